# SPDX-License-Identifier: BSD-3-Clause
"""Regression calls: `fabscope compare BASELINE CURRENT`.

Each side is a run id, ``latest`` / ``latest~N``, a tag (every run with that tag: repeated runs),
or a result file (JSON lines; several files = several runs). Results are matched per case
(backend, op, pattern, size, transport). A case is called ``regression`` or ``improvement`` only
when BOTH hold:

1. effect size: the median over runs of latency p50 (lat) or receiver bandwidth (bw, bibw) moved by
   more than ``--threshold`` (default 5 %) in that direction;
2. statistical evidence that the runs differ, with at least two runs on each side: Welch's t-test
   on the per-run figures (log scale) at ``--alpha`` (default 0.01) and, for latency, also the
   Mann-Whitney U test on the runs' merged latency histograms at ``--alpha-samples``
   (default 0.002, as asv uses) in the same direction.

Why runs and not only samples: on a shared machine whole runs shift (A/A pairs of one build here
moved p50 by up to 15 % with Mann-Whitney p < 1e-80 over their samples; bench/RESULTS.md), so the
samples of one run cannot tell a change from the run-to-run variation. With one run on a side the
case says "one run: no statistical evidence" and is never called; the samples' test is still shown.

A change beyond the threshold without that evidence is never "same": it is ``inconclusive``, with the
number of runs a side that would settle it (from the runs' own spread: a two-sided Welch test at
``--alpha`` with 80 % power; at least 3 a side when a side has one run and no spread to go by).

The tail is judged on its own ("tail regression"): latency p99, and for bandwidth the slowest whole
interval (``bandwidth_min_gbps``), per run, with the same threshold and a Mann-Whitney U test across
the runs' figures (exact; ranks, because one run's p99 can be 100 times another's on a shared
machine: A/A runs here did that). It needs at least 5 runs a side to reach p < 0.01. A CPU hog on
the engine's CPU moves the tail long before the median.

Above the table: the settings that differ between the two sides (engine options from the records'
``config``, poll mode, what carried the run, the CPUs and idle drivers of ``host``, versions), since
a "regression" between two different configurations is a comparison of configurations.

Under a case where B (current) is slower than A (baseline): a regression of the median or the tail,
or a median change beyond the threshold in the slower direction that lacks the evidence to call it
(one run a side, the usual `latest~1 latest`), the causes that differ between A's runs and B's
(results/contrast.py, from each result's explanation): text ``# why B differs: ...`` lines under
the row (or one line saying the causes are the same), JSON ``causes_differ`` and its neighbours.

Exit status: ``EXIT_REGRESSION`` (9) when any case (median or tail) is a regression, else
``EXIT_INCONCLUSIVE`` (10) when a median change is inconclusive, else 0 (an inconclusive tail is
shown, not an exit status: p99 moves that much between A/A runs here).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from . import argtypes
from .errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, FabscopeError
from .report.text_table import aligned
from .results import Result
from .results.contrast import CauseContrast, contrast
from .results.histogram import Histogram, HistogramError, mann_whitney, merge
from .untyped import number

__all__ = ["EXIT_INCONCLUSIVE", "EXIT_REGRESSION", "CaseComparison", "Rule", "compare", "differences",
           "rank_p", "runs_needed", "welch_p"]

#: Runs a side suggested when a side has a single run (no run-to-run spread to size it from).
MIN_RUNS = 3
#: Above this many runs a side the change is within the run-to-run noise for practical purposes.
MAX_RUNS = 100

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


# --------------------------------------------------------------------------------------------
# statistics (stdlib only)
# --------------------------------------------------------------------------------------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def welch_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p of Welch's t-test; None with fewer than two values on a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(b) - statistics.fmean(a)
    if va + vb == 0.0:
        return 1.0 if diff == 0 else 0.0
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return _betainc(df / 2.0, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=4096)
def _u_counts(n: int, m: int) -> tuple[int, ...]:
    """How many orderings of n + m distinct values give each Mann-Whitney U (0..n*m)."""
    if n == 0 or m == 0:
        return (1,)
    left, right = _u_counts(n - 1, m), _u_counts(n, m - 1)
    out = [0] * (n * m + 1)
    for u, c in enumerate(left):
        out[u + m] += c
    for u, c in enumerate(right):
        out[u] += c
    return tuple(out)


def rank_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p of the Mann-Whitney U test of b against a: exact for up to 40 values a side (ties
    count a half), the normal approximation beyond; None with fewer than two values on a side.
    Across runs for the tail: one run's p99 can be 100 times another's on a shared machine, which a
    t-test on the values takes for evidence and a rank test does not."""
    n, m = len(a), len(b)
    if n < 2 or m < 2:
        return None
    u = sum(1.0 if y > x else 0.5 if y == x else 0.0 for x in a for y in b)
    if n <= 40 and m <= 40:
        counts = _u_counts(n, m)
        total = math.comb(n + m, n)
        low = sum(counts[: math.floor(u) + 1]) / total
        high = sum(counts[math.ceil(u):]) / total
        return min(1.0, 2.0 * min(low, high))
    mean, sd = n * m / 2.0, math.sqrt(n * m * (n + m + 1) / 12.0)
    return min(1.0, 2.0 * statistics.NormalDist().cdf(-abs(u - mean) / sd))


