"""Prove the path: which device carried the bytes of a measurement.

The engine snapshots raw counters of every netdev and every RDMA port on both
hosts before and after each measured size and puts them in the result record
under ``counters`` (see ``counter_deltas`` for the shape).  This module turns
those snapshots into a ``path`` object with a verdict:

``verified``
    On every side that sent counters, the requested device counted at least
    90% of the payload bytes the measurement must have put on the wire.
``misrouted``
    The requested device fell short and other devices counted the missing
    bytes; the verdict names them, with bytes.
``unverifiable``
    The counters cannot tell (none sent, saturated, reset, the traffic stayed
    on ``lo`` because the peer address is local, ...); the reason says which.
``not-requested``
    No device was asked for; the path object just reports where the bytes went.

Counters are attributed, never required to be exclusive: ssh sessions and
other tests add bytes on the same hosts, so a device is judged only on whether
it carried the expected bytes, and the top carriers are named.

RDMA ports and netdevs
----------------------
A RoCE (or IPoIB) port and the netdev behind it (``ports/N/gid_attrs/ndevs/*``,
reported as ``ndevs`` in the rdma entry) can count the same bytes: rxe shows
RoCE traffic in both, mlx5 RoCE bypasses the kernel and shows it only in the
port counters, and an InfiniBand port counts IPoIB traffic as well as verbs.
The rules that follow from that:

* A request for an RDMA device (``rxe0``, ``mlx5_0``) or port (``mlx5_0/1``)
  is satisfied only by that device's port counters.  Bytes seen only on its
  netdev went through the kernel stack, not through RDMA, so they do not count.
* A request for a netdev (``eth0``) is satisfied by the netdev counters *or*
  by the port counters of any RDMA port whose ``ndevs`` include it, since the
  mlx5 kernel bypass hides RoCE bytes from the netdev.
* Devices related that way form one *link*.  The bytes of a link are the
  largest of its members' counts, never their sum, so rxe traffic is not
  counted twice.  (That is a lower bound when mlx5 carries RoCE and TCP at
  once; the verdict only needs a lower bound.)

Keys of RDMA ports are ``<device>/<port>``; a netdev name cannot contain ``/``
so the two namespaces never collide.

Optional keys the engine may add to an rdma entry: ``ndevs`` (list of netdev
names), ``bits`` (32 or 64: the counter width, when known) and ``overflow``
(``"saturate"`` - the PMA PortCounters behaviour the kernel exposes for
32-bit counters - or ``"wrap"``).  A net entry may carry ``addresses`` (list
of IP addresses) so a ``--bind`` address can be mapped to its device.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "THRESHOLD",
    "DeviceDelta",
    "counter_deltas",
    "expected_payload_bytes",
    "format_bytes",
    "render_path_text",
    "side_counters",
    "snapshot",
    "snapshot_net",
    "snapshot_rdma",
    "verdict",
]

PATH_SCHEMA = 1

#: Share of the expected payload bytes the requested device must count.
THRESHOLD = 0.9

NET_FIELDS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")
RDMA_FIELDS = (
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
)
# Which DeviceDelta field each RDMA counter feeds, and its unit in bytes.
# port_{xmit,rcv}_data count 4-byte words (IBA PortCounters), the packet
# counters count packets.  Forgetting the 4 is the classic exporter bug.
_RDMA_MAP = {
    "port_xmit_data": ("tx_bytes", 4),
    "port_rcv_data": ("rx_bytes", 4),
    "port_xmit_packets": ("tx_packets", 1),
    "port_rcv_packets": ("rx_packets", 1),
}
# Soft-RoCE (rxe) keeps packet counts in hw_counters and has no byte counters at all.
_RDMA_HW_PACKETS = {"port_xmit_packets": "hw_sent_pkts", "port_rcv_packets": "hw_rcvd_pkts"}
_U32_MAX = 0xFFFFFFFF
_U64_MOD = 1 << 64

# How many carriers to name on each side.
_TOP_N = 3


@dataclass(frozen=True)
class DeviceDelta:
    """Traffic one device counted between two snapshots, in bytes and packets.

    A field is ``None`` when the counters cannot tell (saturated, reset,
    missing); ``problems`` then says why.  ``notes`` records adjustments
    that were made (e.g. a 32-bit wrap that was unwound).
    """

    name: str
    kind: str  # "net" or "rdma"
    tx_bytes: int | None
    rx_bytes: int | None
    tx_packets: int | None
    rx_packets: int | None
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    link_layer: str | None = None
    ndevs: tuple[str, ...] = ()
    # Bytes after which a wrapping counter comes back to the same value;
    # a run that moves more than this cannot be told from a smaller one.
    wrap_bytes: int | None = None

    @property
    def bytes(self) -> int | None:
        """tx + rx bytes, or None when either direction is unknown."""
        if self.tx_bytes is None or self.rx_bytes is None:
            return None
        return self.tx_bytes + self.rx_bytes

    @property
    def rdma_device(self) -> str | None:
        return self.name.split("/", 1)[0] if self.kind == "rdma" else None


def _as_count(value: object) -> int | None:
    # bool is an int subclass; a true/false counter is a malformed record.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _field_delta(
    name: str,
    counter: str,
    before: object,
    after: object,
    *,
    bits: int | None,
    overflow: str,
) -> tuple[int | None, str | None, str | None]:
    """Return (delta, problem, note) for one raw counter."""
    b, a = _as_count(before), _as_count(after)
    if b is None or a is None:
        return (
            None,
            f"{name}: {counter} missing or not a counter value (before={before!r}, after={after!r})",
            None,
        )
    width = bits
    if width is None and max(a, b) > _U32_MAX:
        width = 64  # a value above 2^32-1 proves the counter is wider than 32 bits
    if overflow == "saturate" and width != 64 and a == _U32_MAX:
        why = (
            f"{name}: {counter} is saturated at 0xFFFFFFFF (a 32-bit PMA counter stops "
            "counting there), so the bytes of this run cannot be told; clear the port "
            "counters (e.g. `perfquery -R`) and run again"
        )
        return None, why, None
    if a >= b:
        return a - b, None, None
    if overflow == "wrap" and width == 32:
        return (
            (a + (1 << 32) - b),
            None,
            f"{name}: {counter} wrapped at 32 bits once (assumed a single wrap)",
        )
    if overflow == "wrap" and width == 64 and b - a > (1 << 63):
        return (a + _U64_MOD - b), None, f"{name}: {counter} wrapped at 64 bits"
    why = (
        f"{name}: {counter} went backwards ({b} -> {a}): the counter was reset or the "
        "device was re-created during the run, so its bytes cannot be told"
    )
    return None, why, None


def _delta_entry(name: str, kind: str, entry: Mapping[str, Any]) -> DeviceDelta:
    before = entry.get("before")
    after = entry.get("after")
    problems: list[str] = []
    notes: list[str] = []
    values: dict[str, int | None] = {f: None for f in NET_FIELDS}
    link_layer = entry.get("link_layer") if kind == "rdma" else None
    raw_ndevs = entry.get("ndevs") if kind == "rdma" else None
    ndevs = (
        tuple(sorted({str(n) for n in raw_ndevs}))
        if isinstance(raw_ndevs, list)
        else ()
    )
    wrap_bytes: int | None = None
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        which = "before" if not isinstance(before, Mapping) else "after"
        problems.append(
            f"{name}: no '{which}' snapshot (the device appeared or vanished during the run), so its bytes cannot be told"
        )
        return DeviceDelta(
            name,
            kind,
            None,
            None,
            None,
            None,
            tuple(problems),
            (),
            link_layer if isinstance(link_layer, str) else None,
            ndevs,
        )
    if kind == "rdma" and not before and not after:
        problems.append(
            f"{name}: the device exposes no traffic counters at all (siw, the iWARP software device, "
            "has none), so which device carried the bytes cannot be proven"
        )
        return DeviceDelta(name, kind, None, None, None, None, tuple(problems), (),
                           link_layer if isinstance(link_layer, str) else None, ndevs)
    raw_bits = entry.get("bits")
    bits = raw_bits if raw_bits in (32, 64) else None
    if kind == "net":
        # netdev statistics are 64-bit on every platform fabscope runs on;
        # going backwards is a reset (device re-created), not a wrap.
        bits, overflow = 64, "reset"
        for f in NET_FIELDS:
            delta, problem, note = _field_delta(
                name, f, before.get(f), after.get(f), bits=bits, overflow=overflow
            )
            values[f] = delta
            if problem:
                problems.append(problem)
            if note:
                notes.append(note)
    else:
        raw_overflow = entry.get("overflow")
        overflow = raw_overflow if raw_overflow in ("saturate", "wrap") else "saturate"
        if overflow == "wrap" and bits == 32:
            wrap_bytes = 4 << 32  # port_*_data: 2^32 words of 4 bytes
        for counter, (target, unit) in _RDMA_MAP.items():
            hw = _RDMA_HW_PACKETS.get(counter)
            if hw and counter not in before and hw in before:
                # rxe has no counters/ directory, only hw_counters: packets, no bytes.
                counter = hw
                notes.append(f"{name}: packets from hw_counters ({hw}); this port counts no bytes")
            delta, problem, note = _field_delta(
                name,
                counter,
                before.get(counter),
                after.get(counter),
                bits=bits,
                overflow=overflow,
            )
            values[target] = None if delta is None else delta * unit
            if problem:
                problems.append(problem)
            if note:
                notes.append(note)
    return DeviceDelta(
        name=name,
        kind=kind,
        tx_bytes=values["tx_bytes"],
        rx_bytes=values["rx_bytes"],
        tx_packets=values["tx_packets"],
        rx_packets=values["rx_packets"],
        problems=tuple(problems),
        notes=tuple(notes),
        link_layer=link_layer if isinstance(link_layer, str) else None,
        ndevs=ndevs,
        wrap_bytes=wrap_bytes,
    )


def counter_deltas(side_snapshot: Mapping[str, Any]) -> dict[str, DeviceDelta]:
    """Deltas of one side's snapshot: ``{"host": ..., "net": {...}, "rdma": {...}}``.

    Keys are netdev names (``lo``, ``fabric0``) and RDMA ports (``rxe0/1``).
    RDMA data counters are converted from 4-byte words to bytes.
    """
    out: dict[str, DeviceDelta] = {}
    for kind in ("net", "rdma"):
        table = side_snapshot.get(kind)
        if not isinstance(table, Mapping):
            continue
        for name, entry in table.items():
            if isinstance(entry, Mapping):
                out[str(name)] = _delta_entry(str(name), kind, entry)
    return out


# --------------------------------------------------------------------------
# expected bytes and the request
# --------------------------------------------------------------------------


def expected_payload_bytes(record: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """Payload bytes each side must have sent plus received, or (None, why).

    lat: a message each way per iteration; bw: one direction; bibw: both.
    ``messages`` (bw/bibw: messages actually measured, per direction) wins
    over ``iterations`` when present; warmup messages cross the wire too.
    """
    pattern = record.get("pattern")
    directions = (
        {"lat": 2, "bw": 1, "bibw": 2}.get(pattern)
        if isinstance(pattern, str)
        else None
    )
    if directions is None:
        return (
            None,
            f"the record's pattern {pattern!r} is not one of lat, bw, bibw, so the expected bytes are unknown",
        )
    size = _as_count(record.get("size"))
    count = _as_count(record.get("messages")) if pattern in ("bw", "bibw") else None
    if count is None:
        count = _as_count(record.get("iterations"))
    warmup = _as_count(record.get("warmup"))
    if warmup is None and record.get("warmup") is None:
        warmup = 0
    if size is None or count is None or warmup is None:
        return (
            None,
            "the record does not say size and iterations (or messages), so the expected bytes are unknown",
        )
    return size * (count + warmup) * directions, None


@dataclass(frozen=True)
class _Request:
    name: str
    via: str  # "device" or "bind"
    bind: str | None = None


def _split_host_port(address: object) -> str | None:
    """'10.0.0.1:4000' or '[fe80::1]:4000' or a bare address -> the IP text."""
    if not isinstance(address, str) or not address:
        return None
    text = address.strip()
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end > 0 else None
    if text.count(":") == 1:
        return text.split(":", 1)[0]
    return text  # bare IPv4 or bare IPv6


def _parse_ip(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if text is None:
        return None
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _local_transport(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """This side's transport facts: the engine nests them under ``transport.local``."""
    transport = record.get("transport")
    if not isinstance(transport, Mapping):
        return {}
    local = transport.get("local")
    return local if isinstance(local, Mapping) else transport


