# SPDX-License-Identifier: BSD-3-Clause
"""The fabric matrix's output: ``fabscope.matrix/1``, one object per matrix run.

Owns the types the matrix produces and their JSON: a ``Measurement`` is one directed pair
measurement (src client -> dst server) at one pattern, carrying the engine's result record (the
``fabscope.result/1`` schema, path verdict attached, plus ``src_host``/``dst_host``); a
``Finding`` is a verdict about the fabric (a bad node, a bad link, a misrouted pair) with its
evidence and, for a bad node or link, the causes seen on its slow pairs (``FindingWhy``,
results/findingwhy.py); ``MatrixRun`` is the whole run. The judging lives in ``fabscope.matrix.rules`` and
``fabscope.matrix.findings``; this module only holds and serialises what they decided, and reads a
``fabscope.matrix/1`` document back (``MatrixRun.parse``: what ``fabscope report`` draws, strict like
``parse_record``: a malformed document is a ``RecordError`` naming the field).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_BAD_FABRIC, EXIT_INTERRUPTED, EXIT_MEASURE, EXIT_MISROUTED, EXIT_OK, EXIT_PEER
from ..untyped import count
from .errors import RecordError
from .findingwhy import CauseOnPairs, FindingWhy
from .model import PATTERNS, Result, _int, _obj, _opt_num, _opt_obj, _opt_str, _str, _strings, parse_record

MATRIX_SCHEMA = "fabscope.matrix/1"
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
    result: Result | None = None  # the engine's record (of the last size), typed, path attached
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

    @staticmethod
    def parse(obj: Mapping[str, Any], where: str = "") -> Measurement:
        """One of a document's ``pairs``: the engine's record (none for a measurement that failed)
        with ``src_host``, ``dst_host`` and the matrix's own ``matrix`` object beside its fields."""
        judged = _obj(obj, "matrix", where)
        w = f"{where}matrix."
        pattern = _str(judged, "pattern", w)
        if pattern not in PATTERNS:
            raise RecordError(f"{w}pattern", f"must be one of {', '.join(PATTERNS)}, got {pattern!r}")
        phase = _opt_str(judged, "phase", w) or "screen"
        if phase not in PHASES:
            raise RecordError(f"{w}phase", f"must be one of {', '.join(PHASES)}, got {phase!r}")
        record = {k: v for k, v in obj.items() if k not in ("src_host", "dst_host", "matrix")}
        try:
            result = parse_record(record, judge_path=False) if "schema" in record else None
        except RecordError as exc:
            raise RecordError(f"{where}{exc.field}", exc.problem) from exc
        return Measurement(
            src=_str(obj, "src_host", where), dst=_str(obj, "dst_host", where), pattern=pattern,
            value=_opt_num(judged, "value", w), phase=phase, round=count(judged.get("round")) or 0,
            verdict=result.path.verdict if result else None, result=result, error=_opt_str(judged, "error", w),
            suspect=judged.get("suspect") is True, measured_s=result.duration_s if result else None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.result.to_json() if self.result else {})
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

    @staticmethod
    def parse(obj: Mapping[str, Any], where: str = "") -> Finding:
        kind = _str(obj, "kind", where)
        if kind not in FINDING_KINDS:
            raise RecordError(f"{where}kind", f"must be one of {', '.join(FINDING_KINDS)}, got {kind!r}")
        diagnosis = _opt_str(obj, "diagnosis", where)
        why = None
        if diagnosis is not None:  # a bad node or link: the causes seen on its slow pairs
            causes = obj.get("causes") or []
            if not isinstance(causes, list) or not all(isinstance(c, Mapping) for c in causes):
                raise RecordError(f"{where}causes", "must be a list of objects")
            why = FindingWhy(causes=tuple(_cause(c, f"{where}causes[{i}].") for i, c in enumerate(causes)),
                             diagnosis=diagnosis, slow_pairs=_int(obj, "slow_pairs", where),
                             unexplained=tuple(_strings(obj, "unexplained", where)))
        return Finding(kind=kind, hosts=_strings(obj, "hosts", where), summary=_str(obj, "summary", where),
                       evidence=dict(_opt_obj(obj, "evidence") or {}), why=why)

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "hosts": self.hosts, "summary": self.summary, "evidence": self.evidence}
        why = self.why.to_json() if self.why else {"causes": [], "diagnosis": None, "slow_pairs": 0, "unexplained": []}
        return out | why


def _cause(obj: Mapping[str, Any], where: str) -> CauseOnPairs:
    return CauseOnPairs(cause=_str(obj, "cause", where), pairs=_int(obj, "pairs", where), of=_int(obj, "of", where),
                        evidence=_str(obj, "evidence", where), fix=_opt_str(obj, "fix", where),
                        clean_pairs=_int(obj, "clean_pairs", where), clean_of=_int(obj, "clean_of", where))


