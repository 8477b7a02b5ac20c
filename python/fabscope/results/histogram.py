# SPDX-License-Identifier: BSD-3-Clause
"""The compact latency histogram a record carries (``latency_us.histogram``), and its statistics.

Scheme ``log2-linear`` (the engine writes it in engine/src/core/stats.c, ``fs_histogram_index``):
every power of two of nanoseconds is cut into ``sub_buckets`` equal buckets. A sample x >= 1 ns
with ``frexp(x) = (m, e)`` (x = m * 2^e, 0.5 <= m < 1) falls in bucket
``(e - 1) * sub_buckets + floor((2m - 1) * sub_buckets)``; samples below 1 ns count as 1 ns.
Bucket i covers ``[2^o (1 + s/S), 2^o (1 + (s+1)/S))`` with ``o, s = divmod(i, S)``, so its width
is at most 1/S of its lower bound: with S = 32 any value read back from the histogram (the bucket
midpoint) is within 1/64 = 1.6 % of the true sample. Buckets are stored sparse, as
``[[index, count], ...]`` in ascending index order: a run of 10^6 samples spread over a decade takes
about 110 buckets.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import RecordError

__all__ = ["SCHEME", "Histogram", "bucket_index", "mann_whitney"]

SCHEME = "log2-linear"


class HistogramError(ValueError):
    pass


def bucket_index(value_ns: float, sub_buckets: int) -> int:
    """The bucket of one sample, exactly as the engine computes it."""
    m, e = math.frexp(max(value_ns, 1.0))
    return (e - 1) * sub_buckets + min(int((2.0 * m - 1.0) * sub_buckets), sub_buckets - 1)


@dataclass(frozen=True)
class Histogram:
    sub_buckets: int
    buckets: tuple[tuple[int, int], ...]  # (index, count), ascending index, counts > 0

    @property
    def total(self) -> int:
        return sum(c for _, c in self.buckets)

    def bounds_ns(self, index: int) -> tuple[float, float]:
        octave, sub = divmod(index, self.sub_buckets)
        base = math.ldexp(1.0, octave)
        return base * (1 + sub / self.sub_buckets), base * (1 + (sub + 1) / self.sub_buckets)

    def mid_us(self, index: int) -> float:
        lo, hi = self.bounds_ns(index)
        return (lo + hi) / 2 / 1e3

    def quantile_us(self, q: float) -> float:
        """The q-quantile read back from the buckets (bucket midpoint; <= 1/(2S) relative error)."""
        if not self.buckets:
            return math.nan
        rank = q * (self.total - 1)
        seen = 0
        for index, count in self.buckets:
            seen += count
            if seen > rank:
                return self.mid_us(index)
        return self.mid_us(self.buckets[-1][0])

    @staticmethod
    def from_samples_ns(samples: Iterable[float], sub_buckets: int = 32) -> Histogram:
        counts: dict[int, int] = {}
        for x in samples:
            i = bucket_index(x, sub_buckets)
            counts[i] = counts.get(i, 0) + 1
        return Histogram(sub_buckets, tuple(sorted(counts.items())))

    @staticmethod
    def parse(obj: Any, where: str = "histogram") -> Histogram:
        """From the record's JSON; a malformed histogram is an error naming the field."""
        if not isinstance(obj, Mapping):
            raise RecordError(where, f"must be an object, got {type(obj).__name__}")
        if obj.get("scheme") != SCHEME:
            raise RecordError(f"{where}.scheme", f"must be {SCHEME!r}, got {obj.get('scheme')!r}")
        if obj.get("unit") != "ns":
            raise RecordError(f"{where}.unit", f"must be 'ns', got {obj.get('unit')!r}")
        sub = obj.get("sub_buckets")
        if not isinstance(sub, int) or isinstance(sub, bool) or not 1 <= sub <= 4096:
            raise RecordError(f"{where}.sub_buckets", f"must be an integer in 1..4096, got {sub!r}")
        raw = obj.get("buckets")
        if not isinstance(raw, list):
            raise RecordError(f"{where}.buckets", "must be a list of [index, count] pairs")
        pairs: list[tuple[int, int]] = []
        for k, pair in enumerate(raw):
            ok = (isinstance(pair, list) and len(pair) == 2
                  and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in pair))
            if not ok or pair[1] == 0 or (pairs and pair[0] <= pairs[-1][0]):
                raise RecordError(f"{where}.buckets[{k}]",
                                  f"must be [index, count] with ascending index and count > 0, got {pair!r}")
            pairs.append((pair[0], pair[1]))
        return Histogram(sub, tuple(pairs))

    def to_json(self) -> dict[str, Any]:
        return {"scheme": SCHEME, "unit": "ns", "sub_buckets": self.sub_buckets,
                "buckets": [[i, c] for i, c in self.buckets]}


@dataclass(frozen=True)
class MannWhitney:
    u: float
    z: float
    p_two_sided: float
    # P(a sample of B > a sample of A) + half the ties: 0.5 = no shift; > 0.5 = B is slower.
    prob_b_greater: float


def mann_whitney(a: Histogram, b: Histogram) -> MannWhitney:
    """Mann-Whitney U of B against A over their buckets (samples in one bucket are ties), with the
    tie-corrected normal approximation (both samples are in the hundreds or more)."""
    if a.sub_buckets != b.sub_buckets:
        raise HistogramError(f"histograms with {a.sub_buckets} and {b.sub_buckets} sub-buckets cannot be compared")
    na, nb = a.total, b.total
    if na == 0 or nb == 0:
        raise HistogramError("an empty histogram has no distribution to compare")
    ca, cb = dict(a.buckets), dict(b.buckets)
    rank_b, below, ties = 0.0, 0, 0.0
    for index in sorted(set(ca) | set(cb)):
        ta, tb = ca.get(index, 0), cb.get(index, 0)
        t = ta + tb
        mid_rank = below + (t + 1) / 2.0
        rank_b += tb * mid_rank
        ties += t**3 - t
        below += t
    n = na + nb
    u_b = rank_b - nb * (nb + 1) / 2.0
    mean = na * nb / 2.0
    var = na * nb / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    z = (u_b - mean) / math.sqrt(var) if var > 0 else 0.0
    p = math.erfc(abs(z) / math.sqrt(2.0))
    return MannWhitney(u=u_b, z=z, p_two_sided=p, prob_b_greater=u_b / (na * nb))


def merge(histograms: Sequence[Histogram]) -> Histogram:
    """The histogram of several runs' samples together (repeated runs of one case)."""
    if not histograms:
        raise HistogramError("nothing to merge")
    sub = histograms[0].sub_buckets
    counts: dict[int, int] = {}
    for h in histograms:
        if h.sub_buckets != sub:
            raise HistogramError("histograms with different sub-buckets cannot be merged")
        for i, c in h.buckets:
            counts[i] = counts.get(i, 0) + c
    return Histogram(sub, tuple(sorted(counts.items())))
