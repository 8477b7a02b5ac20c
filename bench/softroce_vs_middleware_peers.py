#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""fabscope's UCX, libfabric, MPI and rsocket backends against their peer tools between two
Soft-RoCE guests (rxe), alternated in one boot of two pinned guests.

    PYTHONPATH=python python3 bench/softroce_vs_middleware_peers.py [--repeats 3] [--only ucx_tag_lat,...]
        [--lat-iters 1000] [--bw-iters 300] [--json FILE] [--out FILE.md]

The companion of bench/softroce_vs_perftest.py (verbs vs perftest), with its machinery: two qemu TCG
guests, one vCPU each, each qemu pinned to a host CPU of its own (`--pin-cpus`), the load sampled
while they run. The server guest runs the testbed's `fabscope serve`; the client guest runs
tests/softroce/middleware_bench.py, which starts each peer's server half in the server guest over
the testbed's ssh (mpirun starts its rank there itself) and then the client half, and runs
`fabscope run --peer server` against the serve. Each case runs as a chain that starts and ends with
the peer: P F P F ... P (R fabscope runs, R + 1 peer runs).

| case | peer (both halves) | fabscope | compared |
|---|---|---|---|
| ucx_tag_lat | `ucx_perftest -t tag_lat -s 8 -n N -w W` | `--backend ucx --op tag --pattern lat` | p50 (ucx_perftest's typical) |
| ucx_tag_bw | `ucx_perftest -t tag_bw -s 64K -n N -w W -O 32` | `--pattern bw --tx-depth 32` | MB/s |
| ofi_rxm_lat | `fi_pingpong -p "verbs;ofi_rxm" -e rdm -I N -S 8` | `--backend ofi --provider "verbs;ofi_rxm"` | mean |
| ofi_msg_lat | `fi_pingpong -p verbs -e msg -I N -S 8` | `--provider verbs --ofi-ep msg` | mean |
| mpi_lat | `mpirun ... osu_pingpong lat 8 N W` (bench/osu_pingpong.c) | `--backend mpi --mpi openmpi --mca pml=ucx` | p50 |
| mpi_bw | `mpirun ... osu_pingpong bw 64K N/64 W/64 64` | `--pattern bw --tx-depth 64` | MB/s |
| rsocket_lat | `rstream -S 64 -I N -C 1` | `--backend rsocket --pattern lat` | mean (rstream's usec/xfer) |
| rsocket_bw | `rstream -S 64K -I 1 -C N` | `--backend rsocket --pattern bw` | MB/s |

Both tools of a case use the same transport settings: UCX `UCX_TLS=rc_verbs,ud_verbs:aux` (RC lanes,
UD only to wire them up; `rc_verbs` alone cannot connect, see testbed/softroce/README.md) on
`rxe0:1`; libfabric on rxe0; Open MPI `pml ucx` on `rxe0:1` with one rank in each guest (the
same mpirun options fabscope's MPI backend uses); rsocket with rstream's socket buffers (512 KiB,
rstream sets them on every rsocket). Every peer spins (ucx_perftest, fi_pingpong, MPI busy-poll;
rstream uses non-blocking rsend/rrecv in a loop), so fabscope runs `--poll busy` everywhere.
Same sizes and message counts; fabscope's warmup is the peer's where the peer has one
(ucx_perftest -w, osu_pingpong), its default (100 messages, not measured) where the peer has
none (fi_pingpong, rstream: their mean includes the first messages).

The verdict is on the sandwiches (softroce_vs_perftest.sandwiches): the median over repeats of
fabscope / (the mean of the peer's runs just before and just after it) on the compared figure
(latency: lower is better, goal <= 1.05; bandwidth: higher is better, goal >= 0.95), leaving out a
repeat whose two peer runs differ by more than 15 %. Under TCG the guests' speed drifts and jumps
between levels (a quarter between the first and third repeat of one run, seen here), so a single
pair of runs, even back to back, measures that as much as the tools: the worst per-repeat ratio
(fabscope / the peer's run just before it) is shown, for information, with its median.

Nothing is written into the checkout unless asked (--out, --json).
tests/softroce/test_middleware_two_guests.py runs the guest half in its smallest mode in its own
boot and renders it with table() here.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# bench/ is sys.path[0] when this file runs as a script.
from middleware_peers import OSU_BIN, build_osu
from peer_output import PARSERS, BenchError, tail
from sandwich import decided, meets, peer_against_itself, sandwich_cell, self_cell, verdict_word
from softroce_vs_perftest import (
    GOAL_BW,
    GOAL_LAT,
    LoadSampler,
    host_state,
    placement_agent,
    placement_effect,
    placements_of,
    sandwiches,
)
from tcp_peers import REPO, fabscope_values, parse_fabscope

GUEST_SCRIPT = "/fabscope/tests/softroce/middleware_bench.py"
GUEST_OSU = "/fabscope/" + str(OSU_BIN.relative_to(REPO))
UCX_TLS = "rc_verbs,ud_verbs:aux"
UCX_DEV = "rxe0:1"
UCX_WINDOW = 32
OSU_WINDOW = 64
LAT_SIZE = 8
RS_LAT_SIZE = 64  # rstream's smallest size of its own series
BW_SIZE = 65536
RSTREAM_BUF = 1 << 19  # rstream sets SO_SNDBUF/SO_RCVBUF to this on every rsocket (no -B)
FAB = ["fabscope", "run", "--peer", "server", "--format", "json", "--no-store", "--timeout", "60", "--poll", "busy"]
# Open MPI refuses root unless told twice (the guests run as root), as fabscope's mpirun.py does.
MPIRUN = ["env", "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "timeout", "--kill-after=5", "150",
          "mpirun.openmpi", "-np", "2", "-H", "client,server", "--map-by", "node",
          "--mca", "pml", "ucx", "-x", "UCX_NET_DEVICES=" + UCX_DEV, "-x", "UCX_IB_GID_INDEX",
          "-x", "FI_UNIVERSE_SIZE"]

class Case:
    """One pair: the plan entry for the guest and how to read each tool's output."""

    def __init__(self, name: str, kind: str, metric: str, peer: str, peer_server: str | None, peer_client: list[str],
                 fabscope: list[str], size: int, parser: str, parser_kwargs: dict[str, Any] | None = None,
                 peer_listens: str | None = None) -> None:
        self.name, self.kind, self.metric, self.peer = name, kind, metric, peer
        self.peer_server, self.peer_client, self.fabscope, self.size = peer_server, peer_client, fabscope, size
        # where peer_server listens for peer_client (tcp:PORT or cm:PORT): the guest half starts the
        # client once it does (tests/softroce/peer_server.sh)
        self.peer_listens = peer_listens
        if peer_server and not peer_listens:
            raise ValueError(f"{name}: a peer server needs peer_listens (tcp:PORT or cm:PORT), or its client would "
                             "start before it listens")
        # how the peer's output is read: a parser of bench/peer_output.py by name, which the guest
        # half (plan's "peer_figure") uses too
        self.parser, self.parser_kwargs = parser, parser_kwargs or {}

    def parse_peer(self, text: str) -> dict[str, float]:
        return PARSERS[self.parser](text, **self.parser_kwargs)

    def plan(self) -> dict[str, Any]:
        return {"name": self.name, "peer_server": self.peer_server, "peer_listens": self.peer_listens,
                "peer_client": self.peer_client,
                "fabscope": self.fabscope,
                "peer_figure": {"parser": self.parser, "kwargs": self.parser_kwargs, "metric": self.metric}}


def cases(lat_n: int, bw_n: int) -> list[Case]:
    warm_lat, warm_bw = max(1, lat_n // 10), max(1, bw_n // 10)
    out: list[Case] = []
    ucx_env = f"UCX_TLS={UCX_TLS} UCX_NET_DEVICES={UCX_DEV}"
    ucx_fab = [*FAB, "--backend", "ucx", "--op", "tag", "--ucx-tls", UCX_TLS, "--device", UCX_DEV]
    for kind, test, size, n, w, extra, fextra in (
            ("lat", "tag_lat", LAT_SIZE, lat_n, warm_lat, [], []),
            ("bw", "tag_bw", BW_SIZE, bw_n, warm_bw, ["-O", str(UCX_WINDOW)], ["--tx-depth", str(UCX_WINDOW)])):
        out.append(Case(
            f"ucx_{test}", kind, "lat_p50_us" if kind == "lat" else "bw_MBps", f"ucx_perftest {test}",
            f"{ucx_env} ucx_perftest -p 13337",
            ["env", f"UCX_TLS={UCX_TLS}", f"UCX_NET_DEVICES={UCX_DEV}", "ucx_perftest", "server", "-p", "13337",
             "-t", test, "-s", str(size), "-n", str(n), "-w", str(w), *extra],
            [*ucx_fab, "--pattern", kind, "--sizes", str(size), "--iters", str(n), "--warmup", str(w), *fextra],
            size, "ucx_perftest", {"kind": kind}, peer_listens="tcp:13337"))
    for name, prov, ep in (("ofi_rxm_lat", "verbs;ofi_rxm", "rdm"), ("ofi_msg_lat", "verbs", "msg")):
        common = ["fi_pingpong", "-p", prov, "-e", ep, "-I", str(lat_n), "-S", str(LAT_SIZE)]
        out.append(Case(
            name, "lat", "lat_mean_us", f"fi_pingpong {prov} {ep}",
            " ".join(f'"{a}"' if ";" in a else a for a in common), [*common, "server"],
            [*FAB, "--backend", "ofi", "--provider", prov, "--ofi-ep", ep, "--device", "rxe0", "--op", "send",
             "--pattern", "lat", "--sizes", str(LAT_SIZE), "--iters", str(lat_n)],
            LAT_SIZE, "fi_pingpong", peer_listens="tcp:47592"))  # its control socket, before any fabric
    mpi_fab = ["fabscope", "run", "--hosts", "client,server", "--backend", "mpi", "--mpi", "openmpi", "--mca",
               "pml=ucx", "--device", UCX_DEV, "--format", "json", "--no-store", "--timeout", "120", "--poll", "busy"]
    loops, warm_loops = max(1, bw_n // OSU_WINDOW), max(1, warm_bw // OSU_WINDOW)
    out.append(Case(
        "mpi_lat", "lat", "lat_p50_us", "osu_pingpong lat (Open MPI pml ucx)", None,
        [*MPIRUN, GUEST_OSU, "lat", str(LAT_SIZE), str(lat_n), str(warm_lat)],
        [*mpi_fab, "--pattern", "lat", "--sizes", str(LAT_SIZE), "--iters", str(lat_n), "--warmup", str(warm_lat)],
        LAT_SIZE, "osu_pingpong"))
    out.append(Case(
        "mpi_bw", "bw", "bw_MBps", f"osu_pingpong bw window {OSU_WINDOW} (Open MPI pml ucx)", None,
        [*MPIRUN, GUEST_OSU, "bw", str(BW_SIZE), str(loops), str(warm_loops), str(OSU_WINDOW)],
        [*mpi_fab, "--pattern", "bw", "--sizes", str(BW_SIZE), "--iters", str(loops * OSU_WINDOW),
         "--warmup", str(warm_loops * OSU_WINDOW), "--tx-depth", str(OSU_WINDOW)],
        BW_SIZE, "osu_pingpong"))
    rs_fab = [*FAB, "--backend", "rsocket", "--device", "rxe0", "--rsocket-sndbuf", str(RSTREAM_BUF),
              "--rsocket-rcvbuf", str(RSTREAM_BUF)]
    for kind, size, iters, count in (("lat", RS_LAT_SIZE, lat_n, 1), ("bw", BW_SIZE, 1, bw_n)):
        common = ["rstream", "-S", str(size), "-I", str(iters), "-C", str(count), "-p", "7471"]
        out.append(Case(
            f"rsocket_{kind}", kind, "lat_mean_us" if kind == "lat" else "bw_MBps", f"rstream {kind}",
            " ".join(common), [*common, "-s", "server"],
            [*rs_fab, "--pattern", kind, "--sizes", str(size), "--iters", str(iters * count)],
            size, "rstream", {"moved": 2 * iters * count * size if kind == "bw" else 0}, peer_listens="cm:7471"))
    return out


def figure(case: Case, rec: dict[str, Any]) -> tuple[float | None, str]:
    """The compared figure of one run, or None and why not. A fabscope run that printed its result
    and then exited non-zero (Open MPI's MPI_Finalize outliving the engine's grace under TCG) gives
    its figure; note() says so beside the table."""
    if rec.get("rc") != 0 and not (rec["tool"] == "fabscope" and _fab_result(case, rec)):
        text = (rec.get("stderr") or "") + (rec.get("output") or "")
        return None, f"exit {rec.get('rc')}: {tail(text, 3)}"
    try:
        if rec["tool"] == "fabscope":
            values, _ = fabscope_values(parse_fabscope(rec["output"], case.size), case.kind)
        else:
            values = case.parse_peer(rec["output"])
    except BenchError as exc:
        return None, str(exc).splitlines()[0]
    v = values.get(case.metric)
    return (v, "") if v else (None, f"no {case.metric}")


def _fab_result(case: Case, rec: dict[str, Any]) -> bool:
    try:
        parse_fabscope(rec.get("output") or "", case.size)
    except BenchError:
        return False
    return True


def note(rec: dict[str, Any]) -> str:
    """Why a run that gave its figure still exited non-zero (first line of its stderr)."""
    if rec.get("rc") == 0:
        return ""
    first = next((ln for ln in (rec.get("stderr") or "").splitlines() if ln.strip()), "")
    return f"exit {rec.get('rc')} after its result: `{first.strip()[:220]}`"


def table(records: list[dict[str, Any]], all_cases: list[Case]) -> list[dict[str, Any]]:
    rows = []
    for case in all_cases:
        mine = [r for r in records if r.get("section") == "bench" and r.get("bench") == case.name]
        if not mine:
            continue
        by_rep: dict[int, dict[str, float | None]] = {}
        errors: list[str] = []
        notes: list[str] = []
        for r in mine:
            v, why = figure(case, r)
            by_rep.setdefault(int(r["rep"]), {})[r["tool"]] = v
            if why:
                errors.append(f"{r['tool']} repeat {r['rep']}: {why}")
            elif note(r):
                notes.append(f"{r['tool']} repeat {r['rep']}: {note(r)}")
        fab_reps = sorted(k for k in by_rep if "fabscope" in by_rep[k])
        # per repeat: fabscope / the peer's run just before it (for information)
        ratios: list[float | None] = []
        for rep in fab_reps:
            p, f = by_rep[rep].get("peer"), by_rep[rep].get("fabscope")
            ratios.append(f / p if (p and f) else None)
        lat = case.kind == "lat"
        ok = [x for x in ratios if x is not None]
        worst = (max(ok) if lat else min(ok)) if ok else None
        peer_runs = {k: d.get("peer") for k, d in by_rep.items()}
        used, left_out = sandwiches(peer_runs, {k: by_rep[k].get("fabscope") for k in fab_reps})
        sandwich = statistics.median(used) if used else None
        goal = GOAL_LAT if lat else GOAL_BW
        met = None if sandwich is None else meets(lat, goal, sandwich)
        fab_rec = next((r for r in mine if r["tool"] == "fabscope" and _fab_result(case, r)), None)
        rows.append({"bench": case.name, "kind": case.kind, "metric": case.metric, "peer": case.peer,
                     "peer_all": [by_rep[k].get("peer") for k in sorted(by_rep)],
                     "fabscope_all": [by_rep[k].get("fabscope") for k in fab_reps],
                     "ratios": ratios, "worst": worst, "median": statistics.median(ok) if ok else None,
                     "sandwich": sandwich, "sandwich_ratios": used, "sandwich_left_out": left_out,
                     "placement_probes_ns": placements_of(records, case.name),
                     "goal": goal, "met": met, "decided": decided(lat, goal, used),
                     "peer_self_ratios": peer_against_itself(peer_runs), "errors": errors, "notes": notes,
                     "peer_cmd": shlex.join(case.peer_client), "peer_server": case.peer_server,
                     "fabscope_cmd": shlex.join(case.fabscope),
                     "carried_by": carried_by(fab_rec, case.size) if fab_rec else None})
    return rows


def carried_by(rec: dict[str, Any], size: int) -> str | None:
    """What fabscope's record says carried the bytes: UCX lanes, provider, MPI components, verdict."""
    try:
        res = parse_fabscope(rec["output"], size)
    except BenchError:
        return None
    local = (res.get("transport") or {}).get("local") or {}
    bits = []
    lanes = local.get("lanes") or ((local.get("ucx") or {}).get("lanes"))
    if lanes:
        bits.append("lanes " + ",".join(sorted({f"{x.get('transport')}/{x.get('device')}" for x in lanes})))
    for k in ("provider", "endpoint", "selected"):
        if local.get(k):
            bits.append(f"{k} {local[k]}")
    bits.append("path " + str((res.get("path") or {}).get("verdict")))
    return "; ".join(bits)


def render(rows: list[dict[str, Any]], context: str = "") -> str:
    def fmt(x: float | None, lat: bool) -> str:
        return "-" if x is None else (f"{x:.1f}" if lat else f"{x:.2f}")

    lines = [
        "## UCX, libfabric, MPI and rsocket vs their peer tools (two guests)",
        "",
        "Generated by `bench/softroce_vs_middleware_peers.py` (its docstring has every setting). Two pinned",
        "qemu TCG guests, servers in one, clients in the other. Each case runs as a chain that starts and",
        "ends with the peer (P F P F ... P). **sandwich** = the median over repeats of fabscope / (mean of the",
        "peer's runs just before and just after it), leaving out a repeat whose two peer runs differ by more",
        "than 15 % (the guests changed speed between them); **met** is judged on it (latency: goal <= 1.05;",
        "bandwidth in MB/s = 10^6 B/s: goal >= 0.95). While fewer than 3 sandwiches count, the chain runs",
        "one more repeat, up to twice the repeats asked for (bench/sandwich.py; decided on the peer's runs",
        "alone, never on fabscope's). In brackets, the interval that holds the sandwiches' median with 95 %",
        "confidence (order statistics); where the goal lies inside it (or fewer than six sandwiches",
        "count), **met** says `(undecided)`: the run's noise is wider than its distance to the goal, so",
        "yes or NO is not a verdict. **peer vs itself** applies the same rule to the peer alone (each inner",
        "peer run against its two neighbours): the run's noise floor. `ratio per repeat` is fabscope / the",
        "peer run just before it, with its worst and median, for information.",
        "",
    ]
    if context:
        lines += [context, ""]
    lines += ["| case | peer | compared | peer runs | fabscope per repeat | ratio per repeat | worst | "
              "median | sandwich (used) [95 %] | peer vs itself | goal | met |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lat = r["kind"] == "lat"
        unit = {"lat_p50_us": "p50 us", "lat_mean_us": "mean us", "bw_MBps": "MB/s"}[r["metric"]]
        ratios = " / ".join("-" if x is None else f"{x:.3f}" for x in r["ratios"])
        met = verdict_word(r["met"], r.get("decided") is not None)
        sandwich = sandwich_cell(r["sandwich"], r["sandwich_ratios"], r["sandwich_left_out"])
        itself = self_cell(r.get("peer_self_ratios") or [])
        lines.append(
            f"| {r['bench']} | {r['peer']} | {unit} | {' / '.join(fmt(x, lat) for x in r['peer_all'])} | "
            f"{' / '.join(fmt(x, lat) for x in r['fabscope_all'])} | {ratios} | "
            f"{'-' if r['worst'] is None else format(r['worst'], '.3f')} | "
            f"{'-' if r['median'] is None else format(r['median'], '.3f')} | {sandwich} | {itself} | "
            f"{'<=' if lat else '>='} {r['goal']} | {met} |")
    lines += ["", "Commands (client guest; the peer's server half in the server guest over ssh, fabscope's",
              "against `fabscope serve` there):", ""]
    for r in rows:
        srv = f"; server `{r['peer_server']}`" if r["peer_server"] else ""
        lines.append(f"- **{r['bench']}**: peer `{r['peer_cmd']}`{srv}; fabscope `{r['fabscope_cmd']}`"
                     + (f" ({r['carried_by']})" if r["carried_by"] else ""))
    notes = [(r["bench"], e) for r in rows for e in r.get("notes", [])]
    if notes:
        lines += ["", "Runs that gave their figure but exited non-zero:", ""]
        lines += [f"- {b} {e}" for b, e in notes]
    errs = [(r["bench"], e) for r in rows for e in r["errors"]]
    if errs:
        lines += ["", "Runs that produced no number:", ""]
        lines += [f"- {b} {e}" for b, e in errs]
    lines.append("")
    return "\n".join(lines)


def context_text(meta: dict[str, Any]) -> str:
    load = meta["host"]["load"]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(meta["host"]["after"]["t"]))
    effect = placement_effect(meta.get("rows") or [], "peer_all", "fabscope_all")
    return (f"Run of {when}: {meta['repeats']} repeats, {meta['lat_iters']} messages per latency run, "
            f"{meta['bw_iters']} of 64 KiB per bandwidth run; the guest run took {meta['guest_run_s']:.0f} s "
            f"(exit status {meta['exit_status']}). Host: {meta['host']['cpus']} CPUs shared with other work, load "
            f"average (1 min) min {load['load1_min']:.1f} / median {load['load1_median']:.1f} / max "
            f"{load['load1_max']:.1f}, up to {load['qemu_processes_max']:.0f} qemu processes (ours included)."
            + (f" {effect}" if effect else ""))


def load_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="repeats per case (default 3)")
    ap.add_argument("--only", default="", help="comma-separated case names (default: all)")
    ap.add_argument("--lat-iters", type=int, default=1000, help="messages per latency run (default 1000)")
    ap.add_argument("--bw-iters", type=int, default=320,
                    help="64 KiB messages per bandwidth run (default 320; the emulated link carries ~10-20 MB/s)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure, ratio and the machine state here")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown section here")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds for the whole guest run (default 3600)")
    ap.add_argument("--render-from", type=Path, default=None, help="re-render a saved --json run")
    args = ap.parse_args()
    if args.repeats < 1 or args.lat_iters < 1 or args.bw_iters < OSU_WINDOW:
        ap.error(f"--repeats and --lat-iters must be at least 1, --bw-iters at least {OSU_WINDOW}")
    if args.render_from:
        meta = json.loads(args.render_from.read_text())
        names = {r["bench"] for r in meta["rows"]}
        meta["rows"] = table(meta["records"], [c for c in cases(meta["lat_iters"], meta["bw_iters"]) if c.name in names])
        md = render(meta["rows"], context_text(meta))
    else:
        sys.path.insert(0, str(REPO / "python"))
        from fabscope.testbed import softroce

        all_cases = cases(args.lat_iters, args.bw_iters)
        only = [x for x in args.only.split(",") if x]
        bad = [x for x in only if x not in {c.name for c in all_cases}]
        if bad:
            ap.error(f"--only {','.join(bad)}: no such case; cases: {', '.join(c.name for c in all_cases)}")
        chosen = [c for c in all_cases if not only or c.name in only]
        if any(c.name.startswith("mpi_") for c in chosen):
            build_osu()  # into build/bench/, which both guests see under /fabscope
        with tempfile.TemporaryDirectory(prefix="fabscope-bench-middleware-") as tmp:
            out = Path(tmp)
            plan = out / "plan.json"
            plan.write_text(json.dumps({"repeats": args.repeats, "cases": [c.plan() for c in chosen]}))
            before, t0 = host_state(), time.monotonic()
            with LoadSampler() as sampler, placement_agent(out / "client", True, softroce.guest_host_cpus) as agent:
                rc = softroce.run(["python3", GUEST_SCRIPT, "/fabscope-ctl/plan.json", "/out/res"], two_guests=True,
                                  pin_cpus=True, out_dir=out, timeout_s=args.timeout, stdout=sys.stderr,
                                  stderr=sys.stderr, extra_files={"plan.json": plan})
            probes = agent.answered if agent else 0
            took = time.monotonic() - t0
            recs = load_records(out / "client" / "res" / "bench.jsonl")
        rows = table(recs, chosen)
        meta = {"repeats": args.repeats, "lat_iters": args.lat_iters, "bw_iters": args.bw_iters, "exit_status": rc,
                "guest_run_s": round(took, 1), "placement_probes_answered": probes,
                "host": {"cpus": os.cpu_count(), "before": before, "after": host_state(), "load": sampler.summary()},
                "goals": {"latency_ratio_max": GOAL_LAT, "bw_ratio_min": GOAL_BW}, "rows": rows, "records": recs}
        md = render(rows, context_text(meta))
        if args.json:
            args.json.write_text(json.dumps(meta, indent=1, default=str))
    print(md)
    if args.out:
        args.out.write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
