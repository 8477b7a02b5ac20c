# SPDX-License-Identifier: BSD-3-Clause
"""The testbed's own sysfs counter reader, for testbed and test checks only (never for a verdict:
the engine is the one counter reader of a measurement). Snapshots have the engine's shape, so
``side_counters`` builds the per-side ``counters`` object of a record around real kernel counts.

Inside ``ip netns exec NS`` /sys is remounted for NS, so a snapshot taken there sees that
namespace's devices (``fabscope.testbed.netns.snapshot_ns``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..results.deltas import NET_FIELDS, RDMA_FIELDS

__all__ = ["side_counters", "snapshot", "snapshot_net", "snapshot_rdma"]


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def snapshot_net(sysfs_root: str = "/sys") -> dict[str, dict[str, int]]:
    """One instant of every netdev's byte/packet counters: ``{dev: {tx_bytes: ...}}``.

    Inside ``ip netns exec NS`` /sys is remounted for NS, so this sees that
    namespace's devices.
    """
    base = os.path.join(sysfs_root, "class", "net")
    out: dict[str, dict[str, int]] = {}
    for dev in _listdir(base):
        stats = os.path.join(base, dev, "statistics")
        if not os.path.isdir(stats):
            continue  # e.g. the bonding_masters file
        values = {f: _read_int(os.path.join(stats, f)) for f in NET_FIELDS}
        out[dev] = {k: v for k, v in values.items() if v is not None}
    return out


def snapshot_rdma(sysfs_root: str = "/sys") -> dict[str, dict[str, Any]]:
    """One instant of every RDMA port's raw counters (4-byte words, as sysfs has them).

    ``{"rxe0/1": {"link_layer": "Ethernet", "ndevs": ["eth0"], "values": {...}}}``
    """
    base = os.path.join(sysfs_root, "class", "infiniband")
    out: dict[str, dict[str, Any]] = {}
    for dev in _listdir(base):
        ports = os.path.join(base, dev, "ports")
        for port in _listdir(ports):
            pdir = os.path.join(ports, port)
            try:
                with open(os.path.join(pdir, "link_layer"), encoding="ascii") as fh:
                    link_layer: str | None = fh.read().strip()
            except OSError:
                link_layer = None
            ndevs: set[str] = set()
            ndir = os.path.join(pdir, "gid_attrs", "ndevs")
            for idx in _listdir(ndir):
                try:
                    with open(os.path.join(ndir, idx), encoding="ascii") as fh:
                        name = fh.read().strip()
                except OSError:
                    continue  # unused GID slots read as EINVAL
                if name:
                    ndevs.add(name)
            values = {
                c: _read_int(os.path.join(pdir, "counters", c)) for c in RDMA_FIELDS
            }
            out[f"{dev}/{port}"] = {
                "link_layer": link_layer,
                "ndevs": sorted(ndevs),
                "values": {k: v for k, v in values.items() if v is not None},
            }
    return out


def snapshot(sysfs_root: str = "/sys") -> dict[str, Any]:
    """Both kinds of counters at one instant: ``{"net": ..., "rdma": ...}``."""
    return {"net": snapshot_net(sysfs_root), "rdma": snapshot_rdma(sysfs_root)}


def side_counters(
    host: str, before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, Any]:
    """Pair two ``snapshot()`` results into the engine's per-side ``counters`` shape."""
    side: dict[str, Any] = {"host": host, "net": {}, "rdma": {}}
    b_net, a_net = before.get("net") or {}, after.get("net") or {}
    for dev in sorted(set(b_net) | set(a_net)):
        side["net"][dev] = {"before": b_net.get(dev), "after": a_net.get(dev)}
    b_rdma, a_rdma = before.get("rdma") or {}, after.get("rdma") or {}
    for port in sorted(set(b_rdma) | set(a_rdma)):
        b, a = b_rdma.get(port), a_rdma.get(port)
        meta = a or b or {}
        side["rdma"][port] = {
            "link_layer": meta.get("link_layer"),
            "ndevs": list(meta.get("ndevs") or []),
            "before": b.get("values") if b else None,
            "after": a.get("values") if a else None,
        }
    return side
