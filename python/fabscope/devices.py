# SPDX-License-Identifier: BSD-3-Clause
"""Discovery of RDMA devices, their ports, GIDs, netdevs and PCI placement.

Two sources, each for what it knows:

- the engine's ``--inventory-json`` (:mod:`fabscope.inventory`): what libibverbs reports for
  every device and port (``ibv_query_port``: state, active and maximum MTU, rate, LIDs;
  ``ibv_query_gid_table``: GIDs with their type and netdev).  The active and maximum MTU exist
  only there (sysfs has no file for them);
- sysfs, read from a root given as a parameter (default ``/sys``, or the environment variable
  ``FABSCOPE_SYSFS_ROOT``) so that tests can point it at a copy of a real device layout: PCI
  placement, NUMA node, PCIe link, netdevs and their MTU, and, where no inventory is given,
  the port files.

Nothing is invented: a value neither source has is ``None`` and is shown as ``unknown``.
Without verbs data (a sysfs copy of another host, or an engine built without libibverbs)
the RoCE active MTU is derived from the netdev MTU the way the kernel's ``iboe_get_mtu()``
does, labelled as derived; on InfiniBand the MTUs then stay unknown.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fabscope.inventory import EngineInventory, Verbs, VerbsDevice, VerbsPort, from_env_or_query

SCHEMA = "fabscope.devices/1"
DEFAULT_SYSFS_ROOT = Path("/sys")

_BDF_RE = re.compile(r"^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"
_IB_MTUS = (4096, 2048, 1024, 512, 256)
# Headers a RoCE v2 packet carries inside the Ethernet payload, as ib_core's
# iboe_get_mtu() subtracts them: GRH 40 + UDP 8 + BTH 12 + XRC ext 4 + AtomicETH 28 + ICRC 4.
_ROCE_HEADER_BYTES = 40 + 8 + 12 + 4 + 28 + 4


def sysfs_root_from_env(explicit: Path | str | None = None) -> Path:
    """The sysfs root to use: the explicit one, else $FABSCOPE_SYSFS_ROOT, else /sys."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get("FABSCOPE_SYSFS_ROOT")
    return Path(env) if env else DEFAULT_SYSFS_ROOT