def _resolve_request(record: Mapping[str, Any]) -> tuple[_Request | None, str | None]:
    """The device the user asked for, or (None, None) when nothing was asked.

    ``config.device`` is the request.  Without it, ``config.bind`` is one:
    binding to an address asks for the device that owns that address, which
    the engine reports as ``transport.device`` (the owner of the bind address,
    NOT the device the kernel routed over) or as ``addresses`` of a net entry.
    """
    config = record.get("config")
    config = config if isinstance(config, Mapping) else {}
    device = config.get("device")
    if isinstance(device, str) and device:
        return _Request(device, "device"), None
    bind = config.get("bind")
    if not isinstance(bind, str) or not bind:
        return None, None
    transport = _local_transport(record)
    tdev = transport.get("address_owner") or transport.get("device")
    if isinstance(tdev, str) and tdev:
        return _Request(tdev, "bind", bind), None
    bind_ip = _parse_ip(_split_host_port(bind))
    counters = record.get("counters")
    local = counters.get("local") if isinstance(counters, Mapping) else None
    net = local.get("net") if isinstance(local, Mapping) else None
    if bind_ip is not None and isinstance(net, Mapping):
        for name, entry in net.items():
            addrs = entry.get("addresses") if isinstance(entry, Mapping) else None
            if isinstance(addrs, list) and any(
                _parse_ip(str(a).split("/", 1)[0]) == bind_ip for a in addrs
            ):
                return _Request(str(name), "bind", bind), None
    return None, (
        f"the run was bound to {bind}, but the record does not say which device owns that address "
        "(neither transport.device nor net addresses), so the path cannot be judged"
    )


