# SPDX-License-Identifier: BSD-3-Clause
"""What the wire did: segmentation into a tiny last packet, the MTU, loss and retransmission (TCP's own
counts, the library's sockets, the RDMA and netdev counters, congestion marks and pauses) and link events."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...untyped import count_at, member
from ..counters import Counters, CounterSide, DeviceCounters
from ..pathsides import path_sides
from .facts import _fmt, _senders, _tcp_kernel
from .model import Cause

# A message "ends in a tiny packet" when its last segment carries less than this share of an MSS
# and the extra packet is at least this share of the packets per message. 64 KiB over MSS 1448:
# 46 packets where 45.3 would do (1.6 %): clear; 64 KiB over MSS 65,483: 2 where 1.001 would do.
TAIL_SHARE = 1 / 8


EXTRA_PACKET_SHARE = 0.10


# Retransmitted share of the payload's segments (less those the receiver reported as duplicates,
# DSACK: spurious, from an ACK that came late on a busy host) from which loss is named. A stray
# segment does not bend a number; at 0.5 % TCP's throughput has sagged (Mathis: ~1/sqrt(p)).
RETRANS_SHARE = 0.005


# Headers on top of a TCP segment's payload that the path MTU also carries: IPv4 + TCP + the
# timestamp option (Linux's default), and the slack for IPv6 and other options.
TCP_OVERHEAD = 20 + 20 + 12


MTU_SLACK = 64


# Known RDMA counters of loss and retransmission (rxe hw_counters, mlx5), where a snapshot has them.
RDMA_LOSS_COUNTERS = (
    "rcvd_seq_err", "out_of_seq_request", "duplicate_request", "retry_exceeded_err",
    "completer_retry_err", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
    "implied_nak_seq_err", "rnr_nak_retry_err",
)


# Congestion signals (mlx5 hw_counters; rxe and siw have none): ECN-marked RoCE packets seen by a
# receiver (the notification point), the CNPs it sent back, and the CNPs a sender's rate limiter
# handled (DCQCN cut its rate). Not loss, but the same symptom in a bandwidth run: the fabric held
# the sender back.
RDMA_CONGESTION_COUNTERS = ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled")


# RDMA retries on a port (the sum of its loss counters) count as loss from this many, and from
# RETRANS_SHARE of the packets it sent or received. Measured between two Soft-RoCE guests: 20 clean
# runs had 0-8 (in latency runs: the requester's ACK timer firing while the emulated peer was
# descheduled, 600 packets); 3 % netem loss gave 1,376-1,410 per run of 100,000 packets.
RDMA_STRAY_RETRIES = 20


# Link events: netdev carrier changes (carrier_changes counts up and down), RDMA port link events.
NETDEV_LINK_COUNTERS = ("carrier_changes", "carrier_down_count")


RDMA_LINK_COUNTERS = ("link_downed", "link_error_recovery", "symbol_error")


NETDEV_LOSS_COUNTERS = ("rx_dropped", "tx_dropped", "rx_errors", "tx_errors", "rx_missed_errors",
                        "rx_crc_errors")




def _verbs_mtu(local: Mapping[str, Any]) -> tuple[int | None, int | None, str]:
    """(active, used, selection) of the verbs path MTU: the smallest over a --device list's devices."""
    parts = [member(d, "mtu") for d in local.get("devices") or [] if isinstance(d, Mapping)] or [member(local, "mtu")]
    pairs = [(count_at(m, "active"), count_at(m, "used"), str(m.get("selection") or "")) for m in parts]
    known = [(a, u, s) for a, u, s in pairs if a and u]
    return min(known, key=lambda p: p[1] or 0) if known else (None, None, "")


