# SPDX-License-Identifier: BSD-3-Clause
"""devices and doctor on the sysfs captured from the Soft-RoCE guest (a real rxe layout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabscope.devices import discover
from fabscope.doctor import Context, run_doctor

RXE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "rxe-qemu" / "sys"


def test_rxe_port_gids_and_netdev() -> None:
    inv = discover(RXE)
    (dev,) = inv.to_dict()["rdma_devices"]
    assert dev["name"] == "rxe0"
    (port,) = dev["ports"]
    assert port["state"] == "ACTIVE" and port["link_layer"] == "Ethernet" and port["netdev"] == "eth0"
    gids = {g["index"]: g for g in port["gids"]}
    assert gids[1]["ipv4"] == "192.168.77.2" and gids[1]["type"] == "RoCE v2"
    assert gids[0]["gid"].startswith("fe80")


def test_doctor_names_the_roce_v2_gid_index_a_default_tool_misses() -> None:
    report = run_doctor(Context(sysfs_root=RXE), checks=["gid.roce_v2", "ports.mtu"])
    gid = next(f for f in report.findings if f.id.startswith("gid.roce_v2"))
    assert gid.severity == "warn" and "index 1" in gid.title and "fe80" in gid.title
    mtu = next(f for f in report.findings if f.id.startswith("ports.mtu"))
    assert "1500" in mtu.title and "1024" in mtu.title


def _side(root: Path) -> dict[str, object]:
    """The engine's counter snapshot shape, read from one captured sysfs tree."""
    stats = root / "class/net/eth0/statistics"
    hw = root / "class/infiniband/rxe0/ports/1/hw_counters"
    return {
        "net": {"eth0": {k: int((stats / k).read_text()) for k in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")}},
        "rdma": {"hw_sent_pkts": int((hw / "sent_pkts").read_text()), "hw_rcvd_pkts": int((hw / "rcvd_pkts").read_text())},
    }


@pytest.mark.parametrize("device", ["rxe0", "rxe0:1"])
def test_a_real_rxe_write_is_verified_by_port_packets_and_netdev_bytes(device: str) -> None:
    """The capture brackets `ib_write_bw -n 500 -s 65536` (32,768,000 payload bytes) with
    counter copies: rxe counts the packets, eth0 behind it the bytes. A request for the port
    (UCX_NET_DEVICES' rxe0:1) is proved the same way as one for the device."""
    from fabscope.results.verdict import verdict

    before, after = _side(RXE.parent / "counters-before" / "sys"), _side(RXE)
    local = {
        "host": "rxe-guest",
        "net": {"eth0": {"before": before["net"]["eth0"], "after": after["net"]["eth0"]}},  # type: ignore[index]
        "rdma": {"rxe0/1": {"link_layer": "Ethernet", "ndevs": ["eth0"], "before": before["rdma"], "after": after["rdma"]}},
    }
    record = {"pattern": "bw", "op": "write", "size": 65536, "iterations": 500, "warmup": 0,
              "config": {"device": device}, "transport": {"local": {}}, "counters": {"local": local, "peer": None}}
    path = verdict(record)
    assert path["verdict"] == "verified", path
    side = path["sides"]["local"]
    assert side["requested"]["counted_on"] == "eth0"  # rxe's bytes are read behind the port
    assert set(side["requested"]["counted_by"]) == {"rxe0/1", "eth0"}
    assert "counts packets but no bytes" in side["notes"][0]
    assert side["requested"]["of_expected"] >= 1.0  # headers on top of 32.8 MB of payload
