# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope check FILE`: run a scenario's checks and judge each expectation pass / warn / fail /
inconclusive with a stable fault code (faults.py), its evidence and its fix; then name the
defective nodes and links. Text, JSON (one object) or JUnit XML (--junit PATH).

An inconclusive call (a baseline comparison without the evidence to call it, a figure or reference
the run did not report) is reported as inconclusive, never as a pass.

Exit status (docs/exit-codes.md): 0 every expectation passed; 1 only warnings; 10 something is
inconclusive and nothing failed; 11 at least one expectation failed; 2 the scenario is wrong
(nothing was run)."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import (
    EXIT_CHECK_FAILED,
    EXIT_INCONCLUSIVE,
    EXIT_MISROUTED,
    EXIT_OK,
    EXIT_PEER,
    EXIT_USAGE,
    EXIT_WARN,
    FabscopeError,
)
from ..results import Result, parse_record
from . import baseline as baselines
from .command import run_fabscope
from .expectations import Absolute, Expectation, Relative
from .faults import fault
from .scenario import CheckSpec, Scenario, load

STATUS_ORDER = ("pass", "warn", "inconclusive", "fail")


@dataclass
class Judgement:
    check: str
    case: str  # what was measured, e.g. "tcp send lat 8 B", or the doctor finding's id
    expectation: str
    status: str  # pass | warn | fail | inconclusive
    code: str | None  # a fault code (faults.py) unless the status is pass
    value: float | None
    bound: float | None
    evidence: str
    fix: str
    nodes: tuple[str, ...] = ()  # the hosts this judgement is about (one: a node; two: a link)
    made_at: str = ""
    valid_until: str = ""


@dataclass
class Outcome:
    scenario: Scenario
    judgements: list[Judgement] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)  # every record the run checks measured
    made_at: str = ""
    valid_until: str = ""

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for j in self.judgements if j.status == s) for s in STATUS_ORDER}

    @property
    def status(self) -> str:
        worst = max((STATUS_ORDER.index(j.status) for j in self.judgements), default=0)
        return STATUS_ORDER[worst]

    def defective(self) -> tuple[list[str], list[str]]:
        """(nodes, links) that a failed judgement names."""
        nodes: dict[str, None] = {}
        links: dict[str, None] = {}
        for j in self.judgements:
            if j.status != "fail":
                continue
            hosts = tuple(dict.fromkeys(h for h in j.nodes if h))
            if len(hosts) == 1:
                nodes[hosts[0]] = None
            elif len(hosts) == 2:
                links["<->".join(sorted(hosts))] = None
        return list(nodes), list(links)

    def exit_code(self) -> int:
        return {"pass": EXIT_OK, "warn": EXIT_WARN, "inconclusive": EXIT_INCONCLUSIVE, "fail": EXIT_CHECK_FAILED}[self.status]

    def to_json(self) -> dict[str, Any]:
        nodes, links = self.defective()
        return {"schema": "fabscope.check/1", "scenario": self.scenario.name, "file": str(self.scenario.path),
                "made_at": self.made_at, "valid_until": self.valid_until, "status": self.status,
                "counts": self.counts, "defective_nodes": nodes, "defective_links": links,
                "judgements": [asdict(j) for j in self.judgements]}


# --------------------------------------------------------------------------------------------
# validation: everything that can be found before anything runs
# --------------------------------------------------------------------------------------------


