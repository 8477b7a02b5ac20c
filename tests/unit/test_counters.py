# SPDX-License-Identifier: BSD-3-Clause
"""The typed counters of a record (results/counters.py): one parser for the explanation, the path
verdict, the preload's device and the matrix's error counters. Real records from the fixtures; a
malformed part reads as absent, never as an exception (a record is network input or a file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabscope.matrix.findings import moved_errors
from fabscope.results import Counters, parse_record

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def _record(name: str) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((RECORDS / name).read_text().splitlines()[0])
    return rec


def test_a_softroce_record_reads_its_ports_netdevs_and_pause_statistics() -> None:
    rec = _record("softroce-loopback-verbs-send-bw-retries.jsonl")
    local = Counters.of_record(rec).local
    assert local is not None and local.host == "softroce"
    port = local.rdma["rxe0/1"]
    assert port.kind == "rdma" and port.ndevs == ("eth0",)
    raw = rec["counters"]["local"]["rdma"]["rxe0/1"]
    assert port.delta("hw_sent_pkts") == raw["after"]["hw_sent_pkts"] - raw["before"]["hw_sent_pkts"] > 0
    assert port.delta("no_such_counter") is None
    assert local.rdma_behind("eth0") == "rxe0" and local.rdma_behind("lo") is None
    # eth0's driver (virtio_net) was asked and lists no pause statistics: an empty mapping, not None
    assert [d.name for d in local.netdevs_behind_rdma()] == ["eth0"]
    eth0 = local.net["eth0"]
    pauses = eth0.ethtool()
    assert pauses is not None and pauses.after == {} and "ethtool" not in eth0.after
    assert local.net["lo"].ethtool() is None  # no RDMA port on lo: its driver is not asked
    assert local.tcp_sockets is not None and local.tcp_sockets.sockets == 0


def test_the_typed_deltas_are_the_verdicts() -> None:
    rec = _record("netns-tcp-bw-device-fabric0-verified.jsonl")
    result = parse_record(rec)
    local = result.counters.local
    assert local is not None and result.path.verdict == "verified"
    assert local.deltas()["fabric0"].tx_bytes is not None
    assert result.counters.peer is not None and result.counters.side("peer") is result.counters.peer
    assert result.counters.side("elsewhere") is None


def test_tcp_info_of_the_sockets_the_engine_opened() -> None:
    local = Counters.of_record(_record("tcp-send-bw-loopback-rx-duration.jsonl")).local
    assert local is not None and local.tcp_sockets is not None
    assert (local.tcp_sockets.sockets, local.tcp_sockets.data_segs_out, local.tcp_sockets.total_retrans) == (1, 761, 0)


@pytest.mark.parametrize("counters", [
    None, "text", [], {"local": "x"}, {"local": {"net": [], "rdma": "x", "tcp_sockets": 3}},
    {"local": {"net": {"eth0": "x", "eth1": {"before": [], "after": {"rx_bytes": "many", "tx_bytes": True}}}}},
])
def test_a_malformed_snapshot_reads_as_absent(counters: object) -> None:
    c = Counters.of(counters)
    side = c.local
    if side is not None:
        assert not side.rdma and side.tcp_sockets is None
        for dev in side.net.values():  # a number only where there is one: "many" and True are not
            assert dev.before == {} and dev.after == {} and dev.delta("rx_bytes") is None
    assert moved_errors(side) == {}


def test_error_counters_that_moved_are_per_device() -> None:
    c = Counters.of({"local": {"net": {"fabric0": {"before": {"rx_dropped": 3, "rx_errors": 1},
                                                     "after": {"rx_dropped": 10, "rx_errors": 1}}},
                               "rdma": {"mlx5_0/1": {"before": {"symbol_error": 0}, "after": {"symbol_error": 2}}}}})
    assert moved_errors(c.local) == {"fabric0": {"rx_dropped": 7}, "mlx5_0/1": {"symbol_error": 2}}
