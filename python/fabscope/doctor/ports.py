# SPDX-License-Identifier: BSD-3-Clause
"""RDMA port checks: state, subnet manager, link layer, MTU, rate vs netdev speed, PCIe."""

from __future__ import annotations

from collections.abc import Callable

from fabscope.devices import (
    NetDev,
    Port,
    RdmaDevice,
    netdev_mtu_for_roce_mtu,
    parse_pcie_speed_gts,
    roce_active_mtu_from_netdev,
)
from fabscope.doctor.core import Context, Finding, check


def _pname(d: RdmaDevice, p: Port) -> str:
    return f"{d.name}/{p.num}"


def _port_file(ctx: Context, d: RdmaDevice, p: Port, attr: str) -> str:
    return str(ctx.sys(f"class/infiniband/{d.name}/ports/{p.num}/{attr}"))


# Judges one port: (context, device, port, finding id) -> that port's finding, or None.
PortJudge = Callable[[Context, RdmaDevice, Port, str], Finding | None]


def _port_check(name: str) -> Callable[[PortJudge], PortJudge]:
    """Register the check ``name`` that judges every RDMA port on its own. The judge gets the
    finding id ``<name>.<device>/<port>`` and returns None when it has nothing to say about a port.
    A host without RDMA devices has no port to judge (rdma.devices reports that, once)."""

    def register(judge: PortJudge) -> PortJudge:
        def run(ctx: Context) -> list[Finding]:
            found = (judge(ctx, d, p, f"{name}.{_pname(d, p)}") for d, p in ctx.inventory.ports())
            return [f for f in found if f is not None]

        run.__doc__ = judge.__doc__
        check(name, "ports")(run)
        return judge

    return register


@check("rdma.devices", "rdma")
def check_devices(ctx: Context) -> list[Finding]:
    """Are there RDMA devices at all."""
    inv = ctx.inventory
    base = ctx.sys("class/infiniband")
    if not inv.rdma_devices:
        return [Finding("rdma.devices", "info",
                        "no RDMA device on this host: port, GID, MTU and PCIe checks have nothing to check",
                        f"{base}: absent or empty; netdevs: {', '.join(nd.name for nd in inv.netdevs) or 'none'}",
                        "RDMA runs need an RDMA device (hardware, or Soft-RoCE: `rdma link add rxe0 type rxe "
                        "netdev <netdev>`)", "")]
    names = ", ".join(f"{d.name} ({len(d.ports)} port{'s' if len(d.ports) != 1 else ''})" for d in inv.rdma_devices)
    return [Finding("rdma.devices", "ok", f"RDMA devices: {names}", f"{base}: {names}")]


@_port_check("ports.state")
def check_state(ctx: Context, d: RdmaDevice, p: Port, fid: str) -> Finding | None:
    """Logical and physical state of every RDMA port."""
    ev = (f"{_port_file(ctx, d, p, 'state')} = {p.state or 'unreadable'}, "
          f"{_port_file(ctx, d, p, 'phys_state')} = {p.phys_state or 'unreadable'}")
    if p.state is None:
        return Finding(fid, "info", f"{_pname(d, p)}: port state unknown", ev,
                       "the state file could not be read", "read it with `ibv_devinfo -d "
                       f"{d.name} -i {p.num}`")
    if p.state == "ACTIVE":
        if p.phys_state not in (None, "LinkUp"):
            return Finding(fid, "warn", f"{_pname(d, p)}: ACTIVE but physical state {p.phys_state}",
                           ev, "an active port should have its physical link up",
                           f"check the cable and the peer port; `ibstat {d.name} {p.num}`")
        return Finding(fid, "ok", f"{_pname(d, p)}: ACTIVE", ev)
    if p.state == "INIT" and p.is_infiniband:
        # The subnet-manager check explains this one; do not report it twice.
        return None
    phys = p.phys_state or "unknown"
    if p.state == "DOWN" and phys in ("Polling", "Disabled", "unknown"):
        hint = ("no link: the cable is unplugged or the peer is off (Polling), or the port "
                "was disabled (Disabled)")
        fix = (f"connect the cable / power the peer; for Disabled: `ibportstate -C {d.name} "
               f"-P {p.num} -D 0 {p.num} enable` (IB) or `ip link set <netdev> up` (RoCE)")
    else:
        hint = "traffic cannot flow through a port that is not ACTIVE"
        fix = f"inspect with `ibstat {d.name} {p.num}` and the switch port"
    return Finding(fid, "error", f"{_pname(d, p)}: port is {p.state} (physical {phys})", ev, hint, fix)


