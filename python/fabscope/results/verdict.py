# SPDX-License-Identifier: BSD-3-Clause
"""The path verdict: which device carried a measurement's bytes, against what the user asked for.

Owns the ``path`` object of a result record (schema ``PATH_SCHEMA``):

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

What counts as a request (``requests.py``): ``config.device``, ``config.bind``, and a device named
in the settings the transport was given: ``UCX_NET_DEVICES`` (set by the user, as the UCX backend
reports its source), Open MPI ``btl_tcp_if_include`` / ``pml_ucx_devices`` and the libfabric
interface variables, from ``--mca``, ``--env`` or the environment the ranks got.

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
* A request naming several devices (``UCX_NET_DEVICES=eth0,eth1``) is satisfied by their links
  together.  When the engine itself spread the operations over them and says how many each
  carried (verbs ``--device rxe0,rxe1``: ``transport.local.devices[].completed/received``),
  each device must also count its own share: bytes of rxe1's queue pairs that left through
  rxe0's link are a misroute, even though the two together carried everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .. import hostport
from .counters import Counters, CounterSide
from .deltas import DeviceDelta, as_count
from .pathtext import format_bytes, pct, summary
from .requests import Request, local_transport, parse_ip, resolve_request

__all__ = ["PATH_SCHEMA", "THRESHOLD", "device_shares", "expected_payload_bytes", "settings_without_effect", "verdict"]

PATH_SCHEMA = 1

#: Share of the expected payload bytes the requested device must count.
THRESHOLD = 0.9

# How many carriers to name on each side.
_TOP_N = 3


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
    size = as_count(record.get("size"))
    count = as_count(record.get("messages")) if pattern in ("bw", "bibw") else None
    if count is None:
        count = as_count(record.get("iterations"))
    warmup = as_count(record.get("warmup"))
    if warmup is None and record.get("warmup") is None:
        warmup = 0
    if size is None or count is None or warmup is None:
        return (
            None,
            "the record does not say size and iterations (or messages), so the expected bytes are unknown",
        )
    return size * (count + warmup) * directions, None


#: The largest RDMA path MTU: a run whose payload went through RDMA sent at least
#: expected_bytes / this many packets, whatever the message sizes.
_MAX_RDMA_MTU = 4096


def _request_members(
    req: str, deltas: Mapping[str, DeviceDelta], expected: int | None = None
) -> tuple[set[str], str | None]:
    """Counter entries on one side that satisfy a request for ``req``.

    Returns the set and the kind of request ("rdma" or "net"), or an empty set
    and None when the side has no such device.
    """
    if "/" in req:  # one port (UCX's rxe0:1): the same packet-only rule as a device's ports
        ports = {req} if req in deltas and deltas[req].kind == "rdma" else set()
        if not ports:
            return set(), "rdma"
    else:
        ports = {n for n, d in deltas.items() if d.kind == "rdma" and d.rdma_device == req}
    if ports:
        # A port that counts packets but no bytes (rxe) proves by its packets that RDMA carried
        # the run; its bytes are then read on the netdev it sends through (ndevs), where rxe's
        # RoCE frames appear. A port without even packets moving proves nothing, and keeps none;
        # nor does one whose packets are too few to have carried the payload (a connection
        # handshake before a fallback to kernel TCP, whose bytes the netdev counts too).
        least = max(1, int(THRESHOLD * expected) // _MAX_RDMA_MTU) if expected else 1
        packet_only = {
            nd
            for n in ports
            if deltas[n].bytes is None and (deltas[n].tx_packets or 0) + (deltas[n].rx_packets or 0) >= least
            for nd in deltas[n].ndevs
            if nd in deltas
        }
        return ports | packet_only, "rdma"
    if req in deltas and deltas[req].kind == "net":
        behind = {n for n, d in deltas.items() if d.kind == "rdma" and req in d.ndevs}
        return {req} | behind, "net"
    return set(), None


def _too_few_packets(members: Iterable[str], deltas: Mapping[str, DeviceDelta],
                     expected: int) -> tuple[int, int] | None:
    """(packets, packets needed) when the requested RDMA ports count packets but no bytes (rxe)
    and too few packets to have carried ``expected`` bytes; else None."""
    ports = [deltas[n] for n in members if deltas[n].kind == "rdma"]
    if not ports or any(d.bytes is not None or d.tx_packets is None for d in ports):
        return None
    got = sum((d.tx_packets or 0) + (d.rx_packets or 0) for d in ports)
    least = max(1, int(THRESHOLD * expected) // _MAX_RDMA_MTU)
    return (got, least) if got < least else None


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


def _members_bytes(members: Iterable[str], deltas: Mapping[str, DeviceDelta]) -> tuple[int | None, str | None]:
    """Bytes the members counted (one link counts the same bytes: its largest count; separate
    links add up) and the member that counted the most, or (None, None) when none counts bytes."""
    total: int | None = None
    by: str | None = None
    best = -1
    for group in _links(members, deltas):
        counted = [(deltas[n].bytes, n) for n in group if deltas[n].bytes is not None]
        if not counted:
            continue
        b, n = max(counted, key=lambda t: (t[0] or 0, t[1]))
        total = (total or 0) + (b or 0)
        if (b or 0) > best:
            best, by = b or 0, n
    return total, by


def device_shares(record: Mapping[str, Any]) -> dict[str, float] | None:
    """Each device's share of the operations when the engine spread them over several devices
    (verbs ``--device A,B``), from its own per-device counts; None otherwise."""
    devices = local_transport(record).get("devices")
    if not isinstance(devices, list) or len(devices) < 2:
        return None
    counts: dict[str, int] = {}
    for d in devices:
        if isinstance(d, Mapping) and isinstance(d.get("device"), str):
            counts[d["device"]] = (as_count(d.get("completed")) or 0) + (as_count(d.get("received")) or 0)
    total = sum(counts.values())
    return {name: n / total for name, n in counts.items()} if total else None


def _short_devices(
    request: Request, deltas: Mapping[str, DeviceDelta], expected: int, shares: Mapping[str, float]
) -> list[tuple[str, int, int]]:
    """(device, bytes counted, bytes of its share) for each requested device below its share."""
    short = []
    for name in request.names:
        share = shares.get(name)
        if share is None:
            continue
        found, _ = _request_members(name, deltas)
        got = _members_bytes(found, deltas)[0] or 0
        if got < THRESHOLD * expected * share:
            short.append((name, got, round(expected * share)))
    return short


def _judge_side(
    label: str,
    side: CounterSide,
    request: Request | None,
    expected: int | None,
    peer_local_reason: str | None,
    shares: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    deltas = side.deltas()
    host = side.host or label
    members: set[str] = set()
    req_kind: str | None = None
    if request is not None:
        kinds: set[str] = set()
        for name in request.names:
            # Each device of a list is held to its own share of the payload (its queue pairs'
            # share of the operations): a slow rail that carried 14 % has too few packets for the
            # whole payload, and its netdev's bytes must still count.
            own = round(expected * shares[name]) if expected and shares and name in shares else expected
            found, kind = _request_members(name, deltas, own)
            members |= found
            if kind and found:
                kinds.add(kind)
        req_kind = "rdma" if "rdma" in kinds else ("net" if kinds else None)

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

    req_bytes, req_by = _members_bytes(members, deltas)

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

    if request is not None and shares and len(request.names) > 1:
        per_device: dict[str, Any] = {}
        for name in request.names:
            found, _ = _request_members(name, deltas)
            per_device[name] = {
                "bytes": _members_bytes(found, deltas)[0],
                "share_of_operations": round(shares.get(name, 0.0), 4),
                "expected_bytes": round(expected * shares.get(name, 0.0)) if expected else None,
            }
        result["requested"]["per_device"] = per_device

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
    short = _short_devices(request, deltas, expected, shares) if shares and len(request.names) > 1 else []
    if req_bytes is not None and req_bytes >= need and short:
        # Together they carried it, so what one device's queue pairs sent left through another.
        return done(
            "misrouted",
            "; ".join(
                f"{n} counted {format_bytes(got)} on {host}, below its share of {format_bytes(want)} "
                f"(its queue pairs carried {pct(shares[n] if shares else 0)} of the operations)"
                for n, got, want in short
            )
            + f"; the devices together counted {format_bytes(req_bytes)}, so the rest left through another of them",
            [(req_bytes, req_by or request.name)] + carriers[: _TOP_N - 1],
        )
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
    few = _too_few_packets(members, deltas, expected)
    if few and carriers and carriers[0][0] >= material:
        # rxe counts packets, not bytes: too few of them to have carried the payload, while a
        # netdev counted it, means the bytes took the kernel stack (e.g. librspreload's fallback).
        return done(
            "misrouted",
            f"{request.name} counted {few[0]} packets on {host}, fewer than the {few[1]} the "
            f"{format_bytes(expected)} expected need even at the largest RDMA MTU; "
            + ", ".join(f"{n} counted {format_bytes(b)}" for b, n in carriers[:_TOP_N] if b >= material)
            + " (kernel traffic, not RDMA)",
            [(b, n) for b, n in carriers if b >= material][:_TOP_N],
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
        f"no device on {host} counted at least {pct(THRESHOLD)} of the "
        f"{format_bytes(expected)} expected: {request.name} counted "
        f"{format_bytes(req_bytes or 0)}, all others together {format_bytes(others)}"
        f"{hint}",
        carriers[:_TOP_N],
    )


def _peer_local_reason(record: Mapping[str, Any]) -> str | None:
    transport = local_transport(record)
    peer_txt = hostport.host_of(transport.get("peer_address"))
    peer = parse_ip(peer_txt)
    local = parse_ip(hostport.host_of(transport.get("local_address")))
    if peer is None:
        return None
    if peer.is_loopback:
        return f"the peer address {peer_txt} is a loopback address"
    if local is not None and peer == local:
        return f"the peer address {peer_txt} is this host's own address"
    return f"the peer address {peer_txt} is an address of this host"


def verdict(record: Mapping[str, Any], counters: Counters | None = None) -> dict[str, Any]:
    """Build the ``path`` object of a result record (see the module docstring); ``counters``: the
    record's, when the caller has parsed them already."""
    counters = Counters.of_record(record) if counters is None else counters
    expected, expected_why = expected_payload_bytes(record)
    request, request_why = resolve_request(record)
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
    shares = device_shares(record)
    sides: dict[str, dict[str, Any] | None] = {}
    for label in ("local", "peer"):
        side = counters.side(label)
        if side is not None and (side.net or side.rdma):
            sides[label] = _judge_side(label, side, request, expected, loc_reason, shares)
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
    shm = shared_memory_carrier(record)
    if request is not None and shm and final != "verified":
        # The transport's own report says no network device carried the payload at all.
        final = "misrouted"
        reason = (f"asked for {request.name} (via {request.via}), but the transport carried the bytes "
                  f"through {shm}, which no device counter sees")
        path["shared_memory"] = shm
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
    # The transport's own report of settings it ignored (e.g. UCX_NET_DEVICES under pml ob1).
    for text in settings_without_effect(record):
        path["notes"].append(text if "no effect" in text else f"setting had no effect: {text}")
    path["summary"] = summary(path)
    return path


