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

Exit status: ``EXIT_REGRESSION`` (9) when any case is a regression, else 0.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import argtypes
from .errors import EXIT_OK, EXIT_USAGE, FabscopeError
from .results import RecordError, Result, load_file
from .results.histogram import Histogram, HistogramError, mann_whitney, merge

__all__ = ["EXIT_REGRESSION", "CaseComparison", "Rule", "compare", "welch_p"]

#: Exit code of `fabscope compare` when at least one case is a regression.
EXIT_REGRESSION = 9

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
    verdict: str  # regression | improvement | same | only-baseline | only-current


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


def _compare_case(case: Case, base: list[Result], cur: list[Result], rule: Rule) -> CaseComparison:
    lat = case[2] == "lat"
    b_vals, c_vals = [_figure(r) for r in base], [_figure(r) for r in cur]
    b_med, c_med = _median(b_vals), _median(c_vals)
    change = _change(b_med, c_med)
    b99 = _median([r.latency.p99 for r in base if r.latency]) if lat else None
    c99 = _median([r.latency.p99 for r in cur if r.latency]) if lat else None
    logs_b = [math.log(v) for v in b_vals if v and v > 0]
    logs_c = [math.log(v) for v in c_vals if v and v > 0]
    p_runs = welch_p(logs_b, logs_c) if len(logs_b) == len(base) and len(logs_c) == len(cur) else None
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
    if len(base) < 2 or len(cur) < 2:
        notes.insert(0, f"{'one run' if min(len(base), len(cur)) == 1 else 'too few runs'}: no statistical "
                        f"evidence ({len(base)} vs {len(cur)} run(s); repeat runs under one --tag)")
    elif p_runs is not None:
        notes.insert(0, f"Welch t over {len(base)} vs {len(cur)} runs: p={p_runs:.2g}")
    # Worse = latency up, bandwidth down; direction +1 means "current is worse".
    worse = 0 if change is None else (1 if change > 0 else -1) * (1 if lat else -1)
    big = change is not None and abs(change) > rule.threshold
    runs_differ = p_runs is not None and p_runs < rule.alpha
    samples_agree = not lat or (p_samples is not None and p_samples < rule.alpha_samples
                                and sample_dir == (1 if change and change > 0 else -1))
    verdict = "same"
    if big and runs_differ and samples_agree:
        verdict = "regression" if worse > 0 else "improvement"
    return CaseComparison(
        backend=case[0], op=case[1], pattern=case[2], size=case[3], transport=case[4],
        metric="latency p50 [us]" if lat else "bandwidth [Gb/s]", baseline=b_med, current=c_med, change=change,
        baseline_p99=b99, current_p99=c99, p99_change=_change(b99, c99), runs=(len(base), len(cur)),
        p_runs=p_runs, p_samples=p_samples, evidence="; ".join(notes), verdict=verdict,
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


def load_side(spec: str, store_path: str | None) -> Side:
    """A result file (or comma-separated files: one run each), else a run id / latest / tag."""
    files = [Path(p) for p in spec.split(",")]
    if all(p.is_file() for p in files):
        try:
            runs = [load_file(p) for p in files]
        except (OSError, RecordError) as exc:
            raise FabscopeError(f"{spec}: {exc}", EXIT_USAGE) from exc
        if not any(runs):
            raise FabscopeError(f"{spec}: no fabscope.result records in it", EXIT_USAGE)
        return Side(spec, runs)
    if any(sep in spec for sep in ("/", ".json")):
        raise FabscopeError(f"{spec}: no such file (a side is a result file, a run id, latest, latest~N or a tag)",
                            EXIT_USAGE)
    from .store import open_store

    with open_store(store_path) as store:
        ids = store.run_ids_for(spec)
        return Side(f"{spec} (run{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))})",
                    [store.results([i]) for i in ids])


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def render(rows: Sequence[CaseComparison], baseline: Side, current: Side, rule: Rule) -> str:
    lines = [f"# baseline: {baseline.name}", f"# current:  {current.name}",
             f"# a call needs a change beyond {100 * rule.threshold:g}% AND runs that differ (Welch t p < "
             f"{rule.alpha:g}; latency also Mann-Whitney U p < {rule.alpha_samples:g} over the samples)"]
    head = ["case", "metric", "baseline", "current", "change", "p99 change", "verdict", "evidence"]
    table = [[f"{r.backend} {r.op} {r.pattern} {r.size} B ({r.transport})", r.metric, _fmt(r.baseline),
              _fmt(r.current), _pct(r.change), _pct(r.p99_change), r.verdict.upper() if r.verdict == "regression"
              else r.verdict, r.evidence] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) if table else len(h) for i, h in enumerate(head)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    lines += ["  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)).rstrip() for t in table]
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("regression", "improvement", "same")}
    lines.append(f"# {counts['regression']} regression(s), {counts['improvement']} improvement(s), "
                 f"{counts['same']} same, of {len(rows)} case(s)")
    return "\n".join(lines) + "\n"


def add_compare_parser(sub: Any) -> None:  # argparse._SubParsersAction of the CLI's parser class
    c = sub.add_parser("compare", help="compare two sets of results and call regressions (exit 9 on a regression)")
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


def compare_main(ns: argparse.Namespace) -> int:
    rule = Rule(ns.threshold / 100.0, ns.alpha, ns.alpha_samples)
    baseline, current = load_side(ns.baseline, ns.store), load_side(ns.current, ns.store)
    rows = compare(baseline, current, rule)
    if ns.format == "json":
        sys.stdout.write("".join(json.dumps(asdict(r)) + "\n" for r in rows))
    else:
        sys.stdout.write(render(rows, baseline, current, rule))
    return EXIT_REGRESSION if any(r.verdict == "regression" for r in rows) else EXIT_OK
