# SPDX-License-Identifier: BSD-3-Clause
"""The check kinds that run a whole fabscope command once and judge its result objects: suite
(`fabscope suite`: its summary's failed rows, its records' path verdicts and figures), collective
(`fabscope run --backend mpi --pattern allreduce|...`: fabscope.collective/1 records) and load
(`fabscope load PATTERN`: the fabscope.load/1 run with its findings). check.py runs the scenario;
this module owns what each of these kinds runs and how it is judged (docs/check.md)."""

from __future__ import annotations

import json
import socket
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import EXIT_PEER, EXIT_WRONG_DATA
from ..results import RecordError, Result, parse_record
from ..results.collective import COLLECTIVE_SCHEMA, CollectiveResult, parse_collective
from ..results.suite import SuiteSummary
from .check import Judgement, _case, _judge_absolute, _violated
from .command import Ran, run_fabscope
from .expectations import RUN_BANDWIDTH_FIGURES, RUN_LATENCY_FIGURES, Absolute, Expectation
from .faults import fault
from .scenario import CheckSpec, Scenario

# `fabscope suite`'s options that are flags (a TOML `quick = true` is `--quick`).
SUITE_FLAGS = ("quick",)


def _options(check: CheckSpec, flags: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> list[str]:
    argv: list[str] = []
    for key, value in check.options.items():
        if key in skip:
            continue
        if key in flags:
            argv += [f"--{key}"] if value == "yes" else []
        else:
            argv += [f"--{key}", value]
    return argv


def suite_argv(check: CheckSpec, scenario: Scenario, out: str) -> list[str]:
    argv = ["suite", "--out", out]
    if not check.loopback:
        argv += ["--peer", check.peer] if check.peer else []
        if len(scenario.hosts) == 2:
            argv += ["--hosts", ",".join(scenario.hosts), "--launcher", scenario.launcher or "mpirun"]
    return argv + _options(check, SUITE_FLAGS)


def collective_argv(check: CheckSpec, scenario: Scenario) -> list[str]:
    where = (["--loopback"] if check.loopback
             else ["--hosts", ",".join(scenario.hosts), "--launcher", scenario.launcher or "mpirun"])
    return ["run", "--backend", "mpi", *where, *_options(check)]  # a backend option other than mpi is refused


def load_argv(check: CheckSpec, scenario: Scenario) -> list[str]:
    return ["load", check.options["pattern"], "--hosts", ",".join(scenario.hosts), "--launcher",
            scenario.launcher or "mpirun", *_options(check, skip=("pattern",))]


def validation_argv(check: CheckSpec, scenario: Scenario) -> list[str]:
    """The command line the check runs, as its parser checks it before anything runs."""
    if check.kind == "suite":
        return suite_argv(check, scenario, str(Path(tempfile.gettempdir()) / "fabscope-check-suite"))
    return collective_argv(check, scenario) if check.kind == "collective" else load_argv(check, scenario)


def _this_host() -> str:
    return socket.gethostname()


def _failed_command(check: CheckSpec, ran: Ran, nodes: tuple[str, ...]) -> Judgement:
    code = "FS-LINK-001" if ran.returncode == EXIT_PEER else "FS-RUN-001"
    return Judgement(check.name, check.kind, " ".join(ran.argv[:2]), "fail", code, None, None, ran.said,
                     fault(code).fix, nodes)


def _count_judgements(check: CheckSpec, e: Expectation, value: float,
                      items: list[tuple[str, str, tuple[str, ...]]], code: str) -> list[Judgement]:
    """A bound on a count: a pass, or one judgement per counted item (case, evidence, nodes)."""
    assert isinstance(e.rule, Absolute)  # scenario.py allows no baseline on these kinds
    if e.rule.holds(value, e.rule.factor):
        return [Judgement(check.name, check.kind, e.text, "pass", None, value, e.rule.factor,
                          f"{e.figure} = {value:g}", "", ())]
    return [Judgement(check.name, case, e.text, _violated(e), code, value, e.rule.factor, said, fault(code).fix, nodes)
            for case, said, nodes in items]


# --------------------------------------------------------------------------------------------
# suite
# --------------------------------------------------------------------------------------------


def row_selected(r: Result, rows: tuple[str, ...]) -> bool:
    """A record is judged by a suite check's row figures when `rows` is empty or one selector's
    words are the start of its "backend op pattern" (``tcp``, ``ucx tag``, ``mpi send lat``)."""
    words = [r.backend, r.op, r.pattern]
    return not rows or any(sel.split() == words[:len(sel.split())] for sel in rows)


def judge_suite(check: CheckSpec, scenario: Scenario, summary: SuiteSummary, records: list[Result]) -> list[Judgement]:
    here = _this_host()
    where = (here,) if check.loopback else (here, (check.peer or scenario.hosts[-1]).rsplit(":", 1)[0])
    counts: dict[str, tuple[float, list[tuple[str, str, tuple[str, ...]]], str]] = {
        "rows_failed": (float(len(summary.failed)),
                        [(f"row {f['row']}", f"{f['row']}: FAILED (exit {f['exit_code']}): {f.get('error') or '-'}",
                          where) for f in summary.failed], "FS-SUITE-001"),
        "rows_misrouted": (float(sum(r.misrouted for r in records)),
                           [(_case(r), f"path misrouted: {r.path.reason or r.path.summary}", where)
                            for r in records if r.misrouted], "FS-SUITE-002"),
        "rows_unverified": (float(sum(r.path.verdict == "unverifiable" for r in records)),
                            [(_case(r), f"path unverifiable: {r.path.reason or r.path.summary}", where)
                             for r in records if r.path.verdict == "unverifiable"], "FS-SUITE-003"),
    }
    # The row figures are judged as a run check's, over the selected rows that produce them.
    as_run = replace(check, loopback=check.loopback, peer=check.peer or (None if check.loopback else where[-1]))
    out: list[Judgement] = []
    for e in check.expectations:
        if e.figure in counts:
            value, items, code = counts[e.figure]
            out += _count_judgements(check, e, value, items, code)
            continue
        lat = e.figure in RUN_LATENCY_FIGURES
        assert lat or e.figure in RUN_BANDWIDTH_FIGURES
        chosen = [r for r in records if row_selected(r, check.rows) and (r.latency is not None) == lat]
        if not chosen:
            sel = f" among rows {', '.join(check.rows)}" if check.rows else ""
            out.append(Judgement(check.name, check.kind, e.text, "inconclusive", "FS-FIG-002", None, None,
                                 f"no row{sel} measured {e.figure}", fault("FS-FIG-002").fix, where))
            continue
        out += _judge_absolute(as_run, e, [chosen])
    return out


def suite_check(check: CheckSpec, scenario: Scenario, store_args: list[str], runs: list[list[Result]]) -> list[Judgement]:
    """Run the suite and judge it; its records are appended to ``runs`` (the HTML report draws them)."""
    with tempfile.TemporaryDirectory(prefix="fabscope-check-suite-") as tmp:
        ran = run_fabscope([*suite_argv(check, scenario, tmp), *store_args])
        where = (_this_host(),) if check.loopback else (_this_host(), (check.peer or scenario.hosts[-1]).rsplit(":", 1)[0])
        try:
            summary = SuiteSummary.parse(json.loads((Path(tmp) / "suite.json").read_text()))
            jsonl = Path(tmp) / ("loopback.jsonl" if check.loopback else "hosts.jsonl")
            records = [parse_record(json.loads(line), judge_path=False)
                       for line in jsonl.read_text().splitlines() if line.startswith("{")]
        except (OSError, ValueError, RecordError):
            return [_failed_command(check, ran, where)]
    runs.append(records)
    return judge_suite(check, scenario, summary, records)


# --------------------------------------------------------------------------------------------
# collective
# --------------------------------------------------------------------------------------------


def _collective_figure(r: CollectiveResult, figure: str) -> tuple[float | None, str]:
    """(value, why it is missing)."""
    if figure == "fraction_of_ceiling":
        ceiling, basis = r.ceiling()
        return r.fraction, (f"no ceiling: {basis}" if ceiling is None else "no busbw for this operation")
    value = {"busbw_gbps": r.busbw_gbps, "algbw_gbps": r.algbw_gbps, "p50_us": r.time_ns.p50 / 1000.0,
             "p99_us": r.time_ns.p99 / 1000.0}[figure]
    return value, f"{r.pattern} has no {figure}"


def judge_collective(check: CheckSpec, results: list[CollectiveResult]) -> list[Judgement]:
    out: list[Judgement] = []
    for r in results:
        case = f"mpi {r.pattern} {r.size} B, {r.ranks} ranks"
        hosts = r.hosts
        if r.misrouted:
            bad = tuple(r.misrouted_hosts)
            shown = "; ".join(f"{p.host}: {p.device} counted {p.counted_bytes} of the {p.required_bytes} B it must "
                              f"carry (carriers {p.carriers})" for p in r.host_paths() if p.host in bad)
            out.append(Judgement(check.name, case, "bytes over the requested device", "fail", "FS-PATH-001", None,
                                 None, f"misrouted on {', '.join(bad)}: {shown}", fault("FS-PATH-001").fix, bad))
        for e in check.expectations:
            assert isinstance(e.rule, Absolute)
            value, why = _collective_figure(r, e.figure)
            if value is None:
                out.append(Judgement(check.name, case, e.text, "inconclusive", "FS-FIG-002", None, None, why,
                                     fault("FS-FIG-002").fix, hosts))
                continue
            slowest = f" (slowest rank {r.last_rank} on {r.last_host})" if e.figure.endswith("_us") else ""
            if e.rule.holds(value, e.rule.factor):
                out.append(Judgement(check.name, case, e.text, "pass", None, value, e.rule.factor,
                                     f"{e.figure} = {value:.4g}{slowest}", "", hosts))
            else:
                code = "FS-LAT-001" if e.figure.endswith("_us") else "FS-COLL-002"
                out.append(Judgement(check.name, case, e.text, _violated(e), code, value, e.rule.factor,
                                     f"{e.figure} = {value:.4g}{slowest}, not {e.rule.op} {e.rule.factor:.4g}",
                                     fault(code).fix, hosts))
    return out


def collective_check(check: CheckSpec, scenario: Scenario) -> list[Judgement]:
    """The collectives' results are not kept in the history yet (`run` refuses --store for them)."""
    ran = run_fabscope([*collective_argv(check, scenario), "--format", "json"])
    nodes = (_this_host(),) if check.loopback else scenario.hosts
    if ran.returncode == EXIT_WRONG_DATA:
        return [Judgement(check.name, check.options.get("pattern", "collective"), "every element of the result right",
                          "fail", "FS-COLL-001", None, None, ran.said, fault("FS-COLL-001").fix, nodes)]
    results: list[CollectiveResult] = []
    for line in ran.stdout.splitlines():
        if line.startswith("{"):
            raw = json.loads(line)
            if raw.get("schema") == COLLECTIVE_SCHEMA:
                results.append(parse_collective(raw))
    got = judge_collective(check, results)
    if not results or (ran.returncode not in (0, 5)):
        got.append(_failed_command(check, ran, nodes))
    return got


# --------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------

# The load's findings (load/findings.py's kinds) and their fault codes; oversubscription is a fact
# of the pattern, not a fault.
FINDING_CODES = {"loss": "FS-LOAD-001", "hot-spot": "FS-LOAD-001", "unfair": "FS-LOAD-002", "starved": "FS-LOAD-002",
                 "victim": "FS-LOAD-003", "rail-imbalance": "FS-LOAD-004", "slow-rail": "FS-LOAD-004",
                 "ecn": "FS-LOAD-005", "rdma-congestion": "FS-LOAD-005", "pause": "FS-LOAD-005"}
FIGURE_CODES = {"total_gbps": "FS-LOAD-006", "fraction_of_bottleneck": "FS-LOAD-006", "fairness_jain": "FS-LOAD-002",
                "retransmitted_segments": "FS-LOAD-001", "drops": "FS-LOAD-001", "victim_p50_factor": "FS-LOAD-003",
                "victim_p99_factor": "FS-LOAD-003"}


@dataclass(frozen=True)
class LoadFigures:
    """What a load check judges, from one fabscope.load/1 run: the figures (None: not measured, with
    why), each impact's 95 % interval, the findings (kind, summary, fix) and the hosts."""

    values: dict[str, float | None]
    missing: dict[str, str]
    intervals: dict[str, tuple[float, float]]
    findings: list[tuple[str, str, str]]
    hosts: tuple[str, ...]
    bottleneck_host: str | None = None  # the host whose port the load's flows share (incast: the receiver)


def load_figures(doc: dict[str, Any]) -> LoadFigures:
    """The figures of a `fabscope load --format json` document: the totals, fairness and impacts as
    the load computed them, the retransmissions and drops from each flow's FlowResult."""
    from ..load.model import flow_result
    from ..load.patterns import Flow

    flows = [flow_result(Flow(int(f["flow"]), str(f["src"]), str(f["dst"]), int(f.get("lane") or 0),
                              str(f.get("role") or "load")), [f["record"]] if f.get("record") else [], f.get("error"))
             for f in doc.get("flows") or []]
    retrans = [f.retransmitted for f in flows]
    drops = [sum(d.values()) for f in flows for side in ("local", "peer") for d in f.net_deltas(side).values()]
    bottleneck = doc.get("bottleneck") or {}
    rate = bottleneck.get("rate_gbps")
    values: dict[str, float | None] = {
        "total_gbps": float(doc["total_gbps"]),
        "fraction_of_bottleneck": float(doc["concurrent_gbps"]) / float(rate) if rate else None,
        "fairness_jain": float(doc["fairness_jain"]) if doc.get("fairness_jain") is not None else None,
        "retransmitted_segments": float(sum(n for n in retrans if n is not None))
        if retrans and all(n is not None for n in retrans) else None,
        "drops": float(sum(drops)) if drops else None,
    }
    missing = {"fraction_of_bottleneck": f"the bottleneck's rate is unknown ({bottleneck.get('rate_source')}); "
                                         "give options.line-rate",
               "fairness_jain": "no flow carried anything",
               "retransmitted_segments": "a flow's record carries no retransmission count (not TCP?)",
               "drops": "no netdev counters in the flows' records"}
    intervals: dict[str, tuple[float, float]] = {}
    impacts = {float(i["q"]): i for i in ((doc.get("victim") or {}).get("impact") or [])}
    for q, figure in ((0.5, "victim_p50_factor"), (0.99, "victim_p99_factor")):
        i = impacts.get(q)
        values[figure] = float(i["factor"]) if i else None
        if i:
            intervals[figure] = (float(i["interval"][0]), float(i["interval"][1]))
        missing[figure] = "no victim pair (options.victim = \"H1,H2\")" if not doc.get("victim") else \
            "the victim's latency has no histogram"
    findings = [(str(f["kind"]), str(f["summary"]), str(f.get("fix") or "")) for f in doc.get("findings") or []]
    return LoadFigures(values, missing, intervals, findings, tuple(str(h) for h in doc.get("hosts") or []),
                       str(bottleneck["host"]) if bottleneck.get("host") else None)


def judge_load(check: CheckSpec, got: LoadFigures) -> list[Judgement]:
    out: list[Judgement] = []
    named: set[str] = set()
    for e in check.expectations:
        assert isinstance(e.rule, Absolute)
        value = got.values.get(e.figure)
        if value is None:
            out.append(Judgement(check.name, "load", e.text, "inconclusive", "FS-FIG-002", None, None,
                                 got.missing[e.figure], fault("FS-FIG-002").fix, got.hosts))
            continue
        code = FIGURE_CODES[e.figure]
        related = [f for f in got.findings if FINDING_CODES.get(f[0]) == code]
        named |= {f[0] for f in related}
        low, high = got.intervals.get(e.figure, (value, value))
        span = f" (95 % interval {low:.3g}-{high:.3g})" if e.figure in got.intervals else ""
        said = f"{e.figure} = {value:.4g}{span}" + "".join(f"; {k}: {s}" for k, s, _ in related)
        both = (e.rule.holds(low, e.rule.factor), e.rule.holds(high, e.rule.factor))
        if all(both):
            out.append(Judgement(check.name, "load", e.text, "pass", None, value, e.rule.factor, said, "", got.hosts))
        elif any(both):  # the interval straddles the bound: no call either way
            out.append(Judgement(check.name, "load", e.text, "inconclusive", "FS-STAT-001", value, e.rule.factor,
                                 f"{said}: the interval straddles {e.rule.factor:g}", fault("FS-STAT-001").fix,
                                 got.hosts))
        else:
            fix = "; ".join(f for _, _, f in related if f) or fault(code).fix
            # Too little carried: the shared port's host is the node named (its link is the bottleneck).
            nodes = (got.bottleneck_host,) if code == "FS-LOAD-006" and got.bottleneck_host else got.hosts
            out.append(Judgement(check.name, "load", e.text, _violated(e), code, value, e.rule.factor,
                                 f"{said}; not {e.rule.op} {e.rule.factor:g}", fix, nodes))
    # A congestion finding no expectation spoke to is still said: a warning with its code.
    for kind, summary, fix in got.findings:
        found = FINDING_CODES.get(kind)
        if found and kind not in named:
            out.append(Judgement(check.name, f"finding {kind}", "no congestion named", "warn", found, None, None,
                                 summary, fix or fault(found).fix, got.hosts))
    return out


def load_check(check: CheckSpec, scenario: Scenario, store_args: list[str]) -> list[Judgement]:
    ran = run_fabscope([*load_argv(check, scenario), "--format", "json", *store_args])
    try:
        doc = json.loads(ran.stdout)
        got = load_figures(doc)
    except (ValueError, KeyError, TypeError, RecordError):
        return [_failed_command(check, ran, scenario.hosts)]
    out = judge_load(check, got)
    unreachable = doc.get("unreachable") or {}
    out += [Judgement(check.name, f"host {h}", "every host's agent", "fail", "FS-LINK-001", None, None, str(why),
                      fault("FS-LINK-001").fix, (str(h),)) for h, why in unreachable.items()]
    failed = [f for f in doc.get("flows") or [] if f.get("error")]
    out += [Judgement(check.name, f"flow {f['src']}->{f['dst']}", "every flow measured", "fail", "FS-RUN-001", None,
                      None, str(f["error"]), fault("FS-RUN-001").fix, (str(f["src"]), str(f["dst"]))) for f in failed]
    return out
