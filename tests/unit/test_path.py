"""The path verdict, judged on real counter snapshots from the netns testbed.

The verdict tests move real bytes between fs-a and fs-b (a Python bulk stream
or ping-pong run under `ip netns exec`) and read the counters inside each namespace,
so nothing about the kernel's routing or counting is assumed.  The counter
arithmetic tests (4-byte words, 32-bit wrap, saturation, reset) and the
RDMA-port/netdev relation tests use hand-written snapshots, because no RDMA
device exists on the build machines; their shapes follow the engine's schema.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

import netns_helpers as h

from fabscope.results.deltas import counter_deltas
from fabscope.results.pathtext import render_path_text
from fabscope.results.verdict import expected_payload_bytes, verdict
from fabscope.testbed.netns import FABRIC, MGMT, NS_A, NS_B, snapshot_ns
from fabscope.testbed.sysfs_counters import snapshot_net

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


def test_snapshot_net_reads_this_namespace() -> None:
    snap = snapshot_net()
    assert "lo" in snap
    assert set(snap["lo"]) == {"tx_bytes", "rx_bytes", "tx_packets", "rx_packets"}


# --------------------------------------------------------------------------
# counter arithmetic (hand-written snapshots)
# --------------------------------------------------------------------------


def _rdma(
    before: dict[str, int], after: dict[str, int], **extra: Any
) -> dict[str, Any]:
    return {
        "host": "h",
        "net": {},
        "rdma": {
            "mlx4_0/1": {
                "link_layer": "InfiniBand",
                "before": before,
                "after": after,
                **extra,
            }
        },
    }


def _words(x: int, r: int, xp: int = 0, rp: int = 0) -> dict[str, int]:
    return {
        "port_xmit_data": x,
        "port_rcv_data": r,
        "port_xmit_packets": xp,
        "port_rcv_packets": rp,
    }


def test_rdma_data_counters_are_four_byte_words() -> None:
    d = counter_deltas(_rdma(_words(100, 200, 1, 2), _words(1100, 700, 11, 7)))[
        "mlx4_0/1"
    ]
    assert (d.tx_bytes, d.rx_bytes) == (4000, 2000)
    assert (d.tx_packets, d.rx_packets) == (10, 5)  # packets are not scaled
    assert d.problems == ()


def test_32bit_wrapping_counter_is_unwound_once() -> None:
    before = _words(0xFFFFFF00, 10)
    after = _words(0x100, 20)
    d = counter_deltas(_rdma(before, after, bits=32, overflow="wrap"))["mlx4_0/1"]
    assert d.tx_bytes == (0x100 + (1 << 32) - 0xFFFFFF00) * 4 == 0x200 * 4
    assert d.problems == () and any("wrapped" in n for n in d.notes)


def test_backwards_counter_of_unknown_width_is_not_guessed_as_wrap() -> None:
    # Without the engine saying the counter wraps at 32 bits, going backwards
    # may as well be a reset: report it, never invent bytes.
    d = counter_deltas(_rdma(_words(0xFFFFFF00, 10), _words(0x100, 20)))["mlx4_0/1"]
    assert d.tx_bytes is None and "went backwards" in d.problems[0]


def test_saturated_pma_counter_cannot_tell() -> None:
    d = counter_deltas(_rdma(_words(0xFFFFFFF0, 0), _words(0xFFFFFFFF, 0)))["mlx4_0/1"]
    assert d.tx_bytes is None and d.rx_bytes == 0
    assert "saturated" in d.problems[0]
    # a 64-bit counter passing 0xFFFFFFFF is just a number
    d64 = counter_deltas(_rdma(_words(0xFFFFFFF0, 0), _words(0xFFFFFFFF, 0), bits=64))[
        "mlx4_0/1"
    ]
    assert d64.tx_bytes == 15 * 4


def test_saturated_requested_port_makes_the_verdict_unverifiable() -> None:
    side = _rdma(_words(0xFFFF0000, 0xFFFF0000), _words(0xFFFFFFFF, 0xFFFFFFFF))
    rec = {"pattern": "bw", "size": 65536, "iterations": 1000, "warmup": 0,
           "config": {"device": "mlx4_0"}, "counters": {"local": side, "peer": None}}  # fmt: skip
    path = verdict(rec)
    assert path["verdict"] == "unverifiable"
    assert "saturated" in path["reason"]


def test_net_counter_reset_is_unverifiable() -> None:
    side = {"host": "h", "rdma": {}, "net": {
        "eth0": {"before": {"tx_bytes": 10**9, "rx_bytes": 10**6, "tx_packets": 10**6, "rx_packets": 10**5},
                 "after": {"tx_bytes": 5000, "rx_bytes": 300, "tx_packets": 4, "rx_packets": 3}}}}  # fmt: skip
    d = counter_deltas(side)["eth0"]
    assert d.tx_bytes is None and d.bytes is None
    assert "reset" in d.problems[0]
    rec = {"pattern": "bw", "size": 1000, "iterations": 100, "config": {"device": "eth0"},
           "counters": {"local": side, "peer": None}}  # fmt: skip
    path = verdict(rec)
    assert path["verdict"] == "unverifiable" and "went backwards" in path["reason"]


def test_rdma_reset_above_32_bits_is_a_reset_not_a_wrap() -> None:
    d = counter_deltas(_rdma(_words(1 << 40, 0), _words(5, 0)))["mlx4_0/1"]
    assert d.tx_bytes is None and "went backwards" in d.problems[0]


def test_expected_bytes_per_pattern() -> None:
    base = {"size": 1000, "iterations": 10, "warmup": 2}
    assert expected_payload_bytes({**base, "pattern": "lat"})[0] == 1000 * 12 * 2
    assert expected_payload_bytes({**base, "pattern": "bw"})[0] == 1000 * 12
    assert expected_payload_bytes({**base, "pattern": "bibw"})[0] == 1000 * 12 * 2
    assert (
        expected_payload_bytes({**base, "pattern": "bw", "messages": 50})[0]
        == 1000 * 52
    )
    assert expected_payload_bytes({"pattern": "bw"})[0] is None


def test_no_counters_is_unverifiable() -> None:
    path = verdict({"pattern": "bw", "size": 1, "iterations": 1, "config": {"device": "eth0"},
                    "counters": {"local": None, "peer": None}})  # fmt: skip
    assert path["verdict"] == "unverifiable" and "no counters" in path["reason"]


# --------------------------------------------------------------------------
# RDMA port <-> netdev relation (hand-written: no RDMA device here)
# --------------------------------------------------------------------------


def _roce_side(netdev_bytes: int, port_bytes: int) -> dict[str, Any]:
    words = port_bytes // 4
    return {
        "host": "h",
        "net": {
            "eth0": {"before": {"tx_bytes": 0, "rx_bytes": 0, "tx_packets": 0, "rx_packets": 0},
                     "after": {"tx_bytes": netdev_bytes, "rx_bytes": 0, "tx_packets": 1, "rx_packets": 0}},
            "mgmt0": {"before": {"tx_bytes": 0, "rx_bytes": 0, "tx_packets": 0, "rx_packets": 0},
                      "after": {"tx_bytes": 40_000, "rx_bytes": 40_000, "tx_packets": 9, "rx_packets": 9}},
        },
        "rdma": {"dev0/1": {"link_layer": "Ethernet", "ndevs": ["eth0"],
                            "before": _words(0, 0), "after": _words(words, 0, 1, 0)}},
    }  # fmt: skip


def _roce_record(device: str, side: dict[str, Any]) -> dict[str, Any]:
    return {"pattern": "bw", "size": 1_000_000, "iterations": 10, "warmup": 0,
            "config": {"device": device}, "counters": {"local": side, "peer": None}}  # fmt: skip


def test_rxe_counts_in_port_and_netdev_without_double_counting() -> None:
    side = _roce_side(
        netdev_bytes=10_400_000, port_bytes=10_200_000
    )  # rxe: both see it
    for device in ("dev0", "dev0/1", "eth0"):
        path = verdict(_roce_record(device, side))
        assert path["verdict"] == "verified", (device, path)
    local = verdict(_roce_record("", side))["sides"]["local"]
    assert local["observed_bytes"] == 10_400_000 + 80_000  # eth0/dev0 link counted once
    assert local["top"][0]["device"] == "eth0"


def test_mlx5_kernel_bypass_netdev_request_satisfied_by_port_counters() -> None:
    side = _roce_side(netdev_bytes=0, port_bytes=10_300_000)  # RoCE invisible to eth0
    path = verdict(_roce_record("eth0", side))
    assert path["verdict"] == "verified"
    assert path["sides"]["local"]["requested"]["counted_on"] == "dev0/1"


def test_rdma_request_not_satisfied_by_its_netdev_alone() -> None:
    # Bytes only in eth0's statistics took the kernel TCP path, not RDMA.
    side = _roce_side(netdev_bytes=10_300_000, port_bytes=0)
    path = verdict(_roce_record("dev0", side))
    assert path["verdict"] == "misrouted"
    assert path["sides"]["local"]["carriers"][0]["device"] == "eth0"


def test_unknown_device_name_is_said() -> None:
    side = _roce_side(netdev_bytes=10_300_000, port_bytes=0)
    path = verdict(_roce_record("eth9", side))
    assert path["verdict"] == "unverifiable"
    assert "no device named 'eth9'" in path["reason"] and "eth0" in path["reason"]
