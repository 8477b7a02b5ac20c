# SPDX-License-Identifier: BSD-3-Clause
"""fabscope's collectives beside a minimal OSU/IMB-style loop (bench/osu_collective.c) on this host:
chains of sandwiches (peer, fabscope, peer; bench/sandwich.py's rule) per operation and size, both
under Open MPI's mpirun with the same ranks. The figure compared is the median over iterations of
the slowest rank's time, which both measure the same way (a barrier before each iteration); the
peer's OSU-style loop figure (one timed loop / iterations) is shown beside it.

    python bench/collective_peers.py [--ranks 4] [--repeats 3] [--ops allreduce,alltoall] [--sizes 8,64K,1M]

Prints one row per case: the peer's median p50, fabscope's, their ratio (fabscope / peer) over the
sandwiches whose two peer runs agree. On a loaded machine the ratios are not a verdict."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from statistics import median

from sandwich import run_chain, usable

REPO = Path(__file__).resolve().parents[1]
PEER_SRC = REPO / "bench" / "osu_collective.c"
PEER_BIN = REPO / "build" / "bench" / "osu_collective"
FABSCOPE = [sys.executable, "-m", "fabscope"]
TIMEOUT_S = 300
_PEER_LINE = re.compile(r"osu_us=([\d.]+) p50_us=([\d.]+)")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    if os.geteuid() == 0:  # Open MPI refuses root unless told twice
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def build_peer() -> None:
    if PEER_BIN.exists() and PEER_BIN.stat().st_mtime >= PEER_SRC.stat().st_mtime:
        return
    PEER_BIN.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mpicc.openmpi", "-O2", "-Wall", "-Wextra", "-o", str(PEER_BIN), str(PEER_SRC)], check=True,
                   timeout=120)


def run_peer(op: str, size: int, ranks: int, iters: int) -> tuple[float, float] | None:
    argv = ["timeout", "--kill-after=5", str(TIMEOUT_S), "mpirun.openmpi", "-np", str(ranks), "--oversubscribe",
            str(PEER_BIN), op, str(size), str(iters), str(max(1, iters // 10))]
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=TIMEOUT_S + 10, check=False)
    m = _PEER_LINE.search(out.stdout)
    return (float(m.group(1)), float(m.group(2))) if out.returncode == 0 and m else None


def run_fabscope(op: str, size: int, ranks: int, iters: int) -> float | None:
    argv = [*FABSCOPE, "run", "--backend", "mpi", "--loopback", "--ppn", str(ranks), "--pattern", op, "--sizes",
            str(size), "--iters", str(iters), "--warmup", str(max(1, iters // 10)), "--format", "json", "--no-store"]
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(), timeout=TIMEOUT_S + 10, check=False)
    lines = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0 or len(lines) != 1:
        print(f"fabscope {op} {size}: exit {out.returncode}: {out.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return float(lines[0]["time_ns"]["p50"]) / 1e3


def case(op: str, size: int, ranks: int, iters: int, repeats: int) -> str:
    peer: dict[int, float | None] = {}
    osu: list[float] = []
    fab: dict[int, float] = {}

    def peer_run(i: int) -> float | None:
        got = run_peer(op, size, ranks, iters)
        peer[i] = got[1] if got else None
        if got:
            osu.append(got[0])
        return peer[i]

    def fab_run(i: int) -> bool:
        got = run_fabscope(op, size, ranks, iters)
        if got is not None:
            fab[i] = got
        return got is not None

    run_chain(peer_run, fab_run, repeats)
    used, left_out = usable(peer, fab)
    ratios = [fab[i] / ((peer[i] or 0) + (peer[i + 1] or 0)) * 2 for i in used]
    peer_p50 = median([v for v in peer.values() if v]) if any(peer.values()) else float("nan")
    ratio = f"{median(ratios):.3f}" if ratios else "-"
    return (f"| {op} | {size} | {ranks} | {peer_p50:.2f} | {median(osu) if osu else float('nan'):.2f} | "
            f"{median(fab.values()) if fab else float('nan'):.2f} | {ratio} | {len(used)} ({len(left_out)} left out) |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iters", type=int, default=300)
    p.add_argument("--ops", default="allreduce,alltoall")
    p.add_argument("--sizes", default="8,65536,1048576")
    a = p.parse_args(argv)
    build_peer()
    print("| op | size B | ranks | peer p50 us | peer OSU loop us | fabscope p50 us | fabscope / peer | sandwiches |")
    print("|---|---|---|---|---|---|---|---|")
    for op in a.ops.split(","):
        for size in (int(s) for s in a.sizes.split(",")):
            if size % (4 * a.ranks) and op != "allreduce":
                size -= size % (4 * a.ranks)  # whole blocks per rank for the split operations
            print(case(op, size, a.ranks, a.iters, a.repeats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
