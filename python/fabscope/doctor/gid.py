# SPDX-License-Identifier: BSD-3-Clause
"""RoCE GID table: is there a RoCE v2 GID, and what does a tool defaulting to index 0 get."""

from __future__ import annotations

from collections.abc import Callable

from fabscope.devices import Gid, Port
from fabscope.doctor.core import Context, Finding, Severity, check


def best_roce_v2(port: Port) -> Gid | None:
    """The GID a RoCE v2 run should use: IPv4-mapped first (routable, what NCCL #769 and
    perftest #44 ended up using), then a global IPv6, then link-local as a last resort."""
    v2 = [g for g in port.gids if g.is_roce_v2]
    preds: list[Callable[[Gid], bool]] = [
        lambda g: g.ipv4 is not None and not g.ipv4.startswith("169.254."),
        lambda g: g.ipv4 is None and not g.link_local,
        lambda g: True,
    ]
    for pred in preds:
        for g in v2:
            if pred(g):
                return g
    return None


def describe(g: Gid | None) -> str:
    if g is None:
        return "nothing (empty slot)"
    addr = g.ipv4 or g.gid
    kind = "link-local " if g.link_local else ""
    return f"{kind}{g.type or 'untyped'} {addr}"


@check("gid.roce_v2", "gid")
def check_roce_v2(ctx: Context) -> list[Finding]:
    """Each RoCE port has a routable RoCE v2 GID; say which index to pass and what index 0 is."""
    inv = ctx.inventory
    if not inv.rdma_devices:
        return []  # rdma.devices already says there is none
    out: list[Finding] = []
    for d, p in inv.ports():
        if not p.is_ethernet:
            continue
        name = f"{d.name}/{p.num}"
        fid = f"gid.roce_v2.{name}"
        gdir = ctx.sys(f"class/infiniband/{d.name}/ports/{p.num}")
        table = "; ".join(f"[{g.index}] {describe(g)}" + (f" on {g.ndev}" if g.ndev else "") for g in p.gids)
        ev = f"{gdir}/gids/* and gid_attrs/types/*: " + (table or "no populated entries")
        best = best_roce_v2(p)
        idx0 = next((g for g in p.gids if g.index == 0), None)
        if not p.gids:
            out.append(Finding(fid, "error", f"{name}: GID table is empty",
                               ev, "without a GID no RoCE connection can be made; the netdev has no "
                               "IP address, or the RDMA device is not bound to it in this namespace",
                               f"give {p.netdev or 'the netdev'} an address: `ip addr add <ip>/<len> dev "
                               f"{p.netdev or '<netdev>'}`; in containers expose the RDMA device in the pod's netns"))
            continue
        if best is None:
            out.append(Finding(fid, "error", f"{name}: no RoCE v2 GID", ev,
                               "RoCE v1 is not routable and most switches' lossless (PFC/ECN) "
                               "setups assume v2 (UDP 4791)",
                               "the kernel adds a RoCE v2 GID per IP address when the adapter supports v2: "
                               f"check `cat {gdir}/gid_attrs/types/*`; ConnectX-3 (non-Pro) and old firmware "
                               "offer only v1 - update firmware/driver; rdma_cm tools also need "
                               f"`cma_roce_mode -d {d.name} -p {p.num} -m 2`"))
            continue
        default_ok = idx0 is not None and idx0.index == best.index
        if default_ok:
            out.append(Finding(fid, "ok", f"{name}: GID index 0 is the RoCE v2 GID {describe(best)}", ev))
            continue
        sev: Severity = "warn"
        title = (f"{name}: RoCE v2 GID is index {best.index} ({describe(best)}); a tool defaulting "
                 f"to index 0 gets {describe(idx0)}")
        out.append(Finding(
            fid, sev, title, ev,
            "hosts that default to different GIDs fail to connect or time out (perftest #44, "
            "NCCL #769: a link-local or v1 GID at index 0)",
            f"pass the index explicitly and the same kind on both hosts: perftest `-x {best.index}`, "
            f"NCCL_IB_GID_INDEX={best.index}, UCX_IB_GID_INDEX={best.index}, fabscope `--gid-index "
            f"{best.index}` (or rdma_cm tools, which pick the GID from the IP address)"))
    if not out:
        out.append(Finding("gid.roce_v2", "ok", "no RoCE ports; GID types do not apply",
                           "every port's link layer is InfiniBand"))
    return out
