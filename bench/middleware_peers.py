#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""fabscope's UCX, libfabric and MPI backends against ucx_perftest, fi_pingpong and an OSU-style MPI
ping-pong on this host: alternated, medians, ratios.

    python3 bench/middleware_peers.py [--repeats 5] [--cases ucx,ofi,mpi] [--json out.json]

Pairs (peer vs fabscope, same transport, same size, same window, same iteration count):

| case | peer | fabscope |
|---|---|---|
| ucx tag_lat sm / tcp, 8 B | `ucx_perftest -t tag_lat` | `--backend ucx --op tag --pattern lat` |
| ucx tag_bw sm, 1 MiB, window 32 | `ucx_perftest -t tag_bw -O 32` | `--op tag --pattern bw --tx-depth 32` |
| ucx put_bw sm, 1 MiB, window 32 | `ucx_perftest -t ucp_put_bw -O 32` | `--op write --pattern bw --tx-depth 32` |
| ofi tcp (rdm, msg) / shm (rdm), 8 B | `fi_pingpong -p P -e E` | `--backend ofi --provider P --ofi-ep E --op send` |
| mpi lat 8 B, bw 1 MiB window 64 | `bench/osu_pingpong.c` under mpirun | `--backend mpi --mpi openmpi` |

UCX_TLS is the same for both tools of a pair (`sm`, or `tcp` with UCX_NET_DEVICES=lo so that only
127.0.0.1 carries data). Open MPI runs its default here: ob1 + vader. fabscope runs busy polling
in every case (`--poll busy`, also for bw), since every peer spins.

Within a repeat every pair runs back to back as a sandwich: peer, fabscope, peer again. The
verdict is the median over repeats of fabscope / (mean of the two peer runs around it). A repeat
whose two peer runs differ by more than 15 % is left out of that median and counted as "unstable":
on this VM the latency between the two vCPUs jumps between levels (0.075, 0.16-0.19 and 0.6-0.7 us
for the same ucx_perftest tag_lat over sm, seconds apart: where the host places the vCPUs), which
moves both tools alike but wrecks any comparison that straddles a jump. The placement is measured,
not guessed: a 50 ms probe of the CPU 0 - CPU 1 cache-line round trip (bench/placement.py) runs
before every run and after the last, and a repeat whose probes disagree is left out as well, even
when its two peer runs happen to agree. While a case rests on fewer than 3 repeats that count,
another repeat of every case runs, up to twice --repeats (bench/sandwich.py needs_more). The ratio
of the medians over all repeats is shown as well.

Each pair is judged on a statistic both tools report: the p50 where the peer has one
(ucx_perftest prints the median of its last 2048 iterations; osu_pingpong prints the median of
all), the MEAN where the peer has only a mean (fi_pingpong prints time / iterations / 2).
Bandwidth in MB/s = 10^6 B/s: ucx_perftest prints MiB/s (converted here) and measures at the
sender; fabscope measures at the receiver for tag and at the initiator (flushed) for put;
osu_bw-style at the sender including the per-window ack.

Goals (issue 3, Benchmark): latency <= 1.05 x the peer, bandwidth >= 0.95 x the peer. PASS/MISS
is printed; the exit status is 0 either way (a benchmark on a shared machine is evidence, not a
test); exit 2 only for a setup problem (a tool missing, cpu_dma_latency not writable, the MPI
ping-pong not buildable).

/dev/cpu_dma_latency is held at 0 by this script around every peer run and by fabscope
(--hold-cpu-latency) around its own. Servers on CPU 0, clients on CPU 1 (taskset), as
`fabscope run --loopback` pins its engines; mpirun binds rank 0 to core 0 and rank 1 to core 1
(--bind-to core). Only 127.0.0.1; every process has a deadline and every server is killed (its
process group) at the end of its measurement, on error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TextIO

# bench/ is sys.path[0] when this file runs as a script (and mypy resolves it the same way).
from peer_output import BenchError, parse_fi_pingpong, parse_osu, parse_ucx_perftest, tail
from placement import same_placement
from sandwich import needs_more, peer_runs_agree
from tcp_peers import (
    DMA_LATENCY,
    HOST,
    REPO,
    Figures,
    Measurement,
    SetupError,
    check_placement_probe,
    client_argv,
    fabscope_values,
    fmt,
    free_port,
    hold_cpu_latency,
    machine_state,
    measure,
    parse_fabscope,
    placement_probe,
    qos_value,
    run_client,
    server,
)

