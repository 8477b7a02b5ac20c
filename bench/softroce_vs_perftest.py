#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""fabscope vs perftest on Soft-RoCE (rxe), alternated, medians and spread of the repeats.

    PYTHONPATH=python python3 bench/softroce_vs_perftest.py [--repeats 5] [--only send_lat,read_bw]
        [--single-guest] [--json FILE] [--out FILE.md] [--engine PATCHED_ENGINE]

Default: TWO qemu guests (`fabscope testbed softroce run --two-guests`), one vCPU each. The server
guest runs the `bench-server` section of tests/softroce/verbs_suite.py, which starts the server
half of each case when asked; the client guest runs the `bench` section, which asks for it and
runs the client half. So each busy poller has a vCPU of its own. (In one guest with one vCPU two
busy pollers take turns by scheduler tick: ~4000 us "latency" for both tools, which measures the
scheduler; `--single-guest` keeps that mode for comparison.)

Cases: perftest's ib_{send,write,read}_lat, ib_{send,write,read,atomic}_bw, ib_atomic_lat, UC and
UD where perftest has them, rdma_cm (-R) against fabscope --cm, and two completion-event rows
(perftest -e, fabscope --poll block). fabscope runs with the settings perftest printed (tx depth,
CQ moderation, inline) and --poll busy, as perftest polls by default; both use the same device,
GID (RoCE v2 IPv4), MTU and one QP.

Ratios: latency = fabscope p50 / perftest t_typical (its median; lower is better, goal <= 1.05);
bandwidth = fabscope message rate / perftest message rate at the same size (higher is better,
goal >= 0.95). Message rates are compared because perftest's MB/s and fabscope's MB/s use
different MB (2^20 vs 10^6) and the message rate has no unit ambiguity.

Nothing is written into the checkout unless asked: --out writes the Markdown table (e.g.
bench/RESULTS-softroce.md), --json every figure, ratio, spread and the machine state.
tests/softroce/test_verbs.py calls render() on the results of its own guest boot.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# bench/ is sys.path[0] when this file runs as a script (and mypy resolves it the same way).
from placement import GuestAgent
from sandwich import decided, meets, peer_against_itself, sandwich_cell, self_cell, usable, verdict_word

REPO = Path(__file__).resolve().parents[1]
# The guest side reads perftest's figure to decide whether a chain needs more repeats; the table
# reads it with the same function.
sys.path.insert(0, str(REPO / "tests" / "softroce"))
import verbs_suite  # type: ignore[import-not-found]  # noqa: E402

GOAL_LAT = 1.05
GOAL_BW = 0.95


