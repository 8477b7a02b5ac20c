# SPDX-License-Identifier: BSD-3-Clause
"""The regression rule: per case, the median's change against the threshold and the evidence across
runs (stats.py), the tail judged on its own, and the causes that differ when B is slower."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..results import Result
from ..results.contrast import CauseContrast, contrast
from ..results.histogram import Histogram, HistogramError, mann_whitney, merge
from ..untyped import number
from .stats import MAX_RUNS, rank_p, rank_runs_needed, runs_needed, welch_p

Case = tuple[str, str, str, int, str]


@dataclass(frozen=True)
class Rule:
    threshold: float = 0.05
    alpha: float = 0.01
    alpha_samples: float = 0.002


@dataclass(frozen=True)
class Side:
    """One side of a comparison: its name and its runs (each a list of results)."""

    name: str
    runs: list[list[Result]]


@dataclass(frozen=True)
class CaseComparison:
    backend: str
    op: str
    pattern: str
    size: int
    transport: str
    metric: str  # "latency p50 [us]" or "bandwidth [Gb/s]"
    baseline: float | None
    current: float | None
    change: float | None  # relative: +0.10 = 10 % more (slower for latency, faster for bandwidth)
    baseline_p99: float | None
    current_p99: float | None
    p99_change: float | None
    runs: tuple[int, int]
    p_runs: float | None
    p_samples: float | None
    evidence: str
    verdict: str  # regression | improvement | same | inconclusive | only-baseline | only-current
    tail_metric: str | None = None  # "latency p99 [us]", "slowest interval [Gb/s]", None: not in the records
    tail_baseline: float | None = None
    tail_current: float | None = None
    tail_change: float | None = None
    p_tail: float | None = None
    tail_verdict: str = "-"  # regression | improvement | same | inconclusive | - (no tail figures)
    tail_evidence: str = ""
    runs_to_settle: int | None = None  # runs a side that would settle an inconclusive call
    causes: CauseContrast | None = None  # the causes that differ, when B is slower (else None)

    def to_json(self) -> dict[str, Any]:
        """The row for `--format json`: every field, the causes flattened (``causes_differ``:
        [{cause, seen_in, evidence, cost, fix, ...}], null when B is not slower)."""
        out = asdict(replace(self, causes=None))
        del out["causes"]
        empty = CauseContrast((), (), (), ()).to_json()
        out.update(self.causes.to_json() if self.causes is not None else dict.fromkeys(empty))
        return out


def _by_case(side: Side) -> dict[Case, list[Result]]:
    """Per case, one result per run (a run measuring a case twice keeps its last)."""
    out: dict[Case, list[Result]] = {}
    for run in side.runs:
        latest: dict[Case, Result] = {r.case: r for r in run}
        for case, r in latest.items():
            out.setdefault(case, []).append(r)
    return out


def _figure(r: Result) -> float | None:
    if r.latency is not None:
        return r.latency.p50
    return r.bandwidth.gbps if r.bandwidth is not None else None


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _change(base: float | None, cur: float | None) -> float | None:
    return cur / base - 1.0 if base and cur is not None else None


def _histogram(results: Sequence[Result]) -> Histogram | None:
    hists = [r.latency.histogram for r in results if r.latency is not None and r.latency.histogram is not None]
    if len(hists) != len(results) or not hists:
        return None
    return merge(hists)


@dataclass(frozen=True)
class _Call:
    verdict: str
    p: float | None
    evidence: str
    runs_to_settle: int | None


def _call(b_vals: Sequence[float | None], c_vals: Sequence[float | None], lower_is_better: bool, rule: Rule,
          samples_agree: bool = True, ranks: bool = False) -> _Call:
    """The rule for one figure over runs: effect beyond the threshold AND a test across runs (Welch t
    on the logs; ``ranks``: Mann-Whitney U, for the heavy-tailed tail figures) and ``samples_agree``:
    a call; a big change without that: inconclusive; else same."""
    b_med, c_med = _median(b_vals), _median(c_vals)
    change = _change(b_med, c_med)
    logs_b = [math.log(v) for v in b_vals if v is not None and v > 0]
    logs_c = [math.log(v) for v in c_vals if v is not None and v > 0]
    complete = len(logs_b) == len(b_vals) and len(logs_c) == len(c_vals)
    test = "Mann-Whitney U over runs" if ranks else "Welch"
    p = (rank_p(logs_b, logs_c) if ranks else welch_p(logs_b, logs_c)) if complete else None
    if change is None or abs(change) <= rule.threshold:
        return _Call("same", p, "", None)
    worse = (change > 0) == lower_is_better
    if p is not None and p < rule.alpha and samples_agree:
        return _Call("regression" if worse else "improvement", p, "", None)
    need = runs_needed(logs_b, logs_c, change, rule.alpha)
    if ranks:
        need = max(need, rank_runs_needed(rule.alpha))
    have = min(len(b_vals), len(c_vals))
    why = ("too few runs to tell it from run-to-run variation" if have < 2 else
           f"runs do not differ enough ({test} p={p:.2g})" if p is not None and p >= rule.alpha else
           "the samples' test does not agree" if not samples_agree else "a figure is missing in some runs")
    more = (f"about {need} runs a side would settle it" if need < MAX_RUNS else
            f"more than {MAX_RUNS} runs a side would be needed: within the run-to-run noise")
    return _Call("inconclusive", p, f"{100 * change:+.1f}% but {why}: {more}", need if need < MAX_RUNS else None)


def _tail(r: Result) -> float | None:
    """The tail figure of a run: latency p99, or the slowest whole bandwidth interval."""
    if r.latency is not None:
        return r.latency.p99
    return number(r.raw.get("bandwidth_min_gbps"))


def _compare_case(case: Case, base: list[Result], cur: list[Result], rule: Rule) -> CaseComparison:
    lat = case[2] == "lat"
    b_vals, c_vals = [_figure(r) for r in base], [_figure(r) for r in cur]
    b_med, c_med = _median(b_vals), _median(c_vals)
    change = _change(b_med, c_med)
    b99 = _median([r.latency.p99 for r in base if r.latency]) if lat else None
    c99 = _median([r.latency.p99 for r in cur if r.latency]) if lat else None
    p_samples: float | None = None
    sample_dir = 0
    notes: list[str] = []
    if lat:
        hb, hc = _histogram(base), _histogram(cur)
        if hb is None or hc is None:
            notes.append("no latency histogram in the records (stored before 0.2): samples not compared")
        else:
            try:
                mw = mann_whitney(hb, hc)
                p_samples = mw.p_two_sided
                sample_dir = 1 if mw.prob_b_greater > 0.5 else -1
                notes.append(f"Mann-Whitney U over {hb.total} vs {hc.total} samples: p={p_samples:.2g}")
            except HistogramError as exc:
                notes.append(str(exc))
    samples_agree = not lat or (p_samples is not None and p_samples < rule.alpha_samples
                                and sample_dir == (1 if change and change > 0 else -1))
    main = _call(b_vals, c_vals, lat, rule, samples_agree)
    if len(base) < 2 or len(cur) < 2:
        notes.insert(0, f"{'one run' if min(len(base), len(cur)) == 1 else 'too few runs'}: no statistical "
                        f"evidence ({len(base)} vs {len(cur)} run(s); repeat runs under one --tag)")
    elif main.p is not None:
        notes.insert(0, f"Welch t over {len(base)} vs {len(cur)} runs: p={main.p:.2g}")
    if main.evidence:
        notes.insert(0, main.evidence)
    b_tail, c_tail = [_tail(r) for r in base], [_tail(r) for r in cur]
    tail = _call(b_tail, c_tail, lat, rule, ranks=True) if any(v is not None for v in b_tail + c_tail) else None
    tail_notes = ""
    if tail is not None:
        tail_notes = tail.evidence or (f"Mann-Whitney U over runs: p={tail.p:.2g}" if tail.p is not None else "")
    settle = [n for n in (main.runs_to_settle, tail.runs_to_settle if tail else None) if n is not None]
    slower = (main.verdict == "regression" or (tail is not None and tail.verdict == "regression")
              or (main.verdict == "inconclusive" and change is not None and (change > 0) == lat))
    causes = contrast([r.explanation for r in base], [r.explanation for r in cur]) if slower else None
    return CaseComparison(
        backend=case[0], op=case[1], pattern=case[2], size=case[3], transport=case[4],
        metric="latency p50 [us]" if lat else "bandwidth [Gb/s]", baseline=b_med, current=c_med, change=change,
        baseline_p99=b99, current_p99=c99, p99_change=_change(b99, c99), runs=(len(base), len(cur)),
        p_runs=main.p, p_samples=p_samples, evidence="; ".join(notes), verdict=main.verdict,
        tail_metric=None if tail is None else "latency p99 [us]" if lat else "slowest interval [Gb/s]",
        tail_baseline=_median(b_tail), tail_current=_median(c_tail),
        tail_change=_change(_median(b_tail), _median(c_tail)), p_tail=tail.p if tail else None,
        tail_verdict=tail.verdict if tail else "-", tail_evidence=tail_notes,
        runs_to_settle=max(settle) if settle else None, causes=causes,
    )


def compare(baseline: Side, current: Side, rule: Rule = Rule()) -> list[CaseComparison]:
    b_cases, c_cases = _by_case(baseline), _by_case(current)
    out: list[CaseComparison] = []
    for case in sorted(set(b_cases) | set(c_cases)):
        if case in b_cases and case in c_cases:
            out.append(_compare_case(case, b_cases[case], c_cases[case], rule))
            continue
        only = "only-baseline" if case in b_cases else "only-current"
        rs = b_cases.get(case) or c_cases[case]
        out.append(CaseComparison(case[0], case[1], case[2], case[3], case[4],
                                  "latency p50 [us]" if case[2] == "lat" else "bandwidth [Gb/s]",
                                  _median([_figure(r) for r in rs]) if only == "only-baseline" else None,
                                  _median([_figure(r) for r in rs]) if only == "only-current" else None,
                                  None, None, None, None, (len(b_cases.get(case, [])), len(c_cases.get(case, []))),
                                  None, None, f"measured {only.split('-')[1]} only", only))
    return out
