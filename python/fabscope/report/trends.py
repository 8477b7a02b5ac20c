"""History trends for the report: the stored runs of the report's cases, with regressions marked as
`fabscope compare` calls them (``fabscope.compare``, the one owner of that rule).

One point per stored run (its median latency p50 or its bandwidth). Regressions are called between
consecutive groups of runs: a tag groups repeated runs (compare needs at least two runs a side for
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


def case_history(store: Store, case: Case, max_runs: int = 30, rule: Rule = DEFAULT_RULE) -> History | None:
    """The trend of one case over the newest ``max_runs`` stored runs that measured it, or None
    when fewer than two runs did."""
    backend, op, pattern, size, transport = case
    filters = Filters(backend=backend, op=op, pattern=pattern, size=size)
    runs = list(reversed(store.runs(filters, limit=max_runs)))  # oldest first
    measured: list[tuple[RunInfo, Result]] = []
    for run in runs:
        mine = [r for r in store.results([run.id], filters) if r.case == case]
        if mine:
            measured.append((run, mine[-1]))
    if len(measured) < 2:
        return None
    # Consecutive groups: runs sharing a tag, or one untagged run.
    groups: list[list[tuple[RunInfo, Result]]] = []
    for run, res in measured:
        if groups and run.tag is not None and groups[-1][0][0].tag == run.tag:
            groups[-1].append((run, res))
        else:
            groups.append([(run, res)])
    verdicts: dict[int, str] = {}
    for before, after in itertools.pairwise(groups):
        calls = compare(Side("before", [[r] for _, r in before]), Side("after", [[r] for _, r in after]), rule)
        verdict = next((c.verdict for c in calls if (c.backend, c.op, c.pattern, c.size, c.transport) == case),
                       "same")
        for run, _ in after:
            verdicts[run.id] = verdict
    points = [TrendPoint(_when(run), value, f"{run.id}" + (f" ({run.tag})" if run.tag else ""),
                         verdicts.get(run.id, "same"))
              for run, res in measured if (value := _figure(res)) is not None]
    unit = "µs" if pattern == "lat" else "Gb/s"
    figure = "p50" if pattern == "lat" else "bandwidth"
    return History(f"{backend} {op} {pattern} {size} B {figure} ({transport})", unit, points)


def histories(store: Store, results: Sequence[Result], max_cases: int = 8, max_runs: int = 30) -> list[History]:
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