def validate(scenario: Scenario, store_path: str | None) -> None:
    """Each run check's options as `fabscope run` would parse them, and every baseline named."""
    from .. import cli
    from .kinds import validation_argv

    for c in scenario.checks:
        if c.kind == "doctor":
            continue
        argv = ([*c.run_argv(), "--no-store"] if c.kind == "run"
                else c.matrix_argv(scenario.hosts, scenario.launcher) if c.kind == "matrix"
                else validation_argv(c, scenario))
        try:
            ns = cli.build_parser(with_engine=True, only=argv[0]).parse_args(argv)
            ns.check(ns)
        except FabscopeError as exc:
            raise FabscopeError(f"{scenario.path}:{c.options_line}: check {c.name!r}: {exc.message}; nothing was run",
                                EXIT_USAGE) from exc
    named = scenario.baselines()
    if not named:
        return
    from ..store import open_store

    first = min(named.values())
    try:
        store = open_store(store_path, readonly=True)
    except FabscopeError as exc:
        raise FabscopeError(f"{scenario.path}:{first}: baseline {next(iter(named))!r}: {exc.message}; nothing was run",
                            EXIT_USAGE) from exc
    with store:
        for name, line in named.items():
            try:
                baselines.find(store, name)
            except FabscopeError as exc:
                raise FabscopeError(f"{scenario.path}:{line}: {exc.message}; nothing was run", EXIT_USAGE) from exc


# --------------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------------


@dataclass
class _RunOutput:
    results: list[Result]
    returncode: int
    stderr: str


def _run_once(check: CheckSpec, store_args: list[str]) -> _RunOutput:
    ran = run_fabscope([*check.run_argv(), "--format", "json", *store_args])
    out, err = ran.stdout, ran.stderr
    results = []
    for line in out.splitlines():
        if not line.startswith("{"):
            continue
        raw = json.loads(line)
        if str(raw.get("schema", "")).startswith("fabscope.result"):
            results.append(parse_record(raw, judge_path=False))
    return _RunOutput(results, ran.returncode, err.strip())


def _case(r: Result) -> str:
    return f"{r.backend} {r.op} {r.pattern} {r.size} B"


def _figure(r: Result, figure: str) -> float | None:
    lat, bw = r.latency, r.bandwidth
    values: dict[str, float | None] = {
        "p50_us": lat.p50 if lat else None, "p99_us": lat.p99 if lat else None,
        "p999_us": lat.p999 if lat else None, "max_us": lat.max if lat else None,
        "bw_gbps": bw.gbps if bw else None, "msg_rate_mpps": bw.msg_rate_mpps if bw else None,
    }
    return values.get(figure)


def _hosts(r: Result, check: CheckSpec) -> tuple[str, ...]:
    host, peer = r.hosts
    host = host or socket.gethostname()
    if check.loopback:
        return (host,)
    # The peer as the scenario names it when its engine's host name does not tell the two ends
    # apart (namespaces and containers share one host name).
    return (host, peer if peer and peer != host else str(check.peer).rsplit(":", 1)[0])


def _absolute_code(e: Expectation) -> str:
    return {"p50_us": "FS-LAT-001", "p99_us": "FS-LAT-001", "p999_us": "FS-LAT-001", "max_us": "FS-LAT-001",
            "bw_gbps": "FS-BW-001", "msg_rate_mpps": "FS-BW-001"}.get(e.figure, "FS-FIG-001")


def _violated(e: Expectation) -> str:
    return "fail" if e.level == "expect" else "warn"


def _judge_absolute(check: CheckSpec, e: Expectation, runs: list[list[Result]]) -> list[Judgement]:
    assert isinstance(e.rule, Absolute)
    out = []
    by_case: dict[str, list[Result]] = {}
    for run in runs:
        for r in run:
            by_case.setdefault(_case(r), []).append(r)
    for case, rs in by_case.items():
        values = [v for v in (_figure(r, e.figure) for r in rs) if v is not None]
        refs = [r.explanation.expected_gbps for r in rs if r.explanation is not None and r.explanation.expected_gbps]
        hosts = _hosts(rs[-1], check)
        code = _absolute_code(e)
        if not values:
            out.append(Judgement(check.name, case, e.text, "inconclusive", "FS-FIG-002", None, None,
                                 f"the run reported no {e.figure}", fault("FS-FIG-002").fix, hosts))
            continue
        value = statistics.median(values)
        bound = e.rule.bound(statistics.median(refs) if refs else None)
        if bound is None:
            basis = rs[-1].explanation.expected_basis if rs[-1].explanation else "the record has no explanation"
            out.append(Judgement(check.name, case, e.text, "inconclusive", "FS-FIG-002", value, None,
                                 f"no {e.rule.reference} for this run: {basis}", fault("FS-FIG-002").fix, hosts))
            continue
        over = f" (median of {len(values)} runs)" if len(values) > 1 else ""
        if e.rule.holds(value, bound):
            out.append(Judgement(check.name, case, e.text, "pass", None, value, bound,
                                 f"{e.figure} = {value:.4g}{over}, bound {bound:.4g}", "", hosts))
        else:
            out.append(Judgement(check.name, case, e.text, _violated(e), code, value, bound,
                                 f"{e.figure} = {value:.4g}{over}, not {e.rule.op} {bound:.4g}", fault(code).fix, hosts))
    return out


