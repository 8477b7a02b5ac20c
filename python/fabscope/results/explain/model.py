# SPDX-License-Identifier: BSD-3-Clause
"""The explanation's types: a cause and its state, the references from the history, the explanation
of one result with its expected ceiling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..delay import DelayReference
from .facts import _gbps

STATES = ("seen", "clear", "unchecked")


CAUSES = ("segmentation", "retransmission", "mtu", "placement", "cpu", "buffers", "link", "delay", "route")


# A result below this share of its expected ceiling (or its reference) with no cause seen is said to
# be unexplained, in words, with the checks' strongest signals (the causes that read the path).
UNEXPLAINED_BELOW = 0.5


SIGNAL_CAUSES = ("delay", "retransmission", "cpu", "buffers", "link")


@dataclass(frozen=True)
class Cause:
    """One cause, checked: ``state`` is seen, clear or unchecked; ``evidence`` says what shows it
    (or why it could not be checked); ``cost`` and ``fix`` are set when it is seen."""

    cause: str
    state: str
    evidence: str
    cost: str | None = None
    fix: str | None = None

    @property
    def seen(self) -> bool:
        return self.state == "seen"

    def why_line(self) -> str:
        """The cause in one line (without "# why: "): name, evidence, and cost and fix where set;
        every output that shows a cause (run, suite, compare) prints this line."""
        return (f"{self.cause}: {self.evidence}" + (f"; cost: {self.cost}" if self.cost else "")
                + (f"; fix: {self.fix}" if self.fix else ""))

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "state": self.state, "seen": self.seen, "evidence": self.evidence,
                "cost": self.cost, "fix": self.fix}


@dataclass(frozen=True)
class LatencyReference:
    """A latency result's reference from the history (fabscope/reference.py finds it): the p50 of
    the same case (same hosts, backend, op, size, transport) in earlier runs. ``named`` is the
    ``--reference TAG|RUN`` that chose it, None for the default (the best, lowest, median of every
    earlier run of the case); ``run_id`` is None for the median of several runs under a tag."""

    p50_us: float
    run_id: int | None
    run_ids: tuple[int, ...]
    tag: str | None
    when: str  # the run's start (ISO, UTC); "FIRST..LAST" for several runs
    runs_considered: int
    named: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"p50_us": self.p50_us, "run_id": self.run_id, "run_ids": list(self.run_ids), "tag": self.tag,
                "when": self.when, "runs_considered": self.runs_considered, "named": self.named}

    @classmethod
    def parse(cls, obj: object) -> LatencyReference | None:
        """A stored record's reference (its ``explanation.reference``), so a run read back from the
        history or a file keeps the reference it was measured against; None where there is none or
        it is not one of ours."""
        if not isinstance(obj, dict):
            return None
        p50, run_id, ids, tag = obj.get("p50_us"), obj.get("run_id"), obj.get("run_ids"), obj.get("tag")
        when, n, named = obj.get("when"), obj.get("runs_considered"), obj.get("named")
        if not (isinstance(p50, (int, float)) and not isinstance(p50, bool) and p50 > 0 and isinstance(when, str)
                and isinstance(n, int) and isinstance(ids, list) and all(isinstance(i, int) for i in ids)
                and (run_id is None or isinstance(run_id, int)) and (tag is None or isinstance(tag, str))
                and (named is None or isinstance(named, str))):
            return None
        return cls(p50_us=float(p50), run_id=run_id, run_ids=tuple(ids), tag=tag, when=when, runs_considered=n,
                   named=named)


@dataclass(frozen=True)
class BandwidthReference:
    """A bandwidth result's reference from the history (fabscope/reference.py finds it), as latency
    has one: the same case's best (highest) Gb/s in earlier runs, or, ``named`` (``--reference
    TAG|RUN``), that run's figure or the median of a tag's runs. Where no link rate is known (a
    virtual link) it is what "expected" means; elsewhere it says how far below its own best a run is."""

    gbps: float
    run_id: int | None
    run_ids: tuple[int, ...]
    tag: str | None
    when: str
    runs_considered: int
    named: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"gbps": self.gbps, "run_id": self.run_id, "run_ids": list(self.run_ids), "tag": self.tag,
                "when": self.when, "runs_considered": self.runs_considered, "named": self.named}

    @classmethod
    def parse(cls, obj: object) -> BandwidthReference | None:
        if not isinstance(obj, dict):
            return None
        gbps, run_id, ids, when, n = obj.get("gbps"), obj.get("run_id"), obj.get("run_ids"), obj.get("when"), \
            obj.get("runs_considered")
        if not (isinstance(gbps, (int, float)) and not isinstance(gbps, bool) and gbps > 0 and isinstance(when, str)
                and isinstance(n, int) and isinstance(ids, list) and all(isinstance(i, int) for i in ids)
                and (run_id is None or isinstance(run_id, int))):
            return None
        tag, named = obj.get("tag"), obj.get("named")
        return cls(gbps=float(gbps), run_id=run_id, run_ids=tuple(ids), tag=tag if isinstance(tag, str) else None,
                   when=when, runs_considered=n, named=named if isinstance(named, str) else None)


@dataclass(frozen=True)
class Explanation:
    """What the number should have been (where known) and every cause, checked. A latency result
    has no ceiling; ``reference_sought`` says the history was read for its reference (``fabscope
    run``), and ``reference`` is what it found (None: ``expected_basis`` says why)."""

    expected_gbps: float | None
    expected_basis: str
    achieved_fraction: float | None
    causes: tuple[Cause, ...]
    reference: LatencyReference | None = None
    reference_sought: bool = False
    bandwidth_reference: BandwidthReference | None = None
    # The round trip of the same case's clean runs (the history), which the delay cause was read against.
    delay_reference: DelayReference | None = None

    @property
    def seen(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.seen)

    @property
    def clear(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.state == "clear")

    @property
    def unchecked(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.state == "unchecked")

    def summary(self) -> str:
        """One phrase for a table cell: the causes seen, or how many checks were clear."""
        if self.seen:
            return ", ".join(c.cause for c in self.seen)
        return f"{len(self.clear)} checks clear" + (f", {len(self.unchecked)} unchecked" if self.unchecked else "")

    def why_lines(self) -> list[str]:
        """The text lines (without "# why: ") for this record: one per seen cause, else what is left
        unexplained (far below its ceiling or reference), else a count."""
        if not self.seen:
            return [self.unexplained() or self.summary()]
        return [c.why_line() for c in self.seen]

    def unexplained(self) -> str | None:
        """Said in words when the result is far below its expected ceiling or its reference
        (UNEXPLAINED_BELOW) and no checked cause is seen: how far, and the strongest signals the
        checks read, instead of a row of "clear". None otherwise."""
        frac = self.achieved_fraction
        if self.seen or frac is None or frac <= 0 or frac >= UNEXPLAINED_BELOW:
            return None
        what = (f"its expected ceiling of {_gbps(self.expected_gbps)} Gb/s" if self.expected_gbps
                else f"its own best of {_gbps(self.bandwidth_reference.gbps)} Gb/s" if self.bandwidth_reference
                else "its reference p50" if self.reference else "what was expected")
        signals = [f"{c.cause}: {c.evidence.split('; ')[0]}" for name in SIGNAL_CAUSES for c in self.causes
                   if c.cause == name and c.state != "unchecked"][:3]
        return (f"{1 / frac:.1f} x below {what} ({self.expected_basis}); no checked cause explains it"
                + (f"; the strongest signals were: {'; '.join(signals)}" if signals else ""))

    def expected_line(self) -> str:
        """The ``# expected:`` text of a latency result whose reference was sought: the basis, and
        where a reference was found, how this run compares with it."""
        frac = self.achieved_fraction
        if self.reference is None or not frac:
            return self.expected_basis
        return f"{self.expected_basis}; this run: {1 / frac:.2f}x its p50 (achieved_fraction {frac:.2f})"

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "expected_gbps": self.expected_gbps, "expected_basis": self.expected_basis,
                "achieved_fraction": self.achieved_fraction, "unexplained": self.unexplained(),
                "reference": self.reference.to_json() if self.reference else None,
                "bandwidth_reference": self.bandwidth_reference.to_json() if self.bandwidth_reference else None,
                "delay_reference": self.delay_reference.to_json() if self.delay_reference else None,
                "causes": [c.to_json() for c in self.causes]}
