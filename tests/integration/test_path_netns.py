# SPDX-License-Identifier: BSD-3-Clause
"""The path verdict, judged on real counter snapshots from the netns testbed.

The tests move real bytes between fs-a and fs-b (a Python bulk stream or ping-pong run under
`ip netns exec`) and read the counters inside each namespace, so nothing about the kernel's
routing or counting is assumed. The counter arithmetic on hand-written snapshots is in
tests/unit/test_path.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import netns_helpers as h
import pytest

from fabscope.results.pathtext import render_path_text
from fabscope.results.verdict import verdict
from fabscope.testbed.netns import FABRIC, MGMT, NS_A, NS_B, snapshot_ns

BLOCK = 128 * 1024  # message size of the bw runs
COUNT = 96  # 12.6 MB per bw run, client -> server
NBYTES = BLOCK * COUNT

# --------------------------------------------------------------------------
# real traffic in the netns testbed
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def testbed() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip(
            "netns tests need root (CAP_NET_ADMIN) to create network namespaces"
        )
    yield from h.testbed()


@pytest.fixture(scope="module")
def fabric_run(testbed: None) -> dict[str, Any]:
    """12.6 MB over fabric0, bound to fabric0's address: the well-behaved run."""
    before = h.snapshots(NS_A, NS_B)
    h.socket_run(
        "bulk",
        NS_A,
        NS_B,
        server_bind=FABRIC.ip_b,
        client_bind=FABRIC.ip_a,
        dst=FABRIC.ip_b,
        size=BLOCK,
        count=COUNT,
    )
    after = h.snapshots(NS_A, NS_B)
    return {"local": h.side(NS_A, before, after), "peer": h.side(NS_B, before, after)}


@pytest.fixture(scope="module")
def misroute_run(testbed: None) -> dict[str, Any]:
    """Bound to fabric0's address but aimed at the peer's mgmt address: goes over mgmt0."""
    before = h.snapshots(NS_A, NS_B)
    h.socket_run(
        "bulk",
        NS_A,
        NS_B,
        server_bind="0.0.0.0",
        client_bind=FABRIC.ip_a,
        dst=MGMT.ip_b,
        size=BLOCK,
        count=COUNT,
    )
    after = h.snapshots(NS_A, NS_B)
    return {"local": h.side(NS_A, before, after), "peer": h.side(NS_B, before, after)}


def _bw_record(sides: dict[str, Any], **kw: Any) -> dict[str, Any]:
    kw.setdefault("local_address", f"{FABRIC.ip_a}:40000")
    kw.setdefault("peer_address", f"{FABRIC.ip_b}:{h.PINGPONG_PORT}")
    return h.record(
        local=sides["local"],
        peer=sides["peer"],
        pattern="bw",
        size=BLOCK,
        iterations=COUNT,
        **kw,
    )


@pytest.mark.netns
def test_fabric_run_is_verified(fabric_run: dict[str, Any]) -> None:
    path = verdict(_bw_record(fabric_run, device="fabric0"))
    assert path["verdict"] == "verified", path
    for label in ("local", "peer"):
        s = path["sides"][label]
        assert s["verdict"] == "verified"
        assert s["requested"]["bytes"] >= NBYTES  # payload plus headers
        assert s["requested"]["share"] > 0.99  # nothing else moves in the namespaces
    # direction: fs-a sent, fs-b received
    assert path["sides"]["local"]["devices"]["fabric0"]["tx_bytes"] >= NBYTES
    assert path["sides"]["peer"]["devices"]["fabric0"]["rx_bytes"] >= NBYTES
    assert path["summary"].startswith("verified: fabric0 counted")
    assert render_path_text(path).startswith("path: VERIFIED")


@pytest.mark.netns
def test_fabric_run_without_request_reports_where_bytes_went(
    fabric_run: dict[str, Any],
) -> None:
    path = verdict(_bw_record(fabric_run))
    assert path["verdict"] == "not-requested"
    assert path["requested"] is None
    for label in ("local", "peer"):
        top = path["sides"][label]["top"][0]
        assert top["device"] == "fabric0" and top["share"] > 0.99
    assert "fabric0 (fs-a) / fabric0 (fs-b)" in path["summary"]


@pytest.mark.netns
def test_misroute_via_bind_is_caught_and_names_mgmt0(
    misroute_run: dict[str, Any],
) -> None:
    # --bind 10.201.0.1: the engine reports fabric0 as the owner of the bind address.
    rec = _bw_record(
        misroute_run,
        bind=FABRIC.ip_a,
        transport_device="fabric0",
        peer_address=f"{MGMT.ip_b}:{h.PINGPONG_PORT}",
    )
    path = verdict(rec)
    assert path["verdict"] == "misrouted", path
    assert path["requested"] == "fabric0" and path["requested_via"] == "bind"
    for label in ("local", "peer"):
        s = path["sides"][label]
        assert s["verdict"] == "misrouted"
        assert s["carriers"][0]["device"] == "mgmt0"
        assert s["carriers"][0]["bytes"] >= NBYTES
        assert (
            s["requested"]["bytes"] < 0.1 * NBYTES
        )  # only ACKs came back over fabric0
    assert "mgmt0 (fs-a) / mgmt0 (fs-b)" in path["summary"]
    assert path["summary"].startswith("misrouted: asked for fabric0, ")
    text = render_path_text(path)
    assert text.startswith("!! MISROUTED") and "mgmt0" in text


