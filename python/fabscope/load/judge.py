# SPDX-License-Identifier: BSD-3-Clause
"""What a load run's figures mean: the bottleneck and its fair share, Jain's fairness index, starved
flows, the victim's congestion impact factor, and the findings (each with evidence, cost and fix).

Definitions (docs/load.md says them with real output):

- **bottleneck**: the link every flow of the pattern crosses at one end. incast: the receiver's link
  (N-1 links into one); fanout: the sender's link; alltoall and permutation: each host's own link
  (judged per receiver: the busiest one).
- **oversubscription**: links into the bottleneck over its one link (incast 7 -> 1: 7:1).
- **fair share**: the bottleneck's rate over the flows through it, what each flow would get if
  the bottleneck were shared evenly.
- **Jain's fairness index**: (sum x)^2 / (n sum x^2) over the flows' rates: 1 when all are equal,
  1/n when one flow has everything; also per interval (short-term fairness: flows that take turns
  average out over a run, not within an interval).
- **starved flow**: one whose rate is below ``STARVED_SHARE`` of the fair share (or, with no known
  rate, of the flows' mean); a flow **stalled** in an interval where its rate was below
  ``STALL_SHARE`` of the fair share (or of that interval's mean).
- **total**: the bytes every flow carried over the union of the flows' measured windows (each
  flow's window on the shared wall clock: its receiver's start to its last arrival); **per common
  interval**: each flow's interval counts re-cut on one set of boundaries from the latest flow's
  start, so a sum of rates only ever adds bytes that crossed the port at the same time (summing
  each flow's rate over its own window, or interval k of flows whose windows began seconds apart,
  reported 1.75x a 100 Mbit/s port's rate).
- **congestion impact factor** (GPCNeT): the victim's latency during the load over its latency
  alone, at p50 and p99; its interval from the two runs' order-statistic intervals (distribution
  free: ranks of a binomial(n, q)), the ratio's low end over the isolated high end and back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..results.histogram import Histogram

# Below this share of the fair share a flow is called starved.
STARVED_SHARE = 0.5
# Below this index the flows are called unfair (1/n is the worst; 0.9 is a mild imbalance).
UNFAIR_JAIN = 0.9
# ... and below this one in the median interval: the short-term turns flows take (a deep queue under
# CUBIC measured 0.86-0.90 on the netns testbed, a shallow one that drops 0.66-0.70).
UNFAIR_SHORT_JAIN = 0.8
# Retransmitted over sent segments above this is loss worth naming (a clean fabric retransmits none;
# a single tail-loss probe in a run of thousands of segments is not congestion).
LOSS_SHARE = 0.001
# A flow below this share of the fair share (or of the interval's mean) in a whole interval stalled:
# a retransmission timeout or a window cut to nothing. On the netns testbed a deep queue's flows
# stayed at 73 % or more of the fair share in every interval; a shallow queue's fell to 0-5 %.
STALL_SHARE = 0.25
# z for the 95 % intervals.
Z95 = 1.959964


def jain(rates: Sequence[float]) -> float | None:
    """Jain's fairness index of the rates; None for no flow or all-zero rates."""
    if not rates:
        return None
    total, squares = sum(rates), sum(r * r for r in rates)
    return total * total / (len(rates) * squares) if squares > 0 else None


@dataclass(frozen=True)
class Window:
    """One flow's measured phase on the shared wall clock: interval 0 begins at ``start_s`` (Unix
    seconds, the measuring side's), every interval lasts ``length_s``; ``gbit`` is what it carried in
    each whole interval; ``span_s`` the whole window (start to last arrival), ``total_gbit`` what it
    carried in it."""
    start_s: float
    length_s: float
    gbit: tuple[float, ...]
    span_s: float
    total_gbit: float

    @property
    def whole_end_s(self) -> float:
        return self.start_s + len(self.gbit) * self.length_s


def union_s(windows: Sequence[Window]) -> float:
    """The length of time covered by at least one flow's window."""
    covered, reach = 0.0, -math.inf
    for w in sorted(windows, key=lambda w: w.start_s):
        lo, hi = max(w.start_s, reach), w.start_s + w.span_s
        if hi > lo:
            covered += hi - lo
        reach = max(reach, hi)
    return covered


def total_gbps(windows: Sequence[Window]) -> float | None:
    """What the flows carried together per second over the union of their windows: never more than
    the port carried (every counted byte arrived inside the union)."""
    span = union_s(windows)
    return sum(w.total_gbit for w in windows) / span if span > 0 else None


