"""devices and doctor on the sysfs captured from the Soft-RoCE guest (a real rxe layout)."""

from __future__ import annotations

from pathlib import Path

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