def read_text(path: Path) -> str | None:
    """Read a sysfs attribute; None when absent or unreadable.

    sysfs answers EINVAL for attributes that have no value right now (the speed of a
    link that is down, the type of an empty GID slot), so every OSError means "unknown".
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def read_int(path: Path, base: int = 10) -> int | None:
    text = read_text(path)
    if text is None or text == "":
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def _strip_enum(text: str | None) -> str | None:
    """'4: ACTIVE' -> 'ACTIVE' (the kernel prints the number and the name)."""
    if text is None:
        return None
    return text.split(":", 1)[1].strip() if ":" in text else text


def roce_active_mtu_from_netdev(netdev_mtu: int) -> int:
    """Active IB MTU the kernel derives from a RoCE netdev MTU (iboe_get_mtu()).

    A netdev MTU of 1500 gives 1024, 9000 gives 4096, and 4096 itself only gives 2048
    because the RoCE headers must fit too.
    """
    payload = netdev_mtu - _ROCE_HEADER_BYTES
    for mtu in _IB_MTUS:
        if payload >= mtu:
            return mtu
    return 256


def netdev_mtu_for_roce_mtu(ib_mtu: int) -> int:
    """Smallest netdev MTU that lets RoCE reach ``ib_mtu`` (inverse of the above)."""
    return ib_mtu + _ROCE_HEADER_BYTES


def decode_gid(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    mapped = addr.ipv4_mapped
    return str(mapped) if mapped is not None else None


def gid_is_link_local(gid: str) -> bool:
    try:
        return ipaddress.IPv6Address(gid).is_link_local
    except ValueError:
        return False


def parse_rate_gbps(rate: str | None) -> float | None:
    """'100 Gb/sec (4X EDR)' -> 100.0; '2.5 Gb/sec (1X SDR)' -> 2.5."""
    if not rate:
        return None
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec", rate)
    return float(m.group(1)) if m else None


def parse_pcie_speed_gts(text: str | None) -> float | None:
    """'8.0 GT/s PCIe' or '8 GT/s' -> 8.0; 'Unknown' -> None."""
    if not text:
        return None
    m = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)\s*GT/s", text)
    return float(m.group(1)) if m else None


# --------------------------------------------------------------------------------------
# data model


@dataclass
class Gid:
    index: int
    gid: str
    type: str | None  # kernel text: "IB/RoCE v1", "RoCE v2"; None when unreadable
    ndev: str | None
    ipv4: str | None
    link_local: bool

    @property
    def is_roce_v2(self) -> bool:
        return self.type is not None and "v2" in self.type


@dataclass
class PciInfo:
    address: str
    numa_node: int | None  # None also when the kernel reports -1 (no NUMA information)
    driver: str | None
    current_link_speed: str | None
    max_link_speed: str | None
    current_link_width: int | None
    max_link_width: int | None
    local_cpulist: str | None


@dataclass
class Port:
    num: int
    state: str | None
    phys_state: str | None
    rate: str | None
    rate_gbps: float | None
    link_layer: str | None
    lid: int | None
    sm_lid: int | None
    lmc: int | None
    cap_mask: str | None
    active_mtu: int | None
    max_mtu: int | None
    mtu_source: str  # where active/max MTU came from, or "unknown"
    netdev: str | None
    gids: list[Gid] = field(default_factory=list)

    @property
    def is_ethernet(self) -> bool:
        if self.link_layer is not None:
            return self.link_layer.lower() == "ethernet"
        # No link_layer file: a port whose GIDs are typed RoCE is Ethernet.
        return any(g.type is not None and "RoCE" in g.type and "IB/" not in g.type
                   for g in self.gids) or any(g.ndev for g in self.gids)

    @property
    def is_infiniband(self) -> bool:
        return self.link_layer is not None and self.link_layer.lower() == "infiniband"


@dataclass
class RdmaDevice:
    name: str
    node_type: str | None
    fw_ver: str | None
    node_guid: str | None
    sys_image_guid: str | None
    hca_type: str | None
    board_id: str | None
    hw_rev: str | None
    pci: PciInfo | None
    netdevs: list[str]
    ports: list[Port] = field(default_factory=list)


@dataclass
class NetDev:
    name: str
    mtu: int | None
    speed_mbps: int | None  # None when the driver reports none (-1 or EINVAL)
    operstate: str | None
    address: str | None
    arphrd_type: int | None  # 1 Ethernet, 32 InfiniBand (IPoIB), 772 loopback
    driver: str | None
    pci: PciInfo | None
    virtual: bool
    ipoib_mode: str | None  # "datagram" / "connected" for IPoIB netdevs

    @property
    def kind(self) -> str:
        return {1: "ether", 32: "ipoib", 772: "loopback"}.get(self.arphrd_type or -1, "other")


@dataclass
class Inventory:
    sysfs_root: str
    rdma_devices: list[RdmaDevice]
    netdevs: list[NetDev]
    notes: list[str]
    # UCX's and libfabric's parts of the engine inventory, when it was asked (fabscope devices)
    libraries: EngineInventory | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("libraries")
        out = {"schema": SCHEMA, **data}
        if self.libraries is not None:
            ucx, ofi = self.libraries.ucx, self.libraries.ofi
            out["ucx"] = {"status": ucx.status, "problem": ucx.problem, "version": ucx.version,
                          "resources": [asdict(r) for r in ucx.resources],
                          "tls_names": list(ucx.tls_names), "net_devices": list(ucx.net_devices)}
            out["libfabric"] = {"status": ofi.status, "problem": ofi.problem, "version": ofi.version,
                                "providers": [asdict(p) for p in ofi.providers],
                                "provider_names": list(ofi.provider_names)}
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    def netdev(self, name: str | None) -> NetDev | None:
        if name is None:
            return None
        for nd in self.netdevs:
            if nd.name == name:
                return nd
        return None

    def ports(self) -> list[tuple[RdmaDevice, Port]]:
        return [(d, p) for d in self.rdma_devices for p in d.ports]


# --------------------------------------------------------------------------------------
# discovery


def _resolve_in_root(root: Path, link: Path) -> Path | None:
    """Resolve a sysfs symlink; None if it does not exist."""
    if not os.path.lexists(link):
        return None
    try:
        return Path(os.path.realpath(link))
    except OSError:
        return None


def _pci_info(root: Path, device_link: Path) -> PciInfo | None:
    """Walk up from a device to the PCI function that holds it (netdevs of virtio sit
    one level below the PCI function)."""
    real = _resolve_in_root(root, device_link)
    if real is None:
        return None
    cur = real
    root_real = Path(os.path.realpath(root))
    while cur != cur.parent and cur != root_real:
        if _BDF_RE.match(cur.name):
            break
        cur = cur.parent
    else:
        return None
    if not _BDF_RE.match(cur.name):
        return None
    numa = read_int(cur / "numa_node")
    drv = _resolve_in_root(root, cur / "driver")
    return PciInfo(
        address=cur.name,
        numa_node=numa if numa is not None and numa >= 0 else None,
        driver=drv.name if drv is not None else None,
        current_link_speed=read_text(cur / "current_link_speed"),
        max_link_speed=read_text(cur / "max_link_speed"),
        current_link_width=read_int(cur / "current_link_width"),
        max_link_width=read_int(cur / "max_link_width"),
        local_cpulist=read_text(cur / "local_cpulist"),
    )


def _read_gids(port_dir: Path) -> list[Gid]:
    """Populated GID entries of a port.

    The table has up to a few hundred slots, most of them all-zero.  Reading every gids/N
    is cheap (one short read each); the type and ndev attributes are read only for the
    populated entries, because for empty ones the kernel answers EINVAL and some kernels
    log it.  Populated entries are not always contiguous (container namespaces hide the
    low ones), so the scan does not stop at the first zero entry.
    """
    gids_dir = port_dir / "gids"
    try:
        names = os.listdir(gids_dir)
    except OSError:
        return []
    out: list[Gid] = []
    for name in sorted((n for n in names if n.isdigit()), key=int):
        value = read_text(gids_dir / name)
        if not value or value == _ZERO_GID:
            continue
        idx = int(name)
        gtype = read_text(port_dir / "gid_attrs" / "types" / name)
        ndev = read_text(port_dir / "gid_attrs" / "ndevs" / name)
        out.append(Gid(index=idx, gid=value, type=gtype or None, ndev=ndev or None,
                       ipv4=decode_gid(value), link_local=gid_is_link_local(value)))
    return out


def _device_netdevs(dev_dir: Path) -> list[str]:
    try:
        return sorted(os.listdir(dev_dir / "device" / "net"))
    except OSError:
        return []


def _port_netdev(root: Path, dev_dir: Path, port_num: int, gids: list[Gid],
                 dev_netdevs: list[str]) -> str | None:
    # 1. The GID table names the netdev of every RoCE GID: the most direct evidence.
    for g in gids:
        if g.ndev:
            return g.ndev
    # 2. rxe and siw record their parent netdev in a 'parent' attribute.
    parent = read_text(dev_dir / "parent")
    if parent:
        return parent
    # 3. A PCI function with one netdev (mlx5: one port per function; IPoIB on IB).
    if len(dev_netdevs) == 1:
        return dev_netdevs[0]
    # 4. Dual-port functions (mlx4): dev_port is the 0-based port of each netdev.
    for nd in dev_netdevs:
        if read_int(root / "class" / "net" / nd / "dev_port") == port_num - 1:
            return nd
    return None


def _discover_netdevs(root: Path) -> list[NetDev]:
    net_dir = root / "class" / "net"
    try:
        names = sorted(os.listdir(net_dir))
    except OSError:
        return []
    out: list[NetDev] = []
    for name in names:
        nd_dir = net_dir / name
        real = _resolve_in_root(root, nd_dir)
        virtual = real is not None and "/devices/virtual/" in str(real)
        speed = read_int(nd_dir / "speed")
        dev_link = nd_dir / "device"
        pci = _pci_info(root, dev_link) if os.path.lexists(dev_link) else None
        drv_link = _resolve_in_root(root, dev_link / "driver")
        arphrd = read_int(nd_dir / "type")
        out.append(NetDev(
            name=name,
            mtu=read_int(nd_dir / "mtu"),
            speed_mbps=speed if speed is not None and speed > 0 else None,
            operstate=read_text(nd_dir / "operstate"),
            address=read_text(nd_dir / "address"),
            arphrd_type=arphrd,
            driver=drv_link.name if drv_link is not None else None,
            pci=pci,
            virtual=virtual,
            ipoib_mode=read_text(nd_dir / "mode") if arphrd == 32 else None,
        ))
    return out


MTU_FROM_VERBS = "ibv_query_port (fabscope-engine --inventory-json)"


def _apply_verbs_port(port: Port, vp: VerbsPort) -> None:
    """What libibverbs said about the port replaces what sysfs said (same facts, one more
    step removed from the driver) and adds what sysfs lacks (MTUs, GID types on old kernels)."""
    port.state = vp.state or port.state
    port.phys_state = vp.phys_state or port.phys_state
    port.link_layer = vp.link_layer if vp.link_layer not in (None, "unspecified") else port.link_layer
    if vp.rate is not None:
        port.rate, port.rate_gbps = vp.rate, vp.rate_gbps
    port.lid = vp.lid if vp.lid is not None else port.lid
    port.sm_lid = vp.sm_lid if vp.sm_lid is not None else port.sm_lid
    port.lmc = vp.lmc if vp.lmc is not None else port.lmc
    port.cap_mask = vp.cap_mask or port.cap_mask
    port.active_mtu, port.max_mtu = vp.active_mtu, vp.max_mtu
    port.mtu_source = MTU_FROM_VERBS
    port.netdev = vp.netdev or port.netdev
    if vp.gids:
        port.gids = [Gid(index=g.index, gid=g.gid, type=g.type, ndev=g.netdev,
                         ipv4=g.ipv4 or decode_gid(g.gid), link_local=gid_is_link_local(g.gid))
                     for g in vp.gids]


def _port_from_verbs(vp: VerbsPort) -> Port:
    port = Port(num=vp.port, state=None, phys_state=None, rate=None, rate_gbps=None,
                link_layer=None, lid=None, sm_lid=None, lmc=None, cap_mask=None, active_mtu=None,
                max_mtu=None, mtu_source="unknown", netdev=None)
    _apply_verbs_port(port, vp)
    return port


def _sysfs_port(root: Path, ddir: Path, pnum: int, dev_netdevs: list[str]) -> Port:
    pdir = ddir / "ports" / str(pnum)
    gids = _read_gids(pdir)
    rate = read_text(pdir / "rate")
    return Port(
        num=pnum,
        state=_strip_enum(read_text(pdir / "state")),
        phys_state=_strip_enum(read_text(pdir / "phys_state")),
        rate=rate,
        rate_gbps=parse_rate_gbps(rate),
        link_layer=read_text(pdir / "link_layer"),
        lid=read_int(pdir / "lid", 16),
        sm_lid=read_int(pdir / "sm_lid", 16),
        lmc=read_int(pdir / "lid_mask_count"),
        cap_mask=read_text(pdir / "cap_mask"),
        active_mtu=None,
        max_mtu=None,
        mtu_source="unknown",
        netdev=_port_netdev(root, ddir, pnum, gids, dev_netdevs),
        gids=gids,
    )


def _derive_roce_mtu(port: Port, by_name: dict[str, NetDev]) -> None:
    nd = by_name.get(port.netdev or "")
    if port.mtu_source != "unknown" or not port.is_ethernet or nd is None or nd.mtu is None:
        return
    port.active_mtu = roce_active_mtu_from_netdev(nd.mtu)
    port.mtu_source = (f"derived from netdev {nd.name} MTU {nd.mtu} (iboe_get_mtu); "
                       "max MTU needs verbs (fabscope-engine --inventory-json)")


def discover(sysfs_root: Path | str | None = None, verbs: Verbs | None = None) -> Inventory:
    """Read the RDMA devices and netdevs under ``sysfs_root``.

    ``verbs`` is the verbs part of the engine's inventory *of the same host*; when given, the
    devices and ports it lists are described as libibverbs sees them (active and maximum MTU
    included) and sysfs adds PCI/NUMA placement and the netdevs.
    """
    root = sysfs_root_from_env(sysfs_root)
    notes: list[str] = []
    if not root.is_dir():
        notes.append(f"sysfs root {root} does not exist or is not a directory")
    netdevs = _discover_netdevs(root)
    by_name = {nd.name: nd for nd in netdevs}
    verbs_devs: dict[str, VerbsDevice] = {}
    if verbs is not None and verbs.ok:
        verbs_devs = {d.name: d for d in verbs.devices}
    elif verbs is not None:
        notes.append(f"verbs inventory {verbs.describe('libibverbs')}: port MTUs come from "
                     "sysfs and the netdev MTU only")

    ib_dir = root / "class" / "infiniband"
    try:
        dev_names = sorted(os.listdir(ib_dir))
    except OSError:
        dev_names = []
    dev_names += sorted(n for n in verbs_devs if n not in dev_names)
    devices: list[RdmaDevice] = []
    for dname in dev_names:
        ddir = ib_dir / dname
        dev_link = ddir / "device"
        pci = _pci_info(root, dev_link) if os.path.lexists(dev_link) else None
        dev_netdevs = _device_netdevs(ddir)
        vdev = verbs_devs.get(dname)
        try:
            port_nums = sorted(int(p) for p in os.listdir(ddir / "ports") if p.isdigit())
        except OSError:
            port_nums = []
        if vdev is not None:
            port_nums = sorted(set(port_nums) | {vp.port for vp in vdev.ports})
            if vdev.error:
                notes.append(f"{dname}: libibverbs: {vdev.error}")
        ports: list[Port] = []
        for pnum in port_nums:
            vp = vdev.port(pnum) if vdev is not None else None
            if ddir.is_dir():
                port = _sysfs_port(root, ddir, pnum, dev_netdevs)
                if vp is not None and vp.error is None:
                    _apply_verbs_port(port, vp)
            elif vp is not None:
                port = _port_from_verbs(vp)
            else:
                continue
            _derive_roce_mtu(port, by_name)
            ports.append(port)
        devices.append(RdmaDevice(
            name=dname,
            node_type=read_text(ddir / "node_type") or (vdev.node_type if vdev else None),
            fw_ver=read_text(ddir / "fw_ver") or (vdev.fw_ver if vdev else None),
            node_guid=read_text(ddir / "node_guid") or (vdev.node_guid if vdev else None),
            sys_image_guid=read_text(ddir / "sys_image_guid") or (vdev.sys_image_guid if vdev else None),
            hca_type=read_text(ddir / "hca_type"),
            board_id=read_text(ddir / "board_id"),
            hw_rev=read_text(ddir / "hw_rev") or (vdev.hw_ver if vdev else None),
            pci=pci,
            netdevs=dev_netdevs,
            ports=ports,
        ))
    if not devices:
        notes.append(f"no RDMA devices: {ib_dir} is absent or empty "
                     "(no RDMA driver loaded, or no RDMA hardware)")
    return Inventory(sysfs_root=str(root), rdma_devices=devices, netdevs=netdevs, notes=notes)


def discover_with_engine(sysfs_root: Path | str | None = None,
                         env: dict[str, str] | None = None) -> Inventory:
    """:func:`discover` with this host's engine inventory (or ``$FABSCOPE_INVENTORY``).

    Its verbs part describes the ports only when it belongs to the sysfs tree read: the live
    ``/sys``, or a saved inventory named by ``$FABSCOPE_INVENTORY`` next to a sysfs copy.
    """
    e = env if env is not None else dict(os.environ)
    root = sysfs_root_from_env(sysfs_root)
    engine_inv = from_env_or_query(e)
    same_host = os.path.realpath(root) == "/sys" or bool(e.get("FABSCOPE_INVENTORY"))
    inv = discover(root, engine_inv.verbs if same_host else None)
    inv.libraries = engine_inv
    return inv


# --------------------------------------------------------------------------------------
# text rendering


def _u(value: object) -> str:
    return "unknown" if value is None or value == "" else str(value)


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain aligned text table."""
    from .report.text_table import aligned

    return "\n".join(aligned(headers, rows, rule=True))


