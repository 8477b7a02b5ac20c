#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Where a fabric matrix's time goes (issue 24, part 3): an all-pairs bandwidth matrix of 8 hosts
on the netns testbed, every host's fabric link shaped to 200 Mbit/s, agents started by mpirun,
default measurement settings; the matrix's own `timing` section (fabscope.matrix/1) says how much
of the wall time was measuring (every pair's measured phase over the pairs measured at once) and
the overhead of a pair. Goal: >= 85 % of the wall time measuring.

    python3 bench/matrix_timing.py [--repeats 3] [--hosts 8] [--shape 200mbit] [--json FILE] [--out FILE.md]

Run as root (the testbed makes network namespaces). Holds the testbed's lock for the whole run;
evidence, not a test: exit 0 whatever the figures, 2 when the testbed cannot be made.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from fabscope.testbed import netns  # noqa: E402

GOAL = 0.85


def matrix_once(hosts: list[str]) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **netns.launcher_env())
    cmd = [sys.executable, "-m", "fabscope", "matrix", "--hosts", ",".join(hosts), "--launcher", "mpirun",
           "--backend", "tcp", "--device", "fabric0", "--pattern", "bw", "--format", "json", "--no-store"]
    began = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env, check=False)
    wall = time.monotonic() - began
    if not out.stdout.strip():
        raise SystemExit(f"matrix_timing: the matrix printed nothing (exit {out.returncode}): {out.stderr[-2000:]}")
    doc = json.loads(out.stdout)
    t = doc["timing"]
    # A pair's measured phase: the longer of the sender's and the receiver's span (the matrix's own rule).
    durations = [max(p.get("duration_s") or 0.0, p.get("rx_duration_s") or 0.0) for p in doc["pairs"]]
    return {"exit": out.returncode, "command_s": round(wall, 2), "timing": t, "pairs": len(doc["pairs"]),
            "sum_pair_durations_s": round(sum(durations), 2), "findings": [f["summary"] for f in doc["findings"]]}


def _phases(t: dict[str, Any]) -> str:
    ph = t.get("job_phases_median_s") or {}
    return " / ".join(f"{ph[k]:.2f}" if k in ph else "-" for k in ("server_start", "client", "server_end"))


def render(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [f"{args.hosts} hosts, fabric links {args.shape} (tbf), all pairs both directions, bw, "
             f"`--launcher mpirun --backend tcp --device fabric0`, default sizes and counts; goal: measuring >= {GOAL:.0%} "
             "of the wall time", "",
             "| run | command s | matrix wall s | start-up s | pairs | at once | sum of measured phases s | measuring s | "
             "measuring share | overhead a pair s (median) | pair medians s: server start / client / server end | met | exit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        t = r["timing"]
        share = t["measuring_fraction"] or 0.0
        lines.append(f"| {i} | {r['command_s']} | {t['wall_s']} | {t['start_s']} | {r['pairs']} | {t['jobs_at_once']} | "
                     f"{r['sum_pair_durations_s']} | {t['measuring_s']} | {share:.1%} | {t['overhead_per_job_s']} | "
                     f"{_phases(t)} | {'yes' if share >= GOAL else 'NO'} | {r['exit']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--shape", default="200mbit")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    runs: list[dict[str, Any]] = []
    with netns.session():
        try:
            netns.up(args.shape, hosts=args.hosts)
        except Exception as exc:  # the testbed itself: say why, exit 2
            print(f"matrix_timing: cannot make the testbed: {exc}", file=sys.stderr)
            return 2
        try:
            hosts = netns.host_names(args.hosts)
            for i in range(args.repeats):
                runs.append(matrix_once(hosts))
                t = runs[-1]["timing"]
                print(f"run {i + 1}: wall {t['wall_s']} s, measuring {t['measuring_s']} s "
                      f"({(t['measuring_fraction'] or 0):.1%}), overhead {t['overhead_per_job_s']} s a pair, "
                      f"{t['jobs']} pairs, {t['jobs_at_once']} at once; pair medians {t.get('job_phases_median_s')}",
                      flush=True)
        finally:
            netns.down()
    text = render(runs, args)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