def _request_members(
    req: str, deltas: Mapping[str, DeviceDelta]
) -> tuple[set[str], str | None]:
    """Counter entries on one side that satisfy a request for ``req``.

    Returns the set and the kind of request ("rdma" or "net"), or an empty set
    and None when the side has no such device.
    """
    if "/" in req:
        return (
            {req} if req in deltas and deltas[req].kind == "rdma" else set()
        ), "rdma"
    ports = {n for n, d in deltas.items() if d.kind == "rdma" and d.rdma_device == req}
    if ports:
        # A port that counts packets but no bytes (rxe) proves by its packets that RDMA carried
        # the run; its bytes are then read on the netdev it sends through (ndevs), where rxe's
        # RoCE frames appear. A port without even packets moving proves nothing, and keeps none.
        packet_only = {
            nd
            for n in ports
            if deltas[n].bytes is None and (deltas[n].tx_packets or 0) + (deltas[n].rx_packets or 0) > 0
            for nd in deltas[n].ndevs
            if nd in deltas
        }
        return ports | packet_only, "rdma"
    if req in deltas and deltas[req].kind == "net":
        behind = {n for n, d in deltas.items() if d.kind == "rdma" and req in d.ndevs}
        return {req} | behind, "net"
    return set(), None


def _links(names: Iterable[str], deltas: Mapping[str, DeviceDelta]) -> list[list[str]]:
    """Group devices into links: an RDMA port together with its netdevs."""
    names = [n for n in names if n in deltas]
    parent = {n: n for n in names}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in names:
        for nd in deltas[n].ndevs:
            if nd in parent:
                parent[find(n)] = find(nd)
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(find(n), []).append(n)
    return [sorted(g) for g in groups.values()]