def _pcie(pci: PciInfo | None) -> str:
    if pci is None:
        return "unknown"
    cur = f"{_u(pci.current_link_speed)} x{_u(pci.current_link_width)}"
    cap = f"{_u(pci.max_link_speed)} x{_u(pci.max_link_width)}"
    return f"{cur} (max {cap})"


def render_text(inv: Inventory) -> str:
    out: list[str] = []
    if not inv.rdma_devices:
        out.append("RDMA devices: none found.")
    else:
        out.append("RDMA devices")
        rows = []
        for d in inv.rdma_devices:
            rows.append([d.name, _u(d.node_type), _u(d.hca_type or d.board_id), _u(d.fw_ver),
                         _u(d.node_guid), _u(d.pci.address if d.pci else None),
                         _u(d.pci.numa_node if d.pci else None), _pcie(d.pci)])
        out.append(table(["device", "node type", "hca/board", "firmware", "node GUID", "PCI",
                          "NUMA", "PCIe link (current / max)"], rows))
        out.append("")
        out.append("Ports")
        prow = []
        for d, p in inv.ports():
            nd = inv.netdev(p.netdev)
            prow.append([f"{d.name}/{p.num}", _u(p.state), _u(p.phys_state), _u(p.rate),
                         _u(p.link_layer), _u(p.active_mtu), _u(p.max_mtu),
                         _u(p.lid if p.lid is not None else None), _u(p.sm_lid),
                         _u(p.netdev), _u(nd.mtu if nd else None)])
        out.append(table(["port", "state", "phys state", "rate", "link layer", "active MTU",
                          "max MTU", "LID", "SM LID", "netdev", "netdev MTU"], prow))
        mtu_notes = sorted({f"{d.name}/{p.num}: MTU source: {p.mtu_source}"
                            for d, p in inv.ports()})
        out.extend(mtu_notes)
        gid_rows = []
        for d, p in inv.ports():
            for g in p.gids:
                gid_rows.append([f"{d.name}/{p.num}", str(g.index), g.gid, g.ipv4 or "-",
                                 _u(g.type), _u(g.ndev)])
        out.append("")
        if gid_rows:
            out.append("GID table (populated entries)")
            out.append(table(["port", "index", "GID", "IPv4", "type", "netdev"], gid_rows))
        else:
            out.append("GID table: no populated entries readable")
    out.append("")
    out.append("Network interfaces")
    nrows = []
    for nd in inv.netdevs:
        speed = f"{nd.speed_mbps} Mb/s" if nd.speed_mbps else "unknown"
        nrows.append([nd.name, nd.kind, _u(nd.operstate), _u(nd.mtu), speed, _u(nd.driver),
                      _u(nd.pci.address if nd.pci else ("virtual" if nd.virtual else None)),
                      _u(nd.pci.numa_node if nd.pci else None),
                      nd.ipoib_mode or ""])
    out.append(table(["netdev", "kind", "state", "MTU", "speed", "driver", "PCI", "NUMA",
                      "IPoIB mode"], nrows) if nrows else "none found")
    if inv.libraries is not None:
        out.extend(_render_libraries(inv.libraries))
    for note in inv.notes:
        out.append(f"note: {note}")
    return "\n".join(out) + "\n"


def _render_libraries(lib: EngineInventory) -> list[str]:
    out = ["", "UCX" + (f" {lib.ucx.version}" if lib.ucx.version else "")]
    if lib.ucx.ok:
        rows = [[r.transport, r.device, r.device_type, r.memory_domain] for r in lib.ucx.resources]
        out.append(table(["transport", "device", "type", "memory domain"], rows) if rows else "no resources")
        out.append(f"--ucx-tls accepts: {', '.join(lib.ucx.tls_names)}")
        out.append(f"--device (UCX) accepts: {', '.join(['all', *lib.ucx.net_devices])}")
    else:
        out.append(lib.ucx.describe("UCX"))
    out += ["", "libfabric" + (f" {lib.ofi.version}" if lib.ofi.version else "")]
    if lib.ofi.ok:
        rows = [[p.name, ", ".join(p.endpoint_types), ", ".join(p.domains)] for p in lib.ofi.providers]
        out.append(table(["provider", "endpoints", "domains"], rows) if rows else "no providers")
        out.append(f"--provider accepts: {', '.join(lib.ofi.provider_names) or 'nothing'}")
    else:
        out.append(lib.ofi.describe("libfabric"))
    return out
