# SPDX-License-Identifier: BSD-3-Clause
"""The path verdict for a run spread over several devices (verbs ``--device rxe0,rxe1``).

The record is real: two Soft-RoCE guests with two links each (see tests/fixtures/records/README.md).
The misrouted case moves the second rail's counts onto the first, as a host whose rxe1 traffic
left through eth0 would show them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from fabscope.results.requests import resolve_request
from fabscope.results.verdict import device_shares, verdict

RECORD = Path(__file__).resolve().parents[1] / "fixtures/records/softroce-verbs-write-bw-two-devices.jsonl"


def _record() -> dict[str, Any]:
    rec: dict[str, Any] = json.loads(RECORD.read_text().splitlines()[0])
    return rec


def test_a_device_list_is_a_request_for_each_device() -> None:
    request, why = resolve_request(_record())
    assert why is None and request is not None
    assert request.names == ("rxe0", "rxe1") and request.via == "device"


def test_each_device_s_share_is_what_its_queue_pairs_completed() -> None:
    rec = _record()
    devices = rec["transport"]["local"]["devices"]
    assert [d["device"] for d in devices] == ["rxe0", "rxe1"]
    assert sum(d["completed"] for d in devices) == rec["iterations"]
    # The core turned each device's operations into its bandwidth; together they are the run's.
    assert abs(sum(d["bandwidth_gbps"] for d in devices) - rec["sender_bandwidth_gbps"]) < 1e-3
    shares = device_shares(rec)
    assert shares == {d["device"]: d["completed"] / rec["iterations"] for d in devices}
    assert shares is not None and 0.4 < shares["rxe0"] < 0.6


def test_both_rails_carrying_their_share_is_verified_per_device() -> None:
    path = verdict(_record())
    assert path["verdict"] == "verified", path.get("reason")
    for side in ("local", "peer"):
        per_device = path["sides"][side]["requested"]["per_device"]
        for name in ("rxe0", "rxe1"):
            assert 0.4 < per_device[name]["share_of_operations"] < 0.6
            assert per_device[name]["bytes"] >= 0.9 * per_device[name]["expected_bytes"]


def _move_rail(side: dict[str, Any], src: str, dst: str, kind: str) -> None:
    """Adds src's counter deltas to dst and leaves src unchanged over the run."""
    counters = side[kind]
    for key, after in counters[src]["after"].items():
        if isinstance(after, int):
            delta = after - counters[src]["before"][key]
            counters[dst]["after"][key] += delta
            counters[src]["after"][key] = counters[src]["before"][key]


def test_one_rail_carrying_the_other_rails_share_is_misrouted() -> None:
    rec = copy.deepcopy(_record())
    for side in ("local", "peer"):
        _move_rail(rec["counters"][side], "eth1", "eth0", "net")
        _move_rail(rec["counters"][side], "rxe1/1", "rxe0/1", "rdma")
    path = verdict(rec)
    assert path["verdict"] == "misrouted"
    assert "rxe1 counted 0 B" in path["reason"] and "its share" in path["reason"]
    assert "rxe0 counted" not in path["reason"]  # the rail that carried its own share is not blamed


def test_without_the_engine_s_per_device_counts_the_devices_are_judged_together() -> None:
    rec = copy.deepcopy(_record())
    del rec["transport"]["local"]["devices"]
    for side in ("local", "peer"):
        _move_rail(rec["counters"][side], "eth1", "eth0", "net")
        _move_rail(rec["counters"][side], "rxe1/1", "rxe0/1", "rdma")
    assert verdict(rec)["verdict"] == "verified"  # a UCX_NET_DEVICES list: any split is fine


SLOW_RAIL = RECORD.with_name("softroce-verbs-write-bw-slow-rail.jsonl")


def test_a_slow_rail_is_held_to_its_own_share_of_the_payload() -> None:
    """rxe1 (its link shaped to 10 Mbit/s) completed 14 % of the operations: it sent too few packets
    for the WHOLE payload, but enough for its share. Held to the whole payload, its netdev's bytes
    were dropped, rxe0's alone were 0.887 of the payload, and the run was called unverifiable."""
    rec: dict[str, Any] = json.loads(SLOW_RAIL.read_text().splitlines()[0])
    assert rec["path"]["verdict"] == "unverifiable"  # as the old front end judged it
    shares = device_shares(rec)
    assert shares is not None and 0.1 < shares["rxe1"] < 0.2
    got = verdict(rec)
    assert got["verdict"] == "verified", got["reason"]
    for side in ("local", "peer"):
        requested = got["sides"][side]["requested"]
        assert {"eth0", "eth1"} <= set(requested["counted_by"]), requested
        assert requested["of_expected"] > 1.0  # both rails' bytes, headers included