def _link_bytes(group: list[str], deltas: Mapping[str, DeviceDelta]) -> tuple[int, str]:
    """Bytes of a link (largest member count: members count the same bytes) and the member that counted them."""
    best_name, best = group[0], -1
    for n in group:
        b = deltas[n].bytes
        if b is not None and b > best:
            best_name, best = n, b
    return max(best, 0), best_name


# --------------------------------------------------------------------------
# the verdict
# --------------------------------------------------------------------------


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole > 0 else 0.0


def _device_table(
    deltas: Mapping[str, DeviceDelta], keep: set[str], observed: int
) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for name in sorted(deltas):
        d = deltas[name]
        b = d.bytes
        if name not in keep and not d.problems and not b:
            continue  # idle devices would bury the interesting ones
        row: dict[str, Any] = {
            "kind": d.kind,
            "tx_bytes": d.tx_bytes,
            "rx_bytes": d.rx_bytes,
            "tx_packets": d.tx_packets,
            "rx_packets": d.rx_packets,
            "share": _share(b, observed) if b is not None else None,
        }
        if d.kind == "rdma":
            row["link_layer"] = d.link_layer
            row["ndevs"] = list(d.ndevs)
        if d.problems:
            row["problems"] = list(d.problems)
        if d.notes:
            row["notes"] = list(d.notes)
        table[name] = row
    return table


