# SPDX-License-Identifier: BSD-3-Clause
"""fabscope.devices against copies of real sysfs layouts (tests/fixtures/sysfs/*/NOTE.md), with
the engine inventory of the same host where there is one (tests/fixtures/inventory/README.md),
and against this machine's live /sys and engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabscope import devices as d
from fabscope.doctor.cli_entry import main_devices
from fabscope.inventory import Verbs, load

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def fixture(name: str) -> Path:
    path = FIX / name
    assert path.is_dir(), f"missing fixture {path}"
    return path


def verbs(name: str) -> Verbs:
    return load(INV / f"{name}.json").verbs


def test_every_fixture_has_a_note_naming_its_source() -> None:
    for sub in FIX.iterdir():
        if sub.is_dir() and sub.name != "rxe-qemu":
            note = (sub / "NOTE.md").read_text()
            assert "Source" in note or "source" in note, sub


def test_no_rdma_host_fixture_says_so_and_lists_netdevs() -> None:
    inv = d.discover(fixture("host-no-rdma"))
    assert inv.rdma_devices == []
    assert any("no RDMA devices" in n for n in inv.notes)
    eth0 = inv.netdev("eth0")
    assert eth0 is not None
    assert eth0.mtu == 1400 and eth0.operstate == "up" and eth0.driver == "virtio_net"
    assert eth0.speed_mbps is None  # virtio reports -1: unknown, not "-1 Mb/s"
    assert eth0.pci is not None and eth0.pci.address == "0000:00:03.0"
    assert eth0.pci.numa_node is None  # numa_node -1
    lo = inv.netdev("lo")
    assert lo is not None and lo.kind == "loopback" and lo.virtual
    text = d.render_text(inv)
    assert "RDMA devices: none found." in text
    assert "eth0" in text and "virtio_net" in text


def test_live_sys_matches_the_files_it_reads() -> None:
    inv = d.discover()  # default /sys
    assert inv.sysfs_root == "/sys"
    names = sorted(p.name for p in Path("/sys/class/net").iterdir())
    assert [nd.name for nd in inv.netdevs] == names
    for nd in inv.netdevs:
        assert nd.mtu == int(Path(f"/sys/class/net/{nd.name}/mtu").read_text())
    if not Path("/sys/class/infiniband").exists():
        assert inv.rdma_devices == [] and "none found" in d.render_text(inv)


def test_env_variable_selects_sysfs_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABSCOPE_SYSFS_ROOT", str(fixture("mlx5-roce-ndr")))
    inv = d.discover()
    assert [x.name for x in inv.rdma_devices] == ["mlx5_0", "mlx5_1"]
    # An explicit root beats the environment.
    assert d.discover(fixture("host-no-rdma")).rdma_devices == []


def test_mlx5_ndr_ibstatus_values() -> None:
    inv = d.discover(fixture("mlx5-roce-ndr"))
    (dev0, port), _ = inv.ports()
    assert dev0.name == "mlx5_0"
    assert port.state == "ACTIVE" and port.phys_state == "LinkUp"
    assert port.rate == "400 Gb/sec (4X NDR)" and port.rate_gbps == 400.0
    assert port.link_layer == "Ethernet" and port.is_ethernet
    assert port.lid == 0 and port.sm_lid == 0
    assert [g.gid for g in port.gids] == ["fe80:0000:0000:0000:966d:aeff:feb3:832e"]
    assert port.gids[0].type is None  # types not in the listing: unknown, not guessed
    assert port.active_mtu is None and port.mtu_source == "unknown"


def test_gid_table_types_ndevs_and_ipv4_decoding() -> None:
    inv = d.discover(fixture("mlx5-roce-gids"))
    (_, port), = inv.ports()
    assert [g.index for g in port.gids] == [0, 1, 2, 3, 4, 5]
    assert [g.type for g in port.gids] == ["IB/RoCE v1", "RoCE v2"] * 3
    assert {g.ndev for g in port.gids} == {"ens1f0"}
    assert port.netdev == "ens1f0"
    assert port.gids[5].ipv4 == "172.19.0.60" and port.gids[5].is_roce_v2
    assert port.gids[0].link_local and port.gids[0].ipv4 is None
    assert port.is_ethernet  # no link_layer file, but RoCE-typed GIDs with a netdev


def test_all_zero_gids_are_skipped() -> None:
    inv = d.discover(fixture("mlx5-roce-pod-gids"))
    for _, port in inv.ports():
        assert [g.index for g in port.gids] == [4, 5, 6, 7]
    ports = {dev.name: p for dev, p in inv.ports()}
    assert ports["mlx5_1"].gids[3].ipv4 == "10.152.4.12"
    assert ports["mlx5_1"].netdev == "net2"


def test_ib_no_sm_pci_numa_pcie_and_ipoib_netdev() -> None:
    inv = d.discover(fixture("ib-no-sm"))
    devs = {x.name: x for x in inv.rdma_devices}
    mlx5_1 = devs["mlx5_1"]
    assert mlx5_1.hca_type == "MT4119"
    assert mlx5_1.pci is not None
    assert mlx5_1.pci.address == "000a:11:00.1" and mlx5_1.pci.numa_node == 2
    assert (mlx5_1.pci.current_link_width, mlx5_1.pci.max_link_width) == (8, 16)
    assert mlx5_1.pci.max_link_speed == "8.0 GT/s PCIe" and mlx5_1.pci.current_link_speed is None
    port = mlx5_1.ports[0]
    assert port.state == "INIT" and port.is_infiniband and port.sm_lid is None
    assert port.netdev == "ib1"
    ib1 = inv.netdev("ib1")
    assert ib1 is not None and ib1.kind == "ipoib" and ib1.ipoib_mode is None


def test_mtu_from_the_engine_inventory() -> None:
    inv = d.discover(fixture("mlx5-roce-azure"), verbs("mlx5-roce-azure"))
    (_, port), = inv.ports()
    assert (port.active_mtu, port.max_mtu) == (1024, 4096)
    assert port.mtu_source == d.MTU_FROM_VERBS
    # Without the inventory the MTUs are unknown (not in sysfs), never guessed.
    (_, bare), = d.discover(fixture("mlx5-roce-azure")).ports()
    assert bare.active_mtu is None and bare.max_mtu is None and bare.mtu_source == "unknown"


def test_inventory_without_port_values_keeps_them_unknown() -> None:
    inv = d.discover(fixture("qedr-roce"), verbs("qedr-roce"))
    (dev, port), = inv.ports()
    assert dev.fw_ver == "8.37.7.0"
    assert port.state is None and port.active_mtu is None and port.gids == []


def test_captured_guest_sysfs_and_inventory_agree() -> None:
    root = fixture("rxe-qemu") / "sys"
    from_sysfs = d.discover(root)
    both = d.discover(root, verbs("rxe-qemu"))
    (_, sp), = from_sysfs.ports()
    (_, bp), = both.ports()
    # Same port seen by the kernel's files and by libibverbs.
    assert (sp.state, sp.phys_state, sp.link_layer, sp.rate) == (bp.state, bp.phys_state,
                                                                  bp.link_layer, bp.rate)
    assert [(g.index, g.gid, g.ndev) for g in sp.gids] == [(g.index, g.gid, g.ndev) for g in bp.gids]
    assert [g.type for g in bp.gids] == ["RoCE v2", "RoCE v2"]
    # Only verbs knows the maximum MTU; sysfs alone derives the active one from eth0's 1500.
    assert (bp.active_mtu, bp.max_mtu) == (1024, 4096) and bp.mtu_source == d.MTU_FROM_VERBS
    assert (sp.active_mtu, sp.max_mtu) == (1024, None) and sp.mtu_source.startswith("derived")
    assert bp.netdev == "eth0" and both.rdma_devices[0].pci is None  # virtual device


def test_verbs_error_is_a_note_not_silence() -> None:
    inv = d.discover(fixture("mlx5-roce-azure"), Verbs("error", "fabscope-engine: not found"))
    assert any("not found" in n for n in inv.notes)
    (_, port), = inv.ports()
    assert port.active_mtu is None


def test_qedr_port_with_no_attributes_is_all_unknown() -> None:
    inv = d.discover(fixture("qedr-roce"))
    dev = inv.rdma_devices[0]
    assert dev.fw_ver == "8.37.7.0" and dev.node_type == "1: CA" and dev.pci is None
    port = dev.ports[0]
    assert port.state is None and port.rate is None and port.gids == []
    assert "unknown" in d.render_text(inv)


def test_roce_mtu_derivation_matches_iboe_get_mtu() -> None:
    assert d.roce_active_mtu_from_netdev(1500) == 1024
    assert d.roce_active_mtu_from_netdev(9000) == 4096
    assert d.roce_active_mtu_from_netdev(4096) == 2048  # headers do not fit
    assert d.roce_active_mtu_from_netdev(d.netdev_mtu_for_roce_mtu(4096)) == 4096
    assert d.roce_active_mtu_from_netdev(d.netdev_mtu_for_roce_mtu(4096) - 1) == 2048


def test_helpers() -> None:
    assert d.decode_gid("0000:0000:0000:0000:0000:ffff:c800:d106") == "200.0.209.6"
    assert d.decode_gid("fe80:0000:0000:0000:0ac0:ebff:feda:1cfb") is None
    assert d.parse_rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert d.parse_rate_gbps("garbage") is None
    assert d.parse_pcie_speed_gts("8.0 GT/s PCIe") == 8.0
    assert d.parse_pcie_speed_gts("Unknown") is None


def test_json_is_schema_versioned() -> None:
    data = json.loads(d.discover(fixture("ib-no-sm")).to_json())
    assert data["schema"] == "fabscope.devices/1"
    assert data["rdma_devices"][1]["ports"][0]["state"] == "INIT"


def test_main_devices_json_and_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_devices(["--json", "--sysfs-root", str(fixture("mlx5-roce-gids"))]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rdma_devices"][0]["name"] == "mlx5_0"
    assert main_devices(["--sysfs-root", "/nonexistent/sys"]) == 2
    err = capsys.readouterr().err
    assert "no such directory" in err and "Traceback" not in err
    assert main_devices(["--bogus"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err


def test_main_devices_live_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main_devices([]) == 0
    out = capsys.readouterr().out
    assert "Network interfaces" in out
    # UCX's and libfabric's resources come from this host's engine, with what the options accept.
    assert "--ucx-tls accepts: all," in out and "--provider accepts:" in out


def test_main_devices_with_a_saved_inventory(capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FABSCOPE_INVENTORY", str(INV / "rxe-qemu.json"))
    assert main_devices(["--json", "--sysfs-root", str(fixture("rxe-qemu") / "sys")]) == 0
    data = json.loads(capsys.readouterr().out)
    port = data["rdma_devices"][0]["ports"][0]
    assert (port["active_mtu"], port["max_mtu"]) == (1024, 4096)
    assert "rxe0:1" in data["ucx"]["net_devices"] and "verbs" in data["libfabric"]["provider_names"]
