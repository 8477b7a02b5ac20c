# SPDX-License-Identifier: BSD-3-Clause
"""The ``delay`` cause: a round trip far above what the same path showed without queues.

A stream's rate is at most its window / its round trip. The sender's smoothed round trip at the end
of the phase (TCP_INFO ``rtt_us``) is compared with the lowest the connection saw (``min_rtt_us``:
the handshake, or a quiet moment; the path without queues) and with the receiver's own estimate.
Far above the floor, the difference is time spent waiting in a queue on the way: a shaper or a
slower hop with a deep buffer (delay without loss), or a congested reverse path holding the ACKs.
Where the round trip is not reported (RDMA and library transports), the cause is unchecked, and says
so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..untyped import count_at, member

__all__ = ["DELAY_COST", "DELAY_FIX", "DELAY_MIN_QUEUE_US", "DELAY_RATIO", "judge_delay"]

# Named from this factor over the path's own floor AND this much queueing. Measured on the shared
# 2-CPU build machine under load: a clean netns veth stream 4,907 us against a 6 us floor (the
# host's scheduling: the ACKs wait for a CPU), a loopback one 5,123 us; a tbf queue of 16 MB at
# 50 Mbit/s 34,729 us against 9 us, and issue 51's shaped path 12,369 us against 24 us. Below
# 10 ms a round trip here cannot be told from a busy host's scheduling.
DELAY_RATIO = 10.0
DELAY_MIN_QUEUE_US = 10_000

DELAY_COST = ("rate <= window / round trip: each multiple of the round trip divides what the same window "
              "carries by as much")
DELAY_FIX = ("find the queue: `tc -s qdisc show dev DEV` on each hop of the path (backlog, overlimits) and the "
             "switch's buffer counters; shorten it (a shaper's limit or latency, fq_codel instead of a deep FIFO) "
             "or remove the shaper; a congested reverse path delays the ACKs as much (check the other direction)")


def _us(x: int) -> str:
    return f"{x:,}"


def judge_delay(rec: Mapping[str, Any], senders: list[str]) -> tuple[str, str]:
    """(state, evidence) of the delay cause for a record whose senders are `senders` ("local",
    "peer"): seen when a sender's round trip is DELAY_RATIO x its floor and DELAY_MIN_QUEUE_US
    above it."""
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
        if rtt is None or floor is None or floor <= 0:
            continue
        who = "the client" if sender == "local" else "the server"
        other = count_at(member(tr, "peer" if sender == "local" else "local"), "rtt_us")
        fact = (f"{who}'s round trip {_us(rtt)} us at the end of the run against {_us(floor)} us at its lowest on this "
                f"connection (TCP_INFO min_rtt: the path without queues)"
                + (f", the receiver's own estimate {_us(other)} us" if other is not None else ""))
        if rtt >= DELAY_RATIO * floor and rtt - floor >= DELAY_MIN_QUEUE_US:
            window = f"; at {rate * 8 / 1e9:.3g} Gb/s that is ~{_us(round(rate * rtt / 1e6))} B in flight" if rate else ""
            seen.append(f"{fact}: {_us(rtt - floor)} us of each round trip waited in a queue ({rtt / floor:.0f} x the "
                        f"floor){window}; the same window over the {_us(floor)} us path would carry {rtt / floor:.0f} x "
                        "as much (rate <= window / round trip)")
        else:
            clear.append(fact)
    if seen:
        return "seen", "; ".join(seen)
    if clear:
        return "clear", "; ".join(clear)
    return "unchecked", "the transport reports no round trip (TCP_INFO's rtt and min_rtt: tcp only, from an engine " \
                        "that reports min_rtt)"