def _judge_side(
    label: str,
    side: Mapping[str, Any],
    request: _Request | None,
    expected: int | None,
    peer_local_reason: str | None,
) -> dict[str, Any]:
    deltas = counter_deltas(side)
    host = side.get("host") if isinstance(side.get("host"), str) else label
    members: set[str] = set()
    req_kind: str | None = None
    if request is not None:
        members, req_kind = _request_members(request.name, deltas)

    all_links = _links(deltas.keys(), deltas)
    observed = sum(_link_bytes(g, deltas)[0] for g in all_links)
    # Links outside the request; a request for an RDMA device leaves its
    # netdev outside (bytes there took the kernel path, not RDMA).
    other_links = _links([n for n in deltas if n not in members], deltas)
    carriers = sorted(
        (
            (b, name)
            for b, name in (_link_bytes(g, deltas) for g in other_links)
            if b > 0
        ),
        key=lambda t: (-t[0], t[1]),
    )
    top_all = sorted(
        ((b, name) for b, name in (_link_bytes(g, deltas) for g in all_links) if b > 0),
        key=lambda t: (-t[0], t[1]),
    )

    req_bytes: int | None = None
    req_by: str | None = None
    for n in sorted(members):
        b = deltas[n].bytes
        if b is not None and (req_bytes is None or b > req_bytes):
            req_bytes, req_by = b, n

    result: dict[str, Any] = {
        "host": host,
        "expected_bytes": expected,
        "observed_bytes": observed,
        "top": [
            {"device": n, "bytes": b, "share": _share(b, observed)}
            for b, n in top_all[:_TOP_N]
        ],
        "devices": _device_table(deltas, members, observed),
    }
    if request is not None and req_kind == "rdma" and req_by is not None and "/" not in req_by:
        result["notes"] = [
            f"{request.name} counts packets but no bytes (Soft-RoCE rxe does this): its packets moved, "
            f"and its bytes were read on {req_by}, the netdev it sends through"
        ]
    if request is not None:
        result["requested"] = {
            "device": request.name,
            "kind": req_kind,
            "counted_by": sorted(members),
            "bytes": req_bytes,
            "counted_on": req_by,
            "share": _share(req_bytes, observed) if req_bytes is not None else None,
            "of_expected": _share(req_bytes, expected)
            if req_bytes is not None and expected
            else None,
        }

    def done(
        v: str, reason: str | None, carrier_list: list[tuple[int, str]] | None = None
    ) -> dict[str, Any]:
        result["verdict"] = v
        if reason:
            result["reason"] = reason
        if carrier_list is not None:
            result["carriers"] = [
                {"device": n, "bytes": b, "share": _share(b, observed)}
                for b, n in carrier_list
            ]
        return result

    if not deltas:
        return done("unverifiable", f"{host} sent no device counters")
    if request is None:
        return done("not-requested", None, top_all[:_TOP_N])
    if expected is None:
        return done("unverifiable", "the expected payload bytes are unknown")
    if not members:
        return done(
            "unverifiable",
            f"{host} has no device named {request.name!r} in its counters "
            f"(it has: {', '.join(sorted(deltas)) or 'none'})",
            carriers[:_TOP_N],
        )
    for n in sorted(members):
        wrap = deltas[n].wrap_bytes
        if wrap is not None and expected >= wrap:
            return done(
                "unverifiable",
                f"{n} on {host} has 32-bit wrapping counters that come round every {format_bytes(wrap)}, "
                f"and this run moved {format_bytes(expected)}, so any count is possible",
            )

    need = THRESHOLD * expected
    if req_bytes is not None and req_bytes >= need:
        return done(
            "verified",
            None,
            [(req_bytes, req_by or request.name)] + carriers[: _TOP_N - 1],
        )

    # Misrouted: the requested device missed more than 10% of the expected
    # bytes and other devices counted at least half of what it missed (the
    # top one at least 10% of the expected), so the bytes demonstrably went
    # elsewhere.  Anything less is "cannot tell", not an accusation: noise
    # from ssh must not turn an invisible (kernel-bypass) run into a misroute.
    missing = expected - (req_bytes or 0)
    others = sum(b for b, _ in carriers)
    material = (1.0 - THRESHOLD) * expected
    if carriers and carriers[0][1] == "lo" and carriers[0][0] >= material:
        why = peer_local_reason or "the peer address is an address of this host"
        return done(
            "unverifiable",
            f"{why}, so the kernel kept the traffic on lo and no NIC saw it "
            f"(lo counted {format_bytes(carriers[0][0])} on {host})",
            carriers[:_TOP_N],
        )
    bad = [p for n in sorted(members) for p in deltas[n].problems]
    if bad:
        return done("unverifiable", bad[0], carriers[:_TOP_N])
    if carriers and others >= 0.5 * missing and carriers[0][0] >= material:
        named = [(b, n) for b, n in carriers if b >= material][:_TOP_N]
        return done(
            "misrouted",
            f"{request.name} counted {format_bytes(req_bytes or 0)} of the "
            f"{format_bytes(expected)} expected on {host}; "
            + ", ".join(f"{n} counted {format_bytes(b)}" for b, n in named),
            named,
        )
    side_problems = [p for d in deltas.values() for p in d.problems]
    if side_problems:
        return done("unverifiable", side_problems[0], carriers[:_TOP_N])
    hint = ""
    if req_kind == "net" and not any(deltas[n].kind == "rdma" for n in members):
        hint = (
            " (RoCE on a kernel-bypass NIC such as mlx5 is counted only by the "
            "RDMA port, which was not reported with this netdev)"
        )
    return done(
        "unverifiable",
        f"no device on {host} counted at least {_pct(THRESHOLD)} of the "
        f"{format_bytes(expected)} expected: {request.name} counted "
        f"{format_bytes(req_bytes or 0)}, all others together {format_bytes(others)}"
        f"{hint}",
        carriers[:_TOP_N],
    )


