# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope load incast|fanout|alltoall|permutation --hosts H1,...,Hn`: many flows at once, judged.

Agents start on every host as for the matrix (--launcher mpirun, srun, external); every flow is one
engine pair, measured by the same loop and statistics as `fabscope run`, all started together and
run for the same --duration. Exit 0 clean (oversubscription alone is a fact of the pattern, not a
fault), 13 congestion named (loss, unfair or starved flows), 4 a flow failed, 3 hosts unreachable,
2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from .. import argtypes
from ..errors import EXIT_USAGE, FabscopeError
from ..untyped import member, number
from .model import FlowResult, LoadRun
from .patterns import PATTERNS, Flow, check_request, flows_of, pairs_of

# Engine options the load sets itself (per flow) or that make no sense across hosts.
LOAD_MANAGED = frozenset({"pattern", "bind", "cpu", "iters", "warmup", "start-at"})
DEFAULT_DURATION_S = 3.0
WARMUP_BY_TIME = 1_000_000_000  # the engine's largest --warmup: --warmup-time always ends it first
VICTIM_QUANTILES = (0.5, 0.99)
# Flows whose engines started further apart than this share of --duration are said not to have run together.
START_SPREAD_SHARE = 0.1


def fill_load_parser(p: argparse.ArgumentParser,
                     add_engine_options: Callable[[argparse.ArgumentParser], None] | None) -> None:
    p.add_argument("load_pattern", choices=PATTERNS, metavar="{" + ",".join(PATTERNS) + "}",
                   help="incast: every host into --receiver; fanout: --sender to every host; alltoall; permutation: "
                        "a random derangement (every host sends to one, receives from one)")
    p.add_argument("--hosts", type=argtypes.host_list, required=True, help="H1,H2,...: the loaded hosts")
    p.add_argument("--receiver", type=argtypes.hostname, help="incast: the host every other sends to (default the first)")
    p.add_argument("--sender", type=argtypes.hostname, help="fanout: the host that sends to every other (default the first)")
    p.add_argument("--flows", type=argtypes.int_range(1, 4096), default=1,
                   help="parallel flows (connections; QPs for verbs) per (sender, receiver) pair, like iperf3 -P (default 1)")
    p.add_argument("--victim", type=argtypes.host_list, metavar="H1,H2",
                   help="two hosts outside --hosts: their ping-pong latency alone, then during the load")
    p.add_argument("--seed", type=argtypes.int_range(0, 2**31), default=0, help="permutation: the seed (in the output)")
    p.add_argument("--to-address-of", metavar="NETDEV", dest="address_of",
                   help="send every flow to the receiver's address on this netdev (default: --device's; else the "
                        "address its agent reached the coordinator from), e.g. a loopback or dummy address that "
                        "multipath routes reach over several rails")
    p.add_argument("--rails", type=argtypes.host_list, metavar="DEV1,DEV2",
                   help="the netdevs that are rails: the split of the senders' bytes between them, and an imbalance "
                        "named when the hash put most flows on one")
    p.add_argument("--line-rate", type=argtypes.finite_float(0.001, 10**6, unit=" Gb/s"),
                   help="Gb/s of the bottleneck's link (default: the rate the receiver's engine read from its netdev)")
    p.add_argument("--launcher", choices=["mpirun", "srun", "external"], default="mpirun",
                   help="what starts one agent per host (default mpirun), as for `fabscope matrix`")
    p.add_argument("--token-file", type=argtypes.file_to_use_or_create, metavar="FILE",
                   help="--launcher external: the run's one-time token for the agents")
    p.add_argument("--coordinator", metavar="ADDR[:PORT]", help="where the agents connect back to")
    p.add_argument("--connect-timeout", type=argtypes.finite_float(1, 3600, unit="s"), default=60.0,
                   help="seconds for every agent to check in (default 60)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--csv", type=Path, metavar="FILE", help="also write every flow as CSV to FILE")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write a self-contained HTML report to FILE")
    from ..history import add_store_options

    add_store_options(p)
    if add_engine_options is not None:
        add_engine_options(p)
    p.set_defaults(func=run_load, check=check_load)


def _engine(ns: argparse.Namespace, name: str, default: str | None = None) -> str | None:
    value = getattr(ns, f"eng:{name}", None)
    return str(value) if value is not None else default


