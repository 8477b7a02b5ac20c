# SPDX-License-Identifier: BSD-3-Clause
"""A switch port's queue on the netns testbed: the buffer that decides what incast does.

The fabric switch's egress towards a host (its port, ``c-fabric`` in ``fs-switch``) gets tbf at a
rate with a byte ``limit``: the queue that builds when several hosts send into that one. A shallow
limit (a few packets) overflows under incast: drops, retransmissions, flows that fall behind; a deep
one holds every flow's window (bounded with --tcp-rcvbuf), so the only finding is the
oversubscription itself. tbf is what this host's kernel has (no netem, no RED): a queue too small
for the burst is how loss is planted here.
"""

from __future__ import annotations

import json

from .netns import FABRIC, SWITCH_NS, _port
from .netns_cmd import run
from .netns_shape import validate_rate

# The bucket: small enough that the port really runs at its rate (the queue, not the bucket, absorbs
# the burst), above 100 Mbit/s x the kernel's timer slack.
QUEUE_BURST = "32kb"


def set_port_queue(host: str, rate: str, limit_bytes: int) -> None:
    """tbf at ``rate`` with a queue of ``limit_bytes`` on the switch's port towards ``host``."""
    validate_rate(rate, "rate")
    run(["tc", "-n", SWITCH_NS, "qdisc", "replace", "dev", _port(host, FABRIC), "root", "tbf", "rate", rate,
         "burst", QUEUE_BURST, "limit", str(limit_bytes)],
        what=f"queue of {limit_bytes} B at {rate} on the switch port towards {host}")


def port_drops(host: str) -> int:
    """Packets the queue on the switch's port towards ``host`` dropped (tc's own count: the
    testbed's ground truth, read by tests, never by fabscope's verdicts)."""
    out = run(["tc", "-n", SWITCH_NS, "-s", "-j", "qdisc", "show", "dev", _port(host, FABRIC)],
              what=f"read the queue of the switch port towards {host}").stdout
    for q in json.loads(out or "[]"):
        if q.get("root"):
            return int(q.get("drops", 0))
    return 0
