#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Several runs of one Soft-RoCE bench side by side, and their sandwiches pooled.

    python3 bench/runs_table.py RUN1.json RUN2.json RUN3.json

Reads the --json files of `bench/softroce_vs_perftest.py` or `bench/softroce_vs_middleware_peers.py`
(all of one kind) and prints two Markdown tables:
- per row, each run's verdict (its sandwich median and how many sandwiches it rests on) and
  whether the row met its goal in every run: the "three runs in a row" reading;
- per row, the sandwiches of all runs pooled: their median and quartiles, against the same goal.

The two answer different questions. A run's verdict is a median of about ten sandwiches; where
one sandwich spreads by 5-10 % (the guests' speed under TCG moves between runs), that median moves
by a few percent from run to run, so a row whose pooled median sits 2 % under its goal still
misses it in some runs. The pooled median says where the row sits; the per-run verdicts say how
often a run of that length calls it. Both carry the interval that holds the median with 95 %
confidence (bench/sandwich.py, median_interval), and a verdict whose interval holds the goal is
marked `(undecided)`. Each run's sandwiches are the ones its bench kept (bench/sandwich.py
decided which count); only the median and its interval are computed here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandwich import decided, median_interval, meets, sandwich_cell, verdict_word


@dataclass(frozen=True)
class RowRun:
    """One row of one run, as its bench wrote it."""

    name: str
    is_lat: bool
    goal: float
    verdict: float | None  # the median of the sandwiches used; None when none counted
    used: list[float]
    left_out: list[int]
    met: bool | None


class RunsError(Exception):
    """A file that is not a Soft-RoCE bench's --json output, or runs of different benches."""


def row_run(row: dict[str, Any]) -> RowRun:
    """Reads both benches' rows: the verbs bench says `lat` and `sandwich_ratio`, the middleware
    bench `kind` and `sandwich`."""
    try:
        is_lat = bool(row["lat"]) if "lat" in row else row["kind"] == "lat"
        verdict = row["sandwich_ratio"] if "sandwich_ratio" in row else row["sandwich"]
        return RowRun(name=str(row["bench"]), is_lat=is_lat, goal=float(row["goal"]),
                      verdict=None if verdict is None else float(verdict),
                      used=[float(x) for x in row["sandwich_ratios"]],
                      left_out=[int(x) for x in row["sandwich_left_out"]],
                      met=None if row.get("met") is None else bool(row["met"]))
    except (KeyError, TypeError, ValueError) as e:
        raise RunsError(f"a row without the sandwich fields ({e}): {json.dumps(row)[:200]}") from e


def load(path: Path) -> list[RowRun]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunsError(f"{path}: {e}") from e
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise RunsError(f"{path}: no `rows`: not the --json output of a Soft-RoCE bench")
    return [row_run(r) for r in rows]


def per_run_table(runs: list[list[RowRun]]) -> list[str]:
    names = [r.name for r in runs[0]]
    for i, run in enumerate(runs[1:], 2):
        if [r.name for r in run] != names:
            raise RunsError(f"run {i} has other rows than run 1: runs of different benches or --only sets")
    out = ["| row | " + " | ".join(f"run {i}: sandwich (used)" for i in range(1, len(runs) + 1))
           + " | goal | met in all |",
           "|---|" + "---|" * len(runs) + "---|---|"]
    for k, name in enumerate(names):
        cells = []
        for run in runs:
            r = run[k]
            settled = decided(r.is_lat, r.goal, r.used) is not None
            # a met run's cell stays plain unless its interval holds the goal; a miss always says NO
            mark = ("" if settled else " (undecided)") if r.met is True else " " + verdict_word(r.met, settled)
            cells.append(sandwich_cell(r.verdict, r.used, r.left_out) + mark)
        verdicts = [decided(run[k].is_lat, run[k].goal, run[k].used) for run in runs]
        all_met = all(run[k].met is True for run in runs)
        # "met in all" is settled when every run's yes is, or when any run's NO is
        settled_all = all(v is not None for v in verdicts) if all_met else False in verdicts
        first = runs[0][k]
        goal = ("<= " if first.is_lat else ">= ") + f"{first.goal:g}"
        out.append(f"| {name} | " + " | ".join(cells) + f" | {goal} | {verdict_word(all_met, settled_all)} |")
    met = [sum(1 for r in run if r.met is True) for run in runs]
    settled = [sum(1 for r in run if decided(r.is_lat, r.goal, r.used) is not None) for run in runs]
    out += ["", "Goals met per run: " + ", ".join(f"{m} of {len(names)}" for m in met)
            + "; decided by the interval: " + ", ".join(f"{d} of {len(names)}" for d in settled) + "."]
    return out


def pooled_table(runs: list[list[RowRun]]) -> list[str]:
    out = ["| row | sandwiches | median | quartiles | 95 % interval | goal | met |", "|---|---|---|---|---|---|---|"]
    for k, first in enumerate(runs[0]):
        pool = sorted(x for run in runs for x in run[k].used)
        goal = ("<= " if first.is_lat else ">= ") + f"{first.goal:g}"
        if not pool:
            out.append(f"| {first.name} | 0 | - | - | - | {goal} | - |")
            continue
        n, med = len(pool), statistics.median(pool)
        quart = f"{pool[n // 4]:.3f}-{pool[(3 * n) // 4]:.3f}"
        band = median_interval(pool)
        ok = verdict_word(meets(first.is_lat, first.goal, med), decided(first.is_lat, first.goal, pool) is not None)
        interval = "-" if band is None else f"{band[0]:.3f}-{band[1]:.3f}"
        out.append(f"| {first.name} | {n} | {med:.3f} | {quart} | {interval} | {goal} | {ok} |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="--json files of one Soft-RoCE bench, in run order")
    args = ap.parse_args(argv)
    try:
        runs = [load(p) for p in args.runs]
        lines = ["Each run's verdicts:", "", *per_run_table(runs), "",
                 f"The sandwiches of {len(runs)} run{'s' if len(runs) > 1 else ''} pooled:", "",
                 *pooled_table(runs)]
    except RunsError as e:
        print(f"runs_table: {e}", file=sys.stderr)
        return 2
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:
        # The reader stopped early (`| head`): nothing is wrong with the runs. stdout is pointed
        # at /dev/null so the interpreter's own flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
