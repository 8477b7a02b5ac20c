#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Validation of `fabscope compare`'s regression rule (python/fabscope/compare/) on real runs.

    .venv/bin/python bench/compare_validation.py [--pairs 20] [--runs 5] [--iters 1000] --out FILE

A/A: --pairs comparisons of the same build and settings (TCP loopback, 8 B ping-pong, --poll busy),
each side --runs fresh runs, the two sides' runs interleaved (a, b, a, b, ...: on this shared
machine the load changes from one minute to the next, and a block of runs taken in a busier minute
differs from the next block for real); every call (regression or improvement) is a false call.
Injected slowdown: --pairs comparisons of --poll busy (baseline) against --poll block (current),
the same otherwise: each must be called a regression.
For reference, the same A/A runs are also judged by a one-run rule as asv applies it to samples
(change beyond the threshold AND Mann-Whitney U p < 0.002 over the two runs' samples), to show
why the rule needs repeated runs on a shared machine.

Writes the figures as JSON to --out and prints a summary; exit 0 either way (a benchmark on a
shared machine is evidence, not a test). Only 127.0.0.1 is used; results are not kept in any
history store (the runner is called directly).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from fabscope.compare import Rule, Side, compare
from fabscope.launch import runner
from fabscope.results import Result
from fabscope.results.histogram import mann_whitney


def one_run(poll: str, iters: int) -> Result:
    args = ["--backend=tcp", "--pattern=lat", "--sizes=8", f"--iters={iters}", "--warmup=200", f"--poll={poll}",
            "--format=json"]
    outcome = runner.run_loopback(args, 10.0)
    if outcome.error or len(outcome.records) != 1:
        raise SystemExit(f"a run failed: {outcome.error or outcome.records}")
    return outcome.records[0]


def sides(poll_a: str, poll_b: str, runs: int, iters: int) -> tuple[Side, Side]:
    """Both sides' runs interleaved (a, b, a, b, ...), so a change of machine load during the pair
    falls on both sides alike instead of on whichever side ran in that minute."""
    a: list[list[Result]] = []
    b: list[list[Result]] = []
    for _ in range(runs):
        a.append([one_run(poll_a, iters)])
        b.append([one_run(poll_b, iters)])
    return Side(poll_a, a), Side(poll_b, b)


def single_run_call(a: Result, b: Result, rule: Rule) -> str:
    """asv-style on one run each: change beyond the threshold and MWU p < alpha_samples."""
    assert a.latency and b.latency and a.latency.histogram and b.latency.histogram
    change = b.latency.p50 / a.latency.p50 - 1
    mw = mann_whitney(a.latency.histogram, b.latency.histogram)
    if abs(change) > rule.threshold and mw.p_two_sided < rule.alpha_samples:
        return "regression" if change > 0 else "improvement"
    return "same"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--runs", type=int, default=5, help="runs per side of each comparison")
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--out", required=True, help="JSON file for the figures")
    ns = ap.parse_args()
    rule = Rule()
    started = time.monotonic()
    aa: list[dict[str, Any]] = []
    slow: list[dict[str, Any]] = []
    for i in range(ns.pairs):
        # Interleave A/A and slowdown pairs so both see the same machine load over time.
        base, cur = sides("busy", "busy", ns.runs, ns.iters)
        (row,) = compare(base, cur, rule)
        aa.append({"change": row.change, "p_runs": row.p_runs, "p_samples": row.p_samples, "verdict": row.verdict,
                   "single_run_verdict": single_run_call(base.runs[0][0], cur.runs[0][0], rule)})
        fast, blocked = sides("busy", "block", ns.runs, ns.iters)
        (row,) = compare(fast, blocked, rule)
        slow.append({"change": row.change, "p_runs": row.p_runs, "p_samples": row.p_samples, "verdict": row.verdict})
        print(f"pair {i + 1:2}: A/A {aa[-1]['verdict']:11} ({100 * (aa[-1]['change'] or 0):+6.1f}%, one-run rule "
              f"{aa[-1]['single_run_verdict']}); busy->block {slow[-1]['verdict']:11} "
              f"({100 * (slow[-1]['change'] or 0):+6.1f}%)", flush=True)
    false_calls = sum(1 for r in aa if r["verdict"] != "same")
    single_false = sum(1 for r in aa if r["single_run_verdict"] != "same")
    caught = sum(1 for r in slow if r["verdict"] == "regression")
    summary = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "rule": {"threshold": rule.threshold, "alpha_runs": rule.alpha, "alpha_samples": rule.alpha_samples},
        "setup": {"pairs": ns.pairs, "runs_per_side": ns.runs, "iters": ns.iters, "case": "tcp send lat 8 B loopback"},
        "aa_false_calls": false_calls,
        "aa_single_run_rule_false_calls": single_false,
        "slowdown_called": caught,
        "aa_abs_change_max": max(abs(float(r["change"] or 0)) for r in aa),
        "slowdown_change_min": min(float(r["change"] or 0) for r in slow),
        "seconds": round(time.monotonic() - started),
        "aa": aa,
        "slowdown": slow,
    }
    Path(ns.out).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.out).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"A/A: {false_calls}/{ns.pairs} false calls (goal <= 1); one-run asv-style rule: {single_false}/{ns.pairs}; "
          f"busy->block called a regression {caught}/{ns.pairs} (goal {ns.pairs}/{ns.pairs}); "
          f"{summary['seconds']} s; figures in {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