def load(paths: list[Path]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in paths:
        if p.exists():
            for line in p.read_text().splitlines():
                if line.strip().startswith("{"):
                    out.append(json.loads(line))
    return out


def _fab_value(rec: dict[str, Any], lat: bool) -> float | None:
    if rec.get("rc") != 0:
        return None
    results = [r for r in rec.get("records", []) if r.get("schema") == "fabscope.result/1"]
    if not results:
        return None
    r = results[0]
    v = (r.get("latency_us") or {}).get("p50") if lat else r.get("msg_rate_mpps")
    return float(v) if isinstance(v, (int, float)) else None


def _spread(xs: list[float]) -> dict[str, float | None]:
    """min, max and (max - min) / median of one tool's repeats."""
    if not xs:
        return {"min": None, "max": None, "rel_spread": None}
    med = statistics.median(xs)
    return {"min": min(xs), "max": max(xs), "rel_spread": (max(xs) - min(xs)) / med if med else None}


def sandwiches(peer: dict[int, float | None], fab: dict[int, float | None]) -> tuple[list[float], list[int]]:
    """The repeats of one case ran as a chain, the peer's run first and last: P0 F0 P1 F1 ... Fn-1 Pn.
    fabscope's run of repeat i is compared with the mean of the peer's runs i (just before it) and
    i + 1 (just after it), as bench/tcp_peers.py does on the host. A TCG guest's speed moves between
    levels (seen: every figure of both tools 25 % lower for a minute) and drifts; a sandwich whose two
    peer runs disagree (bench/sandwich.py: more than 15 % apart) spans such a change and is left out.
    Returns the ratios fabscope / peer of the sandwiches used and the repeats left out.
    (Unlike the host benches, no sandwich is left out for a move of the host CPUs' placement: the
    guests' speed does not follow it, see placement_effect.)"""
    reps, left_out = usable(peer, [i for i, f in fab.items() if f])
    used: list[float] = []
    for i in reps:
        f, before, after = fab[i], peer[i], peer[i + 1]
        assert f and before and after  # usable() was given only repeats with figures, and checked the peer's
        used.append(f / ((before + after) / 2))
    return used, left_out


def placements_of(records: list[dict[str, Any]], bench: str) -> dict[int, float | None] | None:
    """The placement probes of one case's chain by position (None where the probe failed), or None
    when the guest wrote none (no host agent answered)."""
    mine = [r for r in records if r.get("section") == "placement" and r.get("bench") == bench]
    if not mine:
        return None
    return {int(r["seq"]): float(r["rtt_ns"]) if isinstance(r.get("rtt_ns"), (int, float)) else None for r in mine}


NEAR_NS = 250.0  # a probe below this: the two host CPUs share a cache (~50-100 ns); above: ~500 ns


def placement_effect(rows: list[dict[str, Any]], peer_key: str, fab_key: str) -> str:
    """Whether the guests' speed followed the host CPUs' placement (bench/placement.py): each run's
    speed relative to its row's median, for the runs whose probes before and after agree, by
    placement. Under TCG the cross-CPU part of a round trip (a few packets through a socket pair
    between the two qemus) is ~1 us of ~250, so the verdict does not filter on it; this says
    whether a run confirms that."""
    by: dict[tuple[str, bool], list[float]] = {}
    seen = 0
    for row in rows:
        probes = {int(k): v for k, v in (row.get("placement_probes_ns") or {}).items()}
        lat = row.get("lat", row.get("kind") == "lat")
        vals = [v for v in [*row[peer_key], *row[fab_key]] if v]
        if not probes or not vals:
            continue
        med = statistics.median(vals)
        for tool, key, first in (("peer", peer_key, 0), ("fabscope", fab_key, 1)):
            for i, v in enumerate(row[key]):
                a, b = probes.get(2 * i + first), probes.get(2 * i + first + 1)
                seen += 1
                if not v or a is None or b is None or (a < NEAR_NS) != (b < NEAR_NS):
                    continue
                by.setdefault((tool, a < NEAR_NS), []).append(med / v if lat else v / med)
    if not seen:
        return ""

    def cell(tool: str, near: bool) -> str:
        xs = by.get((tool, near), [])
        return f"{statistics.median(xs):.3f} ({len(xs)} runs)" if xs else "- (0 runs)"

    return (f"Host CPU placement (bench/placement.py), probed before each of {seen} runs and after the last: "
            f"speed relative to the row's median, peer {cell('peer', True)} with the CPUs sharing a cache "
            f"against {cell('peer', False)} apart, fabscope {cell('fabscope', True)} against "
            f"{cell('fabscope', False)}. Not used in the verdict: under TCG the guests' speed does not "
            f"follow the placement as loopback TCP on the host does.")


def table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per benchmark: the sandwiches (the verdict), medians of each tool, their spread, the
    ratio of the medians and the median of fabscope / the perftest run just before it."""
    from_suite = [r for r in records if r.get("section") == "bench"]
    names: list[str] = []
    for r in from_suite:
        if r.get("bench") and r["bench"] not in names:
            names.append(r["bench"])
    rows = []
    for name in names:
        lat = "_lat" in name
        mine = [r for r in from_suite if r.get("bench") == name]
        perf = [verbs_suite.perftest_figure(r, lat) for r in mine if r.get("tool") == "perftest"]
        fab = [_fab_value(r, lat) for r in mine if r.get("tool") == "fabscope"]
        perf_ok = [x for x in perf if x]
        fab_ok = [x for x in fab if x]
        pm = statistics.median(perf_ok) if perf_ok else None
        fm = statistics.median(fab_ok) if fab_ok else None
        ratio = (fm / pm) if (pm and fm) else None
        by_rep: dict[int, dict[str, float]] = {}
        for r in mine:
            v = verbs_suite.perftest_figure(r, lat) if r.get("tool") == "perftest" else _fab_value(r, lat)
            if v:
                by_rep.setdefault(int(r.get("rep", 0)), {})[str(r.get("tool"))] = v
        paired = [d["fabscope"] / d["perftest"] for d in by_rep.values() if "fabscope" in d and "perftest" in d]
        perftest_runs: dict[int, float | None] = {k: d.get("perftest") for k, d in by_rep.items()}
        used, left_out = sandwiches(perftest_runs, {k: d.get("fabscope") for k, d in by_rep.items()})
        sandwich = statistics.median(used) if used else None
        goal = GOAL_LAT if lat else GOAL_BW
        # The verdict is the sandwiches' (the two tools within seconds of each other, at one level
        # of the guests' speed); the ratio of the medians is shown beside it.
        met = None if sandwich is None else meets(lat, goal, sandwich)
        cmd = next((r.get("cmd") for r in mine if r.get("tool") == "perftest"), "")
        pargs: list[str] = next((list(r.get("args") or []) for r in mine if r.get("tool") == "perftest"), [])
        settings = next((r for r in mine if r.get("tool") == "perftest" and r.get("rc") == 0), {})
        fargs: list[str] = next((list(r.get("args") or []) for r in mine if r.get("tool") == "fabscope"), [])
        rows.append({"bench": name, "lat": lat, "perftest": pm, "fabscope": fm, "ratio": ratio, "goal": goal,
                     "met": met, "decided": decided(lat, goal, used),
                     "peer_self_ratios": peer_against_itself(perftest_runs),
                     "paired_ratio": statistics.median(paired) if paired else None,
                     "sandwich_ratio": sandwich, "sandwich_ratios": used, "sandwich_left_out": left_out,
                     "placement_probes_ns": placements_of(records, name),
                     "n_perftest": len(perf_ok), "n_fabscope": len(fab_ok), "runs": len(fab),
                     "perftest_cmd": cmd, "perftest_args": pargs, "fabscope_args": fargs,
                     "perftest_all": perf, "fabscope_all": fab,
                     "perftest_spread": _spread(perf_ok), "fabscope_spread": _spread(fab_ok),
                     "settings": {k: settings.get(k) for k in ("tx_depth", "cq_mod", "inline", "mtu")}})
    return rows


TWO_GUESTS_TEXT = [
    "Two qemu TCG guests (`fabscope testbed softroce run --two-guests`), one vCPU each, rdma_rxe on",
    "eth0, joined by a datagram link (a Unix socket pair between the two qemu processes): every",
    "server (perftest's and fabscope's) runs in the server guest,",
    "every client in the client guest, so each busy poller has a vCPU of its own. perftest and",
    "fabscope alternate (the first tool of each repeat alternates); medians of the repeats.",
]
PINNED_TEXT = [
    "Each guest's qemu runs on a host CPU of its own (`--pin-cpus`), so each busy poller has a CPU to",
    "itself and neither guest's packet work is scheduled where the other guest spins.",
]
ONE_GUEST_TEXT = [
    "One qemu TCG guest with ONE vCPU, rdma_rxe on eth0, server and client in the same guest (rxe",
    "loops the traffic back). Two busy pollers on one vCPU take turns by scheduler tick, so the",
    "busy-polling latency rows measure the scheduler (~4000 us at HZ=250) for both tools; the",
    "completion-event rows and `bench/softroce_vs_perftest.py` (two guests) measure the transport.",
    "perftest and fabscope alternate; medians of the repeats.",
]


def render(records: list[dict[str, Any]], context: str = "", two_guests: bool = False, pinned: bool = False) -> str:
    rows = table(records)
    lines = [
        "# fabscope vs perftest on Soft-RoCE (rxe)",
        "",
        "Generated by `bench/softroce_vs_perftest.py" + ("`" if two_guests else " --single-guest` (or the test)") + ".",
        *(TWO_GUESTS_TEXT if two_guests else ONE_GUEST_TEXT),
        *(PINNED_TEXT if pinned else []),
        "fabscope runs with the settings perftest printed (TX depth, CQ moderation, inline size) and",
        "`--poll busy`, as perftest polls by default (the `_event` rows: perftest -e, fabscope --poll block).",
        "",
        "Latency ratio = fabscope p50 / perftest t_typical (lower is better; goal <= 1.05). Bandwidth ratio =",
        "fabscope message rate / perftest message rate at the same size (higher is better; goal >= 0.95).",
        "Each case runs as a chain, perftest first and last (P F P F ... P): **sandwich** is the median over",
        "repeats of fabscope / (mean of the perftest runs just before and just after it); a repeat whose two",
        "perftest runs differ by more than 15 % (the guests changed speed between them) is left out, and",
        "**met** is judged on it. While fewer than 3 sandwiches count, the chain runs one more repeat, up to",
        "twice the repeats asked for (bench/sandwich.py; decided on perftest's runs alone, never on",
        "fabscope's). In brackets, the interval that holds the sandwiches' median with 95 % confidence",
        "(order statistics); where the goal lies inside it (or fewer than six sandwiches count), **met**",
        "says `(undecided)`: the run's noise is wider than its distance to the goal. **perftest vs itself**",
        "applies the same rule to perftest alone (each inner perftest run against its two neighbours): the",
        "run's noise floor. `ratio` is the ratio of the medians, `paired` the median of fabscope / the",
        "perftest run just before it (both for information); `spread` is (max - min) / median of each",
        "tool's repeats.",
        "",
    ]
    if context:
        lines += [context, ""]
    lines += [
        "| test | perftest | fabscope | unit | sandwich (used) [95 %] | perftest vs itself | ratio | paired | goal |"
        " met | spread perftest / fabscope | runs ok |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        unit = "us" if r["lat"] else "Mpps"

        def fmt(x: float | None, lat: bool = r["lat"]) -> str:
            return "-" if x is None else (f"{x:.2f}" if lat else f"{x:.3g}")

        def pct(sp: dict[str, Any]) -> str:
            return "-" if sp["rel_spread"] is None else f"{100 * sp['rel_spread']:.0f} %"

        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
        paired = "-" if r["paired_ratio"] is None else f"{r['paired_ratio']:.3f}"
        sandwich = sandwich_cell(r["sandwich_ratio"], r["sandwich_ratios"], r["sandwich_left_out"])
        met = verdict_word(r["met"], r.get("decided") is not None)
        itself = self_cell(r.get("peer_self_ratios") or [])
        cmp = "<=" if r["lat"] else ">="
        pcmd = " ".join([r["perftest_cmd"] or r["bench"], *[a for a in r["perftest_args"] if a in ("-R", "-e")],
                         *(["-c", r["perftest_args"][r["perftest_args"].index("-c") + 1]]
                           if "-c" in r["perftest_args"] else [])])
        lines.append(
            f"| {pcmd} vs fabscope {r['bench'].replace('_', ' ')} | {fmt(r['perftest'])} | "
            f"{fmt(r['fabscope'])} | {unit} | {sandwich} | {itself} | {ratio} | {paired} | {cmp} {r['goal']} | {met} | "
            f"{pct(r['perftest_spread'])} / {pct(r['fabscope_spread'])} | "
            f"{r['n_perftest']}/{r['n_fabscope']} of {r['runs']} |")
    fails = [r for r in records if r.get("section") == "bench" and r.get("rc") != 0]
    if fails:
        lines += ["", "## Runs that produced no number", ""]
        for r in fails:
            raw = (r.get("raw") or r.get("stderr") or r.get("error") or "").strip().splitlines()
            why = next((ln.strip() for ln in raw if "Correlation" in ln or "Couldn't" in ln or "error" in ln.lower()),
                       raw[-1].strip() if raw else "?")
            lines.append(f"- {r.get('tool')} {r.get('bench')} repeat {r.get('rep')}: exit {r.get('rc')}: `{why}`")
    lines += ["", "## Settings and raw values", ""]
    for r in rows:
        lines.append(f"- **{r['bench']}**: perftest `{r['perftest_cmd']} {' '.join(r['perftest_args'])}` printed "
                     f"{r['settings']}; fabscope args `{' '.join(r['fabscope_args'] or [])}`; perftest runs "
                     f"{r['perftest_all']}, fabscope runs {r['fabscope_all']}")
    lines.append("")
    return "\n".join(lines)


class LoadSampler:
    """The host's load average and running qemu processes every few seconds while the guests run:
    other work on this 2-CPU host takes CPU from the guests, so the figures say how busy it was."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._every = every_s
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(host_state())
            self._stop.wait(self._every)

    def __enter__(self) -> LoadSampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join(timeout=10)
        self.samples.append(host_state())

    def summary(self) -> dict[str, Any]:
        la = [s["load1"] for s in self.samples]
        q = [s["qemu"] for s in self.samples]
        return {"samples": len(la), "load1_min": min(la), "load1_median": statistics.median(la),
                "load1_max": max(la), "qemu_processes_max": max(q), "qemu_processes_median": statistics.median(q)}


def host_state() -> dict[str, float]:
    q = subprocess.run(["pgrep", "-c", "qemu-system"], capture_output=True, text=True).stdout.strip() or "0"
    la = os.getloadavg()
    return {"t": time.time(), "load1": la[0], "load5": la[1], "load15": la[2], "qemu": float(q)}


def context_text(meta: dict[str, Any]) -> str:
    """The run's conditions, from the saved figures (so a re-render says the same)."""
    load = meta["host"]["load"]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(meta["host"]["after"]["t"]))
    ctx = (f"Run of {when}: {meta['repeats']} repeats, {meta['lat_iters']} messages per latency run, "
           f"{meta['bw_iters']} per bandwidth run of 64 KiB messages and {meta.get('bw_small_factor', 1)} times as "
           f"many for the atomic and UD rows (small messages); the guest run took {meta['guest_run_s']:.0f} s (suite exit "
           f"status {meta['suite_exit_status']}). Host: {meta['host']['cpus']} CPUs shared with other work; load "
           f"average (1 min) during the run min {load['load1_min']:.1f} / median {load['load1_median']:.1f} / "
           f"max {load['load1_max']:.1f}, up to {load['qemu_processes_max']:.0f} qemu processes (ours "
           f"included). Under TCG every guest instruction is emulated, so a loaded host slows both tools; "
           f"ratios are comparable, absolute figures are not those of real hardware.")
    info = meta.get("guests") or {}
    if info:
        srv, cli = info.get("server", {}), info.get("client", {})
        ctx += (f" Guests: server {srv.get('nproc')} vCPU, clocksource {srv.get('clocksource')}; client "
                f"{cli.get('nproc')} vCPU, clocksource {cli.get('clocksource')}, kernel {cli.get('kernel')}.")
    effect = placement_effect(meta.get("rows") or [], "perftest_all", "fabscope_all")
    return f"{ctx} {effect}" if effect else ctx


