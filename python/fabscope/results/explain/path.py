# SPDX-License-Identifier: BSD-3-Clause
"""The path's causes: queueing delay on it (delay.py decides) and a misrouted result with the setting
that chose the device (misroute.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...untyped import member
from ..delay import DELAY_COST, DELAY_FIX, DelayReference, judge_delay
from ..misroute import route_reasons
from .facts import _senders
from .model import Cause, Explanation


def _delay(rec: Mapping[str, Any], reference: DelayReference | None = None) -> Cause:
    """Queueing delay on the path (delay.py decides): the round trip against the path's own floor and,
    given, the round trip of the same case's clean runs in the history."""
    state, evidence = judge_delay(rec, _senders(rec), reference)
    return Cause("delay", state, evidence, DELAY_COST if state == "seen" else None, DELAY_FIX if state == "seen" else None)


def _route(rec: Mapping[str, Any]) -> Cause:
    """A misrouted result (the path verdict's) with what chose the device that carried it (misroute.py)."""
    path = member(rec, "path")
    verdict, asked = path.get("verdict"), path.get("requested")
    if verdict == "verified":
        return Cause("route", "clear", f"the bytes took {asked}, the device asked for")
    if verdict == "not-requested":
        return Cause("route", "clear", "no device was asked for: whichever the bytes took is the one asked")
    if verdict != "misrouted":
        return Cause("route", "unchecked", f"the path is {verdict or 'not judged'}: {path.get('reason') or 'no verdict'}")
    carriers = member(member(path, "sides"), "local").get("carriers")
    carrier = carriers[0].get("device") if isinstance(carriers, list) and carriers and isinstance(carriers[0], Mapping) \
        else "another device"
    found = route_reasons(rec)
    cost = f"the result measures {carrier}, not {asked}"
    if not found:
        return Cause("route", "seen", f"the bytes left by {carrier}, not {asked}; the library's report in the record "
                     "names no setting that chose it", cost,
                     f"`fabscope doctor --device {asked}` checks the settings that choose a device")
    return Cause("route", "seen", "; ".join(r for r, _ in found), cost, "; ".join(dict.fromkeys(f for _, f in found)))


def with_delay_reference(expl: Explanation, rec: Mapping[str, Any], found: DelayReference | None) -> Explanation:
    """The explanation with its delay cause read again against the round trip the same case showed on
    its clean runs in the history (fabscope/reference.py finds them: ``find_delay_reference``); None
    found: as it was (the cause then reads the connection's own floor)."""
    if found is None:
        return expl
    causes = tuple(_delay(rec, found) if c.cause == "delay" else c for c in expl.causes)
    return replace(expl, causes=causes, delay_reference=found)
