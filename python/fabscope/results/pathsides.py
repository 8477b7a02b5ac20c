# SPDX-License-Identifier: BSD-3-Clause
"""The path verdict's sides, typed: per host, the verdict, the bytes it observed and which devices
carried them (``path.sides.local`` / ``path.sides.peer``, as ``verdict.py`` writes them).

One parser for every reader (the explanation's carrying netdevs, the matrix's bytes per device, the
report's carrier column). A stored record is a file and a peer's is network input: a malformed part
reads as absent, never as an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..untyped import member, number
from .deltas import as_count

__all__ = ["DeviceBytes", "PathSide", "path_sides"]


@dataclass(frozen=True)
class DeviceBytes:
    """A device (``eth0``, ``rxe0/1``, a bond's links ``a+b``) and the bytes it counted over the run,
    with its share of all the bytes its host observed (None where nothing was observed)."""

    device: str
    bytes: int
    share: float | None

    @staticmethod
    def of(raw: object) -> DeviceBytes | None:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("device"), str):
            return None
        b = as_count(raw.get("bytes"))
        return DeviceBytes(raw["device"], b, number(raw.get("share"))) if b is not None else None


def _listed(raw: object) -> tuple[DeviceBytes, ...]:
    items = (DeviceBytes.of(x) for x in raw) if isinstance(raw, list) else ()
    return tuple(d for d in items if d is not None)


@dataclass(frozen=True)
class PathSide:
    """One host's judgement of the path."""

    verdict: str | None
    host: str | None
    observed_bytes: int | None
    top: tuple[DeviceBytes, ...]  # the devices that counted bytes, most first
    # The devices that carried the bytes as the verdict names them: verified, the requested device
    # first; misrouted, where the bytes went instead; not-requested, the busiest; () where it
    # could not say (no counters)
    carriers: tuple[DeviceBytes, ...]
    raw: Mapping[str, Any] = field(repr=False)
    reason: str | None = None  # why this host judged as it did (a misroute's, an unverifiable side's)
    # The requested device's own count (``requested``): its bytes, and their share of the payload the
    # run had to move (above 1.0 where headers and other traffic count too); None where not counted
    requested_bytes: int | None = None
    requested_of_expected: float | None = None

    def carrier(self) -> str | None:
        """The device that carried this host's bytes: the verdict's first carrier, else the busiest
        device."""
        first = (self.carriers or self.top or (None,))[0]
        return first.device if first else None

    @staticmethod
    def of(raw: Mapping[str, Any]) -> PathSide:
        verdict, host, reason = raw.get("verdict"), raw.get("host"), raw.get("reason")
        requested = member(raw, "requested")
        return PathSide(
            verdict=verdict if isinstance(verdict, str) else None,
            host=host if isinstance(host, str) else None,
            observed_bytes=as_count(raw.get("observed_bytes")),
            top=_listed(raw.get("top")), carriers=_listed(raw.get("carriers")), raw=raw,
            reason=reason if isinstance(reason, str) else None,
            requested_bytes=as_count(requested.get("bytes")),
            requested_of_expected=number(requested.get("of_expected")),
        )


def path_sides(path: object) -> dict[str, PathSide]:
    """The judged sides of a ``path`` object ("local", "peer"); a side the verdict could not judge
    (no counters from it) or a malformed one is absent."""
    sides = path.get("sides") if isinstance(path, Mapping) else None
    if not isinstance(sides, Mapping):
        return {}
    return {name: PathSide.of(s) for name in ("local", "peer") if isinstance(s := sides.get(name), Mapping)}