@dataclass(slots=True)
class JobTiming:
    """One pair measurement: its wall time (from its start until its hosts were free again; in a
    round measured at once, the round's) and its measured phases."""

    wall_s: float
    measured_s: float  # the job's Measurement.measured_s
    phases: dict[str, float] = field(default_factory=dict)  # the job's Measurement.phases


@dataclass
class MatrixTiming:
    """Where a matrix's time went (issue 24: a matrix that spends its time measuring)."""

    start_s: float = 0.0  # from the command's start to the first job: launcher, agents checking in
    wall_s: float = 0.0  # from the command's start to the last job's end
    slots: int = 0  # the most jobs at once: a round's width (hosts / 2), or --parallel
    jobs: list[JobTiming] = field(default_factory=list)

    @property
    def measuring_s(self) -> float:
        """The wall time the measurements need at that many at once: the sum of every job's measured
        phases over the slots (issue 24's 199 s of pair durations / 4 pairs at once = 50 s)."""
        return sum(j.measured_s for j in self.jobs) / self.slots if self.slots else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "start_s": round(self.start_s, 3),
            "jobs": len(self.jobs),
            "jobs_at_once": self.slots,
            "measuring_s": round(self.measuring_s, 3),
            "measuring_fraction": round(self.measuring_s / self.wall_s, 4) if self.wall_s > 0 else None,
            # A job's time beyond its measured phases: engine start, warmup, counters, the agent.
            "overhead_per_job_s": (round(statistics.median(j.wall_s - j.measured_s for j in self.jobs), 3)
                                   if self.jobs else None),
            "job_phases_median_s": self._phase_medians(),
        }

    def _phase_medians(self) -> dict[str, float]:
        by: dict[str, list[float]] = {}
        for j in self.jobs:
            for k, v in j.phases.items():
                by.setdefault(k, []).append(v)
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

    @staticmethod
    def parse(obj: Mapping[str, Any]) -> MatrixRun:
        """A ``fabscope.matrix/1`` document (``fabscope matrix --format json``, or a store's summary) read
        back. Its ``timing`` is a summary (the jobs' medians), so the parsed run has no timing of its own."""
        try:
            return MatrixRun._parse(obj)
        except RecordError as exc:  # the field's path is from the document's top: say which document
            raise RecordError(exc.field, exc.problem, "fabscope.matrix/1 document") from exc

    @staticmethod
    def _parse(obj: Mapping[str, Any]) -> MatrixRun:
        schema = _str(obj, "schema")
        name, _, num = schema.partition("/")
        if name != "fabscope.matrix" or not num.isdigit():
            raise RecordError("schema", f"is {schema!r}, not a fabscope.matrix/N document")
        if int(num) > 1:
            raise RecordError("schema", f"is {schema!r}, newer than this fabscope reads ({MATRIX_SCHEMA}); upgrade "
                              "fabscope")
        given = obj.get("pattern")
        patterns = [given] if isinstance(given, str) else given
        if not isinstance(patterns, list) or not patterns or not all(p in PATTERNS for p in patterns):
            raise RecordError("pattern", f"must be one of {', '.join(PATTERNS)} or a list of them, got {given!r}")
        pairs, findings, unreachable = (obj.get(k) or [] for k in ("pairs", "findings", "unreachable"))
        for key, items in (("pairs", pairs), ("findings", findings), ("unreachable", unreachable)):
            if not isinstance(items, list) or not all(isinstance(x, Mapping) for x in items):
                raise RecordError(key, "must be a list of objects")
        return MatrixRun(
            hosts=_strings(obj, "hosts"), patterns=[str(p) for p in patterns], backend=_str(obj, "backend"),
            schedule=dict(_opt_obj(obj, "schedule") or {}), rule=dict(_opt_obj(obj, "rule") or {}),
            measurements=[Measurement.parse(p, f"pairs[{i}].") for i, p in enumerate(pairs)],
            findings=[Finding.parse(f, f"findings[{i}].") for i, f in enumerate(findings)],
            unreachable={_str(u, "host", f"unreachable[{i}]."): _str(u, "reason", f"unreachable[{i}].")
                         for i, u in enumerate(unreachable)},
            centres={str(k): dict(v) for k, v in (_opt_obj(obj, "centres") or {}).items() if isinstance(v, Mapping)},
            notes=_strings(obj, "notes"), launcher=_opt_str(obj, "launcher"), interrupted=obj.get("interrupted") is True)

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
