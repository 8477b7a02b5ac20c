# SPDX-License-Identifier: BSD-3-Clause
"""A load run's output, ``fabscope.load/1``: every flow's figures and the run's judgement.

A ``FlowResult`` is one engine pair's outcome, read from its client's record (the engine's own
fields: the receiver's rate, its per-interval rates, TCP_INFO's retransmissions of the sending
socket, both hosts' netdev counters); ``LoadRun`` is the run: flows, totals, the bottleneck and its
fair share, Jain's index, the victim's impact factor and the findings (load/findings.py decides
them; this module only holds and serialises).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_CONGESTED, EXIT_MEASURE, EXIT_OK
from ..results import RecordError, Result, parse_record
from ..untyped import count, member, number
from . import judge
from .judge import Bottleneck, Impact, jain
from .patterns import Flow

LOAD_SCHEMA = "fabscope.load/1"
NET_DROP_COUNTERS = ("rx_dropped", "tx_dropped", "rx_missed_errors")


@dataclass
class FlowResult:
    flow: Flow
    result: Result | None = None
    error: str | None = None
    # The client engine's start and end on its host's wall clock (time.time(); hosts' clocks are
    # assumed in step to well under a second, as NTP keeps a cluster's).
    span: tuple[float, float] = (0.0, 0.0)

    @property
    def gbps(self) -> float | None:
        if self.result is None or self.result.bandwidth is None:
            return None
        return self.result.bandwidth.gbps

    @property
    def intervals_gbps(self) -> list[float]:
        """The rate of each whole interval (the engine's --interval records; the cut-short last one left out)."""
        if self.result is None:
            return []
        iv = member(self.result.raw, "intervals")
        rates = iv.get("bandwidth_gbps")
        whole = count(iv.get("whole")) or 0
        return [float(x) for x in rates[:whole]] if isinstance(rates, list) else []

    @property
    def window(self) -> judge.Window | None:
        """Its measured phase on the wall clock (None: the engine did not say where its intervals began)."""
        if self.result is None or self.gbps is None:
            return None
        iv = member(self.result.raw, "intervals")
        start, length = number(iv.get("started_unix_s")), number(iv.get("length_s"))
        span = number(self.result.raw.get("rx_duration_s"))
        if not start or not length or not span:
            return None
        return judge.Window(start, length, tuple(g * length for g in self.intervals_gbps), span, self.gbps * span)

    @property
    def retransmitted(self) -> int | None:
        """Segments the sending socket retransmitted in the measured phase, less the ones the receiver
        reported as duplicates (spurious: not lost)."""
        if self.result is None:
            return None
        side = member(member(self.result.raw, "transport"), "local")
        n = count(side.get("phase_retransmitted_segments"))
        if n is None:
            return None
        return n - min(n, count(side.get("phase_spurious_retransmissions")) or 0)

    @property
    def ce_marked(self) -> int | None:
        """Segments the sending socket had delivered with a CE mark (ECN) in the measured phase."""
        if self.result is None:
            return None
        return count(member(member(self.result.raw, "transport"), "local").get("phase_delivered_ce"))

    @property
    def segments(self) -> int | None:
        """Payload segments sent (messages x segments per message at the socket's MSS)."""
        if self.result is None:
            return None
        mss = count(member(member(self.result.raw, "transport"), "local").get("mss"))
        return -(-self.result.size // mss) * self.result.iterations if mss else None

    def net_deltas(self, side: str) -> dict[str, dict[str, int]]:
        """{netdev: {counter: after - before}} of the drop counters of one side ("local": the sender,
        "peer": the receiver) over this flow's run."""
        if self.result is None:
            return {}
        out: dict[str, dict[str, int]] = {}
        for dev, snap in member(member(member(self.result.raw, "counters"), side), "net").items():
            before, after = member(snap, "before"), member(snap, "after")
            d = {k: a - b for k in NET_DROP_COUNTERS
                 if (a := count(after.get(k))) is not None and (b := count(before.get(k))) is not None}
            out[str(dev)] = d
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"flow": self.flow.index, "src": self.flow.src, "dst": self.flow.dst,
                               "lane": self.flow.lane, "role": self.flow.role, "error": self.error,
                               "started": self.span[0], "ended": self.span[1]}
        if self.flow.role == "victim":
            lat = self.result.latency if self.result else None
            out["latency_p50_us"] = lat.p50 if lat else None
            out["latency_p99_us"] = lat.p99 if lat else None
        else:
            out.update(gbps=self.gbps, retransmitted_segments=self.retransmitted, ce_marked_segments=self.ce_marked,
                       segments=self.segments, intervals_gbps=self.intervals_gbps)
        out["record"] = self.result.raw if self.result else None
        return out


def flow_result(flow: Flow, raws: list[dict[str, Any]], error: str | None) -> FlowResult:
    result = None
    for raw in raws:
        try:
            result = parse_record(raw, judge_path=False)
        except RecordError as exc:
            error = error or f"invalid record from {flow.src}: {exc}"
    if result is None and error is None:
        error = "no result came back"
    return FlowResult(flow, result, error)


@dataclass
class Finding:
    kind: str  # oversubscription, loss, unfair, starved, hot-spot, victim
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    cost: str | None = None
    fix: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "summary": self.summary, "evidence": self.evidence, "cost": self.cost,
                "fix": self.fix}


@dataclass
class VictimResult:
    pair: tuple[str, str]
    isolated: FlowResult
    congested: FlowResult | None
    impacts: list[Impact] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"pair": list(self.pair), "isolated": self.isolated.to_json(),
                "congested": self.congested.to_json() if self.congested else None,
                "impact": [i.to_json() for i in self.impacts]}