GOAL_LAT = 1.05  # fabscope / peer, at most
GOAL_BW = 0.95  # fabscope / peer, at least
LAT_SIZE = 8
BW_SIZE = 1 << 20  # 1 MiB: rendezvous for tag over sm, beyond the L2 caches, so copies are real
UCX_WINDOW = 32  # ucx_perftest's default window for tag_bw and ucp_put_bw (perftest.c)
OSU_WINDOW = 64  # osu_bw's window
BW_ITERS = 10000  # 1 MiB messages per UCX bw run: about 1 s at 12 GB/s, so a burst of load hits both tools
TIMEOUT = 60.0  # per client; every run here takes < 5 s on an idle machine
OSU_SRC = REPO / "bench" / "osu_pingpong.c"
OSU_BIN = REPO / "build" / "bench" / "osu_pingpong"
MPICC = "mpicc.openmpi"
MPIRUN = "mpirun.openmpi"


@dataclass
class Config:
    fabscope: str
    hold: bool
    engine: str | None = None  # FABSCOPE_ENGINE: A/B of a patched engine (ucx, ofi)
    engine_dir: str | None = None  # FABSCOPE_ENGINE_DIR: A/B of patched MPI engines


@dataclass(frozen=True)
class Case:
    """One pair. `metric` is the statistic judged (same on both sides); `info` are shown too."""

    name: str
    group: str  # ucx | ofi | mpi (--cases)
    kind: str  # lat | bw
    peer: str  # label of the peer tool
    metric: str  # the key compared in both tools' values
    label: str  # what the metric is, for the table
    run_peer: Callable[[Config, int], Measurement]
    run_fab: Callable[[Config, int], Measurement]
    info: tuple[str, ...] = ()




# --------------------------------------------------------------------------------------------
# One measurement per tool


def run_fab(cfg: Config, rep: int, tool: str, pattern: str, size: int, args: Sequence[str]) -> Measurement:
    argv = [
        cfg.fabscope,
        "run",
        "--loopback",
        "--format",
        "json",
        "--pattern",
        pattern,
        "--sizes",
        str(size),
        "--poll",
        "busy",
        *args,
    ]
    if cfg.hold:
        argv.append("--hold-cpu-latency")

    def go() -> Figures:
        env = dict(os.environ)
        if cfg.engine:
            env["FABSCOPE_ENGINE"] = cfg.engine
        if cfg.engine_dir:
            env["FABSCOPE_ENGINE_DIR"] = cfg.engine_dir
        rc, out, err, secs = run_client(argv, TIMEOUT, env)
        if rc != 0:
            raise BenchError(f"exit {rc}: {tail(err)}")
        rec = parse_fabscope(out, size)
        host, peer = rec.get("host") or {}, rec.get("peer_host") or {}
        tr = rec.get("transport") or {}
        local = tr.get("local") or {}
        details: dict[str, Any] = {
            "iterations": rec.get("iterations"),
            "warmup": rec.get("warmup"),
            "poll": tr.get("poll"),
            "cpus": [host.get("cpu"), peer.get("cpu")],
            "cpu_dma_latency_held": [host.get("cpu_dma_latency_held"), peer.get("cpu_dma_latency_held")],
            "warnings": rec.get("warnings"),
            # what the layer selected: UCX lanes/protocol, libfabric provider, MPI components
            "selected": {
                k: local.get(k)
                for k in ("lanes", "protocol", "transports", "provider", "endpoint", "domain", "selected", "api")
                if local.get(k) is not None
            },
        }
        values, measured_at = fabscope_values(rec, pattern)
        if pattern != "lat":
            details["measured_at"] = measured_at
        return values, details, secs

    return measure(tool, rep, argv, go)


