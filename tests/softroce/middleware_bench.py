#!/usr/bin/env python3
"""Guest side of bench/softroce_vs_middleware_peers.py: runs in the CLIENT guest of a two-guest
boot whose server guest runs the testbed's default `fabscope serve`.

    python3 middleware_bench.py PLAN.json OUTDIR

Also called by middleware_cases.py (run_plan) when its boot carries a plan (the test's smallest mode).
PLAN.json (written by the host script): {"repeats": R, "cases": [{"name", "peer_server" (shell
command for the server guest, started over ssh, or null when the peer launches both halves itself,
as mpirun does), "peer_client" (argv), "fabscope" (argv)}]}. Each case runs as a chain that starts
and ends with the peer, P F P F ... P (R fabscope runs, R + 1 peer runs), so every fabscope run has
the peer's run right before and right after it (the host's sandwiches). One JSON line per run in
OUTDIR/bench.jsonl (argv, exit status, output); the host parses the figures after the guests
powered off, so nothing here judges.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from middleware_cases import run_peer  # same directory
from placement_client import write_placement

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
            chain = [(rep, tool) for rep in range(repeats) for tool in ("peer", "fabscope")]
            chain.append((repeats, "peer"))
            for seq, (rep, tool) in enumerate(chain):
                write_placement(out, case["name"], seq)
                if tool == "fabscope":
                    rec = run_local(case["fabscope"])
                elif case.get("peer_server"):
                    rec = run_peer(case["peer_server"], case["peer_client"], TIMEOUT_S)
                else:
                    rec = run_local(case["peer_client"])
                rec.update(section="bench", bench=case["name"], tool=tool, rep=rep)
                out.write(json.dumps(rec) + "\n")
                out.flush()
                print(f"[bench] {case['name']} {tool} rep {rep}: rc={rec['rc']} {rec['elapsed_s']} s", flush=True)
            write_placement(out, case["name"], len(chain))


def main() -> int:
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    run_plan(plan, sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