def _judge_relative(check: CheckSpec, e: Expectation, runs: list[list[Result]], store_path: str | None) -> list[Judgement]:
    from .. import __version__
    from ..compare import Rule, Side, compare
    from ..store import open_store

    assert isinstance(e.rule, Relative)
    with open_store(store_path, readonly=True) as store:
        base = baselines.find(store, e.rule.baseline)
        base_runs = baselines.runs_of(store, base)
    rows = compare(Side(f"baseline {e.rule.baseline}", base_runs), Side(check.name, runs),
                   Rule(threshold=e.rule.percent / 100.0))
    now = baselines.fingerprint([r for run in runs for r in run], [__version__], baselines.this_kernel(),
                                baselines.port_facts())
    changed = baselines.changes(base["fingerprint"], now)
    differs = f"; the baseline was made on another configuration ({'; '.join(changed)})" if changed else ""
    hosts_of = {(_case(r)): _hosts(r, check) for run in runs for r in run}
    out = []
    lat_code = "FS-LAT-002" if e.figure in ("p50_us", "p99_us") else "FS-BW-002"
    for row in rows:
        case = f"{row.backend} {row.op} {row.pattern} {row.size} B"
        if case not in hosts_of:
            continue  # a case only the baseline measured: not this check's
        tail = e.figure == "p99_us"
        verdict = row.tail_verdict if tail else row.verdict
        value = row.tail_current if tail else row.current
        ref = row.tail_baseline if tail else row.baseline
        change = row.tail_change if tail else row.change
        said = (f"{e.figure} {value if value is None else f'{value:.4g}'} against the baseline's "
                f"{ref if ref is None else f'{ref:.4g}'} ({'-' if change is None else f'{100 * change:+.1f} %'}, "
                f"{row.runs[0]} vs {row.runs[1]} runs): {verdict}"
                + (f"; {row.tail_evidence if tail else row.evidence}" if (row.tail_evidence if tail else row.evidence)
                   else "") + differs)
        hosts = hosts_of[case]
        if verdict in ("same", "improvement"):
            out.append(Judgement(check.name, case, e.text, "pass", None, value, ref, said, "", hosts))
        elif verdict == "regression":
            out.append(Judgement(check.name, case, e.text, _violated(e), lat_code, value, ref, said,
                                 fault(lat_code).fix, hosts))
        else:  # inconclusive, only-current, or no tail figures
            out.append(Judgement(check.name, case, e.text, "inconclusive", "FS-STAT-001", value, ref, said,
                                 fault("FS-STAT-001").fix, hosts))
    if changed:
        out.append(Judgement(check.name, f"baseline {e.rule.baseline}", e.text, "warn", "FS-BASE-001", None, None,
                             "what changed since the baseline: " + "; ".join(changed), fault("FS-BASE-001").fix,
                             ()))
    return out