def rank_runs_needed(alpha: float) -> int:
    """The fewest runs a side with which the rank test can reach ``alpha`` at all (every run of one
    side beyond every run of the other): 5 at 0.01."""
    n = 2
    while 2.0 / math.comb(2 * n, n) >= alpha and n < MAX_RUNS:
        n += 1
    return n


# --------------------------------------------------------------------------------------------
# the comparison
# --------------------------------------------------------------------------------------------


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


def runs_needed(b_logs: Sequence[float], c_logs: Sequence[float], change: float, alpha: float) -> int:
    """Runs a side for a two-sided Welch test at ``alpha`` to find a change of this size with 80 %
    power, from the runs' pooled spread (log scale); ``MIN_RUNS`` when a side has one run."""
    if len(b_logs) < 2 or len(c_logs) < 2 or change <= -1.0:
        return MIN_RUNS
    spread = (statistics.variance(b_logs) + statistics.variance(c_logs)) / 2.0
    effect = abs(math.log1p(change))
    if effect == 0.0:
        return MAX_RUNS
    z = statistics.NormalDist()
    n = 2.0 * (z.inv_cdf(1.0 - alpha / 2.0) + z.inv_cdf(0.8)) ** 2 * spread / effect**2
    return int(min(MAX_RUNS, max(MIN_RUNS, math.ceil(n) + 1)))  # + 1: t, not z, with few runs


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


# --------------------------------------------------------------------------------------------
# the command
# --------------------------------------------------------------------------------------------


#: Config entries that name this one run (addresses, descriptors, ports, output form), not a setting.
_VOLATILE_CONFIG = {"peer", "peer-fd", "control-fd", "listen", "session-open", "format", "sizes", "backend", "op",
                    "pattern"}
_VOLATILE_PARTS = ("addr", "qpn", "psn", "key", "pid", "fd", "port_num", "lid", "gid")


