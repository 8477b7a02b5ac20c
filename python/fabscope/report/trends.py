# SPDX-License-Identifier: BSD-3-Clause
"""History trends for the report: the stored runs of the report's cases, with regressions marked as
`fabscope compare` calls them (``fabscope.compare``, the one owner of that rule).

One point per stored run (its latency p50 or its bandwidth), grouped by tag in the order the tags
first ran (asv's view: a tag is a build or a configuration); regressions are called between
consecutive groups: a tag groups repeated runs (compare needs at least two runs a side for
statistical evidence), and a run without a tag is a group of its own, which compare can never call
on its own (it says "one run: no statistical evidence"); the caption says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import datetime

from ..compare import Rule, Side, compare
from ..results import Result
from ..store import Filters, RunInfo, Store
from .charts import TrendPoint
from .html import History

Case = tuple[str, str, str, int, str]


def _figure(r: Result) -> float | None:
    if r.latency is not None:
        return r.latency.p50
    return r.bandwidth.gbps if r.bandwidth is not None else None


def _when(run: RunInfo) -> datetime:
    return datetime.fromisoformat(run.started_at)


DEFAULT_RULE = Rule()


def case_history(store: Store, case: Case, max_runs: int = 200, rule: Rule = DEFAULT_RULE) -> History | None:
    """The trend of one case over the newest ``max_runs`` stored runs that measured it, or None
    when fewer than two runs did. Runs are grouped by tag (untagged: a group of one) in the order
    the groups first ran, and each group is compared with the one before."""
    backend, op, pattern, size, transport = case
    filters = Filters(backend=backend, op=op, pattern=pattern, size=size)
    runs = {r.id: r for r in store.runs(filters, limit=max_runs)}
    measured: list[tuple[RunInfo, Result]] = []
    latest: dict[int, Result] = {}
    for run_id, r in store.results_by_run(sorted(runs), filters):
        if r.case == case:
            latest[run_id] = r  # a run measuring the case twice keeps its last
    measured = [(runs[i], latest[i]) for i in sorted(latest)]  # oldest first
    if len(measured) < 2:
        return None
    groups: dict[str, list[tuple[RunInfo, Result]]] = {}
    for run, res in measured:
        groups.setdefault(run.tag or f"run {run.id}", []).append((run, res))
    verdicts: dict[str, str] = {}
    names = list(groups)
    for before, after in itertools.pairwise(names):
        calls = compare(Side(before, [[r] for _, r in groups[before]]), Side(after, [[r] for _, r in groups[after]]),
                        rule)
        call = next((c for c in calls if (c.backend, c.op, c.pattern, c.size, c.transport) == case), None)
        verdict = "same" if call is None else call.verdict
        if call is not None and verdict in ("same", "inconclusive") and call.tail_verdict == "regression":
            verdict = "tail regression"
        verdicts[after] = verdict
    points = [TrendPoint(_when(run), value, f"{run.id}" + (f" ({run.tag})" if run.tag else ""),
                      verdicts.get(name, "same"), name)
              for name, members in groups.items() for run, res in members if (value := _figure(res)) is not None]
    unit = "µs" if pattern == "lat" else "Gb/s"
    figure = "p50" if pattern == "lat" else "bandwidth"
    return History(f"{backend} {op} {pattern} {size} B {figure} ({transport})", unit, points)


def histories(store: Store, results: Sequence[Result], max_cases: int = 8, max_runs: int = 200) -> list[History]:
    """Trends for the report's own cases (in the order they appear), those with two runs or more."""
    cases = list(dict.fromkeys(r.case for r in results))
    out: list[History] = []
    for case in cases:
        if len(out) >= max_cases:
            break
        found = case_history(store, case, max_runs)
        if found:
            out.append(found)
    return out