def check_load(ns: argparse.Namespace) -> None:
    backend = _engine(ns, "backend", "tcp")
    if backend == "mpi":
        raise FabscopeError("load --backend mpi: not yet; an MPI load is one MPI job over every host, which this "
                            "version does not launch. Use --backend tcp, ucx or ofi (each flow an engine pair)",
                            EXIT_USAGE)
    check_request(ns.load_pattern, ns.hosts, ns.flows, ns.receiver, ns.sender, ns.victim)
    sizes = _engine(ns, "sizes", "") or ""
    if ":" in sizes or "," in sizes:
        raise FabscopeError(f"--sizes {sizes}: a load runs one message size; give one (e.g. --sizes 64K)", EXIT_USAGE)
    if ns.launcher != "external" and ns.token_file is not None:
        raise FabscopeError("--token-file applies only to --launcher external: drop it", EXIT_USAGE)
    if ns.launcher == "external" and (ns.token_file is None or not ns.coordinator or ":" not in ns.coordinator):
        raise FabscopeError("--launcher external: give --coordinator ADDR:PORT and --token-file FILE", EXIT_USAGE)
    from ..launch.engine import validate_args

    local = [a for a in engine_args(ns, "load") if not a.startswith("--device=")]
    validate_args(local)
    if ns.victim:
        validate_args([a for a in engine_args(ns, "victim") if not a.startswith("--device=")])
    ns.checked = True


def engine_args(ns: argparse.Namespace, role: str) -> list[str]:
    """The engine's arguments for one role: the options given, the pattern, and the same duration for all."""
    from ..launch.plan import argv_of, options_given

    given = dict(options_given(ns))
    duration = float(given.pop("duration", DEFAULT_DURATION_S))
    given.pop("timeout", None)
    if role == "victim":
        given.pop("interval", None)
        given.pop("sizes", None)
        for k in [k for k in given if k.startswith("tcp-") and k != "tcp-nodelay"]:
            given.pop(k)
        return argv_of([*given.items(), ("pattern", "lat"), ("duration", f"{duration:g}")])
    if "interval" not in given:
        given["interval"] = f"{min(1.0, duration / 4):g}"
    # Every flow warms up for --warmup-time exactly (a count would end each flow's warmup at its own
    # moment): the measured phases then start together, and their intervals line up.
    return argv_of([*given.items(), ("pattern", "bw"), ("warmup", str(WARMUP_BY_TIME)), ("duration", f"{duration:g}")])


def run_load(ns: argparse.Namespace) -> int:
    if not hasattr(ns, "checked"):
        check_load(ns)
    from ..history import recorder
    from ..matrix.launch import agents_on
    from ..results.histogram import Histogram
    from . import findings, judge, render
    from .model import VictimResult
    from .run import run_flows

    keep = recorder(ns, "load")  # opened (and closed) before anything runs: a bad --store fails up front
    if keep is not None:
        keep.close()
    pattern, hosts = ns.load_pattern, ns.hosts
    pairs = pairs_of(pattern, hosts, ns.receiver, ns.sender, ns.seed)
    flows = flows_of(pairs, ns.flows)
    duration = float(_engine(ns, "duration", str(DEFAULT_DURATION_S)) or DEFAULT_DURATION_S)
    timeout = float(_engine(ns, "timeout", "10") or 10) + duration + 5  # each wait's deadline, past the run
    args = {"load": [*engine_args(ns, "load"), f"--timeout={timeout:g}"],
            "victim": [*engine_args(ns, "victim"), f"--timeout={timeout:g}"]}
    device = ns.address_of or _engine(ns, "device")
    victim_flow = Flow(len(flows), ns.victim[0], ns.victim[1], 0, "victim") if ns.victim else None
    everyone = hosts + (list(ns.victim) if ns.victim else [])
    with agents_on(ns, everyone, "load", len(everyone)) as agents:
        isolated = run_flows(agents, [victim_flow], args, timeout, device, 1)[0] if victim_flow else None
        results = run_flows(agents, [*flows, *([victim_flow] if victim_flow else [])], args, timeout, device, 2)
    load = [r for r in results if r.flow.role == "load"]
    rate, source = ns.line_rate, "--line-rate"
    if rate is None:
        rate, source = _link_rate(load, pattern)
    run = LoadRun(pattern, hosts, ns.flows, _engine(ns, "backend", "tcp") or "tcp", ns.launcher, duration,
                  ns.seed if pattern == "permutation" else None, load,
                  judge.bottleneck_of(pattern, pairs, ns.flows, rate, source), rails=list(ns.rails or []))
    if victim_flow is not None and isolated is not None:
        congested = next(r for r in results if r.flow.role == "victim")
        victim = VictimResult((victim_flow.src, victim_flow.dst), isolated, congested)
        iso = isolated.result.latency.histogram if isolated.result and isolated.result.latency else None
        con = congested.result.latency.histogram if congested.result and congested.result.latency else None
        if isinstance(iso, Histogram) and isinstance(con, Histogram) and iso.total and con.total:
            victim.impacts = [judge.impact(iso, con, q) for q in VICTIM_QUANTILES]
        run.victim = victim
    spread = run.start_spread_s
    if spread is not None and spread > START_SPREAD_SHARE * duration:
        run.notes.append(f"the flows' engines started {spread:.2f} s apart ({spread / duration:.0%} of --duration): "
                         "they did not all run together for the whole phase; a loaded launch host or agents "
                         "slow to start")
    run.notes += _window_notes(run, duration)
    if load and all(f.retransmitted is None for f in load):
        run.notes.append(f"loss unchecked: the {run.backend} flows' records carry no TCP retransmission count (the "
                         "transport does not report one); drops show only in the RDMA and netdev counters")
    run.findings = findings.decide(run)
    if ns.format == "json":
        sys.stdout.write(json.dumps(run.to_json(), indent=1) + "\n")
    else:
        sys.stdout.write(render.text(run))
    sys.stdout.flush()
    for path, make in ((ns.csv, render.csv_text), (ns.html, _html)):
        if path is not None:
            try:
                path.write_text(make(run))
            except OSError as exc:
                print(f"fabscope: {path}: {exc.strerror}", file=sys.stderr)
    _store(ns, run)
    return run.exit_code