def _settings(r: Result) -> dict[str, str]:
    """What a run was set up with: engine options, effective poll mode and buffers, CPUs, versions."""
    out: dict[str, str] = {}

    def put(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                put(f"{prefix}{'.' if prefix else ''}{k}", v)
        elif not isinstance(obj, list):
            out[prefix] = json.dumps(obj)

    put("", {k: v for k, v in r.config.items() if k not in _VOLATILE_CONFIG})
    out["poll (effective)"] = json.dumps(r.transport.poll)
    for k, v in r.transport.local.items():
        if not any(part in k for part in _VOLATILE_PARTS) and not isinstance(v, (dict, list)):
            out[f"transport.{k}"] = json.dumps(v)
    for side, info in (("host", r.host), ("peer_host", r.peer_host)):
        if info is not None:
            out.update({f"{side}.cpu": json.dumps(info.cpu), f"{side}.cpuidle_driver": json.dumps(info.cpuidle_driver),
                        f"{side}.cpuidle_governor": json.dumps(info.cpuidle_governor),
                        f"{side}.cpu_dma_latency_held": json.dumps(info.cpu_dma_latency_held),
                        f"{side}.hostname": json.dumps(info.hostname)})
    out["engine version"] = json.dumps(r.version)
    return out


def differences(baseline: Side, current: Side, limit: int = 20) -> list[str]:
    """The settings whose values differ between the two sides (each side: every value its runs had)."""
    def values(side: Side) -> dict[str, set[str]]:
        got: dict[str, set[str]] = {}
        for run in side.runs:
            for r in run:
                for k, v in _settings(r).items():
                    got.setdefault(k, set()).add(v)
        return got

    a, b = values(baseline), values(current)
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, {"(absent)"}), b.get(key, {"(absent)"})
        if va != vb:
            out.append(f"{key}: {' | '.join(sorted(va))} -> {' | '.join(sorted(vb))}")
    if len(out) > limit:
        out = [*out[:limit], f"... and {len(out) - limit} more"]
    return out


def _file_runs(path: Path) -> list[list[Result]]:
    """A result file's runs. Lines are read by `fabscope report`'s rule (one owner: a line that is
    not a fabscope record is an error naming file and line; suite, matrix and error lines are known
    and carry no results to compare). Records `history export` wrote carry their stored ``run``:
    each run stays a run; records without it are one run per file."""
    from .report.inputs import read_inputs

    runs: dict[object, list[Result]] = {}
    for r in read_inputs([str(path)]).records:
        run = r.raw.get("run")
        key = run.get("id") if isinstance(run, dict) else None
        runs.setdefault(key, []).append(r)
    return list(runs.values())


def load_side(spec: str, store_path: str | None) -> Side:
    """A result file (or comma-separated files: one run each, or the runs `history export` marked in
    them), else a run id / latest / tag."""
    files = [Path(p) for p in spec.split(",")]
    if all(p.is_file() for p in files):
        try:
            runs = [run for p in files for run in _file_runs(p)]
        except OSError as exc:
            raise FabscopeError(f"{spec}: {exc}", EXIT_USAGE) from exc
        if not any(runs):
            raise FabscopeError(f"{spec}: no fabscope.result records in it", EXIT_USAGE)
        return Side(spec + (f" ({len(runs)} runs)" if len(runs) > len(files) else ""), runs)
    if any(sep in spec for sep in ("/", ".json")):
        raise FabscopeError(f"{spec}: no such file (a side is a result file, a run id, latest, latest~N or a tag)",
                            EXIT_USAGE)
    from .store import open_store

    with open_store(store_path, readonly=True) as store:
        ids = store.run_ids_for(spec)
        return Side(f"{spec} (run{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))})",
                    [store.results([i]) for i in ids])


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def _shout(verdict: str) -> str:
    return verdict.upper() if verdict == "regression" else verdict


