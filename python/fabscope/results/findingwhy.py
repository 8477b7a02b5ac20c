# SPDX-License-Identifier: BSD-3-Clause
"""Why a matrix finding is slow: the causes seen on its slow pairs, and the diagnosis worded once (issue 20).

``explain`` decides each cause on one record; this module only counts those decisions over the
slow measurements of one finding (a bad link, a bad node) and says what they add up to: a link
slowed by loss against one slowed by a rate limit, a node with a CPU hog or remote NUMA placement
against one with port errors. ``fabscope.matrix.findings`` picks the measurements, parses their
records and reads the error counters that moved; ``Finding`` (results/matrix.py) carries the
result; the renderers print ``diagnosis`` as it is.

A cause counts per direction (src -> dst at a pattern): seen when any slow measurement of that
direction saw it. A cause also seen on at least ``FABRIC_SHARE`` of the fabric's clean directions
is the fabric's (a message size every pair segments badly), not what sets this finding apart; one
seen on fewer than ``PAIR_SHARE`` of the finding's slow directions is a partner's (a bad node's
slow pair with a host that has a problem of its own). Both are listed, and named as such, but do
not make the diagnosis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .explain import CAUSES, Explanation

__all__ = ["FABRIC_SHARE", "CauseOnPairs", "FindingWhy", "Observed", "judge"]

FABRIC_SHARE = 0.5
PAIR_SHARE = 0.5
# What a seen cause means for a slow pair; a diagnosis names them in this order (loss first, then
# the port's own errors, then the host).
MEANING = {
    "retransmission": "loss (retransmissions or drops)",
    "link": "link events (the link went down or retrained)",
    "cpu": "a CPU hog (another process on an engine's CPU)",
    "placement": "remote NUMA placement (an engine on another node than its device)",
    "mtu": "a small path MTU",
    "buffers": "socket buffers too small for the path",
    "segmentation": "a tiny tail segment per message",
    "delay": "queueing delay (a round trip far above the path's own floor: a deep queue or a congested reverse path)",
    "route": "a misroute (the bytes left by another device than asked, for the reason the route cause names)",
}
ORDER = ("route", "retransmission", "port errors", "link", "delay", "cpu", "placement", "mtu", "buffers",
         "segmentation")
RATE_LIMIT = "no loss, no retransmission seen: a rate limit (a shaped or slower link)"
SLOWER_PATH = ("no loss, no retransmission seen: a slower or longer path (a shaped or slower link, more hops), "
               "which no check names")
PORT_ERRORS_SHOWN = 3


@dataclass(frozen=True)
class Observed:
    """One measurement of a direction, with its record's explanation or why it has none."""

    src: str
    dst: str
    pattern: str
    explanation: Explanation | None
    problem: str | None = None

    @property
    def direction(self) -> tuple[str, str, str]:
        return (self.src, self.dst, self.pattern)

    @property
    def label(self) -> str:
        """The pair named, with which host is the record's ``local`` (the client) and ``peer``."""
        return f"{self.src} -> {self.dst} {self.pattern} (local {self.src}, peer {self.dst})"


@dataclass(frozen=True)
class CauseOnPairs:
    """One cause seen on a finding's slow directions: on how many, one example, the fix."""

    cause: str
    pairs: int  # slow directions it was seen on
    of: int  # slow directions whose records were explained
    evidence: str  # one example, the pair named
    fix: str | None
    clean_pairs: int  # the fabric's clean directions it was seen on too
    clean_of: int

    @property
    def fabric_wide(self) -> bool:
        return self.clean_of > 0 and self.clean_pairs >= FABRIC_SHARE * self.clean_of

    @property
    def few(self) -> bool:
        return self.pairs < PAIR_SHARE * self.of

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "pairs": self.pairs, "of": self.of, "evidence": self.evidence, "fix": self.fix,
                "clean_pairs": self.clean_pairs, "clean_of": self.clean_of, "fabric_wide": self.fabric_wide,
                "few": self.few}


@dataclass(frozen=True)
class FindingWhy:
    """The causes seen on a finding's slow directions and the one-line diagnosis they add up to."""

    causes: tuple[CauseOnPairs, ...]
    diagnosis: str
    slow_pairs: int  # slow directions
    unexplained: tuple[str, ...]  # "src -> dst pattern: why its record gave no explanation"

    def to_json(self) -> dict[str, Any]:
        return {"causes": [c.to_json() for c in self.causes], "diagnosis": self.diagnosis,
                "slow_pairs": self.slow_pairs, "unexplained": list(self.unexplained)}


