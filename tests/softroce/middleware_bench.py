#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Guest side of bench/softroce_vs_middleware_peers.py: runs in the CLIENT guest of a two-guest
boot whose server guest runs the testbed's default `fabscope serve`.

    python3 middleware_bench.py PLAN.json OUTDIR

Also called by middleware_cases.py (run_plan) when its boot carries a plan (the test's smallest mode).
PLAN.json (written by the host script): {"repeats": R, "cases": [{"name", "peer_server" (shell
command for the server guest, started over ssh, or null when the peer launches both halves itself,
as mpirun does), "peer_listens" (where its server half listens for the client: tcp:PORT or
cm:PORT, tests/softroce/peer_server.sh), "peer_client" (argv), "fabscope" (argv), "peer_figure" (how the peer's output is
read, bench/peer_output.py)}]}. Each case runs as a chain that starts and ends with the peer,
P F P F ... P (at least R fabscope runs, one more peer run), so every fabscope run has the peer's
run right before and right after it (the host's sandwiches). One JSON line per run in
OUTDIR/bench.jsonl (argv, exit status, output); the host parses the figures after the guests
powered off. The one thing judged here is whether a chain needs more repeats, from the peer's runs
alone (run_chain).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from middleware_cases import run_peer  # same directory
from placement_client import write_placement

# bench/ beside this directory, or the repo's, read-only at /fabscope in every guest (a test's boot
# runs this file from its own share)
_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, _BENCH if os.path.isfile(os.path.join(_BENCH, "sandwich.py")) else "/fabscope/bench")
from peer_output import peer_figure  # noqa: E402  (bench/: how each peer's output is read)
from sandwich import run_chain as drive_chain  # noqa: E402  (bench/: the benches' one sandwich rule)

TIMEOUT_S = 180  # one tool's run; under TCG the slowest (mpirun + 64 KiB bw) takes ~40 s


def run_local(argv: list[str]) -> dict:
    t0 = time.monotonic()
    try:
        c = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
        rc, so, se = c.returncode, c.stdout, c.stderr
    except subprocess.TimeoutExpired:
        rc, so, se = None, "", f"timed out after {TIMEOUT_S} s"
    # fabscope's JSON records are long lines: all of stdout, the host reads them
    return {"argv": argv, "rc": rc, "output": so, "stderr": se[-3000:],
            "elapsed_s": round(time.monotonic() - t0, 1)}


def run_plan(plan: dict, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "bench.jsonl"), "a") as out:
        repeats = int(plan["repeats"])
        for case in plan["cases"]:
            run_chain(case, repeats, out)


def run_chain(case: dict, repeats: int, out) -> None:
    """One case's chain, P F P F ... P, driven by bench/sandwich.py's run_chain: `repeats`
    fabscope runs, and more while fewer than three sandwiches have two peer runs that agree."""
    seq = 0

    def run(tool: str, rep: int) -> dict:
        nonlocal seq
        write_placement(out, case["name"], seq)
        seq += 1
        if tool == "fabscope":
            rec = run_local(case["fabscope"])
        elif case.get("peer_server"):
            rec = run_peer(case["peer_server"], case["peer_listens"], case["peer_client"], TIMEOUT_S)
        else:
            rec = run_local(case["peer_client"])
        rec.update(section="bench", bench=case["name"], tool=tool, rep=rep)
        out.write(json.dumps(rec) + "\n")
        out.flush()
        print(f"[bench] {case['name']} {tool} rep {rep}: rc={rec['rc']} {rec['elapsed_s']} s", flush=True)
        return rec

    def run_peer_tool(rep: int) -> float | None:
        rec = run("peer", rep)
        return peer_figure(case["peer_figure"], rec["rc"], rec.get("output") or "")

    drive_chain(run_peer_tool, lambda rep: run("fabscope", rep)["rc"] == 0, repeats)
    write_placement(out, case["name"], seq)


def main() -> int:
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    run_plan(plan, sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
