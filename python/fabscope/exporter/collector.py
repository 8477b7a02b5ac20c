# SPDX-License-Identifier: BSD-3-Clause
"""The Prometheus collector: one engine snapshot per scrape into metric families, plus fabscope's
latest results (see the package docstring for what is exported and why)."""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ..errors import FabscopeError
from ..inventory import EngineInventory
from ..untyped import mapping
from .results import ResultsSource
from .snapshot import (
    CounterUnwrapper,
    SnapshotEngine,
    as_count,
    as_list,
    int_text,
    mtu_text,
    rate_bytes,
    state_code,
    unit_info,
    unit_table,
    unwound_offset,
)
from .text import Exposition, series, value_text

__all__ = ["INVENTORY_REFRESH_S", "VERDICTS", "ActiveMtu", "FabscopeCollector", "iter_metric_names", "render"]

#: Seconds between two --inventory-json queries (active MTU).
INVENTORY_REFRESH_S = 300.0


def _word_bytes() -> dict[str, int]:
    """Bytes per unit of the RDMA counters the path verdict converts (port_*_data: 4-byte words)."""
    from ..results import deltas  # the verdict owns the words-to-bytes rule; one copy of it

    return {counter: unit for counter, (_field, unit) in deltas.RDMA_MAP.items()}


# ---------------------------------------------------------------------------------------------
# what each counter is called in Prometheus
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Named:
    metric: str
    what: str


# counters/<file> -> metric (without the fabscope_rdma_port_ prefix) and what it counts. The help text
# adds the file, and the unit, width and overflow behaviour from the engine's table (their one owner).
_RDMA_COUNTERS: dict[str, _Named] = {
    "port_xmit_data": _Named("transmit_bytes", "Data bytes transmitted"),
    "port_rcv_data": _Named("receive_bytes", "Data bytes received"),
    "port_xmit_packets": _Named("transmit_packets", "Packets transmitted"),
    "port_rcv_packets": _Named("receive_packets", "Packets received"),
    "unicast_xmit_packets": _Named("unicast_transmit_packets", "Unicast packets transmitted"),
    "unicast_rcv_packets": _Named("unicast_receive_packets", "Unicast packets received"),
    "multicast_xmit_packets": _Named("multicast_transmit_packets", "Multicast packets transmitted"),
    "multicast_rcv_packets": _Named("multicast_receive_packets", "Multicast packets received"),
    "symbol_error": _Named("symbol_errors", "Minor link errors on any lane"),
    "link_downed": _Named("link_downed", "Times the link went down after training"),
    "link_error_recovery": _Named("link_error_recoveries", "Successful link error recoveries"),
    "port_rcv_errors": _Named("receive_errors", "Received packets with errors"),
    "port_rcv_remote_physical_errors": _Named("receive_remote_physical_errors", "Received packets marked bad by the sender"),
    "port_rcv_switch_relay_errors": _Named("receive_switch_relay_errors", "Packets a switch could not relay"),
    "port_xmit_discards": _Named("transmit_discards", "Outbound packets discarded"),
    "port_xmit_constraint_errors": _Named("transmit_constraint_errors", "Packets not sent for partition/raw constraints"),
    "port_rcv_constraint_errors": _Named("receive_constraint_errors", "Packets dropped for partition/raw constraints"),
    "local_link_integrity_errors": _Named("local_link_integrity_errors", "Local physical errors over the threshold"),
    "excessive_buffer_overrun_errors": _Named("excessive_buffer_overrun_errors", "Consecutive buffer overruns"),
    "VL15_dropped": _Named("vl15_dropped", "Subnet management packets dropped"),
    "port_xmit_wait": _Named("transmit_wait_ticks", "Ticks the port had data to send but no credits"),
}

_NET_STATS: dict[str, _Named] = {
    "tx_bytes": _Named("transmit_bytes", "Bytes transmitted"),
    "rx_bytes": _Named("receive_bytes", "Bytes received"),
    "tx_packets": _Named("transmit_packets", "Packets transmitted"),
    "rx_packets": _Named("receive_packets", "Packets received"),
    "tx_errors": _Named("transmit_errors", "Transmit errors"),
    "rx_errors": _Named("receive_errors", "Receive errors"),
    "tx_dropped": _Named("transmit_dropped", "Packets dropped on transmit"),
    "rx_dropped": _Named("receive_dropped", "Packets dropped on receive"),
}


