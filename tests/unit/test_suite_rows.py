# SPDX-License-Identifier: BSD-3-Clause
"""The two-host suite builds only rows that can run: asked for an RDMA device, the rows that run over
sockets use the netdev behind it (the inventory's, a copy of a real guest's) and say so; a device
with no netdev behind it leaves those rows out with a note, never a row that fails."""

from __future__ import annotations

from pathlib import Path

from fabscope.inventory import load
from fabscope.suite.hosts import netdev_behind, transports

INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def test_tcp_row_runs_on_the_netdev_behind_the_rdma_device() -> None:
    inv = load(INV / "rxe-qemu.json")
    rows, notes = transports(inv, "rxe0", with_mpi=False, with_peer=True)
    tcp = [t for t in rows if t.backend == "tcp" and not t.preload]
    assert len(tcp) == 1
    assert tcp[0].options == ("--device=eth0",)
    assert tcp[0].shown_label == "tcp send (eth0, behind rxe0)"
    # Its records name the netdev the engine was given: the suite matches them by that name.
    assert tcp[0].table_label == "tcp send (device eth0)"
    # UCX's tcp over the same netdev, beside its RDMA transports on rxe0:1.
    ucx = {t.shown_label: t.options for t in rows if t.backend == "ucx"}
    assert ucx["ucx tag (ucx-tls tcp, eth0, behind rxe0)"] == ("--ucx-tls=tcp", "--device=eth0")
    assert all("--device=rxe0:1" in o for label, o in ucx.items() if "behind" not in label)
    assert not [n for n in notes if n.startswith("tcp send")]


def test_a_port_of_the_rdma_device_is_behind_the_same_netdev() -> None:
    inv = load(INV / "rxe-qemu.json")
    assert netdev_behind(inv, "rxe0:1") == ("eth0", None)
    assert netdev_behind(inv, "eth0") == ("eth0", None)  # a netdev is given as it is


def test_a_netdev_asked_for_is_no_rdma_device_behind() -> None:
    inv = load(INV / "rxe-qemu.json")
    rows, _ = transports(inv, "eth0", with_mpi=False, with_peer=True)
    tcp = next(t for t in rows if t.backend == "tcp")
    assert tcp.behind is None and tcp.shown_label == "tcp send (device eth0)"


def test_an_rdma_device_without_netdev_leaves_the_socket_rows_out_with_a_note() -> None:
    inv = load(INV / "ib-with-sm.json")  # InfiniBand, no IPoIB netdev on its port
    dev = inv.verbs.devices[0]
    assert all(p.netdev is None for p in dev.ports)
    rows, notes = transports(inv, dev.name, with_mpi=False, with_peer=True)
    assert not [t for t in rows if t.backend == "tcp"]
    note = next(n for n in notes if n.startswith("tcp send: not in this table"))
    assert dev.name in note and "no netdev behind it" in note and "--device" in note