@dataclass
class LoadRun:
    pattern: str
    hosts: list[str]
    flows_per_pair: int
    backend: str
    launcher: str
    duration_s: float
    seed: int | None
    flows: list[FlowResult]
    bottleneck: Bottleneck
    victim: VictimResult | None = None
    findings: list[Finding] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rails: list[str] = field(default_factory=list)

    def rail_bytes(self) -> dict[str, dict[str, int]]:
        """{sender host: {rail: bytes it sent on that rail}}: the tx_bytes delta of each rail netdev in
        the host's own snapshots, the largest over its flows (they ran at once: their windows overlap,
        so the largest is the host's total over the load, not a sum)."""
        out: dict[str, dict[str, int]] = {}
        for f in self.flows:
            if f.flow.role != "load" or f.result is None or f.result.counters.local is None:
                continue
            for rail in self.rails:
                dev = f.result.counters.local.netdev(rail)
                n = dev.delta("tx_bytes") if dev is not None else None
                if n is not None:
                    mine = out.setdefault(f.flow.src, {})
                    mine[rail] = max(mine.get(rail, 0), n)
        return out

    @property
    def rates(self) -> dict[str, float]:
        return {f.flow.name: g for f in self.flows if (g := f.gbps) is not None}

    def _windows(self) -> dict[str, judge.Window] | None:
        """Every measured load flow's window, or None when one has none (an engine that does not say
        where its intervals began: the flows cannot be put on one time line)."""
        out: dict[str, judge.Window] = {}
        for f in self.flows:
            if f.flow.role != "load" or f.gbps is None:
                continue
            w = f.window
            if w is None:
                return None
            out[f.flow.name] = w
        return out or None

    @property
    def aligned(self) -> bool:
        return self._windows() is not None

    @property
    def sum_of_rates_gbps(self) -> float:
        """The flows' own rates added: each over its own window, so not what the port carried at once."""
        return sum(self.rates.values())

    @property
    def total_gbps(self) -> float | None:
        """The bytes every flow carried over the union of their windows (None: not on one time line)."""
        windows = self._windows()
        return judge.total_gbps(list(windows.values())) if windows else None

    @property
    def fairness(self) -> float | None:
        return jain(list(self.rates.values()))

    @property
    def common_series(self) -> dict[str, list[float]]:
        """{flow: its rate in each common interval}: the intervals of the window every flow covered,
        on the same boundaries for all (load/judge.py common_intervals)."""
        windows = self._windows()
        if not windows:
            return {}
        rows = judge.common_intervals(list(windows.values()))
        return {name: [row[i] for row in rows] for i, name in enumerate(windows)} if rows else {}

    def _common_intervals(self) -> list[list[float]]:
        series = list(self.common_series.values())
        return [list(xs) for xs in zip(*series, strict=True)] if series else []

    @property
    def interval_totals_gbps(self) -> list[float]:
        """What the flows carried together in each common interval."""
        return [sum(xs) for xs in self._common_intervals()]

    @property
    def interval_fairness(self) -> list[float]:
        """Jain's index in each common interval: the short-term fairness a per-run average hides."""
        return [j for xs in self._common_intervals() if (j := jain(xs)) is not None]

    @property
    def concurrent_gbps(self) -> float | None:
        """The total while every flow ran: the mean of the common intervals' totals (None: the flows
        never all ran together for a whole interval)."""
        totals = self.interval_totals_gbps
        return sum(totals) / len(totals) if totals else None

    @property
    def start_spread_s(self) -> float | None:
        """How far apart the flows' client engines started (their processes, on the agents' clocks)."""
        starts = [f.span[0] for f in self.flows if f.span[0] > 0]
        return max(starts) - min(starts) if len(starts) > 1 else None

    @property
    def phase_spread_s(self) -> float | None:
        """How far apart the flows' measured phases began (a warmup whose last bytes waited for a
        retransmission timeout starts its flow's phase late)."""
        windows = self._windows()
        if not windows or len(windows) < 2:
            return None
        starts = [w.start_s for w in windows.values()]
        return max(starts) - min(starts)

    @property
    def failed(self) -> list[FlowResult]:
        return [f for f in self.flows if f.gbps is None]

    @property
    def exit_code(self) -> int:
        if self.failed or self.unreachable:
            return EXIT_MEASURE
        if any(f.kind in ("loss", "unfair", "starved") for f in self.findings):
            return EXIT_CONGESTED
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"schema": LOAD_SCHEMA, "pattern": self.pattern, "hosts": self.hosts,
                "flows_per_pair": self.flows_per_pair, "backend": self.backend, "launcher": self.launcher,
                "duration_s": self.duration_s, "seed": self.seed, "total_gbps": self.total_gbps,
                "sum_of_rates_gbps": self.sum_of_rates_gbps, "phase_spread_s": self.phase_spread_s,
                "concurrent_gbps": self.concurrent_gbps, "interval_totals_gbps": self.interval_totals_gbps,
                "fairness_jain": self.fairness, "interval_fairness_jain": self.interval_fairness,
                "start_spread_s": self.start_spread_s, "bottleneck": self.bottleneck.to_json(),
                "findings": [f.to_json() for f in self.findings],
                "victim": self.victim.to_json() if self.victim else None,
                "rails": self.rails, "rail_bytes": self.rail_bytes() if self.rails else None,
                "flows": [f.to_json() for f in self.flows], "unreachable": self.unreachable, "notes": self.notes,
                "exit_code": self.exit_code}