def _help(what: str, name: str, directory: str, info: tuple[int | None, str | None, str | None], scale: int = 1) -> str:
    """``"Data bytes transmitted (counters/port_xmit_data: 4-byte words, x4 here, width not known, saturates)"``."""
    bits, overflow, unit = info
    parts = [unit or "unit unknown"]
    if scale != 1:
        parts[0] += f", x{scale} here"
    parts.append(f"{bits}-bit" if bits else "width not known")
    if overflow:
        parts.append({"saturate": "saturates", "wrap": "wraps (unwound here)", "none": "does not wrap"}.get(overflow, overflow))
    return f"{what} ({directory}{name}: {', '.join(parts)})"


_PORT_LABELS = ["device", "port", "link_layer", "netdev", "node_guid"]
_NET_LABELS = ["netdev", "rdma_device"]
_CASE_LABELS = ["host", "peer", "backend", "op", "pattern", "size", "device"]
# label names of the series written per port, netdev and device (tuples: the series cache's keys)
_PORT_NAMES = tuple(_PORT_LABELS)
_PMA_NAMES = (*_PORT_LABELS, "counter")
_INFO_NAMES = (*_PORT_LABELS, "driver", "state", "phys_state", "rate")
_DEV_NAMES = ("device", "driver", "counter")
_NET_NAMES = tuple(_NET_LABELS)
_ETHTOOL_NAMES = (*_NET_LABELS, "counter")
VERDICTS = ("verified", "misrouted", "unverifiable", "not-requested")


_HW_HELP = ("Every driver counter of the port, raw (ports/N/hw_counters/<counter>: packets or events as the "
            "driver counts them)")
#: Port directories (counters/, hw_counters/ of one port) whose series plans are kept between scrapes
#: at most (64 ports make 128).
_MAX_ROWS = 4096


@dataclass(eq=False)
class _Plan:
    """What one counter of one RDMA port or netdev becomes, worked out at its first scrape and kept:
    the names, help text (with the engine's unit) and label values do not change between scrapes."""

    counter: str  # the file
    metric: str
    help: str
    label_names: list[str]
    labels: tuple[str, ...]
    key: tuple[str, tuple[str, ...]]  # the series (metric, label values)
    bits: int | None
    overflow: str | None
    scale: int
    saturated_at: int | None  # the raw value of a saturating counter at its maximum
    # [last reading, offset (unwound wraps), its sample line]: shared with the collector's state of
    # the series, which outlives the plan (a units table or a port directory that changed)
    state: list[Any] = field(default_factory=lambda: [None, 0, ""])

    @cached_property
    def prefix(self) -> str:
        """The sample line up to its value: ``'NAME_total{labels} '``."""
        return series(f"{self.metric}_total", tuple(self.label_names), self.labels)

    def line(self, raw: object) -> str | None:
        """The sample line of a reading (None when it is not a count), its wraps unwound against the
        last reading. Most counters do not move between two scrapes: then it is the last line."""
        st = self.state
        if type(raw) is int and raw == st[0]:
            return str(st[2])
        v = as_count(raw)
        if v is None:
            return None
        offset = st[1] if st[0] is None or v > st[0] else unwound_offset(st[0], st[1], v, self.bits, self.overflow)
        st[:] = v, offset, f"{self.prefix}{value_text((v + offset) * self.scale)}\n"
        return str(st[2])


# ---------------------------------------------------------------------------------------------
# active MTU: libibverbs knows it, sysfs does not
# ---------------------------------------------------------------------------------------------


