# SPDX-License-Identifier: BSD-3-Clause
"""The statistics of the regression rule, from the standard library (docs/history.md says why not
SciPy): Welch's t-test, the exact Mann-Whitney U test across runs, and the runs a side a change needs."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

#: Runs a side suggested when a side has a single run (no run-to-run spread to size it from).
MIN_RUNS = 3
#: Above this many runs a side the change is within the run-to-run noise for practical purposes.
MAX_RUNS = 100



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