@_port_check("ports.sm")
def check_sm(ctx: Context, d: RdmaDevice, p: Port, fid: str) -> Finding | None:
    """InfiniBand ports need a subnet manager; RoCE ports need none."""
    ev = (f"link_layer = {p.link_layer or 'unreadable'}, state = {p.state or 'unreadable'}, "
          f"sm_lid = {'unreadable' if p.sm_lid is None else hex(p.sm_lid)}, "
          f"lid = {'unreadable' if p.lid is None else hex(p.lid)}")
    if p.is_infiniband:
        if p.state == "INIT" or (p.state == "ACTIVE" and p.sm_lid == 0):
            return Finding(
                fid, "error", f"{_pname(d, p)}: InfiniBand link has no subnet manager",
                ev,
                "an IB port stays in INIT with no LID until a subnet manager configures it; "
                "nothing can be sent (ibnodes/ibping fail too)",
                "start one SM on the fabric: `systemctl enable --now opensm` on one host "
                "(or enable the switch's SM); the port turns ACTIVE within seconds")
        if p.state == "ACTIVE" and p.sm_lid:
            return Finding(fid, "ok", f"{_pname(d, p)}: subnet manager at LID {p.sm_lid:#x}", ev)
        if p.state == "ACTIVE":
            return Finding(fid, "info", f"{_pname(d, p)}: ACTIVE; SM LID unreadable", ev)
        return None
    if p.is_ethernet:
        return Finding(fid, "ok", f"{_pname(d, p)}: RoCE/Ethernet port; no subnet manager needed",
                       ev + " (RoCE has no SM: ibnodes and other SM queries fail there by design)")
    return None


@_port_check("ports.link_layer")
def check_link_layer(ctx: Context, d: RdmaDevice, p: Port, fid: str) -> Finding | None:
    """Link layer of every port, against the expected one when the user named it."""
    want = ctx.expected_link_layer
    ev = f"{_port_file(ctx, d, p, 'link_layer')} = {p.link_layer or 'unreadable'}"
    if p.link_layer is None:
        return Finding(fid, "info", f"{_pname(d, p)}: link layer unknown", ev)
    if want and p.link_layer.lower() != want.lower():
        other = "Ethernet" if want.lower() == "infiniband" else "InfiniBand"
        return Finding(
            fid, "error", f"{_pname(d, p)}: link layer is {p.link_layer}, expected {want}", ev,
            "a VPI adapter port set to the other protocol cannot talk to the fabric it is cabled to",
            f"set the port type with `mlxconfig -d <pci> set LINK_TYPE_P{p.num}="
            f"{1 if want.lower() == 'infiniband' else 2}` ({want}; currently {other}) and reboot "
            "or reset the adapter")
    return Finding(fid, "ok", f"{_pname(d, p)}: link layer {p.link_layer}", ev)


