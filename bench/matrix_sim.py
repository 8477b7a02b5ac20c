#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Simulate the fabric matrix on synthetic fabrics: does the rule find every planted fault,
with no false positives, in fewer pair-measurements than a full all-pairs run?

A synthetic fabric of N hosts: every directed measurement of a healthy pair draws its bandwidth
from nominal x (1 + noise x a standard normal) (default noise 5 %, about four times the spread of
repeated TCP bw measurements in the netns testbed, see bench/RESULTS.md); k bad nodes and k bad
links are planted at random, each degraded to a random fraction in [--severity-lo, --severity-hi]
of nominal (a bad node degrades every pair it is in). Strategies compared, on the same fabric:

- fabscope screen: `--screen-rounds` random rounds (each a perfect matching, both directions),
  then the retests and fresh partners of fabscope.matrix.rules, then attribution
  (fabscope.matrix.findings): the code `fabscope matrix` runs, fed by this simulated measurer;
- fabscope all-pairs: the circle schedule (N-1 rounds) with the same rule (up to N = 1024);
- ClusterKit's published rule on all-pairs: a pair is bad when its bandwidth is below 93 % of
  the best pair's (pairs only: it names no nodes); counted per pair;
- mpiGraph's schedule: the shift schedule (N-1 steps, every host sending and receiving at once),
  no verdict: its cost, for the wall-time column.

Wall time = rounds x the time of one pair measurement (--pair-time, default the per-round time
the 6-host testbed matrix took, see bench/RESULTS.md). Standard library + numpy (a dev
dependency) for the all-pairs comparators; prints a Markdown table, and writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

from fabscope.matrix import driver
from fabscope.matrix.rules import Job, Rule
from fabscope.matrix.schedule import AllPairs, RandomRounds
from fabscope.results.matrix import Measurement


@dataclass
class Fabric:
    n: int
    noise: float
    bad_nodes: dict[int, float]
    bad_links: dict[tuple[int, int], float]
    rng: random.Random
    count: int = 0

    def factor(self, a: int, b: int) -> float:
        f = self.bad_nodes.get(a, 1.0) * self.bad_nodes.get(b, 1.0)
        return f * self.bad_links.get((a, b) if a < b else (b, a), 1.0)

    def draw(self, a: int, b: int) -> float:
        self.count += 1
        return max(0.0, self.factor(a, b) * (1 + self.noise * self.rng.gauss(0, 1)))


def plant(n: int, nodes: int, links: int, lo: float, hi: float, noise: float, seed: int) -> Fabric:
    rng = random.Random(seed)
    bad_nodes = {h: rng.uniform(lo, hi) for h in rng.sample(range(n), nodes)}
    bad_links: dict[tuple[int, int], float] = {}
    while len(bad_links) < links:
        a, b = sorted(rng.sample(range(n), 2))
        if a not in bad_nodes and b not in bad_nodes:
            bad_links[(a, b)] = rng.uniform(lo, hi)
    return Fabric(n, noise, bad_nodes, bad_links, rng)


@dataclass
class SimMeasurer:
    fabric: Fabric
    names: list[str]
    unreachable: dict[str, str] = field(default_factory=dict)
    index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.index = {h: i for i, h in enumerate(self.names)}

    def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
        return [Measurement(src, dst, pattern, self.fabric.draw(self.index[src], self.index[dst]), phase=phase,
                            round=round_no) for src, dst, pattern, phase in jobs]


def score(fabric: Fabric, names: list[str], findings: list[tuple[str, list[str]]]) -> dict[str, int]:
    want_nodes = {names[h] for h in fabric.bad_nodes}
    want_links = {(names[a], names[b]) for a, b in fabric.bad_links}
    got_nodes = {hs[0] for kind, hs in findings if kind == "node"}
    got_links = {(min(hs), max(hs)) for kind, hs in findings if kind == "link"}
    return {
        "planted": len(want_nodes) + len(want_links),
        "found": len(want_nodes & got_nodes) + len(want_links & got_links),
        "false_positives": len(got_nodes - want_nodes) + len(got_links - want_links),
    }


def run_fabscope(fabric: Fabric, schedule_name: str, rounds: int, rule: Rule, seed: int,
                 directions: str = "both") -> dict[str, object]:
    names = [f"h{i:05d}" for i in range(fabric.n)]
    sched = AllPairs(fabric.n) if schedule_name == "all-pairs" else RandomRounds(fabric.n, k=rounds, seed=seed)
    fabric.count = 0
    t0 = time.perf_counter()
    result = driver.run(names, ["bw"], sched, rule, SimMeasurer(fabric, names), backend="sim", directions=directions)
    cpu = time.perf_counter() - t0
    total_rounds = max((m.round for m in result.measurements), default=0) + 1
    out: dict[str, object] = {
        "strategy": f"fabscope {schedule_name}" + (f" x{rounds}" if schedule_name == "random" else "")
        + (", one direction + retests" if directions == "one" else ", both directions"),
        "measurements": fabric.count, "rounds": total_rounds,
        "steps": sched.rounds * (2 if directions == "both" else 1) + (total_rounds - sched.rounds),
        "retests": result.retests, "cpu_s": round(cpu, 2),
    }
    out.update(score(fabric, names, [(f.kind, f.hosts) for f in result.findings]))
    return out