def _judge_path(check: CheckSpec, runs: list[list[Result]]) -> list[Judgement]:
    out = []
    for run in runs:
        for r in run:
            v = r.path.verdict
            hosts = _hosts(r, check)
            said = f"path {v}: {r.path.reason or r.path.summary}"
            if v == "misrouted":
                out.append(Judgement(check.name, _case(r), "bytes over the requested device", "fail", "FS-PATH-001",
                                     None, None, said, fault("FS-PATH-001").fix, hosts))
            elif v == "unverifiable":
                out.append(Judgement(check.name, _case(r), "bytes over the requested device", "inconclusive",
                                     "FS-STAT-001", None, None, said, fault("FS-STAT-001").fix, hosts))
    return out


def _run_check(check: CheckSpec, store_args: list[str], store_path: str | None,
               runs: list[list[Result]]) -> list[Judgement]:
    """Run the check (its runs are appended to ``runs`` as they come) and judge it."""
    for _ in range(check.repeat):
        got = _run_once(check, store_args)
        if got.results:
            runs.append(got.results)
        if got.returncode not in (EXIT_OK, EXIT_MISROUTED):
            code = "FS-LINK-001" if got.returncode == EXIT_PEER else "FS-RUN-001"
            last = got.stderr.splitlines()[-1] if got.stderr else f"exit {got.returncode}"
            where = ((socket.gethostname(),) if check.loopback
                     else (socket.gethostname(), str(check.peer).rsplit(":", 1)[0]))
            return [Judgement(check.name, "run", " ".join(check.run_argv()), "fail", code, None, None,
                              f"`fabscope {' '.join(check.run_argv())}` exited {got.returncode}: {last}",
                              fault(code).fix, where)]
    out = _judge_path(check, runs)
    for e in check.expectations:
        if isinstance(e.rule, Absolute):
            out += _judge_absolute(check, e, runs)
        else:
            out += _judge_relative(check, e, runs, store_path)
    return out


_MATRIX = {"bad_nodes": ("node", "FS-NODE-001"), "bad_links": ("link", "FS-LINK-003"),
           "misrouted_pairs": ("misrouted", "FS-PATH-001")}


def _matrix_check(check: CheckSpec, scenario: Scenario, store_args: list[str]) -> list[Judgement]:
    """`fabscope matrix` on the scenario's hosts; each violated count names its findings' hosts."""
    from ..results.matrix import MatrixRun

    argv = [*check.matrix_argv(scenario.hosts, scenario.launcher), "--format", "json", *store_args]
    ran = run_fabscope(argv)
    out, err = ran.stdout, ran.stderr
    said = f"`fabscope {' '.join(argv)}` exited {ran.returncode}"
    try:
        doc = json.loads(out)
        run = MatrixRun.parse(doc)
    except ValueError:
        last = err.strip().splitlines()[-1] if err.strip() else "no matrix printed"
        return [Judgement(check.name, "matrix", "a matrix", "fail", "FS-RUN-001", None, None, f"{said}: {last}",
                          fault("FS-RUN-001").fix, scenario.hosts[:1])]
    unreachable = [str(h) for h in doc.get("unreachable", [])]
    found = {figure: [f for f in run.findings if f.kind == kind] for figure, (kind, _) in _MATRIX.items()}
    counts = {figure: float(len(fs)) for figure, fs in found.items()}
    counts["unreachable_hosts"] = float(len(unreachable))
    out_j: list[Judgement] = []
    for e in check.expectations:
        assert isinstance(e.rule, Absolute)  # scenario.py allows no baseline on matrix figures
        value = counts[e.figure]
        if e.rule.holds(value, e.rule.factor):
            out_j.append(Judgement(check.name, "matrix", e.text, "pass", None, value, e.rule.factor,
                                   f"{e.figure} = {value:g}", "", ()))
            continue
        if e.figure == "unreachable_hosts":
            out_j += [Judgement(check.name, f"host {h}", e.text, _violated(e), "FS-LINK-001", value, e.rule.factor,
                                f"{h}: its agent never checked in", fault("FS-LINK-001").fix, (h,))
                      for h in unreachable]
            continue
        code = _MATRIX[e.figure][1]
        out_j += [Judgement(check.name, f"{f.kind} {'<->'.join(f.hosts)}", e.text, _violated(e), code, value,
                            e.rule.factor, f.summary, fault(code).fix, tuple(f.hosts))
                  for f in found[e.figure]]
    return out_j


