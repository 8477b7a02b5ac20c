# SPDX-License-Identifier: BSD-3-Clause
"""The suite, collective and load check kinds (known_good/kinds.py): each validated before anything
runs (an option the command refuses, a figure the kind does not produce, a baseline on its figures:
a named error with the file's line, exit 2), and each judged from real captured output
(tests/fixtures/records/suite, collective, load): failed and misrouted suite rows with their
codes, the row selector, a collective's misroute naming its hosts, a load's figures, and a victim
whose impact interval straddles the bound called inconclusive, never a pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_known_good import assert_refused

from conftest import REPO, fabscope
from fabscope.known_good import kinds
from fabscope.known_good.scenario import CheckSpec, Scenario, load
from fabscope.results import load_file, parse_record
from fabscope.results.collective import parse_collective
from fabscope.results.suite import SuiteSummary

RECORDS = REPO / "tests" / "fixtures" / "records"

GOOD = """\
name = "kinds"
hosts = ["a", "b", "c"]
launcher = "mpirun"

[[checks]]
name = "suite"
kind = "suite"
loopback = true
rows = ["tcp send lat"]
options = { backends = "tcp", quick = true }
expect = ["rows_failed == 0", "rows_misrouted == 0", "p50_us <= 100"]

[[checks]]
name = "coll"
kind = "collective"
options = { pattern = "allreduce", ppn = 2, sizes = "64K" }
expect = ["busbw_gbps >= 1", "fraction_of_ceiling >= 0.8"]

