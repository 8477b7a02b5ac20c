# SPDX-License-Identifier: BSD-3-Clause
"""The ``delay`` cause: a round trip far above what the same path showed without queues.

A stream's rate is at most its window / its round trip. The sender's smoothed round trip at the end
of the phase (TCP_INFO ``rtt_us``) is compared with the lowest the connection saw (``min_rtt_us``:
the handshake, or a quiet moment; the path without queues) and with the receiver's own estimate.
Far above the floor, the difference is time spent waiting in a queue on the way: a shaper or a
slower hop with a deep buffer (delay without loss), or a congested reverse path holding the ACKs.
Where the history holds clean runs of the same case (same hosts, backend, op, pattern, size, carrier;
fabscope/reference.py finds them: ``find_delay_reference``), the round trip is also read against what
the path showed on those runs (``DelayReference``), and the evidence says so ("against 24 us on this
path's last 3 clean runs"). Where the round trip is not reported (RDMA and library transports), the
cause is unchecked, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..untyped import count_at, member

__all__ = ["DELAY_CLEAN_OF", "DELAY_COST", "DELAY_FIX", "DELAY_MIN_QUEUE_US", "DELAY_RATIO", "DELAY_REFERENCE_RUNS",
           "DelayReference", "judge_delay"]

# Named from this factor over the path's own floor AND this much queueing. Measured on the shared
# 2-CPU build machine under load: a clean netns veth stream 4,907 us against a 6 us floor (the
# host's scheduling: the ACKs wait for a CPU), a loopback one 5,123 us; a tbf queue of 16 MB at
# 50 Mbit/s 34,729 us against 9 us, and issue 51's shaped path 12,369 us against 24 us. Below
# 10 ms a round trip here cannot be told from a busy host's scheduling.
DELAY_RATIO = 10.0
DELAY_MIN_QUEUE_US = 10_000

# The round trip of a case's clean runs is the median over at most this many of its newest clean runs;
# a clean run is one whose bytes took the device asked for and that named none of these causes (the
# ones that read the path: a queue, loss, a link event, another route).
DELAY_REFERENCE_RUNS = 5
DELAY_CLEAN_OF = ("delay", "retransmission", "link", "route")

DELAY_COST = ("rate <= window / round trip: each multiple of the round trip divides what the same window "
              "carries by as much")
DELAY_FIX = ("find the queue: `tc -s qdisc show dev DEV` on each hop of the path (backlog, overlimits) and the "
             "switch's buffer counters; shorten it (a shaper's limit or latency, fq_codel instead of a deep FIFO) "
             "or remove the shaper; a congested reverse path delays the ACKs as much (check the other direction)")


def _us(x: float) -> str:
    return f"{round(x):,}"


@dataclass(frozen=True)
class DelayReference:
    """What the path showed on clean runs of the same case in the history (fabscope/reference.py
    finds them): each sender's ("local", "peer") median round trip at the end of those runs, and the
    runs it was taken from (newest first)."""

    rtt_us: dict[str, float]
    run_ids: tuple[int, ...]

    def text(self) -> str:
        n = len(self.run_ids)
        ids = ", ".join(map(str, self.run_ids))
        return (f"this path's last {n} clean run{'s' if n != 1 else ''} of this case "
                f"(run{'s' if n != 1 else ''} {ids}{', median' if n > 1 else ''})")

    def to_json(self) -> dict[str, Any]:
        return {"rtt_us": dict(self.rtt_us), "run_ids": list(self.run_ids)}

    @classmethod
    def parse(cls, obj: object) -> DelayReference | None:
        """A stored record's delay reference (``explanation.delay_reference``); None where there is none."""
        if not isinstance(obj, dict):
            return None
        rtt, ids = obj.get("rtt_us"), obj.get("run_ids")
        if not (isinstance(rtt, dict) and rtt and isinstance(ids, list) and ids
                and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
                and all(k in ("local", "peer") and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                        for k, v in rtt.items())):
            return None
        return cls(rtt_us={str(k): float(v) for k, v in rtt.items()}, run_ids=tuple(ids))


def _queued(rtt: int, base: float) -> bool:
    return base > 0 and rtt >= DELAY_RATIO * base and rtt - base >= DELAY_MIN_QUEUE_US


def judge_delay(rec: Mapping[str, Any], senders: list[str], reference: DelayReference | None = None) -> tuple[str, str]:
    """(state, evidence) of the delay cause for a record whose senders are `senders` ("local",
    "peer"): seen when a sender's round trip is DELAY_RATIO x, and DELAY_MIN_QUEUE_US above, the
    round trip of the same case's clean runs (``reference``, from the history) or its own floor."""
    if rec.get("pattern") == "lat":
        return "clear", "a ping-pong keeps one message in flight: no queue builds on its path"
    tr = member(rec, "transport")
    if member(member(tr, "local"), "route_to_peer").get("dev") == "lo":
        # Measured here: a loaded 2-CPU host's loopback stream showed 5,123 us against a 6 us floor,
        # with no queue of any network: the time is the host's scheduling, not the path's.
        return "clear", ("the peer is reached over lo (this host): no network queue on the path; a loopback round "
                         "trip measures the host's scheduling")
    gbps = rec.get("bandwidth_gbps")
    rate = float(gbps) * 1e9 / 8 if isinstance(gbps, (int, float)) and not isinstance(gbps, bool) and gbps > 0 else None
    seen: list[str] = []
    clear: list[str] = []
    for sender in senders:
        side = member(tr, sender)
        rtt, floor = count_at(side, "rtt_us"), count_at(side, "min_rtt_us")
        clean = reference.rtt_us.get(sender) if reference is not None else None
        floor = floor if floor is not None and floor > 0 else None
        if rtt is None or (floor is None and clean is None):
            continue
        who = "the client" if sender == "local" else "the server"
        other = count_at(member(tr, "peer" if sender == "local" else "local"), "rtt_us")
        against = []
        if clean is not None and reference is not None:
            against.append(f"{_us(clean)} us on {reference.text()}")
        if floor is not None:
            against.append(f"{_us(floor)} us at its lowest on this connection (TCP_INFO min_rtt: the path without "
                           "queues)")
        fact = (f"{who}'s round trip {_us(rtt)} us at the end of the run against {' and '.join(against)}"
                + (f", the receiver's own estimate {_us(other)} us" if other is not None else ""))
        # The clean runs' round trip first: what this path shows without the queue, on this host.
        base, basis = next(((b, w) for b, w in ((clean, "the clean runs'"), (floor, "the floor"))
                            if b is not None and _queued(rtt, b)), (None, ""))
        if base is None:
            clear.append(fact)
            continue
        window = f"; at {rate * 8 / 1e9:.3g} Gb/s that is ~{_us(rate * rtt / 1e6)} B in flight" if rate else ""
        seen.append(f"{fact}: {_us(rtt - base)} us of each round trip waited in a queue ({rtt / base:.0f} x {basis})"
                    f"{window}; the same window over the {_us(base)} us path would carry {rtt / base:.0f} x as much "
                    "(rate <= window / round trip)")
    if seen:
        return "seen", "; ".join(seen)
    if clear:
        return "clear", "; ".join(clear)
    return "unchecked", "the transport reports no round trip (TCP_INFO's rtt and min_rtt: tcp only, from an engine " \
                        "that reports min_rtt)"
