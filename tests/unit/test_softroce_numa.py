# SPDX-License-Identifier: BSD-3-Clause
"""The Soft-RoCE testbed's NUMA guest (`run(numa=True)`, `--numa`): the qemu command line it
builds, the combination it refuses, and the sysfs fixture captured from such a guest. No boot."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabscope.devices import discover
from fabscope.testbed import softroce
from fabscope.testbed.softroce_base import GUEST_MEMORY_MB, QBOOT, Image, SoftRoceError
from fabscope.testbed.softroce_guests import NUMA_NIC_NODE, NUMA_NODE_CPUS, NUMA_VCPUS, _qemu_argv

NUMA_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "rxe-qemu-numa-2x2"


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def _argv(tmp_path: Path, numa: bool) -> list[str]:
    # An image without the PVH kernel: the bzImage path, where the firmware choice shows.
    img = Image(tmp_path / "image", {})
    nics = [("hubport,hubid=0", "52:54:00:77:00:01"), ("hubport,hubid=1", "52:54:00:78:00:01")]
    return _qemu_argv("qemu-system-x86_64", img, tmp_path / "repo", tmp_path / "ctl", tmp_path / "out",
                      nics, numa=numa)


def test_numa_argv_has_two_nodes_and_the_nics_behind_an_expander_bridge_on_node_1(tmp_path: Path) -> None:
    argv = _argv(tmp_path, numa=True)
    assert _values(argv, "-smp") == ["4"]
    assert _values(argv, "-numa") == ["node,nodeid=0,cpus=0-1,memdev=mem0", "node,nodeid=1,cpus=2-3,memdev=mem1"]
    half = GUEST_MEMORY_MB // 2
    assert _values(argv, "-object") == [f"memory-backend-ram,id=mem0,size={half}M",
                                        f"memory-backend-ram,id=mem1,size={GUEST_MEMORY_MB - half}M"]
    devices = _values(argv, "-device")
    assert "pxb,id=pxb1,bus_nr=64,numa_node=1,bus=pci.0" in devices
    nics = [d for d in devices if d.startswith("virtio-net-pci,")]
    assert len(nics) == 2 and all(",bus=pxb1," in d for d in nics), nics
    # A PCI device without bus= would land on the expander's root bus, which refuses it.
    others = [d for d in devices if not d.startswith(("pxb,", "virtio-net-pci,"))]
    assert len(others) == 4 and all(d.endswith(",bus=pci.0") for d in others), others
    assert "-virtfs" not in argv and not any("if=virtio" in d for d in _values(argv, "-drive"))
    # qboot does not set up the expander's bus: the NUMA guest boots with SeaBIOS.
    assert "-bios" not in argv


def test_plain_argv_is_one_node_with_the_nics_on_the_main_bus(tmp_path: Path) -> None:
    argv = _argv(tmp_path, numa=False)
    assert _values(argv, "-smp") == ["1"] and "-numa" not in argv and "-object" not in argv
    devices = _values(argv, "-device")
    assert not any(d.startswith("pxb") for d in devices)
    assert all(",bus=pci.0" in d for d in devices), devices
    assert ("-bios" in argv) == QBOOT.is_file()


def test_numa_with_two_guests_is_refused_naming_both() -> None:
    with pytest.raises(SoftRoceError) as err:
        softroce.run(["true"], two_guests=True, numa=True)
    assert "numa" in str(err.value) and "two_guests" in str(err.value)
    with pytest.raises(SystemExit) as exit_:
        softroce.main(["run", "--numa", "--two-guests", "--", "true"], parse_only=True)
    assert exit_.value.code == 2


def test_the_numa_fixture_puts_eth0_on_node_1() -> None:
    """tests/fixtures/sysfs/rxe-qemu-numa-2x2, copied from a --numa guest: what the testbed promises
    (NUMA_NODE_CPUS, the NIC on NUMA_NIC_NODE), so the fixture and the testbed cannot drift apart."""
    inv = discover(NUMA_FIXTURE)
    (eth0,) = [nd for nd in inv.netdevs if nd.name == "eth0"]
    assert eth0.pci is not None
    assert (eth0.pci.address, eth0.pci.numa_node, eth0.pci.local_cpulist) == (
        "0000:41:00.0", NUMA_NIC_NODE, NUMA_NODE_CPUS[NUMA_NIC_NODE]) == ("0000:41:00.0", 1, "2-3")
    (rxe0,) = inv.rdma_devices
    assert rxe0.name == "rxe0" and [p.netdev for p in rxe0.ports] == ["eth0"]
    node = NUMA_FIXTURE / "devices" / "system" / "node"
    assert tuple((node / f"node{n}" / "cpulist").read_text().strip() for n in (0, 1)) == NUMA_NODE_CPUS
    cpus = NUMA_FIXTURE / "devices" / "system" / "cpu" / "online"
    assert cpus.read_text().strip() == f"0-{NUMA_VCPUS - 1}"