def _doctor_check(check: CheckSpec) -> list[Judgement]:
    from ..devices import sysfs_root_from_env
    from ..doctor import Context, run_doctor

    report = run_doctor(Context(sysfs_root=sysfs_root_from_env(None)), list(check.only) or None)
    counts = report.counts()
    figures = {"errors": counts.get("error", 0), "warnings": counts.get("warning", 0)}
    host = report.host
    out = []
    for e in check.expectations:
        assert isinstance(e.rule, Absolute)  # scenario.py allows no baseline on doctor figures
        value = float(figures[e.figure])
        severity = "error" if e.figure == "errors" else "warning"
        code = "FS-DOC-001" if severity == "error" else "FS-DOC-002"
        findings = [f for f in report.findings if f.severity == severity]
        if e.rule.holds(value, e.rule.factor):
            out.append(Judgement(check.name, "doctor", e.text, "pass", None, value, e.rule.factor,
                                 f"{e.figure} = {value:g}", "", (host,)))
            continue
        shown = "; ".join(f"{f.id}: {f.title} ({f.evidence})" for f in findings[:3])
        fix = "; ".join(f"{f.id}: {f.fix}" for f in findings[:3] if f.fix) or fault(code).fix
        out.append(Judgement(check.name, "doctor", e.text, _violated(e), code, value, e.rule.factor,
                             f"{e.figure} = {value:g}: {shown}", fix, (host,)))
    return out


def run_scenario(scenario: Scenario, store_path: str | None, no_store: bool, tag: str | None) -> Outcome:
    made = datetime.now(UTC)
    outcome = Outcome(scenario, made_at=made.isoformat(timespec="seconds"),
                      valid_until=(made + timedelta(seconds=scenario.valid_for_s)).isoformat(timespec="seconds"))
    store_args = ["--no-store"] if no_store else [*(["--store", store_path] if store_path else []),
                                                   *(["--tag", tag] if tag else [])]
    for check in scenario.checks:
        runs: list[list[Result]] = []
        if check.kind == "doctor":
            got = _doctor_check(check)
        elif check.kind == "matrix":
            got = _matrix_check(check, scenario, store_args)
        elif check.kind in ("suite", "collective", "load"):
            from . import kinds

            got = (kinds.suite_check(check, scenario, store_args, runs) if check.kind == "suite"
                   else kinds.collective_check(check, scenario) if check.kind == "collective"
                   else kinds.load_check(check, scenario, store_args))
        else:
            got = _run_check(check, store_args, store_path, runs)
        outcome.results += [r for run in runs for r in run]
        for j in got:
            j.made_at, j.valid_until = outcome.made_at, outcome.valid_until
        outcome.judgements += got
    return outcome


# --------------------------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------------------------


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def render_text(outcome: Outcome) -> str:
    from ..report.text_table import aligned

    lines = [f"# scenario {outcome.scenario.name} ({outcome.scenario.path}): made {outcome.made_at}, "
             f"valid until {outcome.valid_until}"]
    head = ["status", "code", "check", "case", "expectation", "value", "bound", "evidence"]
    rows = [[j.status.upper() if j.status == "fail" else j.status, j.code or "-", j.check, j.case, j.expectation,
             _num(j.value), _num(j.bound), j.evidence] for j in outcome.judgements]
    lines += aligned(head, rows)
    for j in outcome.judgements:
        if j.status != "pass" and j.fix:
            lines.append(f"# {j.code} {j.check} {j.case}: fix: {j.fix}")
    nodes, links = outcome.defective()
    lines.append(f"# defective nodes: {', '.join(nodes) or 'none'}")
    lines.append(f"# defective links: {', '.join(links) or 'none'}")
    c = outcome.counts
    lines.append(f"# {outcome.status}: {c['pass']} pass, {c['warn']} warn, {c['fail']} fail, "
                 f"{c['inconclusive']} inconclusive")
    return "\n".join(lines) + "\n"