def _roce_mtu_finding(fid: str, name: str, p: Port, nd: NetDev | None, ev: str) -> Finding:
    """RoCE: the active MTU is min(max MTU, what the netdev MTU leaves after the RoCE headers).
    Below that the RDMA side did not follow its netdev; at that but below max the netdev MTU
    is what holds it back."""
    assert p.active_mtu is not None
    nd_name = nd.name if nd is not None else (p.netdev or "<netdev>")
    nd_mtu = nd.mtu if nd is not None else None
    allowed = roce_active_mtu_from_netdev(nd_mtu) if nd_mtu is not None else None
    if allowed is not None and p.max_mtu is not None:
        allowed = min(allowed, p.max_mtu)
    if allowed is not None and p.active_mtu < allowed:
        return Finding(
            fid, "warn", f"{name}: active MTU {p.active_mtu} below the {allowed} its netdev "
            f"{nd_name} (MTU {nd_mtu}) allows", ev,
            "the RDMA port did not follow its netdev's MTU (RoCE takes it from the netdev when the "
            "device is created and on every MTU change); every message is cut into "
            f"{p.active_mtu}-byte packets",
            "fix it on the RDMA side: for rxe/siw re-create the device "
            f"(`rdma link delete {name.split('/')[0]}; rdma link add {name.split('/')[0]} type rxe "
            f"netdev {nd_name}`); for a hardware NIC set the MTU again so the driver hears it "
            f"(`ip link set dev {nd_name} mtu {nd_mtu}`) or reload its driver, and check the "
            "firmware's RoCE MTU setting")
    target = p.max_mtu or 4096
    if allowed is not None and allowed < target:
        need = netdev_mtu_for_roce_mtu(target)
        return Finding(
            fid, "warn", f"{name}: netdev {nd_name} MTU {nd_mtu} limits RoCE to {p.active_mtu}-byte "
            f"packets (the port can do {target})", ev,
            f"RoCE's MTU follows the netdev MTU minus {netdev_mtu_for_roce_mtu(0)} bytes of RoCE "
            f"headers; {target}-byte RoCE packets need a netdev MTU of at least {need} (4096 itself "
            f"only gives {roce_active_mtu_from_netdev(4096)})",
            f"fix the netdev MTU on both hosts and jumbo frames on the switch ports: "
            f"`ip link set dev {nd_name} mtu 9000`")
    if p.max_mtu is not None and p.active_mtu < p.max_mtu:
        return Finding(fid, "warn", f"{name}: active MTU {p.active_mtu} below max {p.max_mtu}", ev,
                       "the netdev MTU is unknown, so fabscope cannot tell which side limits it",
                       f"read the netdev MTU (`ip link show {nd_name}`): below "
                       f"{netdev_mtu_for_roce_mtu(p.max_mtu)} fix the netdev "
                       f"(`ip link set dev {nd_name} mtu 9000`, and jumbo frames on the switch); "
                       "at or above it the RDMA device did not follow its netdev: reload its "
                       "driver or re-create it")
    return Finding(fid, "ok", f"{name}: active MTU {p.active_mtu}", ev)


@_port_check("ports.mtu")
def check_mtu(ctx: Context, d: RdmaDevice, p: Port, fid: str) -> Finding | None:
    """Active vs max MTU; on RoCE which side (RDMA device or netdev) holds it back."""
    nd = ctx.inventory.netdev(p.netdev)
    ev = (f"active_mtu {p.active_mtu or 'unknown'}, max_mtu {p.max_mtu or 'unknown'} "
          f"(source: {p.mtu_source})")
    if nd is not None:
        ev += f"; netdev {nd.name} mtu {nd.mtu if nd.mtu is not None else 'unknown'}"
    if p.active_mtu is None:
        return Finding(fid, "info", f"{_pname(d, p)}: active MTU unknown", ev,
                       "sysfs has no MTU file; it comes from ibv_query_port(), which the "
                       "engine's inventory did not provide for this port",
                       "`fabscope-engine --inventory-json` shows active_mtu and max_mtu "
                       "(`make setup` builds it with libibverbs)")
    if p.is_ethernet:
        return _roce_mtu_finding(fid, _pname(d, p), p, nd, ev)
    if p.max_mtu is not None and p.active_mtu < p.max_mtu:
        return Finding(
            fid, "warn", f"{_pname(d, p)}: active MTU {p.active_mtu} below max {p.max_mtu}", ev,
            f"the SM set a path MTU of {p.active_mtu} on a port that supports {p.max_mtu}",
            "raise the partition MTU in the subnet manager (opensm partitions.conf: "
            "`Default=0x7fff, ipoib, mtu=5 : ALL=full;` for 4096) and restart opensm")
    return Finding(fid, "ok", f"{_pname(d, p)}: active MTU {p.active_mtu}", ev)