@pytest.mark.netns
def test_misroute_with_device_request_and_bind_owner_from_addresses(
    misroute_run: dict[str, Any],
) -> None:
    # Same run judged two more ways: --device fabric0, and --bind resolved
    # through the `addresses` of the net entries instead of transport.device.
    path = verdict(
        _bw_record(misroute_run, device="fabric0", peer_address=f"{MGMT.ip_b}:5201")
    )
    assert path["verdict"] == "misrouted"
    local = dict(misroute_run["local"])
    local["net"] = {k: dict(v) for k, v in local["net"].items()}
    local["net"]["fabric0"]["addresses"] = [FABRIC.addr_a]
    rec = _bw_record({"local": local, "peer": misroute_run["peer"]}, bind=FABRIC.ip_a)
    path = verdict(rec)
    assert path["requested"] == "fabric0" and path["verdict"] == "misrouted"


@pytest.mark.netns
def test_misroute_ping_pong_split_over_both_links(testbed: None) -> None:
    # The lat pattern misrouted: requests leave fs-a over mgmt0 (towards
    # 10.202.0.2), replies to 10.201.0.1 come back over fabric0.  Each host then
    # sees about half the bytes on fabric0, which is not 90%: still misrouted.
    size, count = 4096, 300
    before = h.snapshots(NS_A, NS_B)
    h.socket_run(
        "pingpong",
        NS_A,
        NS_B,
        server_bind="0.0.0.0",
        client_bind=FABRIC.ip_a,
        dst=MGMT.ip_b,
        size=size,
        count=count,
    )
    after = h.snapshots(NS_A, NS_B)
    rec = h.record(
        local=h.side(NS_A, before, after),
        peer=h.side(NS_B, before, after),
        pattern="lat",
        size=size,
        iterations=count,
        device="fabric0",
        local_address=f"{FABRIC.ip_a}:40000",
        peer_address=f"{MGMT.ip_b}:{h.PINGPONG_PORT}",
    )
    path = verdict(rec)
    assert path["verdict"] == "misrouted", path
    local = path["sides"]["local"]
    assert local["devices"]["mgmt0"]["tx_bytes"] >= size * count
    assert local["devices"]["fabric0"]["rx_bytes"] >= size * count
    assert 0.3 < local["requested"]["of_expected"] < 0.7
    assert local["carriers"][0]["device"] == "mgmt0"


@pytest.mark.netns
def test_loopback_is_unverifiable_with_reason(testbed: None) -> None:
    # Client and server both in fs-a, talking to fs-a's own fabric0 address:
    # the kernel keeps it on lo and fabric0 never sees a byte.
    before = h.snapshots(NS_A)
    h.socket_run(
        "bulk",
        NS_A,
        NS_A,
        server_bind=FABRIC.ip_a,
        client_bind=FABRIC.ip_a,
        dst=FABRIC.ip_a,
        size=BLOCK,
        count=COUNT,
    )
    after = h.snapshots(NS_A)
    same_host = h.side(NS_A, before, after)
    rec = h.record(
        local=same_host,
        peer=same_host,
        pattern="bw",
        size=BLOCK,
        iterations=COUNT,
        device="fabric0",
        local_address=f"{FABRIC.ip_a}:40000",
        peer_address=f"{FABRIC.ip_a}:{h.PINGPONG_PORT}",
    )
    path = verdict(rec)
    assert path["verdict"] == "unverifiable", path
    assert "kept the traffic on lo" in path["reason"]
    assert "this host's own address" in path["reason"]
    assert path["sides"]["local"]["devices"]["lo"]["tx_bytes"] >= NBYTES
    # fabric0 may see a few hundred bytes of stray traffic (IPv6 neighbour
    # discovery, the FIN of an earlier test's connection): noise, not payload.
    assert path["sides"]["local"]["requested"]["bytes"] < 0.01 * NBYTES
    assert render_path_text(path).startswith("path: UNVERIFIABLE")


@pytest.mark.netns
def test_peer_without_counters_judges_local_side_only(
    fabric_run: dict[str, Any],
) -> None:
    path = verdict(
        _bw_record({"local": fabric_run["local"], "peer": None}, device="fabric0")
    )
    assert path["verdict"] == "verified"
    assert path["sides"]["peer"] is None
    assert any("peer sent no counters" in n for n in path["notes"])


@pytest.mark.netns
def test_snapshot_net_sees_the_namespace_devices(testbed: None) -> None:
    snap = snapshot_ns(NS_B)
    assert set(snap["net"]) == {"lo", "fabric0", "mgmt0"}
    assert snap["rdma"] == {}