[[checks]]
name = "incast"
kind = "load"
options = { pattern = "incast", duration = 2, sizes = "64K" }
expect = ["fairness_jain >= 0.9", "victim_p99_factor <= 2"]
"""


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def _checks(tmp_path: Path, text: str = GOOD) -> tuple[Scenario, dict[str, CheckSpec]]:
    s = load(_scenario(tmp_path, text))
    return s, {c.name: c for c in s.checks}


def test_the_three_kinds_validate_and_run_nothing(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    got = fabscope("check", str(_scenario(tmp_path, GOOD)), "--validate", "--store", str(db))
    assert got.returncode == 0, got.stderr
    assert "3 check(s), 7 expectation(s): valid; nothing was run" in got.stdout
    assert not db.exists()


@pytest.mark.parametrize(("edit", "line", "says"), [
    (('"p50_us <= 100"', '"busbw_gbps >= 1"'), 11, "this check does not produce 'busbw_gbps'"),
    (('"busbw_gbps >= 1"', '"bw_gbps >= 1"'), 17, "this check does not produce 'bw_gbps'"),
    (('"fairness_jain >= 0.9"', '"p50_us <= 3"'), 23, "this check does not produce 'p50_us'"),
    (('backends = "tcp"', 'backends = "tcp", colour = "red"'), 10, "check 'suite': "),  # not a suite option
    (('ppn = 2,', 'ppn = 2, colour = "red",'), 16, "check 'coll': "),  # an option `run` refuses
    (('duration = 2,', 'duration = 2, colour = "red",'), 22, "check 'incast': "),
    (('"busbw_gbps >= 1"', '\'p50_us within 5 % of baseline "g"\''), 17,
     "a baseline judges the figures of run checks only"),
    (('kind = "collective"', 'kind = "collective"\nrepeat = 2'), 16, "repeat in check 'coll': a collective check"),
    (('pattern = "incast", ', ''), 19, "options.pattern = None in check 'incast': a load check names its pattern"),
    (('kind = "load"', 'kind = "load"\nrows = ["tcp"]'), 22, "rows in check 'incast': applies only to kind = \"suite\""),
    (('rows = ["tcp send lat"]', 'rows = ["tpc send lat"]'), 9, "rows: 'tpc send lat' in check 'suite' does not start"),
    (('ppn = 2,', 'ppn = 2, backend = "tcp",'), 16, "check 'coll': --pattern allreduce is a collective"),
    (('hosts = ["a", "b", "c"]', 'hosts = []'), 13, "check 'coll': a collective needs the scenario's hosts"),
])
def test_bad_input_is_a_named_error_with_its_line(tmp_path: Path, edit: tuple[str, str], line: int, says: str) -> None:
    assert_refused(tmp_path, GOOD, edit, line, says)


def test_what_each_kind_runs(tmp_path: Path) -> None:
    s, c = _checks(tmp_path)
    assert kinds.suite_argv(c["suite"], s, "/o") == ["suite", "--out", "/o", "--backends", "tcp", "--quick"]
    assert kinds.collective_argv(c["coll"], s) == ["run", "--backend", "mpi", "--hosts", "a,b,c", "--launcher",
                                                    "mpirun", "--pattern", "allreduce", "--ppn", "2", "--sizes", "64K"]
    assert kinds.load_argv(c["incast"], s) == ["load", "incast", "--hosts", "a,b,c", "--launcher", "mpirun",
                                               "--duration", "2", "--sizes", "64K"]


# --------------------------------------------------------------------------------------------
# suite
# --------------------------------------------------------------------------------------------

SUITE = RECORDS / "suite"


def _suite(name: str) -> SuiteSummary:
    return SuiteSummary.parse(json.loads((SUITE / name / "suite.json").read_text()))


def _by(judgements: list[Any]) -> dict[tuple[str, str], tuple[str, str | None]]:
    return {(j.case, j.expectation): (j.status, j.code) for j in judgements}


def test_a_clean_suite_passes_and_judges_only_the_selected_rows(tmp_path: Path) -> None:
    s, c = _checks(tmp_path)
    records = load_file(SUITE / "loopback-tcp-quick" / "loopback.jsonl")
    got = _by(kinds.judge_suite(c["suite"], s, _suite("loopback-tcp-quick"), records))
    assert got == {("suite", "rows_failed == 0"): ("pass", None), ("suite", "rows_misrouted == 0"): ("pass", None),
                   ("tcp send lat 8 B", "p50_us <= 100"): ("pass", None),
                   ("tcp send lat 4096 B", "p50_us <= 100"): ("pass", None)}
    tight = _checks(tmp_path, GOOD.replace('"p50_us <= 100"', '"p50_us <= 0.001"'))
    got = _by(kinds.judge_suite(tight[1]["suite"], tight[0], _suite("loopback-tcp-quick"), records))
    assert got[("tcp send lat 8 B", "p50_us <= 0.001")] == ("fail", "FS-LAT-001")
    none = _checks(tmp_path, GOOD.replace('rows = ["tcp send lat"]', 'rows = ["ucx"]'))
    got = _by(kinds.judge_suite(none[1]["suite"], none[0], _suite("loopback-tcp-quick"), records))
    assert got[("suite", "p50_us <= 100")] == ("inconclusive", "FS-FIG-002")  # no row selected: never a pass


def test_failed_rows_each_get_their_fault_code_and_evidence(tmp_path: Path) -> None:
    """The suite with UCX_NET_DEVICES=bogus0: every ucx row failed (exit 2, the device named)."""
    s, c = _checks(tmp_path)
    summary = _suite("loopback-ucx-no-such-device")
    got = kinds.judge_suite(c["suite"], s, summary, [])
    failed = [j for j in got if j.code == "FS-SUITE-001"]
    assert len(failed) == len(summary.failed) == 18
    first = failed[0]
    assert first.status == "fail" and first.case == "row ucx write lat" and first.value == 18
    assert "ucx write lat: FAILED (exit 2)" in first.evidence and "'bogus0'" in first.evidence
    assert "rerun that row by hand" in first.fix and len(first.nodes) == 1
    assert ("suite", "p50_us <= 100") in _by(got) and _by(got)[("suite", "p50_us <= 100")][0] == "inconclusive"


def test_a_misrouted_row_is_named_with_its_carrier(tmp_path: Path) -> None:
    s, c = _checks(tmp_path, GOOD.replace("loopback = true", 'peer = "10.202.0.2"'))
    records = load_file(RECORDS / "netns-tcp-bw-bind-misrouted.jsonl")
    got = [j for j in kinds.judge_suite(c["suite"], s, _suite("loopback-tcp-quick"), records)
           if j.code == "FS-SUITE-002"]
    assert len(got) == 1 and got[0].status == "fail" and got[0].case == "tcp send bw 65536 B"
    assert "mgmt0" in got[0].evidence and got[0].nodes[1] == "10.202.0.2"


# --------------------------------------------------------------------------------------------
# collective
# --------------------------------------------------------------------------------------------


def _collectives(name: str) -> list[Any]:
    return [parse_collective(json.loads(line)) for line in (RECORDS / "collective" / name).read_text().splitlines()]


def test_a_collectives_figures_are_judged_per_size(tmp_path: Path) -> None:
    _s, c = _checks(tmp_path, GOOD.replace('"busbw_gbps >= 1"', '"busbw_gbps >= 0.001", "algbw_gbps >= 1e6", '
                                                               '"p99_us <= 1e9"'))
    results = _collectives("loopback-openmpi-allreduce-ppn2.jsonl")
    got = _by(kinds.judge_collective(c["coll"], results))
    for r in results:
        case = f"mpi allreduce {r.size} B, 2 ranks"
        assert got[(case, "busbw_gbps >= 0.001")] == ("pass", None)
        assert got[(case, "algbw_gbps >= 1e6")] == ("fail", "FS-COLL-002")
        assert got[(case, "p99_us <= 1e9")] == ("pass", None)
        # both ranks on one host: no link, no ceiling: inconclusive, never a pass
        assert got[(case, "fraction_of_ceiling >= 0.8")] == ("inconclusive", "FS-FIG-002")
    p99 = next(j for j in kinds.judge_collective(c["coll"], results) if j.expectation == "p99_us <= 1e9")
    assert p99.value == pytest.approx(results[0].time_ns.p99 / 1000) and "slowest rank" in p99.evidence


def test_a_misrouted_collective_names_its_hosts(tmp_path: Path) -> None:
    _s, c = _checks(tmp_path)
    results = _collectives("netns-mpi-alltoall-3hosts-misrouted.jsonl")
    assert results[0].misrouted_hosts  # the captured run: fabric0 did not carry the bytes
    got = [j for j in kinds.judge_collective(c["coll"], results) if j.code == "FS-PATH-001"]
    assert len(got) == 1 and got[0].status == "fail"
    assert got[0].nodes == tuple(results[0].misrouted_hosts)
    assert all(h in got[0].evidence for h in results[0].misrouted_hosts) and "fabric0" in got[0].evidence


# --------------------------------------------------------------------------------------------
# load
# --------------------------------------------------------------------------------------------

LOAD = RECORDS / "load" / "loopback-incast-3hosts-victim.json"


def _load_check(tmp_path: Path, *expect: str) -> CheckSpec:
    text = GOOD.replace('["fairness_jain >= 0.9", "victim_p99_factor <= 2"]', json.dumps(list(expect)))
    return _checks(tmp_path, text)[1]["incast"]


def test_a_loads_figures_come_from_its_run() -> None:
    doc = json.loads(LOAD.read_text())
    got = kinds.load_figures(doc)
    assert got.values["total_gbps"] == pytest.approx(doc["total_gbps"])
    assert got.values["fairness_jain"] == pytest.approx(doc["fairness_jain"])
    # from each flow's record: TCP_INFO's retransmissions, less the spurious ones
    flows = [parse_record(f["record"], judge_path=False) for f in doc["flows"]]
    assert len(flows) == 2 and got.values["retransmitted_segments"] == sum(f["retransmitted_segments"]
                                                                            for f in doc["flows"])
    assert got.values["fraction_of_bottleneck"] is None  # lo has no link rate
    assert got.values["victim_p50_factor"] == pytest.approx(doc["victim"]["impact"][0]["factor"])
    assert got.intervals["victim_p50_factor"] == tuple(doc["victim"]["impact"][0]["interval"])


def test_a_load_is_judged_and_a_straddling_victim_is_inconclusive(tmp_path: Path) -> None:
    """The victim's p50 factor is 1.18 with its 95 % interval 1.0-1.42: a bound inside the interval
    is no call either way."""
    check = _load_check(tmp_path, "total_gbps >= 0.01", "total_gbps >= 1e6", "fairness_jain >= 0.9",
                        "fairness_jain >= 0.9999", "victim_p50_factor <= 3", "victim_p50_factor <= 1.2",
                        "victim_p50_factor <= 0.9", "fraction_of_bottleneck >= 0.5", "drops == 0")
    got = _by(kinds.judge_load(check, kinds.load_figures(json.loads(LOAD.read_text()))))
    assert got == {("load", "total_gbps >= 0.01"): ("pass", None),
                   ("load", "total_gbps >= 1e6"): ("fail", "FS-LOAD-006"),
                   ("load", "fairness_jain >= 0.9"): ("pass", None),
                   ("load", "fairness_jain >= 0.9999"): ("fail", "FS-LOAD-002"),
                   ("load", "victim_p50_factor <= 3"): ("pass", None),
                   ("load", "victim_p50_factor <= 1.2"): ("inconclusive", "FS-STAT-001"),
                   ("load", "victim_p50_factor <= 0.9"): ("fail", "FS-LOAD-003"),
                   ("load", "fraction_of_bottleneck >= 0.5"): ("inconclusive", "FS-FIG-002"),
                   ("load", "drops == 0"): ("pass", None)}
    judged = kinds.judge_load(check, kinds.load_figures(json.loads(LOAD.read_text())))
    low = next(j for j in judged if j.expectation == "total_gbps >= 1e6")
    assert low.nodes == ("h0",)  # the bottleneck's host: incast's receiver
    unfair = next(j for j in judged if j.expectation == "fairness_jain >= 0.9999")
    assert unfair.nodes == ("h0", "h1", "h2")


def test_a_congestion_finding_becomes_its_fault_code(tmp_path: Path) -> None:
    """The same run with the loss finding load/findings.py names (its kind and text as it writes
    them): on the expectation it bears on, and as a warning when no expectation speaks to it."""
    doc = json.loads(LOAD.read_text())
    doc["findings"].append({"kind": "loss", "summary": "the senders retransmitted 40 of 1000 segments (4.00%)",
                            "evidence": {}, "cost": None, "fix": "deepen the queue"})
    figures = kinds.load_figures(doc)
    got = kinds.judge_load(_load_check(tmp_path, "total_gbps >= 0.01"), figures)
    warned = [j for j in got if j.code == "FS-LOAD-001"]
    assert len(warned) == 1 and warned[0].status == "warn" and "retransmitted 40" in warned[0].evidence
    assert warned[0].fix == "deepen the queue"
    on = kinds.judge_load(_load_check(tmp_path, "retransmitted_segments <= -1"), figures)
    assert [(j.status, j.code) for j in on] == [("fail", "FS-LOAD-001")]  # said once, on its expectation
    assert "retransmitted 40" in on[0].evidence and on[0].fix == "deepen the queue"
