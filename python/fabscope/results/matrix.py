"""The fabric matrix's output: ``fabscope.matrix/1``, one object per matrix run.

Owns the types the matrix produces and their JSON: a ``Measurement`` is one directed pair
measurement (src client -> dst server) at one pattern, carrying the engine's result record (the
``fabscope.result/1`` schema, path verdict attached, plus ``src_host``/``dst_host``); a
``Finding`` is a verdict about the fabric (a bad node, a bad link, a misrouted pair) with its
evidence and, for a bad node or link, the causes seen on its slow pairs (``FindingWhy``,
results/findingwhy.py); ``MatrixRun`` is the whole run. The judging lives in ``fabscope.matrix.rules`` and
``fabscope.matrix.findings``; this module only holds and serialises what they decided.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_MEASURE, EXIT_MISROUTED, EXIT_OK, EXIT_PEER
from .findingwhy import FindingWhy

MATRIX_SCHEMA = "fabscope.matrix/1"
#: Exit code of a matrix that found a bad node or a bad link.
EXIT_BAD_FABRIC = 8
EXIT_INTERRUPTED = 130  # as the CLI's own KeyboardInterrupt
FINDING_KINDS = ("node", "link", "misrouted")
PHASES = ("screen", "retest", "partner")


def metric_of(pattern: str) -> str:
    """The figure a pattern is judged on: receiver bandwidth for bw/bibw, the median latency for lat."""
    return "latency_p50_us" if pattern == "lat" else "bandwidth_gbps"


@dataclass(slots=True)
class Measurement:
    """One directed measurement: the engine on ``src`` ran as client towards ``dst``'s server."""

    src: str
    dst: str
    pattern: str
    value: float | None  # Gb/s for bw/bibw, p50 in us for lat; None when it failed
    phase: str = "screen"  # screen (the schedule), retest (a suspect again), partner (a fresh partner)
    round: int = 0
    verdict: str | None = None  # the record's path verdict
    record: dict[str, Any] | None = None  # the engine's record, path attached
    error: str | None = None
    suspect: bool = False  # set by the rule
    measured_s: float | None = None  # the engines' measured phases (duration_s of its records)
    # Where the job's time went, seen from the coordinator (matrix/execute.py): "server_start" (the
    # listen order to the server engine's port), "client" (the connect order to the client's
    # records), "server_end" (to the server engine's exit).
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def pair(self) -> tuple[str, str]:
        return (self.src, self.dst) if self.src < self.dst else (self.dst, self.src)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.record or {})
        out.update(src_host=self.src, dst_host=self.dst, matrix={
            "pattern": self.pattern, "metric": metric_of(self.pattern), "value": self.value,
            "phase": self.phase, "round": self.round, "suspect": self.suspect,
        })
        if self.error:
            out["matrix"]["error"] = self.error
        return out


@dataclass
class Finding:
    kind: str  # node | link | misrouted
    hosts: list[str]
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    # The causes seen on its slow pairs (a bad node or link); None for a misrouted pair, whose
    # cause is the path verdict its summary states.
    why: FindingWhy | None = None

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "hosts": self.hosts, "summary": self.summary, "evidence": self.evidence}
        why = self.why.to_json() if self.why else {"causes": [], "diagnosis": None, "slow_pairs": 0, "unexplained": []}
        return out | why


@dataclass(slots=True)
class RoundTiming:
    """One round of jobs run at once: its wall time and its jobs' measured phases."""

    jobs: int
    wall_s: float
    measured_s: float  # the sum of its jobs' measured phases
    longest_s: float  # the longest of them: the round cannot end sooner
    phases: list[dict[str, float]] = field(default_factory=list)  # each job's Measurement.phases