def _peer_local_reason(record: Mapping[str, Any]) -> str | None:
    transport = _local_transport(record)
    peer_txt = _split_host_port(transport.get("peer_address"))
    peer = _parse_ip(peer_txt)
    local = _parse_ip(_split_host_port(transport.get("local_address")))
    if peer is None:
        return None
    if peer.is_loopback:
        return f"the peer address {peer_txt} is a loopback address"
    if local is not None and peer == local:
        return f"the peer address {peer_txt} is this host's own address"
    return f"the peer address {peer_txt} is an address of this host"


def verdict(record: Mapping[str, Any]) -> dict[str, Any]:
    """Build the ``path`` object of a result record (see the module docstring)."""
    counters = record.get("counters")
    counters = counters if isinstance(counters, Mapping) else {}
    expected, expected_why = expected_payload_bytes(record)
    request, request_why = _resolve_request(record)
    path: dict[str, Any] = {
        "schema": PATH_SCHEMA,
        "requested": request.name if request else None,
        "requested_via": request.via if request else None,
        "expected_bytes": expected,
        "threshold": THRESHOLD,
        "sides": {},
        "notes": [],
    }
    if request and request.bind:
        path["bind"] = request.bind
    if expected_why:
        path["notes"].append(expected_why)

    loc_reason = _peer_local_reason(record)
    sides: dict[str, dict[str, Any] | None] = {}
    for label in ("local", "peer"):
        side = counters.get(label)
        if isinstance(side, Mapping) and (side.get("net") or side.get("rdma")):
            sides[label] = _judge_side(label, side, request, expected, loc_reason)
        else:
            sides[label] = None
    path["sides"] = sides
    if sides["peer"] is None and sides["local"] is not None:
        path["notes"].append("the peer sent no counters: only this host was checked")

    judged = [s for s in sides.values() if s is not None]
    if request_why:
        final, reason = "unverifiable", request_why
    elif not judged:
        final, reason = (
            "unverifiable",
            "no counters in the record: neither host sent counter snapshots",
        )
    elif request is None:
        final, reason = "not-requested", None
    else:
        verdicts = [s["verdict"] for s in judged]
        if "misrouted" in verdicts:
            final = "misrouted"
        elif "unverifiable" in verdicts:
            final = "unverifiable"
        else:
            final = "verified"
        reasons = [
            f"{s['host']}: {s['reason']}"
            for s in judged
            if s.get("reason") and s["verdict"] == final
        ]
        reason = "; ".join(reasons) if reasons else None
    path["verdict"] = final
    if reason:
        path["reason"] = reason
    # Noise or a second rail: say so when a device other than the requested
    # one also carried as much as the run itself.
    if final == "verified" and expected:
        for s in judged:
            for c in s.get("carriers", [])[1:]:
                if c["bytes"] >= THRESHOLD * expected:
                    path["notes"].append(
                        f"{c['device']} on {s['host']} also counted {format_bytes(c['bytes'])} "
                        "(other traffic, or a second path)"
                    )
    path["summary"] = _summary(path)
    return path