@_port_check("ports.rate")
def check_rate(ctx: Context, d: RdmaDevice, p: Port, fid: str) -> Finding | None:
    """RoCE port rate against the speed of the netdev behind it."""
    if not p.is_ethernet:
        return None
    nd = ctx.inventory.netdev(p.netdev)
    speed = nd.speed_mbps if nd else None
    ev = (f"{_port_file(ctx, d, p, 'rate')} = {p.rate or 'unreadable'}; netdev "
          f"{p.netdev or 'unknown'} speed = {f'{speed} Mb/s' if speed else 'unknown'}")
    if p.rate_gbps is None or speed is None:
        return Finding(fid, "info", f"{_pname(d, p)}: cannot compare port rate and netdev speed", ev)
    nd_gbps = speed / 1000.0
    if abs(p.rate_gbps - nd_gbps) > 0.1 * max(p.rate_gbps, nd_gbps):
        return Finding(
            fid, "warn", f"{_pname(d, p)}: RDMA rate {p.rate_gbps:g} Gb/s but netdev speed {nd_gbps:g} Gb/s",
            ev,
            "bandwidth results are judged against the line rate; when the two disagree one of them "
            "is wrong (a driver mapping Ethernet speeds onto IB width x speed), or the link "
            "negotiated down",
            f"check the real link with `ethtool {p.netdev}`; if ethtool is right, judge "
            "results against it and report the rate mismatch to the driver")
    return Finding(fid, "ok", f"{_pname(d, p)}: rate {p.rate_gbps:g} Gb/s matches netdev", ev)


@check("ports.pcie", "ports")
def check_pcie(ctx: Context) -> list[Finding]:
    """PCIe link of each RDMA adapter against its capability (LnkSta vs LnkCap)."""
    out: list[Finding] = []
    for d in ctx.inventory.rdma_devices:
        fid = f"ports.pcie.{d.name}"
        pci = d.pci
        if pci is None:
            out.append(Finding(fid, "info", f"{d.name}: no PCI function found (virtual device or "
                               "layout without a device link)", f"{ctx.sys(f'class/infiniband/{d.name}/device')} absent"))
            continue
        base = ctx.sys(f"bus/pci/devices/{pci.address}")
        ev = (f"PCI {pci.address}: current_link_speed {pci.current_link_speed or 'unknown'}, "
              f"max_link_speed {pci.max_link_speed or 'unknown'}, current_link_width "
              f"{pci.current_link_width or 'unknown'}, max_link_width {pci.max_link_width or 'unknown'}")
        problems = []
        if pci.current_link_width and pci.max_link_width and pci.current_link_width < pci.max_link_width:
            problems.append(f"width x{pci.current_link_width} of x{pci.max_link_width}")
        cur_s = parse_pcie_speed_gts(pci.current_link_speed)
        max_s = parse_pcie_speed_gts(pci.max_link_speed)
        if cur_s and max_s and cur_s < max_s:
            problems.append(f"speed {cur_s:g} of {max_s:g} GT/s")
        if problems:
            out.append(Finding(
                fid, "warn", f"{d.name}: PCIe link downgraded: {', '.join(problems)}", ev,
                "the adapter cannot move more than its PCIe link carries; a x8 Gen3 link tops out "
                "near 63 Gb/s, below a 100 Gb/s port",
                f"reseat the card in a full-width slot (`lspci -s {pci.address} -vv | grep -E "
                "'LnkCap|LnkSta'` confirms), check BIOS bifurcation/ASPM settings and riser cables"))
        elif pci.current_link_width is None and cur_s is None:
            out.append(Finding(fid, "info", f"{d.name}: PCIe link state not readable", ev + f" (under {base})"))
        else:
            out.append(Finding(fid, "ok", f"{d.name}: PCIe link at capability", ev))
    return out
