#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""`make bench`: every bench of bench/, one after the other, or a line saying why one is skipped.

    python3 bench/run_all.py [--only NAME,...] [--list] [--out DIR]

Each bench is evidence, not a test (bench/README.md): it prints its figures and verdicts and exits 0
whatever they are, 2 when it cannot run fairly (a peer tool missing, a setting it depends on refused).
This harness checks what a bench needs before it starts (root for the netns testbed, the cached
Soft-RoCE guest image, which takes many minutes to build) and skips it, saying why and the fix;
whether the peer tools are installed each bench checks itself (one owner of its list), and its exit 2
is reported as skipped by the bench with its own message. Files the benches write go to --out
(default build/bench). Exit 0 when every bench that ran exited 0 or 2, 1 otherwise (the summary
names which)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"


def _root() -> str | None:
    return None if os.geteuid() == 0 else "needs root (it makes network namespaces): run `make bench` as root"


def _numpy() -> str | None:
    try:
        import numpy  # noqa: F401
    except ImportError:
        return "numpy not installed (it is in deps/python-requirements.txt: `make setup`)"
    return None


def _softroce_image() -> str | None:
    sys.path.insert(0, str(REPO / "python"))
    from fabscope.testbed.softroce_base import default_cache_dir, recipe_key
    from fabscope.testbed.softroce_image import why_it_cannot_boot

    why = why_it_cannot_boot()
    if why:
        return why
    if not (default_cache_dir() / recipe_key() / "manifest.json").exists():
        # Building the image takes many minutes; a bench run does not start one as a side effect.
        return "no cached Soft-RoCE guest image: build it first (`fabscope testbed softroce build`, as root)"
    return None


@dataclass(frozen=True)
class Bench:
    name: str
    argv: Callable[[Path], list[str]]  # the bench's arguments, given the output directory
    needs: tuple[Callable[[], str | None], ...] = ()


BENCHES = (
    Bench("tcp_peers", lambda out: ["--json", str(out / "tcp_peers.json")]),
    Bench("middleware_peers", lambda out: ["--json", str(out / "middleware_peers.json")]),
    Bench("exporter_scrape", lambda out: []),
    Bench("compare_validation", lambda out: ["--out", str(out / "compare_validation.json")]),
    Bench("matrix_sim", lambda out: ["--out", str(out / "matrix_sim.json")], (_numpy,)),
    Bench("schedule_scale", lambda out: [], (_numpy,)),
    Bench("matrix_timing", lambda out: ["--json", str(out / "matrix_timing.json"), "--out", str(out / "matrix_timing.md")],
          (_root,)),
    Bench("softroce_vs_perftest", lambda out: ["--json", str(out / "softroce_vs_perftest.json"),
                                               "--out", str(out / "softroce_vs_perftest.md")],
          (_softroce_image,)),
    Bench("softroce_vs_middleware_peers", lambda out: ["--json", str(out / "softroce_vs_middleware_peers.json"),
                                                       "--out", str(out / "softroce_vs_middleware_peers.md")],
          (_softroce_image,)),
)


def why_skipped(bench: Bench) -> str | None:
    for need in bench.needs:
        why = need()
        if why:
            return why
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help=f"comma-separated benches (default all: {', '.join(b.name for b in BENCHES)})")
    ap.add_argument("--list", action="store_true", help="say which benches would run or be skipped (and why), run none")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "bench", help="directory for the benches' files")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in {b.name for b in BENCHES}]
    if unknown:
        ap.error(f"--only {','.join(unknown)}: no such bench; benches: {', '.join(b.name for b in BENCHES)}")
    chosen = [b for b in BENCHES if not names or b.name in names]
    args.out.mkdir(parents=True, exist_ok=True)
    summary: list[str] = []
    failed = 0
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "python"), os.environ.get("PYTHONPATH")])))
    for bench in chosen:
        why = why_skipped(bench)
        if why:
            summary.append(f"  skipped {bench.name}: {why}")
            continue
        cmd = [sys.executable, str(BENCH / f"{bench.name}.py"), *bench.argv(args.out)]
        if args.list:
            summary.append(f"  would run {bench.name}: {' '.join(cmd)}")
            continue
        print(f"\n=== bench {bench.name}: {' '.join(cmd)}", flush=True)
        start = time.monotonic()
        rc = subprocess.run(cmd, env=env, check=False).returncode
        took = time.monotonic() - start
        if rc == 2:  # the bench's own refusal: a peer tool or a setting its fairness depends on is missing
            summary.append(f"  skipped {bench.name}: it could not run fairly here (exit 2; its message is above)")
            continue
        failed += rc != 0
        summary.append(f"  {'ran' if rc == 0 else f'FAILED (exit {rc})'} {bench.name} in {took:.0f} s")
    print("\nbenches (figures measured on a shared machine need a quiet re-run before they count):")
    print("\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