class ActiveMtu:
    """Active MTU of each RDMA port from the engine's ``--inventory-json`` (what ibv_query_port
    says; sysfs has no such file on most kernels). The query takes about a second, so a background
    thread refreshes it every ``INVENTORY_REFRESH_S`` and a scrape reads the last answer."""

    def __init__(self, source: Callable[[], EngineInventory]) -> None:
        self._source = source
        self._mtu: dict[tuple[str, str], int] = {}
        self._stop = threading.Event()

    def refresh(self) -> None:
        inv = self._source()
        mtu: dict[tuple[str, str], int] = {}
        if inv.verbs.ok:
            for dev in inv.verbs.devices:
                for port in dev.ports:
                    if port.active_mtu is not None:
                        mtu[(dev.name, str(port.port))] = port.active_mtu
        self._mtu = mtu  # one assignment: readers see the old table or the new one

    def start(self) -> None:
        def loop() -> None:
            while True:
                self.refresh()
                if self._stop.wait(INVENTORY_REFRESH_S):
                    return

        threading.Thread(target=loop, name="fabscope-exporter-inventory", daemon=True).start()

    def get(self, device: str, port: str) -> int | None:
        return self._mtu.get((device, port))


# ---------------------------------------------------------------------------------------------
# the collector
# ---------------------------------------------------------------------------------------------


