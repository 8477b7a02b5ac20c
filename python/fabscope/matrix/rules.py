# SPDX-License-Identifier: BSD-3-Clause
"""The rule: when is a measurement suspect, when is a suspect confirmed, what to retest.

Centre and spread are robust: the median of every screened measurement of a pattern, and the
MAD scaled to a standard deviation (1.4826 x MAD). A bad node spoils a whole row and column, so a
mean (or ClusterKit's best-of-all reference) would move with the faults it is looking for; the
median does not until half the pairs are bad.

- bandwidth (bw, bibw): suspect when below ``bw_fraction`` x the reference, the reference being
  the port's line rate when known (``line_rate_gbps``) and the fabric's median otherwise (then also
  more than ``robust_z`` spreads below the median, so a noisy fabric does not flag its own noise);
- latency (lat, p50): suspect when above ``lat_factor`` x the fabric's median and more than
  ``robust_z`` spreads above it.

A suspect is measured again (``retests`` at most) and confirmed by the majority of its
measurements, stopping as soon as the majority is reached. Each host of a suspect pair is also
measured with fresh partners (hosts it was not measured with, that are not suspects themselves)
until it has ``partners`` of them, so that the attribution can tell a bad node (slow with most
partners) from a bad link (slow with one) even when the screen was a few random rounds.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

from ..results.matrix import Measurement, metric_of

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Rule:
    bw_fraction: float = 0.8
    lat_factor: float = 2.0
    line_rate_gbps: float | None = None
    retests: int = 2
    partners: int = 3
    node_share: float = 0.5
    robust_z: float = 4.0

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = dict(asdict(self))
        ref = f"{self.line_rate_gbps:g} Gb/s line rate" if self.line_rate_gbps else "the fabric median"
        beyond = "" if self.line_rate_gbps else f" and < median - {self.robust_z:g} x spread"
        out["text"] = (
            f"suspect: bandwidth < {self.bw_fraction:g} x {ref}{beyond}, or latency p50 > {self.lat_factor:g} x the "
            f"fabric median and > median + {self.robust_z:g} x spread (centre = median, spread = {MAD_TO_SIGMA} x MAD); "
            f"confirmed by the majority of up to "
            f"{self.retests + 1} measurements; bad node: slow with more than {self.node_share:.0%} of at least "
            f"{self.partners} partners, else bad link"
        )
        return out


@dataclass(frozen=True)
class Centre:
    median: float
    spread: float  # 1.4826 x MAD
    count: int

    def to_json(self) -> dict[str, float | None]:
        return {"median": self.median, "spread": self.spread, "count": float(self.count)}


def robust_centre(values: Sequence[float]) -> Centre | None:
    if not values:
        return None
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return Centre(med, MAD_TO_SIGMA * mad, len(values))


def judgeable(m: Measurement) -> bool:
    """Measurements the performance rule looks at: measured, and over the requested path (a
    misrouted figure says nothing about the device that was asked for)."""
    return m.value is not None and m.error is None and m.verdict != "misrouted"


def centres(measurements: Iterable[Measurement]) -> dict[str, Centre]:
    """Per pattern, from the screen only (retests target suspects and would bias it)."""
    values: dict[str, list[float]] = defaultdict(list)
    for m in measurements:
        if m.phase == "screen" and judgeable(m) and m.value is not None:
            values[m.pattern].append(m.value)
    out: dict[str, Centre] = {}
    for pattern, vals in values.items():
        c = robust_centre(vals)
        if c is not None:
            out[pattern] = c
    return out


def threshold(rule: Rule, pattern: str, centre: Centre) -> float:
    """The limit a figure must cross to be suspect: the relative margin, widened to ``robust_z``
    spreads from the median when the fabric is noisier than the margin (a fixed 20 % margin on a
    fabric with 10 % noise flags 2 % of healthy measurements). Against a line rate the margin is
    absolute: a fabric that is uniformly slow must not hide behind its own spread."""
    if pattern == "lat":
        return max(rule.lat_factor * centre.median, centre.median + rule.robust_z * centre.spread)
    if rule.line_rate_gbps:
        return rule.bw_fraction * rule.line_rate_gbps
    return min(rule.bw_fraction * centre.median, centre.median - rule.robust_z * centre.spread)


def is_suspect(rule: Rule, pattern: str, value: float, centre: Centre) -> bool:
    limit = threshold(rule, pattern, centre)
    return value > limit if metric_of(pattern) == "latency_p50_us" else value < limit


def mark(rule: Rule, measurements: Iterable[Measurement], by_pattern: dict[str, Centre]) -> None:
    for m in measurements:
        c = by_pattern.get(m.pattern)
        m.suspect = bool(judgeable(m) and c is not None and m.value is not None and is_suspect(rule, m.pattern, m.value, c))


Key = tuple[str, str, str]  # src, dst, pattern


def _by_direction(measurements: Iterable[Measurement]) -> dict[Key, list[Measurement]]:
    out: dict[Key, list[Measurement]] = defaultdict(list)
    for m in measurements:
        if judgeable(m):
            out[(m.src, m.dst, m.pattern)].append(m)
    return out


def state(rule: Rule, ms: Sequence[Measurement]) -> str:
    """"bad", "clean" or "pending" for the measurements of one direction at one pattern."""
    total = rule.retests + 1
    majority = total // 2 + 1
    bad = sum(1 for m in ms if m.suspect)
    good = len(ms) - bad
    if not bad:
        return "clean"
    if bad >= majority:
        return "bad"
    if good >= majority:
        return "clean"
    if len(ms) >= total:
        return "bad" if bad > good else "clean"
    return "pending"


def directions(rule: Rule, measurements: Iterable[Measurement]) -> dict[Key, str]:
    return {k: state(rule, ms) for k, ms in _by_direction(measurements).items()}


def partners_of(measurements: Iterable[Measurement]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for m in measurements:
        if judgeable(m):
            out[m.src].add(m.dst)
            out[m.dst].add(m.src)
    return out


Job = tuple[str, str, str, str]  # src, dst, pattern, phase


def next_jobs(rule: Rule, hosts: Sequence[str], measurements: Sequence[Measurement],
              unreachable: Iterable[str] = ()) -> list[Job]:
    """What to measure next: pending suspects again, and fresh partners for the hosts of
    suspect pairs that have too few. Empty when everything is decided."""
    gone = set(unreachable)
    states = directions(rule, measurements)
    jobs: list[Job] = [(s, d, p, "retest") for (s, d, p), st in states.items()
                       if st == "pending" and s not in gone and d not in gone]
    suspect_hosts: set[str] = set()
    patterns: set[str] = set()
    for (s, d, p), st in states.items():
        patterns.add(p)
        if st != "clean":
            suspect_hosts.update((s, d))
    if not suspect_hosts:
        return jobs
    known = partners_of(measurements)
    load: dict[str, int] = defaultdict(int)
    position = {h: i for i, h in enumerate(hosts)}
    for h in sorted(suspect_hosts - gone):
        need = rule.partners - len(known.get(h, set()))
        if need <= 0:
            continue
        fresh = [x for x in hosts if x != h and x not in gone and x not in known.get(h, set())]
        # Partners that are not suspects themselves first, the least used first, then in host order.
        fresh.sort(key=lambda x: (x in suspect_hosts, load[x], position[x]))
        for x in fresh[:need]:
            load[x] += 1
            for p in sorted(patterns):
                jobs += [(h, x, p, "partner"), (x, h, p, "partner")]
    return jobs


def pack(jobs: Sequence[Job]) -> list[list[Job]]:
    """Jobs in rounds in which no host is in two measurements (greedy, in order)."""
    rounds: list[list[Job]] = []
    busy: list[set[str]] = []
    for job in jobs:
        for i, used in enumerate(busy):
            if job[0] not in used and job[1] not in used:
                rounds[i].append(job)
                used.update(job[:2])
                break
        else:
            rounds.append([job])
            busy.append({job[0], job[1]})
    return rounds
