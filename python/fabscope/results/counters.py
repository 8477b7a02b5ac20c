# SPDX-License-Identifier: BSD-3-Clause
"""The counters of a result record, typed: each side's snapshot of its netdevs and RDMA ports around
the run (``counters.local`` / ``counters.peer``, as the engine read them), the driver's pause
statistics behind an RDMA port, and TCP_INFO of the sockets a transport library opened.

One parser (``Counters.of``) for every reader: the explanation, the path verdict, the preload's
device, the matrix's error counters. A record is network input or a file: a missing or malformed
part reads as absent (``None``, empty), never as an exception; what the counters mean (4-byte
words, 32-bit wrap, resets) stays with ``deltas.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..untyped import count, member
from .deltas import DeviceDelta, counter_deltas

__all__ = ["CounterSide", "Counters", "DeviceCounters", "TcpSockets"]


def _numbers(obj: Mapping[str, Any]) -> dict[str, int]:
    """The numeric values of a before/after snapshot (other keys, as ``ethtool``, left out)."""
    return {str(k): n for k, v in obj.items() if (n := count(v)) is not None}


@dataclass(frozen=True)
class DeviceCounters:
    """One netdev's or RDMA port's counters before and after the run."""

    name: str  # a netdev (``eth0``) or an RDMA port (``rxe0/1``)
    kind: str  # "net" or "rdma"
    before: Mapping[str, int]
    after: Mapping[str, int]
    ndevs: tuple[str, ...] = ()  # rdma: the netdevs behind the port
    # net: the driver's pause/PFC statistics (`ethtool -S`), read only for a netdev behind an RDMA
    # port: None where the engine did not ask (no RDMA port on it, a sysfs fixture, an older
    # engine); an empty mapping where the driver lists none.
    ethtool_before: Mapping[str, int] | None = None
    ethtool_after: Mapping[str, int] | None = None
    addresses: tuple[str, ...] = ()  # net: its addresses, as the engine listed them

    def delta(self, key: str) -> int | None:
        """after - before of one counter, or None where either is missing."""
        a, b = self.after.get(key), self.before.get(key)
        return a - b if a is not None and b is not None else None

    def ethtool(self) -> DeviceCounters | None:
        """The driver's pause statistics as a device of their own (before/after), or None (see
        ``ethtool_after``)."""
        if self.ethtool_after is None:
            return None
        return DeviceCounters(self.name, self.kind, self.ethtool_before or {}, self.ethtool_after)

    @staticmethod
    def of(name: str, kind: str, raw: Mapping[str, Any]) -> DeviceCounters:
        before, after = member(raw, "before"), member(raw, "after")
        eth_after = after.get("ethtool")
        ndevs = raw.get("ndevs")
        addresses = raw.get("addresses")
        return DeviceCounters(
            name=name, kind=kind, before=_numbers(before), after=_numbers(after),
            ndevs=tuple(str(n) for n in ndevs) if isinstance(ndevs, list) else (),
            ethtool_before=_numbers(member(before, "ethtool")) if isinstance(eth_after, Mapping) else None,
            ethtool_after=_numbers(eth_after) if isinstance(eth_after, Mapping) else None,
            addresses=tuple(str(a) for a in addresses) if isinstance(addresses, list) else (),
        )


@dataclass(frozen=True)
class TcpSockets:
    """TCP_INFO over the run of the TCP sockets a transport library opened (UCX's tcp transport,
    libfabric's tcp-based providers, MPI's tcp btl), read by the engine from its own descriptors,
    the control connection left out. A field is None where the engine could not read it."""

    sockets: int | None
    data_segs_out: int | None
    total_retrans: int | None
    dsack_dups: int | None

    @staticmethod
    def of(raw: Mapping[str, Any]) -> TcpSockets:
        return TcpSockets(*(count(raw.get(k)) for k in ("sockets", "data_segs_out", "total_retrans", "dsack_dups")))


@dataclass(frozen=True)
class CounterSide:
    """One engine's snapshot: its host's netdevs and RDMA ports."""

    host: str | None
    net: Mapping[str, DeviceCounters]
    rdma: Mapping[str, DeviceCounters]
    tcp_sockets: TcpSockets | None
    raw: Mapping[str, Any] = field(repr=False)

    def netdev(self, name: str) -> DeviceCounters | None:
        return self.net.get(name)

    def rdma_behind(self, netdev: str) -> str | None:
        """The RDMA device whose port sits on ``netdev`` (``rxe0`` for ``eth0``), or None."""
        for port in self.rdma.values():
            if netdev and netdev in port.ndevs:
                return port.name.split("/", 1)[0]
        return None

    def netdevs_behind_rdma(self) -> Iterator[DeviceCounters]:
        """Each netdev behind one of this side's RDMA ports, once (a bond, a port's two GIDs)."""
        for name in dict.fromkeys(n for port in self.rdma.values() for n in port.ndevs):
            if name in self.net:
                yield self.net[name]

    def deltas(self) -> dict[str, DeviceDelta]:
        """Bytes and packets per device (``deltas.counter_deltas``: words, wraps and resets)."""
        return counter_deltas(self.raw)

    @staticmethod
    def of(raw: Mapping[str, Any]) -> CounterSide:
        host = raw.get("host")
        socks = raw.get("tcp_sockets")
        return CounterSide(
            host=str(host) if host else None,
            net={str(k): DeviceCounters.of(str(k), "net", v) for k, v in member(raw, "net").items()
                 if isinstance(v, Mapping)},
            rdma={str(k): DeviceCounters.of(str(k), "rdma", v) for k, v in member(raw, "rdma").items()
                  if isinstance(v, Mapping)},
            tcp_sockets=TcpSockets.of(socks) if isinstance(socks, Mapping) else None,
            raw=raw,
        )


@dataclass(frozen=True)
class Counters:
    """Both engines' snapshots; a side is None where the record has none."""

    local: CounterSide | None
    peer: CounterSide | None

    def side(self, name: str) -> CounterSide | None:
        return self.local if name == "local" else self.peer if name == "peer" else None

    @staticmethod
    def of(raw: object) -> Counters:
        """``raw``: a record's ``counters`` object (anything: a malformed one reads as empty)."""
        c: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        local, peer = c.get("local"), c.get("peer")
        return Counters(CounterSide.of(local) if isinstance(local, Mapping) else None,
                        CounterSide.of(peer) if isinstance(peer, Mapping) else None)

    @staticmethod
    def of_record(record: Mapping[str, Any]) -> Counters:
        return Counters.of(record.get("counters"))