# --------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------


def format_bytes(n: float) -> str:
    """Decimal units, as link speeds are: 12.6 MB is 12 600 000 bytes."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - loop always returns


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _judged(path: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    sides = path.get("sides")
    if not isinstance(sides, Mapping):
        return []
    return [
        s for s in (sides.get("local"), sides.get("peer")) if isinstance(s, Mapping)
    ]


def _summary(path: Mapping[str, Any]) -> str:
    v = path.get("verdict")
    req = path.get("requested")
    sides = _judged(path)
    if v == "not-requested" or v == "misrouted":
        parts, shares, totals = [], [], []
        for s in sides:
            lst = s.get("carriers") if v == "misrouted" else s.get("top")
            if lst:
                parts.append(f"{lst[0]['device']} ({s['host']})")
                shares.append(lst[0]["share"])
                totals.append(s["observed_bytes"])
        if not parts:
            return f"{v}: no device counted any bytes"
        where = " / ".join(parts)
        worst = min(range(len(shares)), key=lambda i: shares[i])
        head = (
            f"{_pct(shares[worst])} of {format_bytes(totals[worst])} went over {where}"
        )
        if v == "misrouted":
            return f"misrouted: asked for {req}, {head}"
        return f"not-requested: {head}"
    if v == "verified":
        parts = []
        for s in sides:
            r = s.get("requested") or {}
            parts.append(f"{_pct(r.get('of_expected') or 0.0)} ({s['host']})")
        exp = path.get("expected_bytes") or 0
        return (
            f"verified: {req} counted "
            + " / ".join(parts)
            + f" of the {format_bytes(exp)} payload"
        )
    reason = path.get("reason") or "unknown reason"
    return f"unverifiable: {reason}"


def render_path_text(path: Mapping[str, Any]) -> str:
    """One or two lines for text output; a misroute is impossible to miss."""
    v = path.get("verdict")
    summary = str(path.get("summary") or _summary(path))
    body = summary.split(": ", 1)[1] if ": " in summary else summary
    if v == "misrouted":
        lines = [f"!! MISROUTED: {body}"]
        details = [
            f"{s['host']}: {s['reason']}"
            for s in _judged(path)
            if s.get("verdict") == "misrouted"
        ]
        if details:
            lines.append("!! " + "; ".join(details))
        return "\n".join(lines)
    if v == "verified":
        return f"path: VERIFIED - {body}"
    if v == "not-requested":
        return f"path: not requested (no --device) - {body}"
    return f"path: UNVERIFIABLE - {body}"


# --------------------------------------------------------------------------
# snapshots from sysfs (same shape as the engine's)
# --------------------------------------------------------------------------


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