def write_junit(outcome: Outcome, path: Path) -> None:
    """JUnit XML as CI servers read it: one testsuite per check, one testcase per judgement; a
    failure is <failure type=CODE>, an inconclusive call <skipped> (never a pass), a warning a
    pass with its text in <system-out>."""
    import xml.etree.ElementTree as ET

    c = outcome.counts
    root = ET.Element("testsuites", name=f"fabscope check {outcome.scenario.name}", tests=str(len(outcome.judgements)),
                      failures=str(c["fail"]), errors="0", skipped=str(c["inconclusive"]), time="0")
    for check in outcome.scenario.checks:
        mine = [j for j in outcome.judgements if j.check == check.name]
        suite = ET.SubElement(root, "testsuite", name=check.name, tests=str(len(mine)),
                              failures=str(sum(j.status == "fail" for j in mine)), errors="0",
                              skipped=str(sum(j.status == "inconclusive" for j in mine)),
                              timestamp=outcome.made_at.removesuffix("+00:00"), time="0")
        for j in mine:
            case = ET.SubElement(suite, "testcase", classname=f"{outcome.scenario.name}.{check.name}",
                                 name=f"{j.case}: {j.expectation}", time="0")
            text = f"{j.evidence}\nfix: {j.fix}" if j.fix else j.evidence
            if j.status == "fail":
                ET.SubElement(case, "failure", message=f"{j.code}: {j.evidence}", type=str(j.code)).text = text
            elif j.status == "inconclusive":
                ET.SubElement(case, "skipped", message=f"inconclusive {j.code}: {j.evidence}")
            elif j.status == "warn":
                ET.SubElement(case, "system-out").text = f"WARN {j.code}: {text}"
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def check_main(ns: argparse.Namespace) -> int:
    scenario = load(Path(ns.file))
    if ns.no_store and ns.tag:
        raise FabscopeError("check: --tag labels the runs in the history, but --no-store keeps them out: drop one",
                            EXIT_USAGE)
    validate(scenario, ns.store)
    if ns.validate:
        n = sum(len(c.expectations) for c in scenario.checks)
        print(f"{scenario.path}: {len(scenario.checks)} check(s), {n} expectation(s): valid; nothing was run")
        return EXIT_OK
    outcome = run_scenario(scenario, ns.store, ns.no_store, ns.tag)
    from .status import record

    record(outcome.judgements, scenario.name, socket.gethostname())
    if ns.junit:
        write_junit(outcome, Path(ns.junit))
    if ns.html:
        from .html import render

        Path(ns.html).write_text(render(outcome))
    if ns.format == "json":
        sys.stdout.write(json.dumps(outcome.to_json()) + "\n")
    else:
        sys.stdout.write(render_text(outcome))
    return outcome.exit_code()


def fill_check_parser(p: argparse.ArgumentParser) -> None:
    """`fabscope check FILE` (cli.py names the subcommand)."""
    from .. import argtypes
    from ..history import run_tag

    p.add_argument("file", metavar="FILE", type=argtypes.existing_file, help="the scenario (TOML; docs/check.md)")
    p.add_argument("--validate", action="store_true", help="read and check the scenario; run nothing")
    p.add_argument("--junit", metavar="PATH", default=None, help="also write JUnit XML (what CI servers read)")
    p.add_argument("--html", metavar="PATH", default=None,
                   help="also write the HTML report: the judgements, then the runs' charts and tables")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--store", metavar="PATH", default=None, help="history file: baselines, and where runs are kept")
    p.add_argument("--no-store", action="store_true", help="do not keep the check's runs in the history")
    p.add_argument("--tag", type=run_tag, default=None, help="keep the check's runs under this tag")
    p.set_defaults(func=check_main)