def run_clusterkit(fabric: Fabric) -> dict[str, object]:
    """ClusterKit's rule (bad = bw < 93 % of the maximum) over all pairs, both directions; a fault
    counts as found when a pair it degrades is flagged; false positives are flagged healthy pairs."""
    import numpy as np

    n = fabric.n
    rng = np.random.default_rng(fabric.rng.randrange(1 << 30))
    factor = np.ones((n, n))
    for h, f in fabric.bad_nodes.items():
        factor[h, :] *= f
        factor[:, h] *= f
    for (a, b), f in fabric.bad_links.items():
        factor[a, b] *= f
        factor[b, a] *= f
    bw = factor * (1 + fabric.noise * rng.standard_normal((n, n)))
    np.fill_diagonal(bw, np.nan)
    flagged = bw < 0.93 * np.nanmax(bw)
    healthy = factor == 1.0
    np.fill_diagonal(flagged, False)
    np.fill_diagonal(healthy, False)
    found = sum(1 for h in fabric.bad_nodes if flagged[h, :].any() or flagged[:, h].any())
    found += sum(1 for a, b in fabric.bad_links if flagged[a, b] or flagged[b, a])
    return {"strategy": "ClusterKit rule, all-pairs", "measurements": n * (n - 1), "rounds": n - 1,
            "steps": 2 * (n - 1), "retests": 0, "cpu_s": 0.0,
            "planted": len(fabric.bad_nodes) + len(fabric.bad_links), "found": found,
            "false_positives": int((flagged & healthy).sum()), "fp_unit": "pairs"}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="64,256,1024,4096", help="fabric sizes N (comma-separated)")
    p.add_argument("--noise", type=float, default=0.05, help="relative spread of a healthy measurement")
    p.add_argument("--bad-nodes", type=int, default=2)
    p.add_argument("--bad-links", type=int, default=3)
    p.add_argument("--severity-lo", type=float, default=0.4, help="a fault keeps at least this share of nominal")
    p.add_argument("--severity-hi", type=float, default=0.7, help="... and at most this share")
    p.add_argument("--screen-rounds", type=int, default=4)
    p.add_argument("--all-pairs-max", type=int, default=1024, help="largest N for fabscope's own all-pairs run")
    p.add_argument("--pair-time", type=float, default=1.0, help="seconds one round step takes (wall-time column)")
    p.add_argument("--trials", type=int, default=3, help="fabrics per size (different seeds)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = p.parse_args(argv)
    rule = Rule()
    rows: list[dict[str, object]] = []
    for n in (int(x) for x in args.sizes.split(",")):
        for trial in range(args.trials):
            seed = args.seed * 1000 + trial
            strategies = [("random", args.screen_rounds, "both")]
            if n <= args.all_pairs_max:
                strategies += [("all-pairs", 0, "one"), ("all-pairs", 0, "both")]
            for name, k, directions in strategies:
                fabric = plant(n, args.bad_nodes, args.bad_links, args.severity_lo, args.severity_hi, args.noise, seed)
                rows.append({"n": n, "trial": trial, **run_fabscope(fabric, name, k, rule, seed, directions)})
            fabric = plant(n, args.bad_nodes, args.bad_links, args.severity_lo, args.severity_hi, args.noise, seed)
            rows.append({"n": n, "trial": trial, **run_clusterkit(fabric)})
            rows.append({"n": n, "trial": trial, "strategy": "mpiGraph shift (no verdict)",
                         "measurements": n * (n - 1), "rounds": n - 1, "steps": n - 1})
    print(f"noise {args.noise:.0%}, {args.bad_nodes} bad nodes + {args.bad_links} bad links at "
          f"{args.severity_lo:.0%}-{args.severity_hi:.0%} of nominal, {args.trials} fabrics per N, "
          f"rule: {rule.to_json()['text']}")
    print("| N | strategy | pair measurements | steps | wall time | found / planted | false positives | cpu s |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sorted({int(str(r["n"])) for r in rows}):
        for strat in dict.fromkeys(str(r["strategy"]) for r in rows if r["n"] == n):
            sel = [r for r in rows if r["n"] == n and r["strategy"] == strat]
            meas = max(int(str(r["measurements"])) for r in sel)
            steps = max(int(str(r["steps"])) for r in sel)
            wall = steps * args.pair_time
            if "found" in sel[0]:
                found = f"{sum(int(str(r['found'])) for r in sel)} / {sum(int(str(r['planted'])) for r in sel)}"
                fp = str(sum(int(str(r["false_positives"])) for r in sel)) + (" pairs" if sel[0].get("fp_unit") else "")
                cpu = f"{max(float(str(r['cpu_s'])) for r in sel):.1f}"
            else:
                found, fp, cpu = "-", "-", "-"
            print(f"| {n} | {strat} | {meas:,} | {steps:,} | {_dur(wall)} | {found} | {fp} | {cpu} |")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    return 0


def _dur(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    sys.exit(main())