@dataclass
class MatrixTiming:
    """Where a matrix's time went (issue 24: a matrix that spends its time measuring)."""

    start_s: float = 0.0  # from the command's start to the first round: launcher, agents checking in
    wall_s: float = 0.0  # from the command's start to the last round's end
    rounds: list[RoundTiming] = field(default_factory=list)

    @property
    def slots(self) -> int:
        """The most jobs that ran at once (hosts / 2, or --parallel)."""
        return max((r.jobs for r in self.rounds), default=0)

    @property
    def measuring_s(self) -> float:
        """The wall time the measurements need at that many at once: the sum of every job's measured
        phases over the slots (issue 24's 199 s of pair durations / 4 pairs at once = 50 s)."""
        return sum(r.measured_s for r in self.rounds) / self.slots if self.slots else 0.0

    def to_json(self) -> dict[str, Any]:
        rounds_s = sum(r.wall_s for r in self.rounds)
        n = len(self.rounds)
        return {
            "wall_s": round(self.wall_s, 3),
            "start_s": round(self.start_s, 3),
            "rounds": n,
            "rounds_s": round(rounds_s, 3),
            "measuring_s": round(self.measuring_s, 3),
            "measuring_fraction": round(self.measuring_s / self.wall_s, 4) if self.wall_s > 0 else None,
            "jobs_at_once": self.slots,
            # A round's wait beyond its longest measurement: start-up, warmup, counters, the barrier.
            "overhead_per_round_s": round((rounds_s - sum(r.longest_s for r in self.rounds)) / n, 3) if n else None,
            "job_phases_median_s": self._phase_medians(),
            "per_round": [[r.jobs, round(r.wall_s, 3), round(r.longest_s, 3)] for r in self.rounds],
        }

    def _phase_medians(self) -> dict[str, float]:
        """The median of each job phase over every job, and of the round's wait for its slowest job
        beyond the job's own time (the barrier between rounds)."""
        by: dict[str, list[float]] = {}
        for r in self.rounds:
            for ph in r.phases:
                for k, v in ph.items():
                    by.setdefault(k, []).append(v)
                total = sum(ph.values())
                if total:
                    by.setdefault("barrier", []).append(max(0.0, r.wall_s - total))
        return {k: round(statistics.median(v), 3) for k, v in by.items()}


@dataclass
class MatrixRun:
    hosts: list[str]
    patterns: list[str]
    backend: str
    schedule: dict[str, Any]
    rule: dict[str, Any]
    measurements: list[Measurement] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> what happened
    centres: dict[str, dict[str, float | None]] = field(default_factory=dict)  # pattern -> centre, spread
    notes: list[str] = field(default_factory=list)
    launcher: str | None = None
    interrupted: bool = False  # Ctrl-C: what was measured is judged and printed, exit 130
    timing: MatrixTiming = field(default_factory=MatrixTiming)

    @property
    def retests(self) -> int:
        return sum(1 for m in self.measurements if m.phase != "screen")

    @property
    def failures(self) -> list[Measurement]:
        """Measurements that failed between two hosts that stayed reachable (never silent)."""
        return [m for m in self.measurements
                if m.error and m.src not in self.unreachable and m.dst not in self.unreachable]

    @property
    def exit_code(self) -> int:
        """8 a bad node or link, else 5 a misroute, else 3 an unreachable host, else 4 a failed
        measurement, else 0."""
        if self.interrupted:
            return EXIT_INTERRUPTED
        kinds = {f.kind for f in self.findings}
        if kinds & {"node", "link"}:
            return EXIT_BAD_FABRIC
        if "misrouted" in kinds:
            return EXIT_MISROUTED
        if self.unreachable:
            return EXIT_PEER
        if self.failures:
            return EXIT_MEASURE
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": MATRIX_SCHEMA,
            "hosts": self.hosts,
            "pattern": self.patterns[0] if len(self.patterns) == 1 else self.patterns,
            "backend": self.backend,
            "launcher": self.launcher,
            "schedule": self.schedule,
            "rule": self.rule,
            "centres": self.centres,
            "measurements": len(self.measurements),
            "retests": self.retests,
            "unreachable": [{"host": h, "reason": r} for h, r in sorted(self.unreachable.items())],
            "failed": [{"src": m.src, "dst": m.dst, "pattern": m.pattern, "error": m.error} for m in self.failures],
            "notes": self.notes,
            "pairs": [m.to_json() for m in self.measurements],
            "findings": [f.to_json() for f in self.findings],
            "interrupted": self.interrupted,
            "timing": self.timing.to_json(),
            "exit_code": self.exit_code,
        }
