"""The Prometheus collector: one engine snapshot per scrape into metric families, plus fabscope's
latest results (see the package docstring for what is exported and why)."""

from __future__ import annotations

import re
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from ..errors import FabscopeError
from ..inventory import EngineInventory
from .results import ResultsSource
from .snapshot import (
    CounterUnwrapper,
    SnapshotEngine,
    as_count,
    as_list,
    as_mapping,
    int_text,
    mtu_text,
    rate_bytes,
    state_code,
    unit_info,
    unit_table,
)

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
VERDICTS = ("verified", "misrouted", "unverifiable", "not-requested")


_HW_HELP = ("Every driver counter of the port, raw (ports/N/hw_counters/<counter>: packets or events as the "
            "driver counts them)")
#: Series plans kept between scrapes at most (64 ports x ~40 counters is ~2600).
_MAX_PLANS = 100_000


@dataclass(frozen=True)
class _Plan:
    """What one counter of one RDMA port becomes, worked out at its first scrape and kept: the
    names, help text (with the engine's unit) and label values do not change between scrapes."""

    metric: str
    help: str
    label_names: list[str]
    labels: tuple[str, ...]
    key: tuple[str, tuple[str, ...]]  # the unwrapper's series
    bits: int | None
    overflow: str | None
    scale: int
    saturated_at: int | None  # the raw value of a saturating counter at its maximum

    @cached_property
    def sample(self) -> str:
        return f"{self.metric}_total"

    @cached_property
    def label_dict(self) -> dict[str, str]:
        return dict(zip(self.label_names, self.labels, strict=True))


_UNPLANNED = _Plan("", "", [], (), ("", ()), None, None, 1, None)


