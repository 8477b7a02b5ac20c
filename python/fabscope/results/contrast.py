# SPDX-License-Identifier: BSD-3-Clause
"""The causes that differ between two sides of a comparison (issue 20, `fabscope compare`).

``explain/`` decides each cause of one record; this module only sets the explanations of A's
runs (the baseline) beside B's (the current side) for one case: a cause seen in some run of one
side and in no run of the other differs, and is shown with the evidence, cost and fix of the side
that saw it (its first run that did) and the other side's own check of it (clear, or unchecked and
why). A cause seen on both sides does not tell them apart; one unchecked on a side is named, since
a difference there cannot be told. The wording of each cause stays ``Cause.why_line``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .explain import CAUSES, Cause, Explanation

__all__ = ["CauseContrast", "DifferingCause", "contrast"]


@dataclass(frozen=True)
class DifferingCause:
    """A cause seen on one side (``seen_in``: "A" the baseline, "B" the current) and on no run of
    the other; ``cause`` as the side that saw it explained it, ``other`` the other side's check."""

    seen_in: str
    cause: Cause
    runs_seen: int
    runs: int
    other: Cause | None  # None: the other side's explanations do not check it

    @property
    def other_side(self) -> str:
        return "A" if self.seen_in == "B" else "B"

    def line(self) -> str:
        """One text line (without "# "): which side saw it, in how many of its runs, what the other
        side's check found, then the cause's own line."""
        other = (f"{self.other.state} in {self.other_side}" if self.other is not None
                 else f"not checked in {self.other_side}'s runs")
        return (f"why {self.seen_in} differs (seen in {self.runs_seen} of {self.seen_in}'s {self.runs} run"
                f"{'' if self.runs == 1 else 's'}; {other}): {self.cause.why_line()}")

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause.cause, "seen_in": self.seen_in, "runs_seen": self.runs_seen, "runs": self.runs,
                "evidence": self.cause.evidence, "cost": self.cause.cost, "fix": self.cause.fix,
                "other_state": self.other.state if self.other is not None else None,
                "other_evidence": self.other.evidence if self.other is not None else None}


@dataclass(frozen=True)
class CauseContrast:
    """The causes of A's runs against B's runs of one case."""

    differ: tuple[DifferingCause, ...]
    seen_in_both: tuple[str, ...]  # seen on both sides: it does not tell them apart
    unchecked: tuple[str, ...]  # seen nowhere but unchecked in some run: a difference there cannot be told
    unexplained: tuple[str, ...]  # "A"/"B": a side none of whose runs carries an explanation

    def lines(self) -> list[str]:
        """Text lines (without "# "): one per differing cause, else one saying the causes are the same."""
        if self.differ:
            return [d.line() for d in self.differ]
        if self.unexplained:
            return [f"why: {' and '.join(self.unexplained)}'s runs carry no explanation: the causes cannot be "
                    "compared"]
        seen = f"{', '.join(self.seen_in_both)} seen in both" if self.seen_in_both else "none seen"
        unchecked = f"; unchecked in a run: {', '.join(self.unchecked)}" if self.unchecked else ""
        return [f"why: the same causes in A and B ({seen}{unchecked})"]

    def to_json(self) -> dict[str, Any]:
        return {"causes_differ": [d.to_json() for d in self.differ], "causes_seen_in_both": list(self.seen_in_both),
                "causes_unchecked": list(self.unchecked), "causes_unexplained": list(self.unexplained)}


def _by_cause(explanations: Sequence[Explanation]) -> dict[str, list[Cause]]:
    out: dict[str, list[Cause]] = {}
    for e in explanations:
        for c in e.causes:
            out.setdefault(c.cause, []).append(c)
    return out


def _names(found: Sequence[str]) -> list[str]:
    """Cause names in explain's order (a name explain does not know goes last)."""
    return sorted(set(found), key=lambda n: (CAUSES.index(n) if n in CAUSES else len(CAUSES), n))


def contrast(a: Sequence[Explanation | None], b: Sequence[Explanation | None]) -> CauseContrast:
    """A's runs (their explanations, one per run; None where a run's result carries none) against B's."""
    sides = {"A": [e for e in a if e is not None], "B": [e for e in b if e is not None]}
    causes = {side: _by_cause(exps) for side, exps in sides.items()}
    unexplained = tuple(side for side, exps in sides.items() if not exps)
    names = _names([n for side in causes.values() for n in side])
    differ: list[DifferingCause] = []
    both: list[str] = []
    unchecked: list[str] = []
    for name in names:
        seen = {side: [c for c in causes[side].get(name, []) if c.seen] for side in sides}
        if seen["A"] and seen["B"]:
            both.append(name)
            continue
        for side, other_side in (("B", "A"), ("A", "B")):
            if seen[side] and sides[other_side]:
                checks = causes[other_side].get(name, [])
                differ.append(DifferingCause(side, seen[side][0], len(seen[side]), len(sides[side]),
                                             checks[0] if checks else None))
        if not seen["A"] and not seen["B"] and any(c.state == "unchecked" for s in sides for c in causes[s].get(name, [])):
            unchecked.append(name)
    # B's differences first: B is the side being explained.
    differ.sort(key=lambda d: d.seen_in != "B")
    return CauseContrast(tuple(differ), tuple(both), tuple(unchecked), unexplained)