@contextlib.contextmanager
def placement_agent(share: Path, pinned: bool, cpus: Callable[[], tuple[int, int]]) -> Iterator[GuestAgent | None]:
    """Answers the client guest's placement probes (bench/placement.py) while the guests run: only
    when they are pinned, since then the probe's two CPUs are the guests' own."""
    if not pinned:
        yield None
        return
    with GuestAgent(share, cpus()) as agent:
        yield agent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5, help="repeats per case (default 5)")
    ap.add_argument("--single-guest", action="store_true",
                    help="server and client in ONE one-vCPU guest (the busy-polling rows then measure the scheduler)")
    ap.add_argument("--only", default="", help="comma-separated case names (default: all); e.g. send_lat,read_bw")
    ap.add_argument("--lat-iters", type=int, default=1000, help="messages per latency run (default 1000)")
    ap.add_argument("--bw-iters", type=int, default=0,
                    help="messages per bandwidth run (default: 300 with two guests, whose emulated link carries ~10 MB/s; "
                         "2000 in one guest)")
    ap.add_argument("--json", type=Path, default=None, help="write every figure, ratio and the machine state here")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown table here (e.g. bench/RESULTS-softroce.md)")
    ap.add_argument("--engine", type=Path, default=None,
                    help="engine binary for the guests (default: the host build, see test_verbs.py)")
    ap.add_argument("--no-pin-cpus", dest="pin_cpus", action="store_false",
                    help="two guests: let the host schedule both qemu processes on any CPU (default: each guest "
                         "on a host CPU of its own; unpinned, latency repeats spread by 15-25 %% here)")
    ap.add_argument("--timeout", type=float, default=5400, help="seconds for the whole guest run")
    ap.add_argument("--notes", type=Path, default=None,
                    help="Markdown appended below the generated table (the discussion of a run)")
    ap.add_argument("--render-from", type=Path, default=None,
                    help="re-render the table of a saved --json run instead of booting guests")
    args = ap.parse_args()
    if args.repeats < 1:
        ap.error("--repeats must be at least 1")
    notes = args.notes.read_text() if args.notes else ""
    if args.render_from:
        saved = json.loads(args.render_from.read_text())
        md = render(saved["records"], context_text(saved), two_guests=saved["mode"] == "two-guests",
                    pinned=bool(saved.get("pinned_cpus")))
        md += ("\n" + notes) if notes else ""
        print(md)
        if args.out:
            args.out.write_text(md)
        return 0
    sys.path.insert(0, str(REPO / "python"))
    sys.path.insert(0, str(REPO / "tests"))
    import test_verbs  # type: ignore[import-not-found]

    from fabscope.testbed import softroce

    known = [n for n, *_ in verbs_suite.ALL_BENCH]
    only = [x for x in args.only.split(",") if x]
    bad = [x for x in only if x not in known]
    if bad:
        ap.error(f"--only {','.join(bad)}: no such case; cases: {', '.join(known)}")
    two = not args.single_guest
    pin = two and args.pin_cpus
    bw_n = args.bw_iters or (300 if two else 2000)
    env = ["env", "FS_ENGINE=/out/bin/fabscope-engine", f"FS_BENCH_REPEATS={args.repeats}",
           f"FS_BENCH_LAT_N={args.lat_iters}", f"FS_BENCH_BW_N={bw_n}", "FS_BENCH_MORE=1",
           *([f"FS_BENCH_ONLY={','.join(only)}"] if only else []), *(["FS_BENCH_REMOTE=1"] if two else [])]
    suite = "/fabscope/tests/softroce/verbs_suite.py"
    with tempfile.TemporaryDirectory(prefix="fabscope-bench-softroce-") as tmp:
        out = Path(tmp)
        before = host_state()
        t0 = time.monotonic()
        probes = 0
        with LoadSampler() as sampler:
            if two:
                for side in ("server", "client"):
                    test_verbs.guest_engine(out / side / "bin", args.engine)
                with placement_agent(out / "client", pin, softroce.guest_host_cpus) as agent:
                    rc = softroce.run([*env, "python3", suite, "/out/res", "bench"], two_guests=True,
                                      server_cmd=["env", "FS_ENGINE=/out/bin/fabscope-engine", "python3", suite,
                                                  "/out/res", "bench-server"],
                                      out_dir=out, timeout_s=args.timeout, stdout=sys.stderr, stderr=sys.stderr,
                                      pin_cpus=pin)
                probes = agent.answered if agent else 0
                res = out / "client" / "res" / "bench.jsonl"
            else:
                test_verbs.guest_engine(out / "bin", args.engine)
                rc = softroce.run([*env, "python3", suite, "/out/res", "bench"], out_dir=out,
                                  timeout_s=args.timeout, stdout=sys.stderr, stderr=sys.stderr)
                res = out / "res" / "bench.jsonl"
        took = time.monotonic() - t0
        after = host_state()
        recs = load([res])
    info = next((r for r in recs if r.get("section") == "bench-info"), {})
    meta: dict[str, Any] = {
        "mode": "two-guests" if two else "single-guest", "pinned_cpus": pin, "repeats": args.repeats,
        "lat_iters": args.lat_iters,
        "bw_iters": bw_n, "bw_small_factor": verbs_suite.SMALL_BW_FACTOR, "suite_exit_status": rc, "guest_run_s": round(took, 1),
        "placement_probes_answered": probes,
        "host": {"cpus": os.cpu_count(), "before": before, "after": after, "load": sampler.summary(),
                 "load_samples": sampler.samples},
        "guests": info, "goals": {"latency_ratio_max": GOAL_LAT, "rate_ratio_min": GOAL_BW},
        "records": [r for r in recs if r.get("section") in ("bench", "placement")],
    }
    rows = table(recs)
    meta["ratios"] = {r["bench"]: r["sandwich_ratio"] for r in rows}
    meta["rows"] = rows
    md = render(recs, context_text(meta), two_guests=two, pinned=pin) + (("\n" + notes) if notes else "")
    print(md)
    if args.out:
        args.out.write_text(md)
    if args.json:
        args.json.write_text(json.dumps(meta, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
