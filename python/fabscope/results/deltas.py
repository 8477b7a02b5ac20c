# SPDX-License-Identifier: BSD-3-Clause
"""Counter deltas: one side's before/after snapshots (as the engine emits them) -> bytes per device.

Owns the counter arithmetic only: 4-byte words of IB ``port_*_data``, 32-bit saturation and wrap,
resets, Soft-RoCE's packet-only ``hw_counters``. The engine is the one counter reader; this module
never reads sysfs (the testbed's own sysfs reader is ``fabscope.testbed.sysfs_counters``).

Optional keys the engine may add to an rdma entry: ``ndevs`` (list of netdev names), ``bits`` (32
or 64: the counter width, when known) and ``overflow`` (``"saturate"`` - the PMA PortCounters
behaviour the kernel exposes for 32-bit counters - or ``"wrap"``). Keys of RDMA ports are
``<device>/<port>``; a netdev name cannot contain ``/`` so the two namespaces never collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NET_FIELDS", "RDMA_FIELDS", "RDMA_MAP", "DeviceDelta", "as_count", "counter_deltas"]

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
RDMA_MAP = {
    "port_xmit_data": ("tx_bytes", 4),
    "port_rcv_data": ("rx_bytes", 4),
    "port_xmit_packets": ("tx_packets", 1),
    "port_rcv_packets": ("rx_packets", 1),
}
# Soft-RoCE (rxe) keeps packet counts in hw_counters and has no byte counters at all.
_RDMA_HW_PACKETS = {"port_xmit_packets": "hw_sent_pkts", "port_rcv_packets": "hw_rcvd_pkts"}
_U32_MAX = 0xFFFFFFFF
_U64_MOD = 1 << 64



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




def as_count(value: object) -> int | None:
    # bool is an int subclass; a true/false counter is a malformed record.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def wrapped_at_32(before: int, after: int, bits: int | None, overflow: str | None) -> bool:
    """Whether a counter that went from ``before`` down to ``after`` wrapped at 32 bits: only when
    the engine says it is a 32-bit wrapping counter. A counter of unknown width is never guessed
    to have wrapped (a reset looks the same); a value above 2^32-1 proves a wider counter. The one
    rule for the run deltas here and for the exporter's series between scrapes."""
    return after < before <= _U32_MAX and bits == 32 and overflow == "wrap"


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
    b, a = as_count(before), as_count(after)
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
    if wrapped_at_32(b, a, width, overflow):
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
        for counter, (target, unit) in RDMA_MAP.items():
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