def render(rows: Sequence[CaseComparison], baseline: Side, current: Side, rule: Rule) -> str:
    lines = [f"# baseline: {baseline.name}", f"# current:  {current.name}"]
    differ = differences(baseline, current)
    if differ:
        lines.append("# settings that differ (baseline -> current): this compares configurations, not only builds")
        lines += [f"#   {d}" for d in differ]
    else:
        lines.append("# settings: the same on both sides (engine options, poll mode, buffers, CPUs, versions)")
    lines.append(f"# a call needs a change beyond {100 * rule.threshold:g}% AND runs that differ (Welch t p < "
                 f"{rule.alpha:g}; latency also Mann-Whitney U p < {rule.alpha_samples:g} over the samples); a "
                 "change beyond it without that evidence is inconclusive. The tail (latency p99, the slowest "
                 "bandwidth interval) is judged the same way on its own")
    head = ["case", "metric", "baseline", "current", "change", "verdict", "tail", "tail change", "tail verdict",
            "evidence"]
    table = [[f"{r.backend} {r.op} {r.pattern} {r.size} B ({r.transport})", r.metric, _fmt(r.baseline),
              _fmt(r.current), _pct(r.change), _shout(r.verdict),
              "-" if r.tail_metric is None else f"{_fmt(r.tail_baseline)} -> {_fmt(r.tail_current)}",
              _pct(r.tail_change), "TAIL REGRESSION" if r.tail_verdict == "regression" else r.tail_verdict,
              "; ".join(e for e in (r.evidence, f"tail: {r.tail_evidence}" if r.tail_evidence else "") if e)]
             for r in rows]
    head_line, *row_lines = aligned(head, table)
    lines.append(head_line)
    for r, text in zip(rows, row_lines, strict=True):
        lines.append(text)
        lines += [f"# {line}" for line in (r.causes.lines() if r.causes is not None else [])]
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("regression", "improvement", "inconclusive", "same")}
    tails = {v: sum(1 for r in rows if r.tail_verdict == v) for v in ("regression", "inconclusive")}
    lines.append(f"# {counts['regression']} regression(s), {counts['improvement']} improvement(s), "
                 f"{counts['inconclusive']} inconclusive, {counts['same']} same, of {len(rows)} case(s); tail: "
                 f"{tails['regression']} regression(s), {tails['inconclusive']} inconclusive")
    settle = [r.runs_to_settle for r in rows if r.runs_to_settle is not None]
    if settle:
        lines.append(f"# inconclusive calls: repeat each side to about {max(settle)} runs (`fabscope run ... --tag T` "
                     "repeatedly, then `fabscope compare T_A T_B`)")
    return "\n".join(lines) + "\n"


def fill_compare_parser(c: argparse.ArgumentParser) -> None:
    """The options of `fabscope compare` (cli.py names the subcommand and its help line)."""
    c.add_argument("baseline", help="run id, latest, latest~N, a tag (all its runs), or result file(s) a.jsonl,b.jsonl")
    c.add_argument("current", help="the same forms")
    c.add_argument("--store", metavar="PATH", default=None, help="history file for run ids and tags")
    c.add_argument("--threshold", type=argtypes.finite_float(0.1, 1000.0), default=5.0, metavar="PCT",
                   help="smallest change called, in percent (default 5)")
    c.add_argument("--alpha", type=argtypes.finite_float(1e-12, 0.5), default=0.01,
                   help="Welch t significance over runs (default 0.01)")
    c.add_argument("--alpha-samples", type=argtypes.finite_float(1e-12, 0.5), default=0.002,
                   help="Mann-Whitney U significance over latency samples (default 0.002)")
    c.add_argument("--format", choices=["text", "json"], default="text")
    c.set_defaults(func=compare_main)


def exit_status(rows: Sequence[CaseComparison]) -> int:
    """9: a regression, of the median or the tail; 10: none, but a median change beyond the threshold
    lacks evidence. An inconclusive tail alone does not set 10: p99 moves beyond any threshold between
    runs of one build here (A/A), so it would set it nearly always; the table shows it."""
    if any("regression" in (r.verdict, r.tail_verdict) for r in rows):
        return EXIT_REGRESSION
    if any(r.verdict == "inconclusive" for r in rows):
        return EXIT_INCONCLUSIVE
    return EXIT_OK


def compare_main(ns: argparse.Namespace) -> int:
    rule = Rule(ns.threshold / 100.0, ns.alpha, ns.alpha_samples)
    baseline, current = load_side(ns.baseline, ns.store), load_side(ns.current, ns.store)
    rows = compare(baseline, current, rule)
    if ns.format == "json":
        sys.stdout.write("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    else:
        sys.stdout.write(render(rows, baseline, current, rule))
    return exit_status(rows)