def run_ucx_perftest(
    cfg: Config, rep: int, tool: str, test: str, size: int, iters: int, warmup: int, tls: str, kind: str
) -> Measurement:
    port = free_port()
    env = [f"UCX_TLS={tls}"] + (["UCX_NET_DEVICES=lo"] if tls == "tcp" else [])
    srv = ["env", *env, "ucx_perftest", "-p", str(port)]
    cli = ["env", *env, "ucx_perftest", HOST, "-p", str(port), "-t", test, "-s", str(size), "-n", str(iters)]
    cli += ["-w", str(warmup)]
    if kind == "bw":
        cli += ["-O", str(UCX_WINDOW)]

    def go() -> Figures:
        with server(srv, port), hold_cpu_latency(cfg.hold) as held:
            rc, out, err, secs = run_client(client_argv(cli), TIMEOUT)
        if rc != 0:
            raise BenchError(f"ucx_perftest exit {rc}: {tail(out + err)}")
        return parse_ucx_perftest(out, kind), {"cpu_dma_latency_held": held, "measured_at": "sender"}, secs

    return measure(tool, rep, cli, go)


def run_fi_pingpong(cfg: Config, rep: int, tool: str, prov: str, ep: str, iters: int) -> Measurement:
    port = free_port()
    # fi_pingpong 1.17 has no option for the server's listen address (-B is the port only): its
    # control socket listens on every address for the run; the client only uses 127.0.0.1.
    common = ["fi_pingpong", "-p", prov, "-e", ep, "-I", str(iters), "-S", str(LAT_SIZE)]
    srv = [*common, "-B", str(port)]
    cli = [*common, "-P", str(port), HOST]

    def go() -> Figures:
        with server(srv, port), hold_cpu_latency(cfg.hold) as held:
            rc, out, err, secs = run_client(client_argv(cli), TIMEOUT)
        if rc != 0:
            raise BenchError(f"fi_pingpong exit {rc}: {tail(out + err)}")
        return parse_fi_pingpong(out), {"cpu_dma_latency_held": held}, secs

    return measure(tool, rep, cli, go)


def mpirun_env() -> dict[str, str]:
    env = dict(os.environ)
    if os.geteuid() == 0:  # Open MPI refuses root unless told twice
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run_osu(cfg: Config, rep: int, tool: str, args: Sequence[str]) -> Measurement:
    # `timeout` as well as the subprocess deadline: mpirun's orted must not outlive a hang.
    argv = ["timeout", "--kill-after=5", str(int(TIMEOUT)), MPIRUN, "-np", "2", "--bind-to", "core"]
    argv += [str(OSU_BIN), *args]

    def go() -> Figures:
        with hold_cpu_latency(cfg.hold) as held:
            rc, out, err, secs = run_client(argv, TIMEOUT + 10, mpirun_env())
        if rc != 0:
            raise BenchError(f"osu_pingpong exit {rc}: {tail(out + err)}")
        return parse_osu(out), {"cpu_dma_latency_held": held}, secs

    return measure(tool, rep, argv, go)