class _Families:
    """Metric families of one scrape, created on first use (help and labels from that first call)."""

    def __init__(self) -> None:
        self._all: dict[str, Metric] = {}

    def counter(self, name: str, help_text: str | Callable[[], str], labels: list[str]) -> CounterMetricFamily:
        """``help_text`` may be a function: it is called only when the family is created."""
        m = self._all.get(name)
        if m is None:
            text = help_text() if callable(help_text) else help_text
            m = self._all[name] = CounterMetricFamily(name, text, labels=labels)
        assert isinstance(m, CounterMetricFamily)
        return m

    def gauge(self, name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
        m = self._all.get(name)
        if m is None:
            m = self._all[name] = GaugeMetricFamily(name, help_text, labels=labels)
        assert isinstance(m, GaugeMetricFamily)
        return m

    def all(self) -> list[Metric]:
        return list(self._all.values())


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
        self._plans: dict[tuple[Any, ...], _Plan | None] = {}
        self._plans_units: object = None
        # One scrape at a time: the unwrapping state must see the readings in the order they were taken.
        self._scrape = threading.Lock()

    # The registry calls describe() at registration; returning nothing keeps it from scraping then.
    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        with self._scrape:
            return self._collect()

    def _collect(self) -> list[Metric]:
        start = time.monotonic()
        families: list[Metric] = []
        error = 0
        try:
            snap = self.snapshots.snapshot()
        except (FabscopeError, ValueError) as exc:
            error = 1
            snap = {"rdma": [], "net": []}
            families.append(_info("fabscope_exporter_last_error", "The last scrape's engine error (label: message)",
                                  {"message": str(exc)[:300]}))
        families += self._port_families(snap)
        families += self._net_families(snap)
        if not error:  # a failed snapshot saw nothing; keep the state for the next good one
            self.unwrap.forget_unseen()
        families += self._result_families()
        err = GaugeMetricFamily("fabscope_exporter_scrape_error", "1 when the engine's counter snapshot failed this scrape")
        err.add_metric([], error)
        dur = GaugeMetricFamily("fabscope_exporter_scrape_duration_seconds",
                                "Time this scrape took, seconds (engine snapshot, conversion, results)")
        dur.add_metric([], time.monotonic() - start)
        return [*families, err, dur]

    # -- RDMA ports ---------------------------------------------------------------------------

    def _plans_for(self, snap: Mapping[str, Any]) -> dict[tuple[Any, ...], _Plan | None]:
        """The series plans, kept between scrapes while the engine's units table stays the same (a
        bounded cache: devices that come and go do not grow it for ever)."""
        units = snap.get("units")
        if units != self._plans_units or len(self._plans) > _MAX_PLANS:
            self._plans = {}
            self._plans_units = units
        return self._plans

    def _plan(self, snap: Mapping[str, Any], labels: list[str], driver: str, directory: str, cname: str) -> _Plan | None:
        """What one counter file of one port becomes: family, help text, labels, width, scale."""
        bits, overflow, unit = unit_info(unit_table(snap, directory, driver), cname)
        if directory == "hw_counters":
            if cname == "lifespan":
                return None  # a setting (ms the driver caches hw counters), not a counter
            mname, lab = "fabscope_rdma_port_hw_stat", (*labels, driver, cname)
            return _Plan(mname, _HW_HELP, [*_PORT_LABELS, "driver", "counter"], lab, (mname, lab), bits, overflow, 1, None)
        named = _RDMA_COUNTERS.get(cname)
        # port_*_data count 4-byte words; the engine's unit says so, the verdict's rule scales
        scale = self._words.get(cname, 1)
        # a width the engine cannot know (port_*_data, *_packets) saturates at 32 bits
        saturated_at = (1 << (bits or 32)) - 1 if overflow == "saturate" else None
        if named:
            mname, lab = f"fabscope_rdma_port_{named.metric}", tuple(labels)
            help_text = _help(named.what, cname, "counters/", (bits, overflow, unit), scale)
            return _Plan(mname, help_text, _PORT_LABELS, lab, (mname, lab), bits, overflow, scale, saturated_at)
        mname, lab = "fabscope_rdma_port_pma_other", (*labels, cname)
        return _Plan(mname, "Any other port counter, raw (counters/<counter>)", [*_PORT_LABELS, "counter"], lab,
                     (mname, lab), bits, overflow, scale, saturated_at)

    def _port_families(self, snap: Mapping[str, Any]) -> list[Metric]:
        plans = self._plans_for(snap)
        fam = _Families()
        counter, gauge = fam.counter, fam.gauge
        # Declared even when empty, so dashboards and alerts always find them.
        counter("fabscope_rdma_port_hw_stat", _HW_HELP, [*_PORT_LABELS, "driver", "counter"])
        gauge("fabscope_rdma_port_saturated",
              "1 when ports/N/counters/<counter> sits at its maximum: a saturated PMA counter no longer counts "
              "(clear it: perfquery -R)",
              [*_PORT_LABELS, "counter"])
        gauge("fabscope_rdma_port_unreadable",
              "1 when ports/N/counters/<counter> or hw_counters/<counter> gives no number "
              "(iWARP ports print 'N/A (no PMA)')",
              [*_PORT_LABELS, "counter"])
        for p in snap.get("rdma", []):
            if not isinstance(p, Mapping) or p.get("device") in self.exclude:
                continue
            ndevs = as_list(p.get("ndevs"))
            labels = [
                str(p.get("device", "")),
                str(p.get("port", "")),
                str(p.get("link_layer", "")),
                ",".join(str(n) for n in ndevs),
                str(p.get("node_guid", "")),
            ]
            driver = str(p.get("driver", ""))
            port_key = (*labels, driver)
            for directory in ("counters", "hw_counters"):
                values = p.get(directory)
                if not isinstance(values, Mapping):
                    continue
                for cname, raw in values.items():
                    v = as_count(raw)
                    if v is None:
                        continue
                    plan = plans.get((port_key, directory, cname), _UNPLANNED)
                    if plan is _UNPLANNED:
                        plan = plans[(port_key, directory, cname)] = self._plan(snap, labels, driver, directory, cname)
                    if plan is None:
                        continue
                    value = self.unwrap.value(plan.key, v, plan.bits, plan.overflow) * plan.scale
                    # What add_metric appends, with the label dict built once per series, not per scrape.
                    counter(plan.metric, plan.help, plan.label_names).samples.append(
                        Sample(plan.sample, plan.label_dict, value))
                    if v == plan.saturated_at:
                        gauge("fabscope_rdma_port_saturated", "", []).add_metric([*labels, cname], 1)
            for cname in as_list(p.get("unreadable")):
                gauge("fabscope_rdma_port_unreadable", "", []).add_metric([*labels, str(cname)], 1)
            state = state_code(p.get("state"))
            if state is not None:
                gauge("fabscope_rdma_port_state", "Port state (ports/N/state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE; a code)",
                      _PORT_LABELS).add_metric(labels, state)
            phys = state_code(p.get("phys_state"))
            if phys is not None:
                gauge("fabscope_rdma_port_phys_state",
                      "Physical state (ports/N/phys_state: 2 Polling, 3 Disabled, 5 LinkUp, 6 LinkErrorRecovery; a code)",
                      _PORT_LABELS).add_metric(labels, phys)
            rate = rate_bytes(p.get("rate"))
            if rate is not None:
                gauge("fabscope_rdma_port_rate_bytes_per_second",
                      "Link rate, bytes per second (ports/N/rate: Gb/sec, x 10^9 / 8 here)", _PORT_LABELS).add_metric(
                          labels, rate)
            mtu = mtu_text(p.get("active_mtu"))
            if mtu is None and self.active_mtu is not None:
                mtu = self.active_mtu.get(labels[0], labels[1])
            if mtu is not None:
                gauge("fabscope_rdma_port_active_mtu_bytes",
                      "Active MTU, bytes (ports/N/active_mtu where sysfs has it, else ibv_query_port via the "
                      "engine's --inventory-json)", _PORT_LABELS).add_metric(labels, mtu)
            gauge("fabscope_rdma_port_info",
                  "1 per RDMA port; the labels carry ports/N/state, phys_state and rate as the kernel prints them",
                  [*_PORT_LABELS, "driver", "state", "phys_state", "rate"]).add_metric(
                [*labels, str(p.get("driver", "")), str(p.get("state", "")), str(p.get("phys_state", "")),
                 str(p.get("rate", ""))], 1)
        dev_help = "Device-wide driver counter, raw (class/infiniband/<device>/hw_counters/<counter>: packets or events)"
        counter("fabscope_rdma_device_hw_stat", dev_help, ["device", "driver", "counter"])
        for d in snap.get("rdma_devices", []):
            if not isinstance(d, Mapping) or d.get("device") in self.exclude:
                continue
            driver = str(d.get("driver", ""))
            units = unit_table(snap, "hw_counters", driver)
            for cname, raw in as_mapping(d.get("hw_counters")).items():
                v = as_count(raw)
                if v is None or cname == "lifespan":
                    continue
                lab = [str(d.get("device", "")), driver, cname]
                bits, overflow, _unit = unit_info(units, cname)
                value = self.unwrap.value(("fabscope_rdma_device_hw_stat", tuple(lab)), v, bits, overflow)
                counter("fabscope_rdma_device_hw_stat", dev_help, []).add_metric(lab, value)
        return fam.all()

    # -- netdevs ------------------------------------------------------------------------------

    def _net_families(self, snap: Mapping[str, Any]) -> list[Metric]:
        backs: dict[str, str] = {}
        for p in snap.get("rdma", []):
            if isinstance(p, Mapping) and isinstance(p.get("ndevs"), list):
                for n in p["ndevs"]:
                    backs.setdefault(str(n), f"{p.get('device')}/{p.get('port')}")
        fam = _Families()
        counter, gauge = fam.counter, fam.gauge
        ethtool_help = ("Pause/PFC/ECN/CNP entries of the driver's statistics, raw (ethtool -S <netdev>: frames or "
                        "packets as the driver counts them)")
        counter("fabscope_netdev_ethtool", ethtool_help, [*_NET_LABELS, "counter"])
        net_units = unit_table(snap, "statistics", "")
        for n in snap.get("net", []):
            if not isinstance(n, Mapping) or n.get("name") in self.exclude:
                continue
            name = str(n.get("name", ""))
            labels = [name, backs.get(name, "")]
            stats = as_mapping(n.get("statistics"))
            # bytes, packets, errors, drops; the finer statistics/ files stay in --counters-json
            for sname, named in _NET_STATS.items():
                v = as_count(stats.get(sname))
                if v is None:
                    continue
                bits, overflow, unit = unit_info(net_units, sname)
                mname = f"fabscope_netdev_{named.metric}"
                value = self.unwrap.value((mname, tuple(labels)), v, bits, overflow)
                help_text = partial(_help, named.what, sname, "statistics/", (bits, overflow, unit))
                counter(mname, help_text, _NET_LABELS).add_metric(labels, value)
            ethtool = as_mapping(n.get("ethtool"))
            for ename, raw in sorted(ethtool.items()):
                v = as_count(raw)
                if v is None:
                    continue
                lab = [*labels, str(ename)]
                mname = "fabscope_netdev_ethtool"
                counter(mname, ethtool_help, []).add_metric(lab, self.unwrap.value((mname, tuple(lab)), v, None, None))
            if "operstate" in n:
                gauge("fabscope_netdev_up", "1 when the netdev is up (class/net/<netdev>/operstate)", _NET_LABELS).add_metric(
                    labels, 1 if n.get("operstate") == "up" else 0)
            mtu = int_text(n.get("mtu"))
            if mtu is not None:
                gauge("fabscope_netdev_mtu_bytes", "MTU, bytes (class/net/<netdev>/mtu)", _NET_LABELS).add_metric(labels, mtu)
            speed = int_text(n.get("speed"))
            if speed is not None and speed > 0:
                gauge("fabscope_netdev_speed_bytes_per_second",
                      "Link speed, bytes per second (class/net/<netdev>/speed: Mb/s, x 10^6 / 8 here)",
                      _NET_LABELS).add_metric(labels, speed * 1e6 / 8)
        return fam.all()

    # -- results ------------------------------------------------------------------------------

    def _result_families(self) -> list[Metric]:
        p50 = GaugeMetricFamily("fabscope_result_latency_p50_seconds",
                                "Latest measured median latency of the case (record latency_us.p50), seconds",
                                labels=_CASE_LABELS)
        p99 = GaugeMetricFamily("fabscope_result_latency_p99_seconds",
                                "Latest measured 99th percentile latency of the case (record latency_us.p99), seconds",
                                labels=_CASE_LABELS)
        bw = GaugeMetricFamily("fabscope_result_bandwidth_bytes_per_second",
                               "Latest measured bandwidth of the case at the receiver (record bandwidth_gbps), bytes per second",
                               labels=_CASE_LABELS)
        verdict = GaugeMetricFamily("fabscope_result_path_verdict",
                                    "1 for the latest path verdict of the case, 0 for the others (record path.verdict)",
                                    labels=[*_CASE_LABELS, "verdict"])
        for key, rec in sorted(self.results.latest().items()):
            labels = list(key)
            if rec.latency:
                p50.add_metric(labels, rec.latency.p50 * 1e-6)
                p99.add_metric(labels, rec.latency.p99 * 1e-6)
            if rec.bandwidth and rec.bandwidth.gbps is not None:
                bw.add_metric(labels, rec.bandwidth.gbps * 1e9 / 8)
            seen = rec.path.verdict
            for v in (*VERDICTS, *([seen] if seen not in VERDICTS else [])):
                verdict.add_metric([*labels, v], 1 if v == seen else 0)
        finding = GaugeMetricFamily("fabscope_matrix_finding",
                                    "1 per finding of the newest fabric matrix run (kind node, link or misrouted)",
                                    labels=["kind", "hosts", "summary"])
        for f in self.results.findings():
            finding.add_metric([str(f.get("kind", "")), ",".join(str(h) for h in as_list(f.get("hosts"))),
                                str(f.get("summary", ""))[:200]], 1)
        bad = GaugeMetricFamily("fabscope_exporter_results_unreadable",
                                "1 per --results file that could not be read at this scrape (label: why)",
                                labels=["file", "error"])
        for name, why in sorted(self.results.errors.items()):
            bad.add_metric([name, why[:200]], 1)
        store = GaugeMetricFamily("fabscope_exporter_store_unreadable",
                                  "1 when the history store (--store) could not be read at this scrape (damaged, "
                                  "missing, not a store; label: why); the port metrics are served regardless",
                                  labels=["store", "error"])
        if self.results.store is not None and self.results.store_error is not None:
            store.add_metric([str(self.results.store), self.results.store_error[:200]], 1)
        return [p50, p99, bw, verdict, finding, bad, store]


def _info(name: str, help_text: str, labels: Mapping[str, str]) -> Metric:
    g = GaugeMetricFamily(name, help_text, labels=list(labels))
    g.add_metric(list(labels.values()), 1)
    return g


def render(collector: FabscopeCollector) -> bytes:
    """The Prometheus text exposition of one scrape."""
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return generate_latest(reg)


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