def _window_notes(run: LoadRun, duration: float) -> list[str]:
    """What the flows' windows on the wall clock say about the totals."""
    if not run.aligned:
        return ["the flows' windows are not on one time line (an engine that does not report where its intervals "
                "began: started_unix_s): no total, no common intervals; the sum of the flows' own rates "
                f"({run.sum_of_rates_gbps:.4g} Gb/s) adds rates over different windows and may exceed what the port "
                "carried: run the same fabscope on every host"]
    notes = []
    phase = run.phase_spread_s
    if phase is not None and phase > START_SPREAD_SHARE * duration:
        starts = {f.flow.name: w.start_s for f in run.flows if (w := f.window) is not None}
        first = min(starts.values())
        late = sorted((n for n, t in starts.items() if t - first > START_SPREAD_SHARE * duration),
                      key=lambda n: -starts[n])
        notes.append(f"the flows' measured phases began up to {phase:.2f} s apart (" + ", ".join(
            f"{n} +{starts[n] - first:.2f} s" for n in late[:8]) + "): their warmups' last bytes arrived late "
            "(a retransmission timeout under loss, or a starved engine); the total counts their bytes over the "
            "union of the windows, the per-interval totals only the common window"
            + ("" if run.concurrent_gbps is not None else ", which holds no whole interval here"))
    return notes


def _store(ns: argparse.Namespace, run: LoadRun) -> None:
    """Every flow's record as a result of one run (command ``load``; `fabscope compare` reads them as
    any run's), the load's judgement as its summary (`fabscope history show`)."""
    if ns.no_store:
        return
    from ..store import open_store

    summary = run.to_json()
    summary["flows"] = [{k: v for k, v in f.items() if k != "record"} for f in summary["flows"]]
    if summary.get("victim"):
        for side in ("isolated", "congested"):
            if summary["victim"].get(side):
                summary["victim"][side].pop("record", None)
    results = [f.result for f in run.flows if f.result is not None]
    try:
        with open_store(ns.store) as store:
            run_id = store.add_run("load", list(sys.argv[1:]), results, ns.tag)
            store.add_summary(run_id, summary)
    except Exception as exc:  # the load is printed already; a store problem must not turn into a traceback
        print(f"fabscope: the load was not kept in the history store: {exc}", file=sys.stderr)
        return
    print(f"fabscope: kept as run {run_id} in the history (`fabscope history show {run_id}`)", file=sys.stderr)


def _html(run: LoadRun) -> str:
    from .html import page

    return page(run)


def _link_rate(load: list[FlowResult], pattern: str) -> tuple[float | None, str]:
    """The bottleneck's rate as its engine read it: the receiver's netdev (incast), the sender's (fanout)."""
    for f in load:
        if f.result is None:
            continue
        side = member(member(f.result.raw, "transport"), "local" if pattern == "fanout" else "peer")
        rate = number(side.get("rate_gbps"))
        if rate:
            return rate, f"the engine on {'the sender' if pattern == 'fanout' else 'the receiver'}: " \
                         f"{side.get('rate_source') or 'its netdev'}"
        why = side.get("rate_source")
        if isinstance(why, str):
            return None, why
    return None, "unknown"