def build_osu() -> None:
    """Builds bench/osu_pingpong.c with Open MPI's wrapper when the binary is missing or older."""
    if OSU_BIN.exists() and OSU_BIN.stat().st_mtime >= OSU_SRC.stat().st_mtime:
        return
    OSU_BIN.parent.mkdir(parents=True, exist_ok=True)
    cmd = [MPICC, "-O2", "-Wall", "-Wextra", "-o", str(OSU_BIN), str(OSU_SRC)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        raise SetupError(f"building the MPI ping-pong timed out: {shlex.join(cmd)}") from None
    if p.returncode != 0:
        raise SetupError(f"cannot build the MPI ping-pong ({shlex.join(cmd)}):\n{tail(p.stderr)}")


# --------------------------------------------------------------------------------------------
# The pairs


def cases() -> list[Case]:
    out: list[Case] = []
    for tls, iters, warmup in (("sm", 500000, 10000), ("tcp", 20000, 2000)):
        fab = ["--backend", "ucx", "--ucx-tls", tls, "--op", "tag", "--iters", str(iters), "--warmup", str(warmup)]
        if tls == "tcp":
            fab += ["--device", "lo"]
        out.append(
            Case(
                name=f"ucx tag_lat {tls}",
                group="ucx",
                kind="lat",
                peer="ucx_perftest",
                metric="lat_p50_us",
                label=f"8 B tag latency p50, UCX_TLS={tls} (us)",
                info=("lat_mean_us",),
                run_peer=partial(
                    run_ucx_perftest,
                    tool=f"ucx_perftest tag_lat {tls}",
                    test="tag_lat",
                    size=LAT_SIZE,
                    iters=iters,
                    warmup=warmup,
                    tls=tls,
                    kind="lat",
                ),
                run_fab=partial(run_fab, tool=f"fabscope ucx tag lat {tls}", pattern="lat", size=LAT_SIZE, args=fab),
            )
        )
    for test, op in (("tag_bw", "tag"), ("ucp_put_bw", "write")):
        fab = ["--backend", "ucx", "--ucx-tls", "sm", "--op", op, "--iters", str(BW_ITERS), "--warmup", "200"]
        fab += ["--tx-depth", str(UCX_WINDOW)]
        out.append(
            Case(
                name=f"ucx {test} sm",
                group="ucx",
                kind="bw",
                peer="ucx_perftest",
                metric="bw_MBps",
                label=f"1 MiB {op} bw, window {UCX_WINDOW}, UCX_TLS=sm (MB/s)",
                run_peer=partial(
                    run_ucx_perftest,
                    tool=f"ucx_perftest {test} sm",
                    test=test,
                    size=BW_SIZE,
                    iters=BW_ITERS,
                    warmup=200,
                    tls="sm",
                    kind="bw",
                ),
                run_fab=partial(run_fab, tool=f"fabscope ucx {op} bw sm", pattern="bw", size=BW_SIZE, args=fab),
            )
        )
    for prov, ep, iters in (("tcp", "rdm", 20000), ("tcp", "msg", 20000), ("shm", "rdm", 500000)):
        fab = ["--backend", "ofi", "--provider", prov, "--ofi-ep", ep, "--op", "send", "--iters", str(iters)]
        out.append(
            Case(
                name=f"ofi {prov} {ep}",
                group="ofi",
                kind="lat",
                peer="fi_pingpong",
                metric="lat_mean_us",
                label=f"8 B send latency MEAN, {prov} {ep} (us)",
                info=("lat_p50_us",),
                run_peer=partial(run_fi_pingpong, tool=f"fi_pingpong {prov} {ep}", prov=prov, ep=ep, iters=iters),
                run_fab=partial(run_fab, tool=f"fabscope ofi send lat {prov} {ep}", pattern="lat", size=LAT_SIZE, args=fab),
            )
        )
    mpi = ["--backend", "mpi", "--mpi", "openmpi"]
    out.append(
        Case(
            name="mpi lat ob1+vader",
            group="mpi",
            kind="lat",
            peer="osu_pingpong",
            metric="lat_p50_us",
            label="8 B MPI latency p50, Open MPI default (ob1+vader) (us)",
            info=("lat_mean_us",),
            run_peer=lambda c, r: run_osu(c, r, "osu_pingpong lat", ["lat", str(LAT_SIZE), "500000", "10000"]),
            run_fab=lambda c, r: run_fab(
                c, r, "fabscope mpi lat", "lat", LAT_SIZE, [*mpi, "--iters", "500000", "--warmup", "10000"]
            ),
        )
    )
    loops, warm = 160, 5
    out.append(
        Case(
            name="mpi bw ob1+vader",
            group="mpi",
            kind="bw",
            peer="osu_pingpong",
            metric="bw_MBps",
            label=f"1 MiB MPI bw, window {OSU_WINDOW}, Open MPI default (MB/s)",
            run_peer=lambda c, r: run_osu(c, r, "osu_pingpong bw", ["bw", str(BW_SIZE), str(loops), str(warm), str(OSU_WINDOW)]),
            run_fab=lambda c, r: run_fab(
                c,
                r,
                "fabscope mpi bw",
                "bw",
                BW_SIZE,
                [*mpi, "--iters", str(loops * OSU_WINDOW), "--warmup", str(warm * OSU_WINDOW), "--tx-depth", str(OSU_WINDOW)],
            ),
        )
    )
    return out


# --------------------------------------------------------------------------------------------
# Report

Series = dict[tuple[str, str], dict[int, float]]  # (case name / side, metric) -> {repeat: value}


def series_of(results: dict[tuple[str, str, int], Measurement]) -> Series:
    s: Series = {}
    for (case, side, rep), m in results.items():
        if m.error is None:
            for k, v in m.values.items():
                s.setdefault((f"{case}/{side}", k), {})[rep] = v
    return s


# (case name, repeat) -> the placement probes before the peer's run, fabscope's, the peer's second
# run, and after it (bench/placement.py)
Placements = dict[tuple[str, int], list[float | None]]


def placements_of(results: dict[tuple[str, str, int], Measurement]) -> Placements:
    out: Placements = {}
    for (case, side, rep), m in results.items():
        if side == "peer2":
            out[(case, rep)] = [results[(case, s, rep)].placement_before for s in ("peer", "fabscope", "peer2")
                                if (case, s, rep) in results] + [m.placement_after]
    return out


def compare(series: Series, case: Case, metric: str, placements: Placements) -> dict[str, Any]:
    fab = series.get((f"{case.name}/fabscope", metric), {})
    before = series.get((f"{case.name}/peer", metric), {})
    after = series.get((f"{case.name}/peer2", metric), {})
    peer_all = [*before.values(), *after.values()]
    mf = statistics.median(fab.values()) if fab else None
    mp = statistics.median(peer_all) if peer_all else None
    paired, unstable, moved = [], [], []
    for r, f in fab.items():
        a, b = before.get(r), after.get(r)
        if not a or not b:
            continue
        if not peer_runs_agree(a, b):
            unstable.append(r)
            continue
        if not same_placement(placements.get((case.name, r), [None])):
            unstable.append(r)
            moved.append(r)
            continue
        paired.append(f / ((a + b) / 2))
    return {
        "fabscope_median": mf,
        "peer_median": mp,
        "ratio": mf / mp if mf is not None and mp else None,
        "paired_ratio": statistics.median(paired) if paired else None,
        "paired_repeats": len(paired),
        "unstable_repeats": unstable,
        "placement_moved_repeats": moved,
    }


def counted(results: dict[tuple[str, str, int], Measurement], cs: Sequence[Case]) -> int:
    """The fewest sandwiches that count (`compare`'s paired repeats) of any case so far: which
    repeats fabscope measured, whether the peer's runs agree and the placement held, nothing of
    fabscope's figures."""
    series, placements = series_of(results), placements_of(results)
    return min((compare(series, c, c.metric, placements)["paired_repeats"] for c in cs), default=0)


def verdict(case: Case, ratio: float | None) -> str:
    if ratio is None:
        return "n/a"
    ok = ratio <= GOAL_LAT if case.kind == "lat" else ratio >= GOAL_BW
    return "PASS" if ok else "MISS"


def summarize(series: Series, cs: Sequence[Case], placements: Placements) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in cs:
        main = compare(series, c, c.metric, placements)
        out[c.name] = {
            "metric": c.metric,
            "goal": f"<= {GOAL_LAT}" if c.kind == "lat" else f">= {GOAL_BW}",
            **main,
            "verdict": verdict(c, main["paired_ratio"]),
            "info": {k: compare(series, c, k, placements) for k in c.info},
            "placement_probes_ns": {str(r): placements.get((c.name, r)) for r in sorted(
                {r for (name, r) in placements if name == c.name})},
        }
    return out


_METRIC_NAMES = {"lat_p50_us": "p50", "lat_mean_us": "mean", "bw_MBps": "MB/s"}


def render(series: Series, summary: dict[str, Any], cs: Sequence[Case], repeats: int, out: TextIO) -> None:
    out.write("| case | measure | tool | per repeat | median |\n|---|---|---|---|---|\n")
    for c in cs:
        for side, tool in (("peer", c.peer), ("fabscope", "fabscope"), ("peer2", f"{c.peer} (after)")):
            for metric in (c.metric, *c.info):
                vals = series.get((f"{c.name}/{side}", metric), {})
                digits = 3 if metric.startswith("lat") else 0
                per = " / ".join(fmt(vals.get(r), digits) for r in range(1, repeats + 1))
                med = fmt(statistics.median(vals.values()), digits) if vals else "n/a"
                label = c.label if metric == c.metric else f"({_METRIC_NAMES.get(metric, metric)}, info)"
                out.write(f"| {c.name} | {label} | {tool} | {per} | {med} |\n")
    out.write(
        "\n| case | fabscope / peer | median of sandwich ratios (repeats used) | of medians (info) | goal | verdict |\n"
        "|---|---|---|---|---|---|\n"
    )
    for c in cs:
        s = summary[c.name]
        name = _METRIC_NAMES.get(c.metric, c.metric)
        used = f"{fmt(s['paired_ratio'])} ({s['paired_repeats']}/{repeats})"
        out.write(
            f"| **{c.name}** | {name} / {c.peer} {name} | {used} | {fmt(s['ratio'])} "
            f"| {s['goal']} | **{s['verdict']}** |\n"
        )
        for k, v in s["info"].items():
            if v["ratio"] is None:  # the peer has no such figure (fi_pingpong prints only a mean)
                continue
            n = _METRIC_NAMES.get(k, k)
            used = f"{fmt(v['paired_ratio'])} ({v['paired_repeats']}/{repeats})"
            out.write(f"| {c.name} (info) | {n} / {c.peer} {n} | {used} | {fmt(v['ratio'])} | | |\n")


# --------------------------------------------------------------------------------------------


def preflight(cfg: Config, groups: set[str]) -> None:
    need = ["taskset"]
    if "ucx" in groups:
        need.append("ucx_perftest")
    if "ofi" in groups:
        need.append("fi_pingpong")
    if "mpi" in groups:
        need += [MPICC, MPIRUN, "timeout"]
    missing = [t for t in need if shutil.which(t) is None]
    if not Path(cfg.fabscope).exists() and shutil.which(cfg.fabscope) is None:
        missing.append(cfg.fabscope)
    if missing:
        raise SetupError(
            f"missing: {', '.join(missing)}. The peers come from Debian's ucx-utils, libfabric-bin and "
            "openmpi-bin/libopenmpi-dev; fabscope from `make setup`."
        )
    if (os.cpu_count() or 1) < 2:
        raise SetupError("needs 2 CPUs: servers are pinned to CPU 0 and clients to CPU 1")
    check_placement_probe()
    if cfg.hold:
        try:
            with hold_cpu_latency(True) as ok:
                if not ok:
                    raise SetupError(f"wrote 0 to {DMA_LATENCY} but it reads back {qos_value()}")
        except OSError as e:
            raise SetupError(
                f"cannot hold {DMA_LATENCY} at 0 ({e.strerror}): run as root, or pass --no-hold-cpu-latency"
            ) from None
    if "mpi" in groups:
        build_osu()


def pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return ""


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=5, help="rounds of all pairs (>= 3; default 5)")
    ap.add_argument("--cases", default="ucx,ofi,mpi", help="comma-separated groups: ucx, ofi, mpi (default all)")
    ap.add_argument("--fabscope", default=str(REPO / ".venv" / "bin" / "fabscope"), help="fabscope CLI")
    ap.add_argument("--engine", help="fabscope-engine binary (sets FABSCOPE_ENGINE): A/B of a patched ucx/ofi engine")
    ap.add_argument("--engine-dir", help="directory of fabscope-engine-mpi-* (sets FABSCOPE_ENGINE_DIR): A/B for MPI")
    ap.add_argument("--json", type=Path, help="write every raw figure, command and the machine state here")
    ap.add_argument("--no-hold-cpu-latency", dest="hold", action="store_false", help="do not hold /dev/cpu_dma_latency at 0")
    args = ap.parse_args(argv)
    if args.repeats < 3:
        ap.error("--repeats must be at least 3: a median of fewer runs on a shared machine means little")
    groups = {g.strip() for g in args.cases.split(",") if g.strip()}
    if not groups or groups - {"ucx", "ofi", "mpi"}:
        ap.error("--cases: choose from ucx, ofi, mpi")
    cfg = Config(fabscope=args.fabscope, hold=args.hold, engine=args.engine, engine_dir=args.engine_dir)
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    try:
        preflight(cfg, groups)
    except SetupError as e:
        print(f"middleware_peers: {e}", file=sys.stderr)
        return 2

    cs = [c for c in cases() if c.group in groups]
    started = datetime.datetime.now(datetime.UTC)
    before, psi_before = machine_state(), pressure()
    results: dict[tuple[str, str, int], Measurement] = {}
    last: Measurement | None = None
    t0 = time.monotonic()
    # The repeats asked for, then more while a case rests on fewer than 3 sandwiches that count
    # (bench/sandwich.py needs_more: up to twice --repeats).
    rep = 0
    while needs_more(counted(results, cs), args.repeats, rep):
        rep += 1
        for c in cs:
            # A sandwich: the peer before and after fabscope (see the module text).
            for side, fn in (("peer", c.run_peer), ("fabscope", c.run_fab), ("peer2", c.run_peer)):
                placed = placement_probe()
                if last is not None:
                    last.placement_after = placed
                m = fn(cfg, rep)
                m.placement_before = placed
                results[(c.name, side, rep)] = m
                last = m
                shown = ", ".join(f"{k}={v:.3f}" for k, v in m.values.items() if k in (c.metric, *c.info))
                status = f"ERROR {m.error.splitlines()[0]}" if m.error else shown
                print(f"[{rep}/{max(rep, args.repeats)}] {m.tool:<32} {status}", file=sys.stderr, flush=True)
    if last is not None:
        last.placement_after = placement_probe()
    elapsed = time.monotonic() - t0
    after, psi_after = machine_state(), pressure()

    series = series_of(results)
    summary = summarize(series, cs, placements_of(results))
    print(
        f"\nfabscope vs ucx_perftest / fi_pingpong / OSU-style MPI on {HOST}, {rep} repeats ({args.repeats} asked for), "
        f"{started:%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s"
    )
    print(
        f"idle: cpuidle {before['cpuidle_driver']}/{before['cpuidle_governor']}, cpu_dma_latency held at 0: "
        f"{'yes' if cfg.hold else 'NO'}; CPU {before['cpu_model']} x{before['cpus']}; kernel {before['kernel']}"
    )
    print(f"load average before: {before['loadavg']}; after: {after['loadavg']}")
    print(f"cpu pressure before: {psi_before}; after: {psi_after}")
    if cfg.engine or cfg.engine_dir:
        print(f"engine: FABSCOPE_ENGINE={cfg.engine or '-'} FABSCOPE_ENGINE_DIR={cfg.engine_dir or '-'}")
    print()
    render(series, summary, cs, rep, sys.stdout)
    print()
    for c in cs:
        s = summary[c.name]
        moved = f" ({len(s['placement_moved_repeats'])} across a move of the CPUs)" if s["placement_moved_repeats"] else ""
        unstable = f"; {len(s['unstable_repeats'])} unstable repeat(s) left out{moved}" if s["unstable_repeats"] else ""
        print(
            f"GOAL {c.name:<20} {s['verdict']:<4}  (ratio {fmt(s['paired_ratio'])} over "
            f"{s['paired_repeats']} repeat(s), goal {s['goal']}{unstable})"
        )
    for m in results.values():
        if m.error:
            print(f"\nfailed: {m.tool} (repeat {m.repeat}): {m.command}\n{m.error}", file=sys.stderr)

    if args.json:
        doc = {
            "schema": "fabscope.bench.middleware_peers/1",
            "started_utc": started.isoformat(timespec="seconds"),
            "elapsed_s": round(elapsed, 1),
            "argv": [sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
            "repeats": args.repeats,
            "repeats_run": rep,
            "cpu_dma_latency_held": cfg.hold,
            "engine": cfg.engine or "default",
            "engine_dir": cfg.engine_dir or "default",
            "machine_before": {**before, "cpu_pressure": psi_before},
            "machine_after": {**after, "cpu_pressure": psi_after},
            "measurements": [{"case": k[0], "side": k[1], **m.__dict__} for k, m in results.items()],
            "summary": summary,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