_SHM_BTLS = {"vader", "sm", "self", "smcuda"}


def shared_memory_carrier(record: Mapping[str, Any]) -> str | None:
    """What the backend reported, when that is shared memory rather than a network device."""
    local = local_transport(record)
    kind = local.get("kind")
    if kind == "ucx":
        devices = local.get("devices")
        if isinstance(devices, list) and devices and all(d == "memory" for d in devices):
            return f"shared memory (UCX {'+'.join(str(t) for t in local.get('transports') or [])})"
    elif kind == "ofi":
        provider = str(local.get("provider") or "")
        if provider.split(";", 1)[0] == "shm":
            return "shared memory (libfabric shm provider)"
    elif kind == "mpi":
        sel = local.get("selected")
        sel = sel if isinstance(sel, Mapping) else {}
        btl = sel.get("btl")
        send = btl.get("send") if isinstance(btl, Mapping) else None
        if sel.get("pml") == "ob1" and not sel.get("mtl") and isinstance(send, list) and send:
            if all(b in _SHM_BTLS for b in send):
                return f"shared memory (pml ob1, btl {'+'.join(str(b) for b in send)})"
        ucx = local.get("ucx")
        if sel.get("pml") == "ucx" and isinstance(ucx, Mapping):
            devices = ucx.get("devices")
            if isinstance(devices, list) and devices and all(d == "memory" for d in devices):
                return f"shared memory (pml ucx, {'+'.join(str(t) for t in ucx.get('transports') or [])})"
    return None


def settings_without_effect(record: Mapping[str, Any]) -> list[str]:
    """What the backends said had no effect, both sides, each line once."""
    transport = record.get("transport")
    transport = transport if isinstance(transport, Mapping) else {}
    out: list[str] = []
    for side in ("local", "peer"):
        facts = transport.get(side)
        lines = facts.get("settings_without_effect") if isinstance(facts, Mapping) else None
        for line in lines if isinstance(lines, list) else []:
            if isinstance(line, str) and line not in out:
                out.append(line)
    return out


