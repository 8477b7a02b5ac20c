# SPDX-License-Identifier: BSD-3-Clause
"""The path verdict under librspreload (rspreload.py): the run is judged against the RDMA device,
and rxe's packet-only port must count enough packets to have carried the payload, so a connection
handshake followed by a fallback to kernel TCP (which the netdev counts too) is not "verified".
Built on a real Soft-RoCE record (tests/fixtures/records), with its counters edited per case."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from fabscope.launch.rspreload import amend_record, explain_failure
from fabscope.report.render import header
from fabscope.results.model import carried_by, parse_record
from fabscope.results.verdict import verdict

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "records" / "softroce-verbs-write-bw-two-devices.jsonl"


def _tcp_record(rxe_packets: int) -> dict[str, Any]:
    """The fixture's counters (both rails' bytes put on eth0) as a tcp run from eth0 under the preload; rxe0
    counted `rxe_packets` packets on each side."""
    rec: dict[str, Any] = json.loads(FIXTURE.read_text().splitlines()[0])
    rec = copy.deepcopy(rec)
    rec["config"]["device"] = ""
    rec["transport"] = {"local": {"kind": "tcp", "address_owner": "eth0", "local_address": "192.168.77.2:40000",
                                  "peer_address": "192.168.77.1:50000"}}
    for side in ("local", "peer"):
        rdma = rec["counters"][side]["rdma"]
        rdma.pop("rxe1/1", None)
        rdma["rxe0/1"]["after"] = {"hw_rcvd_pkts": rxe_packets // 2, "hw_sent_pkts": rxe_packets - rxe_packets // 2}
        rdma["rxe0/1"]["before"] = {"hw_rcvd_pkts": 0, "hw_sent_pkts": 0}
        net = rec["counters"][side]["net"]
        for key in ("tx_bytes", "rx_bytes"):  # eth1's bytes onto eth0: one rail carried the run
            net["eth0"]["after"][key] += net["eth1"]["after"][key] - net["eth1"]["before"][key]
            net["eth1"]["after"][key] = net["eth1"]["before"][key]
    amend_record(rec, Path("/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"), None)
    return rec


def test_preload_request_is_the_rdma_device_behind_the_netdev() -> None:
    rec = _tcp_record(40000)
    assert rec["transport"]["local"]["preload"]["device"] == "rxe0"
    path = verdict(rec)
    assert path["requested"] == "rxe0" and path["requested_via"] == "preload"
    assert path["verdict"] == "verified", path.get("reason")
    assert carried_by(rec["transport"]["local"]) == "tcp (rspreload) via eth0"
    # and the text output says so in its first line, where a plain tcp run says "backend tcp"
    assert header(parse_record(rec)).startswith("# backend tcp (rspreload) | op ")


def test_a_handshake_and_a_fallback_to_kernel_tcp_is_misrouted() -> None:
    """A few dozen rxe0 packets (the rdma_cm exchange) cannot have carried 72 MB: eth0's bytes are
    kernel TCP, not RDMA."""
    path = verdict(_tcp_record(30))
    assert path["verdict"] == "misrouted", path
    assert "eth0" in path["reason"]


def test_a_netdev_without_an_rdma_device_is_a_fallback() -> None:
    rec = _tcp_record(40000)
    rec["transport"]["local"]["address_owner"] = "eth1"
    del rec["transport"]["local"]["preload"]
    amend_record(rec, Path("/x/librspreload.so"), None)
    path = verdict(rec)
    assert path["verdict"] == "unverifiable"
    assert "fell back to kernel TCP" in path["reason"]


def test_a_refused_data_connection_under_the_preload_names_the_fix() -> None:
    """The client preloaded, the peer's engine not (a plain serve): the engine's own words (as seen
    between two Soft-RoCE guests), then why and what to do. Other errors pass unchanged."""
    got = explain_failure("tcp: data connection to 192.168.77.1:45639: Connection refused")
    assert got.startswith("tcp: data connection to 192.168.77.1:45639: Connection refused. ")
    assert "both engines must run under librspreload" in got and "fabscope serve --preload rsocket" in got
    other = "no answer from the peer 10.0.0.2:18515 within 30000 ms"
    assert explain_failure(other) == other
