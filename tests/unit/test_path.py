# SPDX-License-Identifier: BSD-3-Clause
"""The path verdict on hand-written counter snapshots: the arithmetic and the RDMA-port/netdev relation.

The verdict on real traffic in the netns testbed is in
tests/integration/test_path_netns.py (it needs root and namespaces). The counter
arithmetic tests (4-byte words, 32-bit wrap, saturation, reset) and the
RDMA-port/netdev relation tests use hand-written snapshots, because no RDMA
device exists on the build machines; their shapes follow the engine's schema.
"""

from __future__ import annotations

from typing import Any

from fabscope.results.deltas import counter_deltas
from fabscope.results.verdict import expected_payload_bytes, verdict
from fabscope.testbed.sysfs_counters import snapshot_net


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