class FabscopeCollector(Collector):
    """A prometheus_client collector: one engine snapshot per scrape, plus the latest results."""

    def __init__(
        self,
        engine: Path,
        *,
        sysfs_root: str | None = None,
        exclude: Iterable[str] = (),
        results: ResultsSource | None = None,
        active_mtu: ActiveMtu | None = None,
    ) -> None:
        self.engine = engine
        self.active_mtu = active_mtu
        self.sysfs_root = sysfs_root
        # One engine for the collector's life (files stay open between scrapes); ended with it.
        self.snapshots = SnapshotEngine(engine, sysfs_root)
        weakref.finalize(self, self.snapshots.close)
        self.exclude = frozenset(exclude)
        self.results = results or ResultsSource()
        self.unwrap = CounterUnwrapper()
        self._words = _word_bytes()
        self._plans: dict[tuple[Any, ...], list[_Plan | None]] = {}  # port or netdev directory -> its plans
        self._rows_seen: set[tuple[Any, ...]] = set()  # the directories this scrape saw
        self._plans_remade = False
        self._states: dict[tuple[str, tuple[str, ...]], list[Any]] = {}  # series -> _Plan.state
        self._plans_units: object = None
        # One scrape at a time: the unwrapping state must see the readings in the order they were taken.
        self._scrape = threading.Lock()

    # The registry calls describe() at registration; returning nothing keeps it from scraping then.
    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        """For a prometheus_client registry: the scrape's exposition read back into families (the
        exporter itself serves :meth:`exposition`, the one place the text is made)."""
        from prometheus_client.parser import text_string_to_metric_families

        return list(text_string_to_metric_families(self.exposition().text().decode()))

    def exposition(self) -> Exposition:
        """One scrape: the engine's snapshot, the ports, netdevs and results, in the text format."""
        with self._scrape:
            return self._scrape_once()

    def _scrape_once(self) -> Exposition:
        start = time.monotonic()
        out = Exposition()
        error = 0
        try:
            snap = self.snapshots.snapshot()
        except (FabscopeError, ValueError) as exc:
            error = 1
            snap = {"rdma": [], "net": []}
            out.add("fabscope_exporter_last_error", "gauge", "The last scrape's engine error (label: message)",
                    {"message": str(exc)[:300]}, 1)
        self._ports(snap, out)
        self._nets(snap, out)
        if not error:  # a failed snapshot saw nothing; keep the state for the next good one
            self.unwrap.forget_unseen()
            self._forget_unseen_rows()
        self._results(out)
        out.add("fabscope_exporter_scrape_error", "gauge", "1 when the engine's counter snapshot failed this scrape",
                {}, error)
        out.add("fabscope_exporter_scrape_duration_seconds", "gauge",
                "Time this scrape took, seconds (engine snapshot, conversion, results)", {}, time.monotonic() - start)
        return out

    # -- RDMA ports ---------------------------------------------------------------------------

    def _plans_for(self, snap: Mapping[str, Any]) -> dict[tuple[Any, ...], list[_Plan | None]]:
        """The series plans of each port directory (one per counter, in the snapshot's order), kept
        between scrapes while the engine's units table stays the same (a bounded cache: devices
        that come and go do not grow it for ever)."""
        units = snap.get("units")
        if units != self._plans_units or len(self._plans) > _MAX_ROWS:
            self._plans = {}
            self._plans_units = units
            self._plans_remade = True
        return self._plans

    def _row(self, key: tuple[Any, ...]) -> list[_Plan | None] | None:
        """The plans of one port or netdev directory (None at first sight: then _new_row)."""
        self._rows_seen.add(key)
        return self._plans.get(key)

    def _new_row(self, key: tuple[Any, ...], row: list[_Plan | None]) -> list[_Plan | None]:
        """Keep a directory's plans; each gets its series' state (last reading, offset), which
        survives a re-made plan."""
        for plan in row:
            if plan is not None:
                plan.state = self._states.setdefault(plan.key, plan.state)
        self._plans[key] = row
        return row

    def _forget_unseen_rows(self) -> None:
        """End of a good scrape: directories it did not see lose their plans, and series no plan
        holds lose their state (a device that went away starts afresh if it comes back)."""
        if len(self._rows_seen) != len(self._plans) or self._plans_remade:  # (seen rows are kept rows)
            self._plans = {k: v for k, v in self._plans.items() if k in self._rows_seen}
            held = {id(p.state) for row in self._plans.values() for p in row if p is not None}
            self._states = {k: v for k, v in self._states.items() if id(v) in held}
            self._plans_remade = False
        self._rows_seen = set()

    def _plan(self, snap: Mapping[str, Any], labels: tuple[str, ...], driver: str, directory: str, cname: str) -> _Plan | None:
        """What one counter file of one port becomes: family, help text, labels, width, scale."""
        bits, overflow, unit = unit_info(unit_table(snap, directory, driver), cname)
        if directory == "hw_counters":
            if cname == "lifespan":
                return None  # a setting (ms the driver caches hw counters), not a counter
            mname, lab = "fabscope_rdma_port_hw_stat", (*labels, driver, cname)
            return _Plan(cname, mname, _HW_HELP, [*_PORT_LABELS, "driver", "counter"], lab, (mname, lab), bits, overflow, 1, None)
        named = _RDMA_COUNTERS.get(cname)
        # port_*_data count 4-byte words; the engine's unit says so, the verdict's rule scales
        scale = self._words.get(cname, 1)
        # a width the engine cannot know (port_*_data, *_packets) saturates at 32 bits
        saturated_at = (1 << (bits or 32)) - 1 if overflow == "saturate" else None
        if named:
            mname, lab = f"fabscope_rdma_port_{named.metric}", tuple(labels)
            help_text = _help(named.what, cname, "counters/", (bits, overflow, unit), scale)
            return _Plan(cname, mname, help_text, _PORT_LABELS, lab, (mname, lab), bits, overflow, scale, saturated_at)
        mname, lab = "fabscope_rdma_port_pma_other", (*labels, cname)
        return _Plan(cname, mname, "Any other port counter, raw (counters/<counter>)", [*_PORT_LABELS, "counter"], lab,
                     (mname, lab), bits, overflow, scale, saturated_at)

    def _ports(self, snap: Mapping[str, Any], out: Exposition) -> None:
        self._plans_for(snap)
        lines, families = out.lines, out.families
        # Declared even when empty, so dashboards and alerts always find them.
        lines("fabscope_rdma_port_hw_stat", "counter", _HW_HELP)
        saturated = lines("fabscope_rdma_port_saturated", "gauge",
                          "1 when ports/N/counters/<counter> sits at its maximum: a saturated PMA counter no longer "
                          "counts (clear it: perfquery -R)")
        unreadable = lines("fabscope_rdma_port_unreadable", "gauge",
                           "1 when ports/N/counters/<counter> or hw_counters/<counter> gives no number "
                           "(iWARP ports print 'N/A (no PMA)')")
        unwrap = self.unwrap.value
        for p in snap.get("rdma", []):
            if not isinstance(p, Mapping) or p.get("device") in self.exclude:
                continue
            ndevs = as_list(p.get("ndevs"))
            labels = (
                str(p.get("device", "")),
                str(p.get("port", "")),
                str(p.get("link_layer", "")),
                ",".join(str(n) for n in ndevs),
                str(p.get("node_guid", "")),
            )
            driver = str(p.get("driver", ""))
            port_key = (*labels, driver)
            for directory in ("counters", "hw_counters"):
                values = p.get(directory)
                if not isinstance(values, Mapping):
                    continue
                names = tuple(values)
                key = (port_key, directory, names)
                row = self._row(key) or self._new_row(
                    key, [self._plan(snap, labels, driver, directory, cname) for cname in names])
                for plan, raw in zip(row, values.values(), strict=True):
                    if plan is None or (line := plan.line(raw)) is None:
                        continue
                    (families.get(plan.metric) or lines(plan.metric, "counter", plan.help)).append(line)
                    if raw == plan.saturated_at:
                        saturated.append(
                            series("fabscope_rdma_port_saturated", _PMA_NAMES, (*labels, plan.counter)) + "1.0\n")
            for cname in as_list(p.get("unreadable")):
                unreadable.append(series("fabscope_rdma_port_unreadable", _PMA_NAMES, (*labels, str(cname))) + "1.0\n")
            state = state_code(p.get("state"))
            if state is not None:
                self._port_gauge(out, "fabscope_rdma_port_state",
                                 "Port state (ports/N/state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE; a code)", labels, state)
            phys = state_code(p.get("phys_state"))
            if phys is not None:
                self._port_gauge(out, "fabscope_rdma_port_phys_state",
                                 "Physical state (ports/N/phys_state: 2 Polling, 3 Disabled, 5 LinkUp, 6 "
                                 "LinkErrorRecovery; a code)", labels, phys)
            rate = rate_bytes(p.get("rate"))
            if rate is not None:
                self._port_gauge(out, "fabscope_rdma_port_rate_bytes_per_second",
                                 "Link rate, bytes per second (ports/N/rate: Gb/sec, x 10^9 / 8 here)", labels, rate)
            mtu = mtu_text(p.get("active_mtu"))
            if mtu is None and self.active_mtu is not None:
                mtu = self.active_mtu.get(labels[0], labels[1])
            if mtu is not None:
                self._port_gauge(out, "fabscope_rdma_port_active_mtu_bytes",
                                 "Active MTU, bytes (ports/N/active_mtu where sysfs has it, else ibv_query_port via the "
                                 "engine's --inventory-json)", labels, mtu)
            info = (*labels, driver, str(p.get("state", "")), str(p.get("phys_state", "")), str(p.get("rate", "")))
            lines("fabscope_rdma_port_info", "gauge",
                  "1 per RDMA port; the labels carry ports/N/state, phys_state and rate as the kernel prints them").append(
                series("fabscope_rdma_port_info", _INFO_NAMES, info) + "1.0\n")
        dev_lines = lines("fabscope_rdma_device_hw_stat",
                          "counter", "Device-wide driver counter, raw (class/infiniband/<device>/hw_counters/<counter>: "
                          "packets or events)")
        for d in snap.get("rdma_devices", []):
            if not isinstance(d, Mapping) or d.get("device") in self.exclude:
                continue
            driver = str(d.get("driver", ""))
            units = unit_table(snap, "hw_counters", driver)
            for cname, raw in mapping(d.get("hw_counters")).items():
                v = as_count(raw)
                if v is None or cname == "lifespan":
                    continue
                lab = (str(d.get("device", "")), driver, cname)
                bits, overflow, _unit = unit_info(units, cname)
                value = unwrap(("fabscope_rdma_device_hw_stat", lab), v, bits, overflow)
                dev_lines.append(series("fabscope_rdma_device_hw_stat_total", _DEV_NAMES, lab) + value_text(value) + "\n")

    @staticmethod
    def _port_gauge(out: Exposition, name: str, help_text: str, labels: tuple[str, ...], value: float) -> None:
        out.lines(name, "gauge", help_text).append(series(name, _PORT_NAMES, labels) + value_text(value) + "\n")

    # -- netdevs ------------------------------------------------------------------------------

    def _nets(self, snap: Mapping[str, Any], out: Exposition) -> None:
        backs: dict[str, str] = {}
        for p in snap.get("rdma", []):
            if isinstance(p, Mapping) and isinstance(p.get("ndevs"), list):
                for n in p["ndevs"]:
                    backs.setdefault(str(n), f"{p.get('device')}/{p.get('port')}")
        lines = out.lines
        unwrap = self.unwrap.value
        ethtool_lines = lines("fabscope_netdev_ethtool", "counter",
                              "Pause/PFC/ECN/CNP entries of the driver's statistics, raw (ethtool -S <netdev>: frames "
                              "or packets as the driver counts them)")
        net_units = unit_table(snap, "statistics", "")
        self._plans_for(snap)
        families = out.families
        for n in snap.get("net", []):
            if not isinstance(n, Mapping) or n.get("name") in self.exclude:
                continue
            name = str(n.get("name", ""))
            labels = (name, backs.get(name, ""))
            stats = mapping(n.get("statistics"))
            # bytes, packets, errors, drops; the finer statistics/ files stay in --counters-json
            row = self._row(("statistics", labels)) or self._new_row(
                ("statistics", labels), [_net_plan(net_units, labels, sname) for sname in _NET_STATS])
            for plan in row:
                if plan is None or (line := plan.line(stats.get(plan.counter))) is None:
                    continue
                (families.get(plan.metric) or lines(plan.metric, "counter", plan.help)).append(line)
            ethtool = mapping(n.get("ethtool"))
            for ename, raw in sorted(ethtool.items()):
                v = as_count(raw)
                if v is None:
                    continue
                lab = (*labels, str(ename))
                value = unwrap(("fabscope_netdev_ethtool", lab), v, None, None)
                ethtool_lines.append(series("fabscope_netdev_ethtool_total", _ETHTOOL_NAMES, lab) + value_text(value) + "\n")
            if "operstate" in n:
                self._net_gauge(out, "fabscope_netdev_up", "1 when the netdev is up (class/net/<netdev>/operstate)",
                                labels, 1 if n.get("operstate") == "up" else 0)
            mtu = int_text(n.get("mtu"))
            if mtu is not None:
                self._net_gauge(out, "fabscope_netdev_mtu_bytes", "MTU, bytes (class/net/<netdev>/mtu)", labels, mtu)
            speed = int_text(n.get("speed"))
            if speed is not None and speed > 0:
                self._net_gauge(out, "fabscope_netdev_speed_bytes_per_second",
                                "Link speed, bytes per second (class/net/<netdev>/speed: Mb/s, x 10^6 / 8 here)",
                                labels, speed * 1e6 / 8)

    @staticmethod
    def _net_gauge(out: Exposition, name: str, help_text: str, labels: tuple[str, ...], value: float) -> None:
        out.lines(name, "gauge", help_text).append(series(name, _NET_NAMES, labels) + value_text(value) + "\n")

    # -- results ------------------------------------------------------------------------------

    def _results(self, out: Exposition) -> None:
        def family(name: str, help_text: str) -> Callable[[tuple[str, ...], float], None]:
            lines = out.lines(name, "gauge", help_text)
            names = (*_CASE_LABELS, "verdict") if name == "fabscope_result_path_verdict" else tuple(_CASE_LABELS)
            return lambda labels, value: lines.append(series(name, names, labels) + value_text(value) + "\n")

        p50 = family("fabscope_result_latency_p50_seconds",
                     "Latest measured median latency of the case (record latency_us.p50), seconds")
        p99 = family("fabscope_result_latency_p99_seconds",
                     "Latest measured 99th percentile latency of the case (record latency_us.p99), seconds")
        bw = family("fabscope_result_bandwidth_bytes_per_second",
                    "Latest measured bandwidth of the case at the receiver (record bandwidth_gbps), bytes per second")
        verdict = family("fabscope_result_path_verdict",
                         "1 for the latest path verdict of the case, 0 for the others (record path.verdict)")
        for key, rec in sorted(self.results.latest().items()):
            if rec.latency:
                p50(key, rec.latency.p50 * 1e-6)
                p99(key, rec.latency.p99 * 1e-6)
            if rec.bandwidth and rec.bandwidth.gbps is not None:
                bw(key, rec.bandwidth.gbps * 1e9 / 8)
            seen = rec.path.verdict
            for v in (*VERDICTS, *([seen] if seen not in VERDICTS else [])):
                verdict((*key, v), 1 if v == seen else 0)
        finding = out.lines("fabscope_matrix_finding",
                            "gauge", "1 per finding of the newest fabric matrix run (kind node, link or misrouted)")
        for f in self.results.findings():
            labels = (f.kind, ",".join(f.hosts), f.summary[:200])
            finding.append(series("fabscope_matrix_finding", ("kind", "hosts", "summary"), labels) + "1.0\n")
        self._known_good(out)
        bad = out.lines("fabscope_exporter_results_unreadable", "gauge",
                        "1 per --results file that could not be read at this scrape (label: why)")
        for name, why in sorted(self.results.errors.items()):
            bad.append(series("fabscope_exporter_results_unreadable", ("file", "error"), (name, why[:200])) + "1.0\n")
        store = out.lines("fabscope_exporter_store_unreadable", "gauge",
                          "1 when the history store (--store) could not be read at this scrape (damaged, "
                          "missing, not a store; label: why); the port metrics are served regardless")
        if self.results.store is not None and self.results.store_error is not None:
            store.append(series("fabscope_exporter_store_unreadable", ("store", "error"),
                                (str(self.results.store), self.results.store_error[:200])) + "1.0\n")

    @staticmethod
    def _known_good(out: Exposition) -> None:
        """The last status of each (node, check) of `fabscope check` / `fabscope health`
        (known_good/status.py): status, fault codes, age, expired."""
        from datetime import UTC, datetime

        from ..known_good import status

        labels = ("node", "check", "scenario")
        st = out.lines("fabscope_check_status", "gauge",
                       "Last status of the check on the node: 0 pass, 1 warn, 2 inconclusive, 3 fail")
        fault = out.lines("fabscope_check_fault", "gauge", "1 per fault code of the check's last status on the node")
        age = out.lines("fabscope_check_age_seconds", "gauge", "Seconds since the check's last status was made")
        expired = out.lines("fabscope_check_expired", "gauge",
                            "1 when the check's last status is past its valid_until (it no longer holds)")
        for e, seconds, gone in status.ages(status.read(), datetime.now(UTC)):
            key = (str(e["node"]), str(e["check"]), str(e.get("scenario", "")))
            st.append(series("fabscope_check_status", labels, key)
                      + value_text(status.STATUS_VALUE.get(str(e["status"]), 2)) + "\n")
            for code in e.get("codes", []):
                fault.append(series("fabscope_check_fault", (*labels, "code"), (*key, str(code))) + "1.0\n")
            age.append(series("fabscope_check_age_seconds", labels, key) + value_text(seconds) + "\n")
            expired.append(series("fabscope_check_expired", labels, key) + value_text(1 if gone else 0) + "\n")


def _net_plan(units: Mapping[str, Any], labels: tuple[str, ...], sname: str) -> _Plan:
    """What one statistics/ file of one netdev becomes (the _Plan of a port counter, for a netdev)."""
    named = _NET_STATS[sname]
    bits, overflow, unit = unit_info(units, sname)
    mname = f"fabscope_netdev_{named.metric}"
    return _Plan(sname, mname, _help(named.what, sname, "statistics/", (bits, overflow, unit)), _NET_LABELS, labels,
                 (mname, labels), bits, overflow, 1, None)


def render(collector: FabscopeCollector) -> bytes:
    """The Prometheus text exposition of one scrape."""
    return collector.exposition().text()


def iter_metric_names(text: str) -> Iterator[str]:
    """Names an exposition declares or samples (a counter family also as NAME_total): what a
    dashboard or alert may query."""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            yield name
            if kind == "counter":
                yield f"{name}_total"
        elif line and not line.startswith("#"):
            yield re.split(r"[{ ]", line, maxsplit=1)[0]
