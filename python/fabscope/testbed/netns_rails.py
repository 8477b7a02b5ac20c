# SPDX-License-Identifier: BSD-3-Clause
"""Two rails on the netns testbed: a second fabric switch and multipath (ECMP) routes between hosts.

On top of what ``netns.up`` made (fabric0 on br-fabric), every host gets ``fabric1`` on a second
bridge ``br-rail1`` (10.203.0.i/24) and a ``rail0`` netdev holding its rail-independent address
10.210.0.i/32 (a veth kept inside the host: this kernel has no dummy netdev); towards every other
host's 10.210.0.j the route has two next hops, one per rail, hashed per flow on the 5-tuple
(fib_multipath_hash_policy 1), as a leaf switch spreads flows over its uplinks. A flow's bytes then
go over one rail or the other, by the hash: the per-rail split of N flows, and an imbalance when the
hash puts most on one rail. ``netns.down`` removes it all (the namespaces go). ``shape_rail``
rate-limits one host's uplink on one rail.
"""

from __future__ import annotations

from collections.abc import Sequence

from .netns import SWITCH_NS
from .netns_cmd import host_index, link_exists, run, sysctl
from .netns_shape import set_tbf

RAIL_BRIDGE = "br-rail1"
RAIL_DEV = "fabric1"
ANYCAST_DEV = "rail0"
RAIL_NET = "10.203.0"
ANYCAST_NET = "10.210.0"
RAILS = ("fabric0", RAIL_DEV)


def rail_ip(host: str) -> str:
    return f"{RAIL_NET}.{host_index(host) + 1}"


def anycast_ip(host: str) -> str:
    """The host's address reached over either rail (what the load's flows use)."""
    return f"{ANYCAST_NET}.{host_index(host) + 1}"


def _port(host: str) -> str:
    return f"{host.removeprefix('fs-')}-rail1"


def rails_up(hosts: Sequence[str], weights: tuple[int, int] = (1, 1), on_rail1: Sequence[str] = ()) -> None:
    """``weights``: the next hops' weights (fabric0, fabric1); (1, 0) plants an imbalance: every flow on
    fabric0, as a hash that always picks one uplink. ``on_rail1``: hosts whose routes use fabric1
    only (weights 0, 1), to put their flows on a rail the test slows."""
    if not link_exists(SWITCH_NS, RAIL_BRIDGE):
        run(["ip", "-n", SWITCH_NS, "link", "add", RAIL_BRIDGE, "type", "bridge", "forward_delay", "0", "stp_state",
             "0"], what=f"create bridge {RAIL_BRIDGE}")
    run(["ip", "-n", SWITCH_NS, "link", "set", RAIL_BRIDGE, "up"], what=f"bring {RAIL_BRIDGE} up")
    for host in hosts:
        if not link_exists(host, RAIL_DEV):
            run(["ip", "-n", SWITCH_NS, "link", "add", _port(host), "type", "veth", "peer", "name", RAIL_DEV, "netns",
                 host], what=f"create veth {_port(host)} <-> {host}:{RAIL_DEV}")
        run(["ip", "-n", SWITCH_NS, "link", "set", _port(host), "master", RAIL_BRIDGE, "up"],
            what=f"plug {_port(host)} into {RAIL_BRIDGE}")
        run(["ip", "-n", host, "addr", "replace", f"{rail_ip(host)}/24", "dev", RAIL_DEV], what=f"address {RAIL_DEV}")
        run(["ip", "-n", host, "link", "set", RAIL_DEV, "up"], what=f"bring {RAIL_DEV} up in {host}")
        if not link_exists(host, ANYCAST_DEV):
            # a veth pair kept inside the host stands in for a dummy netdev (this kernel has no dummy module)
            run(["ip", "-n", host, "link", "add", ANYCAST_DEV, "type", "veth", "peer", "name", f"{ANYCAST_DEV}p"],
                what=f"create {ANYCAST_DEV} in {host}")
            run(["ip", "-n", host, "link", "set", f"{ANYCAST_DEV}p", "up"], what=f"bring {ANYCAST_DEV}p up in {host}")
        run(["ip", "-n", host, "addr", "replace", f"{anycast_ip(host)}/32", "dev", ANYCAST_DEV],
            what=f"address {ANYCAST_DEV}")
        run(["ip", "-n", host, "link", "set", ANYCAST_DEV, "up"], what=f"bring {ANYCAST_DEV} up in {host}")
        sysctl(host, "net.ipv4.fib_multipath_hash_policy", "1")  # per flow: the 5-tuple, not the addresses
    for host in hosts:
        for other in hosts:
            if other == host:
                continue
            j = host_index(other) + 1
            w = (0, 1) if host in on_rail1 else weights
            hops = [("10.201.0", "fabric0", w[0]), (RAIL_NET, RAIL_DEV, w[1])]
            nexthops = [a for net, dev, w in hops if w > 0
                        for a in ("nexthop", "via", f"{net}.{j}", "dev", dev, "weight", str(w))]
            run(["ip", "-n", host, "route", "replace", f"{anycast_ip(other)}/32", "src", anycast_ip(host), *nexthops],
                what=f"multipath route {host} -> {other}")


def shape_rail(host: str, rail: str, rate: str | None) -> None:
    """tbf on ``host``'s uplink on one rail (its egress), or none."""
    set_tbf(host, rail, rate)