def _by_direction(obs: Sequence[Observed]) -> dict[tuple[str, str, str], list[Explanation]]:
    out: dict[tuple[str, str, str], list[Explanation]] = {}
    for o in obs:
        out.setdefault(o.direction, [])
        if o.explanation is not None:
            out[o.direction].append(o.explanation)
    return out


def _state_count(dirs: Mapping[tuple[str, str, str], list[Explanation]], cause: str, state: str) -> int:
    return sum(1 for exps in dirs.values() if any(c.cause == cause and c.state == state
                                                  for e in exps for c in e.causes))


def _aggregate(slow: Sequence[Observed], clean: Sequence[Observed]) -> tuple[CauseOnPairs, ...]:
    slow_dirs, clean_dirs = _by_direction(slow), _by_direction(clean)
    of = sum(1 for exps in slow_dirs.values() if exps)
    clean_of = sum(1 for exps in clean_dirs.values() if exps)
    out: list[CauseOnPairs] = []
    for cause in CAUSES:
        example = next(((o, c) for o in slow if o.explanation is not None
                        for c in o.explanation.seen if c.cause == cause), None)
        if example is None:
            continue
        o, c = example
        out.append(CauseOnPairs(cause, _state_count(slow_dirs, cause, "seen"), of, f"{o.label}: {c.evidence}", c.fix,
                                _state_count(clean_dirs, cause, "seen"), clean_of))
    return tuple(out)


def _port_errors(port_errors: Mapping[str, Mapping[str, Mapping[str, int]]]) -> list[str]:
    """host -> device -> counter -> delta, as "counter +N on device (host)"."""
    return [f"{counter} +{delta:,} on {dev} ({host})" for host, devs in sorted(port_errors.items())
            for dev, moved in sorted(devs.items()) for counter, delta in sorted(moved.items()) if delta > 0]


def judge(slow: Sequence[Observed], clean: Sequence[Observed],
          port_errors: Mapping[str, Mapping[str, Mapping[str, int]]]) -> FindingWhy:
    """The causes of a finding from the measurements of its slow directions, against the fabric's
    clean ones, and the error counters that moved on its hosts' ports (``moved_errors``)."""
    causes = _aggregate(slow, clean)
    slow_dirs = _by_direction(slow)
    unexplained = tuple(f"{o.src} -> {o.dst} {o.pattern}: {o.problem}" for o in slow
                        if o.explanation is None and o.problem)
    named: dict[str, str] = {c.cause: f"{MEANING[c.cause]} on {c.pairs} of {c.of} slow pair{'s' if c.of > 1 else ''}"
                             for c in causes if not c.fabric_wide and not c.few}
    errors = _port_errors(port_errors)
    if errors:
        more = len(errors) - PORT_ERRORS_SHOWN
        named["port errors"] = ("port errors (" + ", ".join(errors[:PORT_ERRORS_SHOWN])
                                + (f", {more} more" if more > 0 else "") + ")")
    parts = [named[k] for k in ORDER if k in named]
    if not parts:
        parts = [_nothing_seen(slow, slow_dirs, unexplained)]
    few = [f"{c.cause} ({c.pairs} of {c.of})" for c in causes if c.few and not c.fabric_wide]
    if few:
        parts.append(f"on fewer of its slow pairs: {', '.join(few)}")
    common = [c.cause for c in causes if c.fabric_wide]
    if common:
        parts.append(f"seen on the fabric's clean pairs too, so not what sets this apart: {', '.join(common)}")
    return FindingWhy(causes, "; ".join(parts), len(slow_dirs), unexplained)


def _nothing_seen(slow: Sequence[Observed], dirs: Mapping[tuple[str, str, str], list[Explanation]],
                  unexplained: Sequence[str]) -> str:
    """The diagnosis when no cause was seen: a rate limit only where loss was checked on every slow
    direction; otherwise say what could not be checked."""
    explained = sum(1 for exps in dirs.values() if exps)
    if not explained:
        first = f" ({unexplained[0]})" if unexplained else ""
        return f"no cause can be told: none of its {len(dirs)} slow pairs carries a record the checks can read{first}"
    loss_seen = _state_count(dirs, "retransmission", "seen")
    if loss_seen:
        return (f"no cause sets it apart: loss is seen on {loss_seen} of {explained} slow pairs, too few of them or "
                "on the fabric's clean pairs too")
    unchecked = explained - _state_count(dirs, "retransmission", "clear")
    if unchecked:
        why = next((c.evidence for o in slow if o.explanation is not None for c in o.explanation.causes
                    if c.cause == "retransmission" and c.state == "unchecked"), "")
        return (f"no cause seen, but loss could not be checked on {unchecked} of {explained} slow pairs "
                f"({why}): loss and a rate limit are not told apart")
    return SLOWER_PATH if all(p == "lat" for _, _, p in dirs) else RATE_LIMIT
