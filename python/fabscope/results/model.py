# SPDX-License-Identifier: BSD-3-Clause
"""The typed result model: one ``Result`` per ``fabscope.result/N`` record the engine prints.

Owns: the schema names and versions this front end reads, validation (a record that fails is a
``RecordError`` naming the field, never a partial row), the typed view of every field the front end
uses, and the one place the path verdict is attached (``parse_record``). The raw dict is kept, so
JSON export is lossless: ``Result.to_json()`` is the engine's record plus ``path`` and
``explanation`` (results/explain/).

Schema policy: every ``fabscope.result/N`` with N <= ``RESULT_VERSION`` is read (records saved by
earlier releases stay readable; tests/fixtures/records holds real ones); fields added later are
optional (``latency_us.histogram`` arrived in 0.2 and is None in older records).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .counters import Counters
from .cpushare import with_shared_cpu_warning
from .errors import RecordError
from .explain import (
    BandwidthReference,
    DelayReference,
    Explanation,
    LatencyReference,
    explain,
    with_bandwidth_reference,
    with_delay_reference,
    with_reference,
)
from .histogram import Histogram
from .pathsides import PathSide, path_sides
from .verdict import settings_without_effect, verdict

RESULT_VERSION = 1
RESULT_SCHEMA = f"fabscope.result/{RESULT_VERSION}"
PATTERNS = ("lat", "bw", "bibw")
VERDICTS = ("verified", "misrouted", "unverifiable", "not-requested")


# --------------------------------------------------------------------------
# typed readers: each names the field it rejects
# --------------------------------------------------------------------------


def _get(obj: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in obj:
        raise RecordError(f"{where}{key}", "is missing")
    return obj[key]


def _str(obj: Mapping[str, Any], key: str, where: str = "") -> str:
    v = _get(obj, key, where)
    if not isinstance(v, str):
        raise RecordError(f"{where}{key}", f"must be a string, got {v!r}")
    return v


def _opt_str(obj: Mapping[str, Any], key: str, where: str = "") -> str | None:
    v = obj.get(key)
    if v is not None and not isinstance(v, str):
        raise RecordError(f"{where}{key}", f"must be a string or null, got {v!r}")
    return v


def _int(obj: Mapping[str, Any], key: str, where: str = "") -> int:
    v = _get(obj, key, where)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v) or v < 0:
        raise RecordError(f"{where}{key}", f"must be a non-negative integer, got {v!r}")
    return int(v)


def _num(obj: Mapping[str, Any], key: str, where: str = "") -> float:
    v = _get(obj, key, where)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RecordError(f"{where}{key}", f"must be a number, got {v!r}")
    return _finite(v, f"{where}{key}")


def _finite(v: float, name: str) -> float:
    """NaN and infinities are no measurement (Python's json reads them; the engine never writes them)."""
    if not math.isfinite(v):
        raise RecordError(name, f"must be a finite number, got {v!r} (the record was edited or damaged)")
    return float(v)


def _opt_num(obj: Mapping[str, Any], key: str, where: str = "") -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RecordError(f"{where}{key}", f"must be a number or null, got {v!r}")
    return _finite(v, f"{where}{key}")


def _obj(obj: Mapping[str, Any], key: str, where: str = "") -> dict[str, Any]:
    v = _get(obj, key, where)
    if not isinstance(v, dict):
        raise RecordError(f"{where}{key}", f"must be an object, got {type(v).__name__}")
    return v


def _opt_obj(obj: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    v = obj.get(key)
    return v if isinstance(v, dict) else None


def _strings(obj: Mapping[str, Any], key: str, where: str = "") -> list[str]:
    v = obj.get(key) or []
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise RecordError(f"{where}{key}", f"must be a list of strings, got {v!r}")
    return list(v)


# --------------------------------------------------------------------------
# the parts of a result
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    """Latency statistics in microseconds over every measured sample (warmup excluded)."""

    min: float
    p50: float
    mean: float
    stdev: float | None  # None for a single sample
    p99: float
    p999: float
    max: float
    samples: int
    outliers: int | None
    mad: float | None
    histogram: Histogram | None  # absent in records from before 0.2

    @staticmethod
    def parse(lat: Mapping[str, Any]) -> Latency:
        w = "latency_us."
        values = [_num(lat, k, w) for k in ("min", "p50", "p99", "max")]
        if values != sorted(values):
            raise RecordError("latency_us", f"is out of order: min/p50/p99/max = {values}")
        hist = lat.get("histogram")
        return Latency(
            min=values[0], p50=values[1], mean=_num(lat, "mean", w), stdev=_opt_num(lat, "stdev", w),
            p99=values[2], p999=_num(lat, "p999", w), max=values[3],
            samples=_int(lat, "samples", w) if "samples" in lat else 0,
            outliers=_int(lat, "outliers", w) if "outliers" in lat else None,
            mad=_opt_num(lat, "mad", w),
            histogram=Histogram.parse(hist, "latency_us.histogram") if hist is not None else None,
        )


@dataclass(frozen=True)
class Bandwidth:
    """Receiver-side bandwidth (Gb/s = 10^9 bit/s, MB/s = 10^6 B/s); None where it could not be timed."""

    gbps: float | None
    mbps: float | None
    msg_rate_mpps: float | None
    measured_at: str | None
    sender_gbps: float | None
    lost_messages: int | None

    @staticmethod
    def parse(rec: Mapping[str, Any]) -> Bandwidth:
        for key in ("bandwidth_gbps", "bandwidth_MBps", "msg_rate_mpps"):
            _get(rec, key, "")
        lost = rec.get("lost_messages")
        return Bandwidth(
            gbps=_opt_num(rec, "bandwidth_gbps"), mbps=_opt_num(rec, "bandwidth_MBps"),
            msg_rate_mpps=_opt_num(rec, "msg_rate_mpps"), measured_at=_opt_str(rec, "bandwidth_measured_at"),
            sender_gbps=_opt_num(rec, "sender_bandwidth_gbps"),
            lost_messages=_int(rec, "lost_messages") if lost is not None else None,
        )


@dataclass(frozen=True)
class Placement:
    """Where --cpu put an engine and why (the engine's ``host.placement``): what was asked (auto, near,
    far, N), the device whose NUMA node counted and that node (None: unknown, ``why_no_node`` says
    why), the host's NUMA nodes with CPUs, and one sentence on the CPU chosen."""

    asked: str
    device: str
    device_numa_node: int | None
    why_no_node: str | None
    host_numa_nodes: int
    how: str

    @staticmethod
    def parse(obj: Mapping[str, Any] | None) -> Placement | None:
        if not obj:
            return None
        node, nodes = obj.get("device_numa_node"), obj.get("host_numa_nodes")
        return Placement(asked=str(obj.get("asked") or ""), device=str(obj.get("device") or ""),
                         device_numa_node=node if isinstance(node, int) else None,
                         why_no_node=_opt_str(obj, "why_no_node", "host.placement."),
                         host_numa_nodes=nodes if isinstance(nodes, int) else 0, how=str(obj.get("how") or ""))


@dataclass(frozen=True)
class HostInfo:
    hostname: str
    cpu: int | None
    cpuidle_driver: str | None
    cpuidle_governor: str | None
    cpu_dma_latency_held: bool
    placement: Placement | None = None

    @staticmethod
    def parse(host: Mapping[str, Any] | None) -> HostInfo | None:
        if not host:
            return None
        cpu = host.get("cpu")
        return HostInfo(
            hostname=str(host.get("hostname") or ""), cpu=cpu if isinstance(cpu, int) else None,
            cpuidle_driver=_opt_str(host, "cpuidle_driver", "host."),
            cpuidle_governor=_opt_str(host, "cpuidle_governor", "host."),
            cpu_dma_latency_held=bool(host.get("cpu_dma_latency_held")),
            placement=Placement.parse(_opt_obj(host, "placement")),
        )


@dataclass(frozen=True)
class Flow:
    """One flow of a run that moved data over several (verbs: a QP, with its device), and its rate
    at this initiator (``None`` where this side only received)."""

    device: str | None
    qpn: int | None
    completed: int
    received: int
    gbps: float | None

    @staticmethod
    def parse_all(local: Mapping[str, Any]) -> tuple[Flow, ...]:
        flows = local.get("flows")
        if not isinstance(flows, list):
            return ()
        out = []
        for f in flows:
            if not isinstance(f, Mapping):
                continue
            qpn, done, got, bw = f.get("qpn"), f.get("completed"), f.get("received"), f.get("bandwidth_gbps")
            out.append(Flow(
                device=f.get("device") if isinstance(f.get("device"), str) else local.get("device")
                if isinstance(local.get("device"), str) else None,
                qpn=qpn if isinstance(qpn, int) else None,
                completed=int(done) if isinstance(done, (int, float)) else 0,
                received=int(got) if isinstance(got, (int, float)) else 0,
                gbps=float(bw) if isinstance(bw, (int, float)) and done else None,
            ))
        return tuple(out)


@dataclass(frozen=True)
class TransportSummary:
    """What the backend reported carried the run: ``carried_by`` is one phrase for tables."""

    kind: str
    poll: str | None
    control: str | None
    carried_by: str
    local: dict[str, Any]
    peer: dict[str, Any] | None
    launcher: dict[str, Any] | None

    @staticmethod
    def parse(tr: Mapping[str, Any]) -> TransportSummary:
        local = _opt_obj(tr, "local") or {}
        return TransportSummary(
            kind=str(local.get("kind") or "?"), poll=_opt_str(tr, "poll", "transport."),
            control=_opt_str(tr, "control", "transport."), carried_by=carried_by(local),
            local=local, peer=_opt_obj(tr, "peer"), launcher=_opt_obj(tr, "launcher"),
        )

    @property
    def label(self) -> str:
        """The transport part of a comparison case (what carried it, as the backend says)."""
        return self.carried_by

    @property
    def flows(self) -> tuple[Flow, ...]:
        """This side's flows (verbs QPs, ``--qps``/``--device A,B``), in the backend's order."""
        return Flow.parse_all(self.local)


def carried_by(local: Mapping[str, Any]) -> str:
    """One phrase for what actually carried a run, from the backend's own transport report."""
    kind = local.get("kind")
    preload = local.get("preload")
    if kind == "tcp" and isinstance(preload, Mapping):
        return f"{preload.get('label') or 'tcp (preload)'} via {local.get('address_owner') or '?'}"
    if kind == "rsocket":
        return f"rsocket {local.get('device') or '?'} via {local.get('address_owner') or '?'}"
    if kind == "tcp":
        return f"tcp via {local.get('bound_device') or local.get('address_owner') or '?'}"
    if kind == "ucx":
        return f"ucx {'+'.join(local.get('transports') or [])} on {'+'.join(local.get('devices') or [])}"
    if kind == "ofi":
        return f"ofi {local.get('provider')} on {local.get('domain')}"
    if kind == "mpi":
        sel = local.get("selected") or {}
        if sel.get("pml"):
            btl = sel.get("btl") or {}
            btls = "+".join(sorted({b for v in btl.values() if isinstance(v, list) for b in v}))
            return f"mpi pml {sel.get('pml')}" + (f" btl {btls}" if btls else "") + (
                f" mtl {sel['mtl']}" if sel.get("mtl") else "")
        return f"mpi {sel.get('device') or str(local.get('library', ''))[:40]}"
    if kind == "verbs":
        return f"verbs {local.get('device', '?')}/{local.get('port', '?')} {local.get('qp_type', '')}".strip()
    return str(kind or "?")


@dataclass(frozen=True)
class PathVerdict:
    """The path verdict (see ``fabscope.results.verdict``); ``raw`` is the full ``path`` object."""

    verdict: str
    requested: str | None
    requested_via: str | None
    summary: str
    reason: str | None
    notes: tuple[str, ...]
    raw: dict[str, Any]
    # Each judged host's verdict and the devices that carried its bytes (results/pathsides.py).
    sides: Mapping[str, PathSide] = field(default_factory=dict)

    @staticmethod
    def of(path: dict[str, Any]) -> PathVerdict:
        v = path.get("verdict")
        if v not in VERDICTS:
            raise RecordError("path.verdict", f"must be one of {', '.join(VERDICTS)}, got {v!r}")
        return PathVerdict(
            verdict=str(v), requested=path.get("requested"), requested_via=path.get("requested_via"),
            summary=str(path.get("summary") or ""), reason=path.get("reason"),
            notes=tuple(str(n) for n in path.get("notes") or []), raw=path, sides=path_sides(path),
        )


# --------------------------------------------------------------------------
# the result
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """One measured size of one run: typed fields, plus the record itself for lossless export."""

    schema_version: int
    version: str
    status: str
    backend: str
    op: str
    pattern: str
    size: int
    iterations: int
    warmup: int
    duration_s: float | None  # the engine's measured phase: a sender's first to last send
    # bw/bibw measured at the receiver: its span (start to the last arrival), which the bandwidth
    # is computed over; longer than a sender's duration_s by what was still in flight.
    rx_duration_s: float | None
    latency: Latency | None
    latency_definition: str | None
    bandwidth: Bandwidth | None
    config: dict[str, Any]
    transport: TransportSummary
    host: HostInfo | None
    peer_host: HostInfo | None
    warnings: tuple[str, ...]
    settings_without_effect: tuple[str, ...]
    path: PathVerdict
    raw: dict[str, Any] = field(repr=False)
    # Both engines' counter snapshots around the run, typed (results/counters.py).
    counters: Counters = field(default_factory=lambda: Counters(None, None), repr=False)
    # Why the number is what it is (results/explain/), attached once in parse_record.
    explanation: Explanation | None = field(default=None, repr=False)

    @property
    def misrouted(self) -> bool:
        return self.path.verdict == "misrouted"

    @property
    def hosts(self) -> tuple[str, str]:
        """(this host, the peer host) as the engines named them; "" where unknown."""
        return (self.host.hostname if self.host else "", self.peer_host.hostname if self.peer_host else "")

    @property
    def case(self) -> tuple[str, str, str, int, str]:
        """What a comparison matches on: backend, op, pattern, size, transport."""
        return (self.backend, self.op, self.pattern, self.size, self.transport.label)

    @property
    def group(self) -> tuple[str, str, str]:
        return (self.backend, self.op, self.pattern)

    def to_json(self) -> dict[str, Any]:
        """The record as the engine printed it, with the ``path`` object attached and the explanation
        as decided on this Result (its references included): the typed field is the one owner, so
        attaching a reference never has to write into the record too."""
        if self.explanation is None:
            return self.raw
        return {**self.raw, "explanation": self.explanation.to_json()}


def parse_record(raw: Mapping[str, Any], *, judge_path: bool = True) -> Result:
    """Validate one record and return it typed, with its path verdict attached (once, here).

    ``judge_path`` recomputes the verdict from the record's counters (what every fresh run and
    every saved engine record gets); False keeps a ``path`` the record already carries (a stored
    result is shown as it was judged then)."""
    if not isinstance(raw, Mapping):
        raise RecordError("(record)", f"must be a JSON object, got {type(raw).__name__}")
    rec = dict(raw)
    schema = _str(rec, "schema")
    name, _, num = schema.partition("/")
    if name != "fabscope.result" or not num.isdigit():
        raise RecordError("schema", f"is {schema!r}, not a fabscope.result/N record")
    if int(num) > RESULT_VERSION:
        raise RecordError("schema", f"is {schema!r}, newer than this fabscope reads ({RESULT_SCHEMA}); upgrade fabscope")
    pattern = _str(rec, "pattern")
    if pattern not in PATTERNS:
        raise RecordError("pattern", f"must be one of {', '.join(PATTERNS)}, got {pattern!r}")
    latency = Latency.parse(_obj(rec, "latency_us")) if pattern == "lat" else None
    bandwidth = Bandwidth.parse(rec) if pattern != "lat" else None
    transport = TransportSummary.parse(_obj(rec, "transport"))
    config = _obj(rec, "config")
    counters = Counters.of_record(rec)  # once: the verdict, the explanation and the Result read it
    if judge_path or not isinstance(rec.get("path"), dict):
        rec["path"] = verdict(rec, counters)
    with_shared_cpu_warning(rec)
    explanation = explain(rec, counters)
    stored = rec.get("explanation")
    reference = LatencyReference.parse(stored.get("reference")) if isinstance(stored, dict) else None
    if reference is not None and latency is not None:  # measured against a reference: read back with it
        explanation = with_reference(explanation, latency.p50, reference, history="")
    bw_ref = BandwidthReference.parse(stored.get("bandwidth_reference")) if isinstance(stored, dict) else None
    if bw_ref is not None and bandwidth is not None and bandwidth.gbps:
        explanation = with_bandwidth_reference(explanation, bandwidth.gbps, bw_ref, history="")
    delay_ref = DelayReference.parse(stored.get("delay_reference")) if isinstance(stored, dict) else None
    explanation = with_delay_reference(explanation, rec, delay_ref)  # read back against the same clean runs
    return Result(
        schema_version=int(num), version=_str(rec, "version"), status=str(rec.get("status") or "ok"),
        backend=_str(rec, "backend"), op=_str(rec, "op"), pattern=pattern, size=_int(rec, "size"),
        iterations=_int(rec, "iterations"), warmup=_int(rec, "warmup"),
        duration_s=_opt_num(rec, "duration_s"), rx_duration_s=_opt_num(rec, "rx_duration_s"), latency=latency,
        latency_definition=_opt_str(rec, "latency_definition"), bandwidth=bandwidth, config=config,
        transport=transport, host=HostInfo.parse(_opt_obj(rec, "host")),
        peer_host=HostInfo.parse(_opt_obj(rec, "peer_host")), warnings=tuple(_strings(rec, "warnings")),
        settings_without_effect=tuple(settings_without_effect(rec)), path=PathVerdict.of(rec["path"]), raw=rec,
        counters=counters, explanation=explanation,
    )