def common_intervals(windows: Sequence[Window]) -> list[list[float]]:
    """Per interval of the window every flow covers with whole intervals (from the latest start, the
    flows' own length), each flow's rate in it: its own intervals' bits re-cut on these boundaries,
    in proportion to the overlap (a flow's interval is the finest it reports). Empty when the flows
    never all ran together for a whole interval."""
    if not windows:
        return []
    length = windows[0].length_s
    if length <= 0 or any(abs(w.length_s - length) > 1e-9 for w in windows):
        return []
    t0 = max(w.start_s for w in windows)
    n = math.floor((min(w.whole_end_s for w in windows) - t0) / length + 1e-9)
    out: list[list[float]] = []
    for k in range(max(0, n)):
        lo, hi = t0 + k * length, t0 + (k + 1) * length
        row = []
        for w in windows:
            bits = 0.0
            for j, g in enumerate(w.gbit):
                a, b = w.start_s + j * length, w.start_s + (j + 1) * length
                overlap = min(b, hi) - max(a, lo)
                if overlap > 0:
                    bits += g * overlap / length
            row.append(bits / length)
        out.append(row)
    return out


@dataclass(frozen=True)
class Bottleneck:
    where: str  # "fs-a's link (the receiver)"
    host: str
    links_in: int  # links feeding it
    flows: int  # flows through it
    rate_gbps: float | None  # None: unknown (no --line-rate, the engine found no link rate)
    rate_source: str

    @property
    def oversubscription(self) -> float:
        return float(self.links_in)

    @property
    def fair_share_gbps(self) -> float | None:
        return self.rate_gbps / self.flows if self.rate_gbps and self.flows else None

    def to_json(self) -> dict[str, object]:
        return {"where": self.where, "host": self.host, "links_in": self.links_in, "flows": self.flows,
                "oversubscription": self.oversubscription, "rate_gbps": self.rate_gbps,
                "rate_source": self.rate_source, "fair_share_gbps": self.fair_share_gbps}


def bottleneck_of(pattern: str, pairs: Sequence[tuple[str, str]], per_pair: int, rate_gbps: float | None,
                  rate_source: str) -> Bottleneck:
    """The port the pattern crowds most: for fanout the sender's link out, otherwise the receiver
    with the most links in (incast: the receiver)."""
    if pattern == "fanout":
        src = pairs[0][0]
        return Bottleneck(f"{src}'s link (the sender, out to {len(pairs)})", src, len(pairs), len(pairs) * per_pair,
                          rate_gbps, rate_source)
    into: dict[str, int] = {}
    for _, dst in pairs:
        into[dst] = into.get(dst, 0) + 1
    host = max(into, key=lambda h: (into[h], h))
    role = "the receiver" if pattern == "incast" else "the busiest receiver"
    return Bottleneck(f"{host}'s link ({role})", host, into[host], into[host] * per_pair, rate_gbps, rate_source)


def starved(rates: dict[str, float], fair_share: float | None) -> list[str]:
    """The flows below STARVED_SHARE of the fair share (or of the mean when the share is unknown)."""
    if not rates:
        return []
    ref = fair_share if fair_share else sum(rates.values()) / len(rates)
    return sorted(name for name, r in rates.items() if r < STARVED_SHARE * ref)


def quantile_interval(h: Histogram, q: float) -> tuple[float, float]:
    """A distribution-free 95 % interval of the q-quantile: the samples at ranks n q -/+ z sqrt(n q (1-q))."""
    n = h.total
    half = Z95 * math.sqrt(n * q * (1 - q))
    lo_rank = max(0, math.floor(n * q - half))
    hi_rank = min(n - 1, math.ceil(n * q + half))
    # the histogram's own reader: its q-quantile is the sample at rank q (n - 1)
    span = max(1, n - 1)
    return h.quantile_us(lo_rank / span), h.quantile_us(hi_rank / span)


@dataclass(frozen=True)
class Impact:
    q: float
    isolated_us: float
    congested_us: float
    factor: float
    low: float
    high: float

    def to_json(self) -> dict[str, float]:
        return {"q": self.q, "isolated_us": self.isolated_us, "congested_us": self.congested_us,
                "factor": self.factor, "interval": [self.low, self.high]}  # type: ignore[dict-item]


def impact(isolated: Histogram, congested: Histogram, q: float) -> Impact:
    iso, con = isolated.quantile_us(q), congested.quantile_us(q)
    iso_lo, iso_hi = quantile_interval(isolated, q)
    con_lo, con_hi = quantile_interval(congested, q)
    return Impact(q, iso, con, con / iso, con_lo / iso_hi, con_hi / iso_lo)


def stalls(series: dict[str, list[float]], fair_share: float | None) -> dict[str, list[int]]:
    """{flow: [intervals in which it stalled]} over the intervals every flow has."""
    if not series:
        return {}
    n = min(len(v) for v in series.values())
    out: dict[str, list[int]] = {}
    for k in range(n):
        ref = fair_share if fair_share else sum(v[k] for v in series.values()) / len(series)
        for name, v in series.items():
            if v[k] < STALL_SHARE * ref:
                out.setdefault(name, []).append(k)
    return out
