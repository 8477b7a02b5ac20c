# SPDX-License-Identifier: BSD-3-Clause
"""Why the number is what it is: the one decision over the facts a record carries (issue 20).

The engine gathers facts around the measured phase (the transport's own report: TCP MSS, path MTU,
netdev MTU and the segments retransmitted during the phase, TCP_INFO; the counter snapshot before
and after; the host section). This module decides, once, from a parsed record, and
``parse_record`` attaches the result (``rec["explanation"]``, ``Result.explanation``) the way it
attaches the path verdict; every output renders that object and nobody re-derives a cause.

Each cause is ``seen`` (with the facts that show it, what it plausibly cost, and the fix),
``clear`` (checked: not there), or ``unchecked`` (and why not). Never silence: a cause this
module cannot check on a record still appears, saying why. A cause that fires on a clean run is a
bug (tests/integration/test_explain_runs.py plants each and proves silence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..untyped import count_at, member, number_at
from .counters import Counters, CounterSide, DeviceCounters
from .delay import DELAY_COST, DELAY_FIX, DelayReference, judge_delay
from .misroute import route_reasons
from .pathsides import path_sides

__all__ = ["CAUSES", "STATES", "BandwidthReference", "Cause", "DelayReference", "Explanation", "LatencyReference",
           "explain", "with_bandwidth_reference", "with_delay_reference", "with_reference"]

STATES = ("seen", "clear", "unchecked")
CAUSES = ("segmentation", "retransmission", "mtu", "placement", "cpu", "buffers", "link", "delay", "route")

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
# A busy-polling engine owns its CPU: below this share of the phase's wall time on CPU, with the
# scheduler taking the CPU away at least this often, something else ran there. (A lone busy poller
# runs > 95 %; two on one CPU get ~50 % each, taken off every few ms.) A blocking engine is not
# judged (see _cpu).
CPU_SHARE_MIN = 0.80
CPU_TAKEN_MIN = 20
CPU_TAKEN_RATE = 20.0
# Frequency governors that hold the clock low until load shows: a latency run never shows enough.
# (intel_pstate's 'powersave' with HWP ramps faster than acpi-cpufreq's, but still lags a ping-pong.)
SLOW_GOVERNORS = frozenset({"powersave", "conservative"})
# cpuidle drivers whose idle states cost tens of microseconds to leave (measured here: haltpoll
# pays ~40 us per blocking message on a quiet machine).
DEEP_IDLE_DRIVERS = frozenset({"haltpoll", "intel_idle", "acpi_idle"})
# A socket buffer fixed by the user (SO_SNDBUF/SO_RCVBUF: the kernel's autotuning is off for it, and
# the kernel doubles the value, keeping half for its bookkeeping) limits the window when what the
# stream had in flight (the rate achieved x TCP_INFO's smoothed round trip) reaches this share of the
# payload the buffer can hold. Measured on loopback at 32 KiB: --tcp-sndbuf 4096 -> 132 % (named);
# 65536 -> 15 %; autotuned -> 2 % of the 4 MiB the kernel grew it to.
# The smoothed round trip is an average over the connection and overstates what a stream on a
# path of this host (loopback, veth) sees, so "in flight" can read several times the buffer's
# payload (netns, --tcp-sndbuf 4096: 72 KB per 56 us); the buffer still bounds the window there.
BUFFER_FILL = 0.5
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


# A result below this share of its expected ceiling (or its reference) with no cause seen is said to
# be unexplained, in words, with the checks' strongest signals (the causes that read the path).
UNEXPLAINED_BELOW = 0.5
SIGNAL_CAUSES = ("delay", "retransmission", "cpu", "buffers", "link")


@dataclass(frozen=True)
class Cause:
    """One cause, checked: ``state`` is seen, clear or unchecked; ``evidence`` says what shows it
    (or why it could not be checked); ``cost`` and ``fix`` are set when it is seen."""

    cause: str
    state: str
    evidence: str
    cost: str | None = None
    fix: str | None = None

    @property
    def seen(self) -> bool:
        return self.state == "seen"

    def why_line(self) -> str:
        """The cause in one line (without "# why: "): name, evidence, and cost and fix where set;
        every output that shows a cause (run, suite, compare) prints this line."""
        return (f"{self.cause}: {self.evidence}" + (f"; cost: {self.cost}" if self.cost else "")
                + (f"; fix: {self.fix}" if self.fix else ""))

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "state": self.state, "seen": self.seen, "evidence": self.evidence,
                "cost": self.cost, "fix": self.fix}


@dataclass(frozen=True)
class LatencyReference:
    """A latency result's reference from the history (fabscope/reference.py finds it): the p50 of
    the same case (same hosts, backend, op, size, transport) in earlier runs. ``named`` is the
    ``--reference TAG|RUN`` that chose it, None for the default (the best, lowest, median of every
    earlier run of the case); ``run_id`` is None for the median of several runs under a tag."""

    p50_us: float
    run_id: int | None
    run_ids: tuple[int, ...]
    tag: str | None
    when: str  # the run's start (ISO, UTC); "FIRST..LAST" for several runs
    runs_considered: int
    named: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"p50_us": self.p50_us, "run_id": self.run_id, "run_ids": list(self.run_ids), "tag": self.tag,
                "when": self.when, "runs_considered": self.runs_considered, "named": self.named}

    @classmethod
    def parse(cls, obj: object) -> LatencyReference | None:
        """A stored record's reference (its ``explanation.reference``), so a run read back from the
        history or a file keeps the reference it was measured against; None where there is none or
        it is not one of ours."""
        if not isinstance(obj, dict):
            return None
        p50, run_id, ids, tag = obj.get("p50_us"), obj.get("run_id"), obj.get("run_ids"), obj.get("tag")
        when, n, named = obj.get("when"), obj.get("runs_considered"), obj.get("named")
        if not (isinstance(p50, (int, float)) and not isinstance(p50, bool) and p50 > 0 and isinstance(when, str)
                and isinstance(n, int) and isinstance(ids, list) and all(isinstance(i, int) for i in ids)
                and (run_id is None or isinstance(run_id, int)) and (tag is None or isinstance(tag, str))
                and (named is None or isinstance(named, str))):
            return None
        return cls(p50_us=float(p50), run_id=run_id, run_ids=tuple(ids), tag=tag, when=when, runs_considered=n,
                   named=named)


@dataclass(frozen=True)
class BandwidthReference:
    """A bandwidth result's reference from the history (fabscope/reference.py finds it), as latency
    has one: the same case's best (highest) Gb/s in earlier runs, or, ``named`` (``--reference
    TAG|RUN``), that run's figure or the median of a tag's runs. Where no link rate is known (a
    virtual link) it is what "expected" means; elsewhere it says how far below its own best a run is."""

    gbps: float
    run_id: int | None
    run_ids: tuple[int, ...]
    tag: str | None
    when: str
    runs_considered: int
    named: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"gbps": self.gbps, "run_id": self.run_id, "run_ids": list(self.run_ids), "tag": self.tag,
                "when": self.when, "runs_considered": self.runs_considered, "named": self.named}

    @classmethod
    def parse(cls, obj: object) -> BandwidthReference | None:
        if not isinstance(obj, dict):
            return None
        gbps, run_id, ids, when, n = obj.get("gbps"), obj.get("run_id"), obj.get("run_ids"), obj.get("when"), \
            obj.get("runs_considered")
        if not (isinstance(gbps, (int, float)) and not isinstance(gbps, bool) and gbps > 0 and isinstance(when, str)
                and isinstance(n, int) and isinstance(ids, list) and all(isinstance(i, int) for i in ids)
                and (run_id is None or isinstance(run_id, int))):
            return None
        tag, named = obj.get("tag"), obj.get("named")
        return cls(gbps=float(gbps), run_id=run_id, run_ids=tuple(ids), tag=tag if isinstance(tag, str) else None,
                   when=when, runs_considered=n, named=named if isinstance(named, str) else None)


@dataclass(frozen=True)
class Explanation:
    """What the number should have been (where known) and every cause, checked. A latency result
    has no ceiling; ``reference_sought`` says the history was read for its reference (``fabscope
    run``), and ``reference`` is what it found (None: ``expected_basis`` says why)."""

    expected_gbps: float | None
    expected_basis: str
    achieved_fraction: float | None
    causes: tuple[Cause, ...]
    reference: LatencyReference | None = None
    reference_sought: bool = False
    bandwidth_reference: BandwidthReference | None = None
    # The round trip of the same case's clean runs (the history), which the delay cause was read against.
    delay_reference: DelayReference | None = None

    @property
    def seen(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.seen)

    @property
    def clear(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.state == "clear")

    @property
    def unchecked(self) -> tuple[Cause, ...]:
        return tuple(c for c in self.causes if c.state == "unchecked")

    def summary(self) -> str:
        """One phrase for a table cell: the causes seen, or how many checks were clear."""
        if self.seen:
            return ", ".join(c.cause for c in self.seen)
        return f"{len(self.clear)} checks clear" + (f", {len(self.unchecked)} unchecked" if self.unchecked else "")

    def why_lines(self) -> list[str]:
        """The text lines (without "# why: ") for this record: one per seen cause, else what is left
        unexplained (far below its ceiling or reference), else a count."""
        if not self.seen:
            return [self.unexplained() or self.summary()]
        return [c.why_line() for c in self.seen]

    def unexplained(self) -> str | None:
        """Said in words when the result is far below its expected ceiling or its reference
        (UNEXPLAINED_BELOW) and no checked cause is seen: how far, and the strongest signals the
        checks read, instead of a row of "clear". None otherwise."""
        frac = self.achieved_fraction
        if self.seen or frac is None or frac <= 0 or frac >= UNEXPLAINED_BELOW:
            return None
        what = (f"its expected ceiling of {_gbps(self.expected_gbps)} Gb/s" if self.expected_gbps
                else f"its own best of {_gbps(self.bandwidth_reference.gbps)} Gb/s" if self.bandwidth_reference
                else "its reference p50" if self.reference else "what was expected")
        signals = [f"{c.cause}: {c.evidence.split('; ')[0]}" for name in SIGNAL_CAUSES for c in self.causes
                   if c.cause == name and c.state != "unchecked"][:3]
        return (f"{1 / frac:.1f} x below {what} ({self.expected_basis}); no checked cause explains it"
                + (f"; the strongest signals were: {'; '.join(signals)}" if signals else ""))

    def expected_line(self) -> str:
        """The ``# expected:`` text of a latency result whose reference was sought: the basis, and
        where a reference was found, how this run compares with it."""
        frac = self.achieved_fraction
        if self.reference is None or not frac:
            return self.expected_basis
        return f"{self.expected_basis}; this run: {1 / frac:.2f}x its p50 (achieved_fraction {frac:.2f})"

    def to_json(self) -> dict[str, Any]:
        return {"schema": 1, "expected_gbps": self.expected_gbps, "expected_basis": self.expected_basis,
                "achieved_fraction": self.achieved_fraction, "unexplained": self.unexplained(),
                "reference": self.reference.to_json() if self.reference else None,
                "bandwidth_reference": self.bandwidth_reference.to_json() if self.bandwidth_reference else None,
                "delay_reference": self.delay_reference.to_json() if self.delay_reference else None,
                "causes": [c.to_json() for c in self.causes]}


# --------------------------------------------------------------------------
# facts, read defensively (a record may be from an older engine, or from another backend)
# --------------------------------------------------------------------------


def _sides(rec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    tr = member(rec, "transport")
    return [(name, member(tr, name)) for name in ("local", "peer") if member(tr, name)]


def _senders(rec: Mapping[str, Any]) -> list[str]:
    """The sides that send the payload: the client (local) in bw; both in bibw and lat."""
    return ["local"] if rec.get("pattern") == "bw" else ["local", "peer"]


def _tcp_kernel(local: Mapping[str, Any]) -> bool:
    """Kernel TCP carried the payload (not a preload library: its sockets are not the kernel's)."""
    return local.get("kind") == "tcp" and not isinstance(local.get("preload"), Mapping)


def _fmt(n: int) -> str:
    return f"{n:,}"


# --------------------------------------------------------------------------
# the causes
# --------------------------------------------------------------------------


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


def _cpu_sides(rec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(side, its ``cpu_use``) for the sides whose engine reported its CPU use in the phase."""
    use = member(rec, "cpu_use")
    return [(side, member(use, side)) for side in ("local", "peer") if count_at(member(use, side), "wall_ns")]


def _where(cu: Mapping[str, Any]) -> str:
    cpu, node = count_at(cu, "cpu"), count_at(cu, "numa_node")
    if cpu is None:
        return "on an unknown CPU"
    return f"on CPU {cpu}" + (f" (NUMA node {node})" if node is not None else "")


def where_engines_ran(rec: Mapping[str, Any]) -> str | None:
    """One line on where each side's engine ran and why (--cpu and the device's NUMA node), for the
    text output; None when the record carries no placement (an older engine)."""
    use = member(rec, "cpu_use")
    parts: list[str] = []
    for side, host in (("local", "host"), ("peer", "peer_host")):
        place = member(member(rec, host), "placement")
        if not place:
            continue
        cu = member(use, side)
        cpu, cpu_node, dev_node = count_at(cu, "cpu"), count_at(cu, "numa_node"), count_at(place, "device_numa_node")
        on = f"CPU {cpu}" if cpu is not None else "an unknown CPU"
        on += f", NUMA node {cpu_node}" if cpu_node is not None else ""
        device = place.get("device") or ""
        dev = f"; {device} on node {dev_node}" if dev_node is not None and device else ""
        parts.append(f"{side} on {on} (--cpu {place.get('asked')}{dev})")
    return "; ".join(parts) if parts else None


def _placement(rec: Mapping[str, Any]) -> Cause:
    """An engine on another NUMA node than its device: each side's ``host.placement`` (what --cpu
    asked, the device's node and why it is unknown) against the node of the CPU it ran the phase on
    (``cpu_use``)."""
    use = member(rec, "cpu_use")
    seen: list[str] = []
    clear: list[str] = []
    unchecked: list[str] = []
    for side, host in (("local", "host"), ("peer", "peer_host")):
        place, cu = member(member(rec, host), "placement"), member(use, side)
        if not place:
            unchecked.append(f"the {side} engine did not report its placement (an engine older than this front end)")
            continue
        dev_node, cpu_node = count_at(place, "device_numa_node"), count_at(cu, "numa_node")
        nodes = count_at(place, "host_numa_nodes")
        device = place.get("device") or "its device"
        if dev_node is None:
            if nodes is not None and nodes <= 1:
                clear.append(f"the {side} host has one NUMA node: the {side} engine {_where(cu)} is as near as any")
            else:
                unchecked.append(f"{side}: {place.get('why_no_node') or 'the device has no NUMA node'}")
        elif cpu_node is None:
            unchecked.append(f"{side}: the NUMA node of the CPU the engine ran on is unknown ({device} is on node "
                             f"{dev_node})")
        elif cpu_node != dev_node:
            seen.append(f"the {side} engine ran {_where(cu)}, and {device} is on node {dev_node} "
                        f"(--cpu {place.get('asked')})")
        else:
            clear.append(f"the {side} engine {_where(cu)}, the node of {device}")
    if seen:
        return Cause("placement", "seen", "; ".join(seen),
                     cost="every completion, doorbell and DMA crosses the link between the sockets: about 0.5 us "
                          "per message in the field reports (1.9 us that became 1.4 us) and memory bandwidth",
                     fix="run each engine on its device's node: --cpu auto (the default) or --cpu near; under a "
                         "launcher, bind the ranks there (mpirun --bind-to core --map-by numa, srun --cpu-bind)")
    # Clear only when both sides were checked: a side that could not be is said, never passed over.
    return Cause("placement", "unchecked" if unchecked else "clear", "; ".join(unchecked + clear))


def _cpu_hog(rec: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(seen, clear, unchecked) facts on another process on an engine's CPU: a busy-polling engine
    should own its CPU for the whole phase; one that ran for much less than the wall time while the
    scheduler took the CPU away (involuntary switches) shared it."""
    sides = _cpu_sides(rec)
    if not sides:
        return [], [], ["the record carries no engine CPU use over the measured phase (an engine older than this "
                        "front end)"]
    if member(rec, "transport").get("poll") == "block":
        # Measured on the netns testbed: a clean blocking receiver ran 51 % of the phase and was
        # taken off its CPU 648 times a second (the network's softirq work waking it and running
        # beside it), while a hog barely shows (the scheduler favours the sleeper).
        return [], [], ["a blocking engine (--poll block) sleeps by design: neither its CPU share nor its switches "
                        "tell another process on its CPU (--poll busy checks it)"]
    seen: list[str] = []
    clear: list[str] = []
    for side, cu in sides:
        wall_s = (count_at(cu, "wall_ns") or 0) / 1e9
        share = ((count_at(cu, "user_ns") or 0) + (count_at(cu, "sys_ns") or 0)) / 1e9 / wall_s
        taken = count_at(cu, "involuntary_switches") or 0
        rate = taken / wall_s
        facts = (f"the {side} engine {_where(cu)} ran {share:.0%} of the {wall_s:.2f} s phase, "
                 f"taken off its CPU {_fmt(taken)} times ({rate:.0f}/s)")
        shared = share < CPU_SHARE_MIN and taken >= CPU_TAKEN_MIN and rate >= CPU_TAKEN_RATE
        (seen if shared else clear).append(facts + (": another process shared its CPU" if shared else ""))
    return seen, clear, []


def _cpu_governor(rec: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(seen, clear, unchecked) facts on each engine CPU's frequency governor during a latency run:
    one that lowers the clock between bursts of work makes each message pay the slow clock and the
    ramp. Bandwidth runs keep their CPUs busy: not judged."""
    if rec.get("pattern") != "lat":
        return [], [], []
    seen: list[str] = []
    clear: list[str] = []
    unchecked: list[str] = []
    for side, cu in _cpu_sides(rec):
        governor = cu.get("governor")
        if not isinstance(governor, str) or not governor:
            unchecked.append(f"the {side} engine's CPU has no frequency governor to read (no cpufreq: a VM, or the "
                             "firmware sets the clock)")
        elif governor in SLOW_GOVERNORS:
            seen.append(f"the {side} engine {_where(cu)} ran under the '{governor}' frequency governor")
        else:
            clear.append(f"the {side} engine's CPU ran under the '{governor}' frequency governor")
    return seen, clear, unchecked


def _cpu_idle(rec: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(seen, clear, unchecked) facts on a blocking latency run's idle states: each message wakes
    a CPU that sleeps in a state it must leave. A spinning engine never idles its CPU."""
    if rec.get("pattern") != "lat" or member(rec, "transport").get("poll") != "block":
        return [], [], []
    seen: list[str] = []
    clear: list[str] = []
    for side, host in (("local", "host"), ("peer", "peer_host")):
        facts = member(rec, host)
        driver = facts.get("cpuidle_driver")
        if not isinstance(driver, str) or not driver:
            continue
        if driver in DEEP_IDLE_DRIVERS and not facts.get("cpu_dma_latency_held"):
            seen.append(f"the {side} engine waited in the kernel (--poll block) while its host's CPUs idle with "
                        f"cpuidle driver '{driver}' (governor '{facts.get('cpuidle_governor') or '?'}'), "
                        "/dev/cpu_dma_latency not held")
        else:
            held = ", /dev/cpu_dma_latency held at 0" if facts.get("cpu_dma_latency_held") else ""
            clear.append(f"the {side} host's cpuidle driver '{driver}'{held}")
    return seen, clear, []


# What each check of the cpu cause costs and how to fix it, when it sees something.
CPU_HOG_COST = "the time the engine waited for its CPU lands in the latency tail and the bandwidth"
CPU_HOG_FIX = ("give each engine a CPU of its own (--cpu N, or the launcher's binding) and move what runs there "
               "(`ps -eLo psr,pid,comm | sort -n` lists who runs where)")
GOVERNOR_COST = ("each message runs at the lowered clock and pays its ramp (a latency run is too light for the "
                 "governor to raise the clock)")
GOVERNOR_FIX = ("the 'performance' governor on both hosts while measuring (`cpupower frequency-set -g performance`, "
                "or the firmware's performance profile)")
IDLE_COST = ("every message wakes the CPU from idle and adds that state's exit latency (about 40 us per message on "
             "a quiet haltpoll VM, measured)")
IDLE_FIX = ("--poll busy, or --hold-cpu-latency (holds /dev/cpu_dma_latency at 0 during the run), or shallower "
            "idle states (`cpupower idle-set -D 10`)")


def _cpu(rec: Mapping[str, Any]) -> Cause:
    """What took an engine's CPU from it: another process (any run), or the CPU's own power
    management (latency runs: the frequency governor, deep idle states of a blocking engine)."""
    hog, governor, idle = _cpu_hog(rec), _cpu_governor(rec), _cpu_idle(rec)
    seen = [(found, cost, fix) for (found, _, _), cost, fix in
            ((hog, CPU_HOG_COST, CPU_HOG_FIX), (governor, GOVERNOR_COST, GOVERNOR_FIX), (idle, IDLE_COST, IDLE_FIX))
            if found]
    if seen:
        return Cause("cpu", "seen", "; ".join(f for found, _, _ in seen for f in found),
                     cost="; ".join(cost for _, cost, _ in seen), fix="; ".join(fix for _, _, fix in seen))
    facts = hog[2] + hog[1] + governor[1] + idle[1] + governor[2]
    return Cause("cpu", "unchecked" if hog[2] else "clear", "; ".join(facts))


def _buffer_fixed(rec: Mapping[str, Any], option: str) -> int:
    """The bytes the user fixed a socket buffer at (``--tcp-sndbuf``/``--tcp-rcvbuf``), 0 = autotuned."""
    return count_at(member(member(rec, "config"), "backend_options"), option) or 0


def _buffers(rec: Mapping[str, Any]) -> Cause:
    """A socket buffer the user fixed below what the stream needed in flight: the window could not
    open past it. The bandwidth-delay product the record can show is the rate achieved times the
    sender's TCP_INFO round trip (the link rate of a virtual device is unknown); a stream the buffer
    held back fills it, one with room to spare leaves it mostly empty."""
    tr = member(rec, "transport")
    local = member(tr, "local")
    if not _tcp_kernel(local):
        return Cause("buffers", "unchecked", f"the {local.get('kind') or '?'} transport does not report its socket "
                                             "buffers (only kernel TCP does)")
    snd, rcv = _buffer_fixed(rec, "tcp-sndbuf"), _buffer_fixed(rec, "tcp-rcvbuf")
    if not snd and not rcv:
        return Cause("buffers", "clear", "send and receive buffers autotuned by the kernel (they grow with the window "
                                         "up to net.ipv4.tcp_wmem/tcp_rmem's maximum, which the record does not carry)")
    gbps = rec.get("bandwidth_gbps")
    rate = float(gbps) * 1e9 / 8 if isinstance(gbps, (int, float)) and gbps > 0 else None
    size = count_at(rec, "size") or 0
    seen: list[str] = []
    clear: list[str] = []
    unchecked: list[str] = []
    for sender in _senders(rec):
        receiver = "peer" if sender == "local" else "local"
        rtt_us = count_at(member(tr, sender), "rtt_us")
        who = "the client" if sender == "local" else "the server"
        # The smaller of the fixed buffers on this direction: the sender's send, the receiver's receive.
        limits = [(f"{who}'s send buffer", snd, count_at(member(tr, sender), "sndbuf_bytes"), "--tcp-sndbuf"),
                  (f"the {'server' if sender == 'local' else 'client'}'s receive buffer", rcv,
                   count_at(member(tr, receiver), "rcvbuf_bytes"), "--tcp-rcvbuf")]
        fixed = [(name, req, eff, opt) for name, req, eff, opt in limits if req]
        if not fixed:
            continue
        name, req, eff, opt = min(fixed, key=lambda f: (f[2] or 2 * f[1]) // 2)
        payload = (eff or 2 * req) // 2
        buf = f"{name} fixed by {opt} {_fmt(req)} B (effective {_fmt(eff or 2 * req)} B, ~{_fmt(payload)} B of payload)"
        if rec.get("pattern") == "lat":
            # A ping-pong has one message in flight: the buffer limits it when the message does not fit.
            (seen if size > payload else clear).append(f"{buf} against one {_fmt(size)} B message in flight")
            continue
        if rate is None or rtt_us is None:
            missing = "round trip (TCP_INFO rtt: an older engine)" if rtt_us is None else "achieved rate"
            unchecked.append(f"{buf}: the record carries no {missing}")
            continue
        bdp = rate * rtt_us / 1e6
        fact = (f"{buf} against {_fmt(round(bdp))} B in flight ({rate * 8 / 1e9:.2f} Gb/s achieved x {who}'s "
                f"round trip {_fmt(rtt_us)} us, TCP_INFO)")
        (seen if bdp >= BUFFER_FILL * payload else clear).append(fact)
    if seen:
        return Cause("buffers", "seen", "; ".join(seen) + ": the window was held to the buffer",
                     cost="one buffer per round trip: the stream can go no faster than buffer / round trip however "
                          "fast the link is, and the longer the path's round trip the lower that ceiling",
                     fix="leave --tcp-sndbuf/--tcp-rcvbuf at 0 (kernel autotuning) or set them to at least the "
                         "bandwidth-delay product (link rate x round trip); a value above net.core.wmem_max/"
                         "rmem_max is cut to it (sysctl -w net.core.wmem_max=... net.core.rmem_max=...)")
    if unchecked and not clear:
        return Cause("buffers", "unchecked", "; ".join(unchecked))
    return Cause("buffers", "clear", "; ".join(clear + unchecked) or "no fixed buffer on a direction that sends")


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


# The wire efficiency at the active MTU: payload bytes per packet over what the link carries for
# that packet. RoCE on Ethernet, per packet: preamble + start-of-frame delimiter (8, IEEE 802.3
# clause 3.2.1-2), the Ethernet header (14: two MACs and the EtherType), the frame check sequence
# (4), the inter-frame gap (12 byte times, 802.3 4.4.2): 38 B that every Ethernet frame costs.
ETHERNET_FRAMING = 8 + 14 + 4 + 12
# Above Ethernet, RoCE v2 (IBTA Annex A17): IPv4 (20) or IPv6 (40), UDP (8, port 4791), the IB base
# transport header (BTH, 12) and the invariant CRC (ICRC, 4). RoCE v1 (Annex A16) carries the IB
# global route header (GRH, 40) instead of IP and UDP. Extension headers (RETH 16 on the first
# packet of a write, AETH on acknowledgements) are per message, not per packet: left out.
IPV4_HEADER, IPV6_HEADER, UDP_HEADER, GRH = 20, 40, 8, 40
BTH, ICRC = 12, 4
# InfiniBand per packet (IBTA vol. 1, 5.2 and 7.8): the local route header (LRH, 8), BTH (12),
# ICRC (4) and the variant CRC (VCRC, 2); a GRH (40) when the QPs route through it.
LRH, VCRC = 8, 2
# TCP per segment on top of the MSS (the payload TCP_MAXSEG reports): IP (20 or 40), TCP (20) and
# the timestamp option (12, Linux's default), then the Ethernet framing above: TCP_OVERHEAD + 38.
# Ethernet is assumed (an IPoIB netdev's framing differs).
# The IB port rate as the kernel prints it (and the engine reports it: ibv_query_port's width x
# speed): SDR, DDR and QDR are signalling rates over 8b/10b line coding, so the data rate is 80 %
# of them; FDR10 and later are data rates after their coding (64b/66b; HDR/NDR PAM4 with FEC),
# except that FDR's 14 Gb/s per lane is a rounding of 14.0625 GBd x 64/66 = 13.64 Gb/s of data.
IB_LINE_CODING = {"SDR": (0.8, "a signalling rate: 8b/10b leaves 80 % for data"),
                  "DDR": (0.8, "a signalling rate: 8b/10b leaves 80 % for data"),
                  "QDR": (0.8, "a signalling rate: 8b/10b leaves 80 % for data"),
                  "FDR": (14.0625 * 64 / 66 / 14, "FDR's 14 Gb/s a lane is 14.0625 GBd x 64/66 = 13.64 Gb/s of data")}
# PCIe generation by GT/s a lane, for the basis text.
PCIE_GENERATION = {2.5: "1.0", 5.0: "2.0", 8.0: "3.0", 16.0: "4.0", 32.0: "5.0", 64.0: "6.0"}


def _f(obj: Mapping[str, Any], key: str) -> float | None:
    """A positive finite number (a float: IB rates are not whole, 2.5 and 14 Gb/s a lane)."""
    v = number_at(obj, key)
    return v if v is not None and v > 0 else None


def _gbps(x: float) -> str:
    return f"{x:.3g}" if x < 10 else f"{x:.1f}".removesuffix(".0")


def _wire(dev: Mapping[str, Any], local: Mapping[str, Any]) -> tuple[float | None, str]:
    """(payload share of the link, what it is) for the transport that carried the run; dev is the
    verbs device's description (local itself, or one of local["devices"])."""
    kind = dev.get("kind") or local.get("kind")
    if kind == "verbs":
        mtu = count_at(member(dev, "mtu"), "used")
        if not mtu:
            return None, "wire efficiency unknown: the record carries no path MTU"
        gid = member(dev, "gid")
        if dev.get("link_layer") == "InfiniBand":
            grh = GRH if gid.get("grh") is True else 0
            over = LRH + grh + BTH + ICRC + VCRC
            what = f"InfiniBand at MTU {mtu:,}: {mtu:,} B per packet + {over} B of LRH{', GRH' if grh else ''}, BTH, ICRC, VCRC"
        elif gid.get("type") == "RoCE v1":
            over = ETHERNET_FRAMING + GRH + BTH + ICRC
            what = f"RoCE v1 at MTU {mtu:,}: {mtu:,} B per packet + {over} B of headers and framing"
        else:
            ip = IPV4_HEADER if gid.get("ipv4") else IPV6_HEADER
            over = ETHERNET_FRAMING + ip + UDP_HEADER + BTH + ICRC
            what = f"RoCE v2 at MTU {mtu:,}: {mtu:,} B per packet + {over} B of headers and framing"
        return mtu / (mtu + over), what
    if _tcp_kernel(local):
        mss = count_at(local, "mss")
        if not mss:
            return None, "wire efficiency unknown: the record carries no MSS"
        addr = str(local.get("local_address") or "")
        over = TCP_OVERHEAD + (IPV6_HEADER - IPV4_HEADER if addr.startswith("[") else 0) + ETHERNET_FRAMING
        return mss / (mss + over), f"TCP at MSS {mss:,}: {mss:,} B per segment + {over} B of TCP/IP headers and Ethernet framing"
    return None, f"wire efficiency of the {kind or '?'} transport unknown"


def _pcie(dev: Mapping[str, Any]) -> tuple[float | None, str]:
    """(usable Gb/s of the device's PCIe link, its description) or (None, why unknown)."""
    p = member(dev, "pcie")
    usable, gts, width = _f(p, "usable_gbps"), _f(p, "gts"), count_at(p, "width")
    if not usable or not gts or not width:
        return None, f"PCIe unknown: {dev.get('pcie_source') or 'the record carries no PCIe link'}"
    gen = PCIE_GENERATION.get(gts, f"{gts:g} GT/s")
    return usable, (f"PCIe {gen} x{width} {_gbps(usable)} Gb/s usable after {p.get('encoding') or 'its line coding'} "
                    "(TLP/DLLP overhead lowers it further, to ~85-90 %)")


def _ceiling(dev: Mapping[str, Any], local: Mapping[str, Any]) -> tuple[float | None, str]:
    """The ceiling of one carrying device: min(link rate x wire efficiency, PCIe usable), and the
    basis naming each term and which one bounds."""
    rate = _f(dev, "rate_gbps")
    pcie, pcie_text = _pcie(dev)
    if not rate:
        name = dev.get("netdev") or local.get("address_owner") or dev.get("device") or dev.get("kind") or "?"
        why = dev.get("rate_source") or "virtual devices have none"
        return None, f"the record carries no link rate for {name} ({why}); {pcie_text}"
    coding, coding_text = IB_LINE_CODING.get(str(dev.get("ib_speed")), (1.0, ""))
    eff, wire_text = _wire(dev, local)
    link = rate * coding * (eff or 1.0)
    text = f"link {_gbps(rate)} Gb/s [{dev.get('rate_source') or 'its source not recorded'}]"
    if coding != 1.0:
        text += f" x {coding * 100:.1f} % ({dev.get('ib_speed')}: {coding_text})"
    if eff:
        text += f" x {eff * 100:.1f} % ({wire_text})"
    text += f" = {_gbps(link)} Gb/s" if eff or coding != 1.0 else ""
    if not eff:
        text += f" ({wire_text}: not applied)"
    if pcie is None:
        return link, f"{text}; {pcie_text}: the link bounds"
    bound = "the link bounds" if link <= pcie else "PCIe bounds"
    return min(link, pcie), f"{text}; {pcie_text}: {bound}"


# A latency record read on its own (compare, report, suite, a stored run): no reference was sought.
LATENCY_BASIS = ("latency has no universal ceiling; `fabscope run` takes the fabric's own best p50 of the same case "
                 "from the history as the reference (--reference TAG|RUN names one)")


def _four_digits(fraction: float) -> float:
    """Four significant digits, not four decimals: a TCG guest's 1.4 % of its ceiling keeps its
    precision as well as a NIC's 92 %."""
    return float(f"{fraction:.4g}")


def _expected(rec: Mapping[str, Any]) -> tuple[float | None, str, float | None]:
    """The bandwidth ceiling of the carrying device(s) (issue 20): the lowest of the link rate times
    the wire efficiency at the active MTU/MSS and the PCIe link's usable rate; several devices
    (verbs --device A,B) add up; bibw moves both directions of a full-duplex link at once."""
    local = member(member(rec, "transport"), "local")
    if rec.get("pattern") == "lat":
        return None, LATENCY_BASIS, None
    devs = [d for d in local.get("devices") or [] if isinstance(d, Mapping)] or [local]
    parts = [_ceiling(d, local) for d in devs]
    basis = "; ".join(f"{d.get('device')}: {t}" for d, (_, t) in zip(devs, parts, strict=True)) if len(devs) > 1 else parts[0][1]
    known = [g for g, _ in parts if g]
    if len(known) < len(parts):
        return None, basis, None
    rate = sum(known)
    if len(devs) > 1:
        basis += f"; the devices together: {_gbps(rate)} Gb/s"
    if rec.get("pattern") == "bibw":
        rate *= 2
        basis += f"; both directions at once (bibw): 2 x = {_gbps(rate)} Gb/s"
    got = rec.get("bandwidth_gbps")
    frac = _four_digits(float(got) / rate) if isinstance(got, (int, float)) and not isinstance(got, bool) else None
    return round(rate, 4), basis, frac


def _us(x: float) -> str:
    return f"{x:.3f}" if x < 1 else f"{x:.2f}"


def _day(when: str) -> str:
    """The date of an ISO time (a range of them: FIRST..LAST), for the basis text."""
    first, _, last = when.partition("..")
    a, b = first[:10], last[:10]
    return a if not b or a == b else f"{a} to {b}"


def _reference_basis(ref: LatencyReference) -> str:
    tag = f"tag {ref.tag}, " if ref.tag else ""
    n = ref.runs_considered
    if ref.named is None:
        return (f"the fabric's own best: p50 {_us(ref.p50_us)} us in run {ref.run_id} ({tag}{_day(ref.when)}), "
                f"the best of {n} stored run{'s' if n != 1 else ''} of this case")
    if ref.run_id is not None:
        return (f"the reference named (--reference {ref.named}): p50 {_us(ref.p50_us)} us in run {ref.run_id} "
                f"({tag}{_day(ref.when)})")
    runs = ", ".join(str(i) for i in ref.run_ids)
    return (f"the reference named (--reference {ref.named}): the median p50 {_us(ref.p50_us)} us of {n} runs of "
            f"this case (runs {runs}; {tag}{_day(ref.when)})")


def with_reference(expl: Explanation, p50_us: float, found: LatencyReference | None, history: str,
                   unread: str | None = None) -> Explanation:
    """A latency explanation with its reference from the history (fabscope/reference.py looks it
    up): ``achieved_fraction`` = the reference's p50 / this run's p50 (1.0: as good as the
    reference; 0.5: twice as slow). No reference: the basis says why (``unread``: the history
    could not be read, and why; else no earlier run of this case is in ``history``)."""
    if found is None:
        why = (f"the history ({history}) could not be read ({unread})" if unread
               else f"no earlier run of this case in the history ({history})")
        return replace(expl, expected_basis=f"{why}: latency has no universal ceiling, so this run has no reference",
                       achieved_fraction=None, reference=None, reference_sought=True)
    frac = _four_digits(found.p50_us / p50_us) if p50_us > 0 else None
    return replace(expl, expected_basis=_reference_basis(found), achieved_fraction=frac, reference=found,
                   reference_sought=True)


def _delay(rec: Mapping[str, Any], reference: DelayReference | None = None) -> Cause:
    """Queueing delay on the path (delay.py decides): the round trip against the path's own floor and,
    given, the round trip of the same case's clean runs in the history."""
    state, evidence = judge_delay(rec, _senders(rec), reference)
    return Cause("delay", state, evidence, DELAY_COST if state == "seen" else None, DELAY_FIX if state == "seen" else None)


def _route(rec: Mapping[str, Any]) -> Cause:
    """A misrouted result (the path verdict's) with what chose the device that carried it (misroute.py)."""
    path = member(rec, "path")
    verdict, asked = path.get("verdict"), path.get("requested")
    if verdict == "verified":
        return Cause("route", "clear", f"the bytes took {asked}, the device asked for")
    if verdict == "not-requested":
        return Cause("route", "clear", "no device was asked for: whichever the bytes took is the one asked")
    if verdict != "misrouted":
        return Cause("route", "unchecked", f"the path is {verdict or 'not judged'}: {path.get('reason') or 'no verdict'}")
    carriers = member(member(path, "sides"), "local").get("carriers")
    carrier = carriers[0].get("device") if isinstance(carriers, list) and carriers and isinstance(carriers[0], Mapping) \
        else "another device"
    found = route_reasons(rec)
    cost = f"the result measures {carrier}, not {asked}"
    if not found:
        return Cause("route", "seen", f"the bytes left by {carrier}, not {asked}; the library's report in the record "
                     "names no setting that chose it", cost,
                     f"`fabscope doctor --device {asked}` checks the settings that choose a device")
    return Cause("route", "seen", "; ".join(r for r, _ in found), cost, "; ".join(dict.fromkeys(f for _, f in found)))


def _bandwidth_basis(ref: BandwidthReference) -> str:
    tag = f"tag {ref.tag}, " if ref.tag else ""
    n = ref.runs_considered
    if ref.named is None:
        return (f"its own best: {_gbps(ref.gbps)} Gb/s in run {ref.run_id} ({tag}{_day(ref.when)}), the best of {n} "
                f"stored run{'s' if n != 1 else ''} of this case")
    if ref.run_id is not None:
        return (f"the reference named (--reference {ref.named}): {_gbps(ref.gbps)} Gb/s in run {ref.run_id} "
                f"({tag}{_day(ref.when)})")
    return (f"the reference named (--reference {ref.named}): the median {_gbps(ref.gbps)} Gb/s of {n} runs of this case "
            f"({tag}{_day(ref.when)})")


def with_bandwidth_reference(expl: Explanation, gbps: float, found: BandwidthReference | None, history: str,
                             unread: str | None = None) -> Explanation:
    """A bandwidth explanation with its reference from the history (fabscope/reference.py looks it
    up). Where no ceiling is known (no link rate), the reference is what the run is measured against
    (``achieved_fraction`` = this run / the reference); where one is, the basis also says how far
    below its own best the run is."""
    if found is None:
        why = (f"the history ({history}) could not be read ({unread})" if unread
               else f"no earlier run of this case in the history ({history})")
        return replace(expl, expected_basis=f"{expl.expected_basis}; {why} to compare with", reference_sought=True)
    versus = (f"{found.gbps / gbps:.2f} x below {_bandwidth_basis(found)}" if gbps < found.gbps
              else f"at or above {_bandwidth_basis(found)}")
    if expl.expected_gbps is None:
        frac = _four_digits(gbps / found.gbps) if found.gbps > 0 else None
        return replace(expl, expected_basis=f"{expl.expected_basis}; this run: {versus}", achieved_fraction=frac,
                       bandwidth_reference=found, reference_sought=True)
    return replace(expl, expected_basis=f"{expl.expected_basis}; this run: {versus}", bandwidth_reference=found,
                   reference_sought=True)


def with_delay_reference(expl: Explanation, rec: Mapping[str, Any], found: DelayReference | None) -> Explanation:
    """The explanation with its delay cause read again against the round trip the same case showed on
    its clean runs in the history (fabscope/reference.py finds them: ``find_delay_reference``); None
    found: as it was (the cause then reads the connection's own floor)."""
    if found is None:
        return expl
    causes = tuple(_delay(rec, found) if c.cause == "delay" else c for c in expl.causes)
    return replace(expl, causes=causes, delay_reference=found)


def explain(rec: Mapping[str, Any], counters: Counters | None = None) -> Explanation:
    """The explanation of one ``fabscope.result`` record (with its ``path`` already attached);
    ``counters``: the record's, when the caller has parsed them already (``parse_record`` has)."""
    counters = Counters.of_record(rec) if counters is None else counters
    expected, basis, frac = _expected(rec)
    causes = (_segmentation(rec), _retransmission(rec, counters), _mtu(rec), _placement(rec), _cpu(rec),
              _buffers(rec), _link(rec, counters), _delay(rec), _route(rec))
    return Explanation(expected_gbps=expected, expected_basis=basis, achieved_fraction=frac, causes=causes)