def _segmentation(rec: Mapping[str, Any]) -> Cause:
    local = member(member(rec, "transport"), "local")
    size = count_at(rec, "size") or 0
    if _tcp_kernel(local):
        unit, what = count_at(local, "mss"), "MSS"
    elif local.get("kind") == "verbs":
        unit, what = _verbs_mtu(local)[1], "path MTU"
    else:
        return Cause("segmentation", "unchecked",
                     f"the {local.get('kind') or '?'} transport does not report its segment size (MSS or path MTU)")
    if not unit:
        return Cause("segmentation", "unchecked", f"the record carries no {what} (an engine from before 0.2)")
    if size <= 0:
        return Cause("segmentation", "unchecked", "the record carries no message size")
    packets = -(-size // unit)
    tail = size - (packets - 1) * unit
    extra = (packets - size / unit) / packets
    fact = f"{_fmt(size)} B per message over {what} {_fmt(unit)} B: {packets} packet{'s' if packets > 1 else ''}"
    if packets >= 2 and tail < unit * TAIL_SHARE and extra >= EXTRA_PACKET_SHARE:
        lower, upper = (packets - 1) * unit, packets * unit
        return Cause(
            "segmentation", "seen", f"{fact} per message, the last one {_fmt(tail)} B",
            cost=f"{packets} packets per message where {size / unit:.3f} would carry it: ~{extra:.0%} of the "
                 "packets (and their per-packet work) carry almost nothing",
            fix=f"use a message size of at most {_fmt(lower)} B or about {_fmt(upper)} B (a multiple of the {what}); "
                "a size sweep's dip here is this tail, not the link")
    return Cause("segmentation", "clear", fact + (f" per message, the last one {_fmt(tail)} B" if packets > 1 else ""))


def _carriers(rec: Mapping[str, Any], side: str) -> list[str]:
    judged = path_sides(rec.get("path")).get(side)
    return [c.device for c in judged.carriers] if judged else []


def _snapshots(rec: Mapping[str, Any], counters: Counters) -> list[tuple[str, CounterSide]]:
    """(side, its counter snapshot) for the snapshots of different devices: both sides', unless the
    two engines ran on one host (a loopback run: same host name, same boot), whose ports and netdevs
    both snapshots hold, so a counter that moved would be named, and summed, twice."""
    local, peer = counters.local, counters.peer
    boot = member(rec, "host").get("boot_id"), member(rec, "peer_host").get("boot_id")
    if local and peer and local.host and local.host == peer.host and boot[0] and boot[0] == boot[1]:
        return [("local", local)]
    return [(label, snap) for label, snap in (("local", local), ("peer", peer)) if snap is not None]


def _counter_loss(rec: Mapping[str, Any], counters: Counters) -> tuple[list[str], list[str], list[str]]:
    """(evidence of loss counters that moved, names of the counters that were read, stray RDMA
    retries too few to count) over the carrying netdevs and every RDMA port of both sides."""
    moved: list[str] = []
    read: list[str] = []
    stray: list[str] = []
    for side, snap in _snapshots(rec, counters):
        host = snap.host or side
        for port in snap.rdma.values():
            events, total = _moved(port, host, RDMA_LOSS_COUNTERS, read)
            packets = max(port.delta("hw_sent_pkts") or port.delta("port_xmit_packets") or 0,
                          port.delta("hw_rcvd_pkts") or port.delta("port_rcv_packets") or 0)
            if total >= RDMA_STRAY_RETRIES and total >= RETRANS_SHARE * packets:
                moved += events
            elif events:
                stray.append(f"{', '.join(events)} of {_fmt(packets)} packets")
        for name in _carriers(rec, side):
            if (dev := snap.netdev(name)) is not None:
                moved += _moved(dev, host, NETDEV_LOSS_COUNTERS, read)[0]
    return moved, read, stray


def _moved(dev: DeviceCounters, host: str, keys: Sequence[str], read: list[str]) -> tuple[list[str], int]:
    """(evidence of the counters among ``keys`` that moved on ``dev``, their sum); each one found is
    added to ``read`` as NAME:KEY."""
    events: list[str] = []
    total = 0
    for key in keys:
        d = dev.delta(key)
        if d is not None:
            read.append(f"{dev.name}:{key}")
            if d > 0:
                events.append(f"{key} +{_fmt(d)} on {dev.name} ({host})")
                total += d
    return events, total


def _congestion(rec: Mapping[str, Any], counters: Counters) -> tuple[list[str], int]:
    """(evidence of the congestion counters that moved, how many were read) over every RDMA port of
    both sides."""
    moved: list[str] = []
    read: list[str] = []
    for side, snap in _snapshots(rec, counters):
        for port in snap.rdma.values():
            moved += _moved(port, snap.host or side, RDMA_CONGESTION_COUNTERS, read)[0]
    return moved, len(read)


def _pauses(rec: Mapping[str, Any], counters: Counters) -> tuple[list[str], int, list[str]]:
    """(evidence of the pause/PFC counters that moved, how many were read, the netdevs whose driver
    lists none) over the netdevs behind both sides' RDMA ports: the engine reads their driver's
    pause statistics (`ethtool -S`: counters.*.net.X.before/after.ethtool; absent where it could not
    ask a driver, as in a sysfs fixture tree or an older engine)."""
    moved: list[str] = []
    read: list[str] = []
    none: list[str] = []
    for side, snap in _snapshots(rec, counters):
        host = snap.host or side
        for netdev in snap.netdevs_behind_rdma():
            pauses = netdev.ethtool()
            if pauses is None:
                continue
            if not pauses.after:
                none.append(f"{netdev.name} ({host})")
                continue
            moved += _moved(pauses, host, sorted(pauses.after), read)[0]
    return moved, len(read), none


def _sockets_not_ours(local: Mapping[str, Any]) -> str | None:
    """What sent the payload through kernel TCP sockets that the transport library opened (so no
    TCP_INFO through fabscope's backend): UCX's tcp transport, libfabric's tcp-based providers,
    MPI's tcp btl; None otherwise."""
    kind = local.get("kind")
    if kind == "ucx" and "tcp" in (local.get("transports") or []):
        return "UCX's tcp transport"
    provider = str(local.get("provider") or "").split(";")[0]
    if kind == "ofi" and provider in ("tcp", "sockets", "net"):
        return f"libfabric's {provider} provider"
    if kind == "mpi":
        selected = local.get("selected")
        btl = member(selected if isinstance(selected, Mapping) else {}, "btl")
        if any("tcp" in v for v in btl.values() if isinstance(v, list)):
            return "MPI's tcp btl"
    return None


def _library_sockets_retransmission(rec: Mapping[str, Any], counters: Counters, sender: str, fix_loss: str) -> Cause:
    """Loss under a transport whose TCP sockets the library opened: TCP_INFO of those sockets, read
    by the engine from its own file descriptors (counters.*.tcp_sockets: data segments sent and
    sent again over the run, matched socket by socket, the control connection left out)."""
    parts: list[str] = []
    unread: list[str] = []
    total = segments = 0
    for side in _senders(rec):
        snap = counters.side(side)
        socks = snap.tcp_sockets if snap else None
        out, again = (socks.data_segs_out, socks.total_retrans) if socks else (None, None)
        if socks is None or out is None or again is None:
            unread.append(side)
            continue
        spurious = min(again, socks.dsack_dups or 0)
        total += again - spurious
        segments += out
        n = socks.sockets or 0
        parts.append(f"{_who(side)} sent {_fmt(again)} of {_fmt(out)} data segments again on its {_fmt(n)} "
                     f"socket{'' if n == 1 else 's'}" + _duplicates(spurious))
    if not parts:
        return Cause("retransmission", "unchecked",
                     f"{sender} opens its own TCP sockets and the record carries no TCP_INFO of them "
                     "(counters.*.tcp_sockets: an engine older than this front end)")
    share = total / segments if segments else 0.0
    return _tcp_judged(f"{sender}: " + ", ".join(parts) + " during the run (TCP_INFO of the library's sockets in "
                       "the engine)", unread, total, share, f" (~{share:.1%} of its data segments)", fix_loss)


def _who(side: str) -> str:
    return "the client" if side == "local" else "the server"


def _duplicates(spurious: int) -> str:
    return f" ({_fmt(spurious)} reported back as duplicates: late ACKs, not loss)" if spurious else ""


def _tcp_judged(fact: str, unread: list[str], total: int, share: float | None, share_text: str,
                fix_loss: str) -> Cause:
    """TCP's retransmissions (less the duplicates) judged: seen at RETRANS_SHARE of the segments,
    or at any count where the segments are unknown."""
    if unread:
        fact += f"; {' and '.join(unread)} side not reported"
    if total and (share is None or share >= RETRANS_SHARE):
        return Cause("retransmission", "seen", fact + share_text,
                     cost="each retransmission halves TCP's congestion window and waits for duplicate ACKs or a "
                          "timeout: the stream stalls and restarts",
                     fix=fix_loss)
    return Cause("retransmission", "clear", fact)


def _retransmission(rec: Mapping[str, Any], counters: Counters) -> Cause:
    local = member(member(rec, "transport"), "local")
    moved, read, stray = _counter_loss(rec, counters)
    # RoCE's congestion counters count RoCE packets: kernel TCP's bytes are not among them.
    congested, congestion_read = _congestion(rec, counters) if not _tcp_kernel(local) else ([], 0)
    paused, pause_read, no_pause = _pauses(rec, counters) if not _tcp_kernel(local) else ([], 0, [])
    fix_loss = ("find the drop: a queue too small for the burst, a congested or faulty port (ethtool -S, "
                "tc -s qdisc on the path); for RoCE enable PFC/ECN on the fabric")
    signals = congested + paused
    signalled = ("; the fabric signalled congestion: " + ", ".join(signals)) if signals else ""
    # Whether PFC paused the port cannot be told where the driver counts no pause frames: said in
    # every verdict of an RDMA run, since a loss on a RoCE fabric that should be lossless asks it.
    unpaused = (f"; pause frames not counted on {', '.join(no_pause)}: the driver lists no pause statistics"
                if no_pause else "")
    if moved:
        return Cause("retransmission", "seen", "during the run: " + ", ".join(moved) + signalled + unpaused,
                     cost="every lost packet is resent after a timeout or NAK; bandwidth sags and latency grows a tail",
                     fix=fix_loss)
    if signals:
        costs, fixes = [], []
        if congested:
            costs.append("ECN marks and the CNPs they return make the sender's rate limiter (DCQCN) cut its rate")
            fixes.append("find the congested port: traffic from other senders on the same egress (an incast), or a "
                         "slower link on the path; check the switches' ECN marking thresholds and the NICs' "
                         "congestion control settings")
        if paused:
            costs.append("a paused port sends nothing on that priority until the pause ends, and a pause spreads "
                         "back towards the senders (head-of-line blocking)")
            fixes.append("find who paused: rx_*pause counters rising at a sender mean the switch (or the peer) "
                         "asked it to stop; tx_*pause at a receiver mean its own NIC could not drain (a slow "
                         "host, PCIe, a receive ring too small); check which priority carries RoCE and the "
                         "switch's buffer headroom for it")
        return Cause("retransmission", "seen",
                     "no loss counter moved, but the fabric signalled congestion during the run: " + ", ".join(signals)
                     + unpaused,
                     cost="; ".join(costs) + ": bandwidth below the link's, with no packet lost",
                     fix="; ".join(fixes))
    sender = _sockets_not_ours(local)
    if sender:
        return _library_sockets_retransmission(rec, counters, sender, fix_loss)
    if not _tcp_kernel(local):
        if any(r.rpartition(":")[2] in RDMA_LOSS_COUNTERS for r in read):
            quiet = (f"; no congestion counter moved ({congestion_read + pause_read} read)"
                     if congestion_read + pause_read else "") + unpaused
            if stray:
                return Cause("retransmission", "clear", f"a few stray retries ({'; '.join(stray)}): below "
                                                        f"{RDMA_STRAY_RETRIES} and {RETRANS_SHARE:.1%} of the packets{quiet}")
            return Cause("retransmission", "clear", f"no loss counter moved ({len(read)} read){quiet}")
        kind = local.get("kind") or "?"
        return Cause("retransmission", "unchecked",
                     f"the {kind} transport does not report retransmissions, and the counter snapshot holds no "
                     "loss or sequence-error counter of its devices")
    size = count_at(rec, "size") or 0
    iters = count_at(rec, "iterations") or 0
    tr = member(rec, "transport")
    parts, unchecked, total, segments = [], [], 0, 0
    for side in _senders(rec):
        info = member(tr, side)
        n, mss = count_at(info, "phase_retransmitted_segments"), count_at(info, "mss")
        if n is None:
            unchecked.append(side)
            continue
        spurious = min(n, count_at(info, "phase_spurious_retransmissions") or 0)
        total += n - spurious
        if mss:
            segments += -(-size // mss) * iters
        parts.append(f"{_who(side)} retransmitted {_fmt(n)} segment{'' if n == 1 else 's'}" + _duplicates(spurious))
    if not parts:
        return Cause("retransmission", "unchecked",
                     "the record carries no TCP_INFO retransmission count (an engine from before 0.2)")
    share = total / segments if segments else None
    share_text = f" (~{share:.1%} of the ~{_fmt(segments)} payload segments)" if share is not None else ""
    return _tcp_judged(", ".join(parts) + " during the measured phase (TCP_INFO)", unchecked, total, share,
                       share_text, fix_loss)


def _mtu(rec: Mapping[str, Any]) -> Cause:
    local = member(member(rec, "transport"), "local")
    if local.get("kind") == "verbs":
        active, used, selection = _verbs_mtu(local)
        if active and used and used < active:
            return Cause("mtu", "seen", f"the QPs use path MTU {_fmt(used)} B where the port's active MTU is "
                                        f"{_fmt(active)} B ({selection or 'as selected'})",
                         cost=f"{active / used:.0f}x the packets (and headers) per byte",
                         fix="use --mtu auto, or raise the smaller side's netdev MTU (RoCE: ip link set DEV mtu 4200)")
        if active and used:
            return Cause("mtu", "clear", f"path MTU {_fmt(used)} B = the port's active MTU (the port's maximum is "
                                         "not in the record, so an active MTU below it is unchecked)")
        return Cause("mtu", "unchecked", "the verbs record carries no active/used MTU")
    if not _tcp_kernel(local):
        return Cause("mtu", "unchecked", f"the {local.get('kind') or '?'} transport does not report its path MTU")
    path, netdev = count_at(local, "path_mtu"), count_at(local, "netdev_mtu")
    dev = local.get("address_owner") or "the netdev"
    if path is None or netdev is None:
        return Cause("mtu", "unchecked", "the record carries no path/netdev MTU (an engine from before 0.2)")
    # IPv4 caps a packet at 65,535 B: loopback's 65,536 B MTU is used to the full at 65,535.
    usable = min(netdev, 65535)
    if path + MTU_SLACK < usable:
        return Cause("mtu", "seen", f"path MTU {_fmt(path)} B below the {_fmt(netdev)} B MTU of {dev} (a router or "
                                    "the peer's netdev lowers it)",
                     cost=f"~{usable / path:.1f}x the packets per byte",
                     fix="raise the MTU along the path (the peer's netdev and every hop) to match")
    return Cause("mtu", "clear", f"path MTU {_fmt(path)} B, {dev} MTU {_fmt(netdev)} B")


def _link(rec: Mapping[str, Any], counters: Counters) -> Cause:
    """Link events during the run: carrier changes on the netdevs that carried the payload, link
    downs, recoveries and symbol errors on every RDMA port of both sides' snapshots."""
    moved: list[str] = []
    read: list[str] = []
    for side, snap in _snapshots(rec, counters):
        host = snap.host or side
        carriers = [dev for name in _carriers(rec, side) if (dev := snap.netdev(name)) is not None]
        for dev in carriers:
            moved += _moved(dev, host, NETDEV_LINK_COUNTERS, read)[0]
        for port in snap.rdma.values():
            moved += _moved(port, host, RDMA_LINK_COUNTERS, read)[0]
    if moved:
        return Cause("link", "seen", "during the run: " + ", ".join(moved),
                     cost="while the link was down or retraining nothing moved: the run's time includes the outage "
                          "(TCP waits for a retransmission timeout; RDMA QPs may have failed over or errored)",
                     fix="find why the link dropped: the cable, transceiver or switch port (ip -s link, ethtool DEV, "
                         "the switch's log; IB: ibstat, perfquery); rerun once it is stable")
    if not read:
        return Cause("link", "unchecked", "the counter snapshot holds no carrier or link-event counter of the devices "
                                          "that carried the run (an older engine, or no carrying device)")
    n = len(read)
    return Cause("link", "clear", f"no carrier change or link event ({n} counter{'s' if n > 1 else ''} read)")
