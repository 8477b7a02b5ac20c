# SPDX-License-Identifier: BSD-3-Clause
"""The suite and collective check kinds on this host, real runs: a suite check judges its counts and
the figures of the rows it selects (a bound no row can meet fails on exactly the selected rows; the
failed-row codes are judged from a real failed suite in tests/unit/test_check_kinds.py, since each
failing row here takes ~10 s); a collective check under mpirun (Open MPI, 2 ranks) judges busbw and the
slowest rank's times, calls the ceiling of a one-host job inconclusive, and a wrong element in the
result (the engine's exit 12) fails with FS-COLL-001; both appear in the JSON and JUnit output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import html5lib
import junitparser
import pytest
from mpi_marks import needs_openmpi

from conftest import fabscope

SUITE = """\
name = "suite-loopback"

[[checks]]
name = "suite"
kind = "suite"
loopback = true
rows = ["tcp send lat", "tcp send bw"]
options = { backends = "tcp", quick = true }
expect = ["rows_failed == 0", "rows_misrouted == 0", "p50_us <= 1e6", "bw_gbps >= 1e6"]
"""

COLLECTIVE = """\
name = "collective-loopback"

[[checks]]
name = "allreduce"
kind = "collective"
loopback = true
options = { pattern = "allreduce", ppn = 2, sizes = "{sizes}", datatype = "int32", iters = 20, warmup = 3, timeout = 20 }
expect = ["busbw_gbps >= 0.001", "p99_us <= 1e7", "fraction_of_ceiling >= 0.5"]
warn = ["p50_us <= 0.001"]
"""


def _check(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], Path]:
    scenario = tmp_path / "s.toml"
    scenario.write_text(text)
    junit = tmp_path / "check.xml"
    got = fabscope("check", str(scenario), "--no-store", "--format", "json", "--junit", str(junit), "--html",
                   str(tmp_path / "check.html"), timeout=400, env=env)
    assert got.stdout.strip(), got.stderr
    return got.returncode, json.loads(got.stdout), junit


def test_a_suite_check_judges_its_counts_and_selected_rows(tmp_path: Path) -> None:
    rc, out, junit = _check(tmp_path, SUITE)
    assert rc == 11, out
    got = {(j["case"], j["expectation"]): (j["status"], j["code"]) for j in out["judgements"]}
    assert got == {("suite", "rows_failed == 0"): ("pass", None), ("suite", "rows_misrouted == 0"): ("pass", None),
                   ("tcp send lat 8 B", "p50_us <= 1e6"): ("pass", None),
                   ("tcp send lat 4096 B", "p50_us <= 1e6"): ("pass", None),
                   ("tcp send bw 65536 B", "bw_gbps >= 1e6"): ("fail", "FS-BW-001"),
                   ("tcp send bw 1048576 B", "bw_gbps >= 1e6"): ("fail", "FS-BW-001")}  # bibw rows: not selected
    bw = next(j for j in out["judgements"] if j["code"] == "FS-BW-001")
    assert 0 < bw["value"] < 1e6 and bw["nodes"] == out["defective_nodes"] and out["defective_links"] == []
    xml = junitparser.JUnitXml.fromfile(str(junit))
    types = {r.type for suite in xml for case in suite for r in case.result if isinstance(r, junitparser.Failure)}
    assert types == {"FS-BW-001"} and (xml.tests, xml.failures) == (6, 2)
    page = (tmp_path / "check.html").read_text()  # the judgements, then the suite's records drawn
    html5lib.HTMLParser(strict=True).parse(page)
    section = page.split("<h2>Known-good check: suite-loopback</h2>", 1)[1]
    assert "FS-BW-001" in section and section.index("defective links") < section.index("<svg")


@needs_openmpi
@pytest.mark.mpi
def test_a_collective_check_is_judged_per_size(tmp_path: Path) -> None:
    rc, out, junit = _check(tmp_path, COLLECTIVE.replace("{sizes}", "64K,1M"))
    assert rc == 10, out  # the one-host ceiling: inconclusive, nothing failed
    got = {(j["case"], j["expectation"]): (j["status"], j["code"]) for j in out["judgements"]}
    for size in (65536, 1048576):
        case = f"mpi allreduce {size} B, 2 ranks"
        assert got[(case, "busbw_gbps >= 0.001")] == ("pass", None)
        assert got[(case, "p99_us <= 1e7")] == ("pass", None)
        assert got[(case, "p50_us <= 0.001")] == ("warn", "FS-LAT-001")
        assert got[(case, "fraction_of_ceiling >= 0.5")] == ("inconclusive", "FS-FIG-002")
    p50 = next(j for j in out["judgements"] if j["expectation"] == "p50_us <= 0.001")
    assert p50["value"] > 0.001 and "slowest rank" in p50["evidence"]
    xml = junitparser.JUnitXml.fromfile(str(junit))
    assert (xml.tests, xml.failures, xml.skipped) == (8, 0, 2)


@needs_openmpi
@pytest.mark.mpi
def test_a_wrong_element_fails_the_collective_check(tmp_path: Path) -> None:
    """FABSCOPE_TEST_CORRUPT_RESULT (test only) changes element 5 of rank 1's result, as a library or
    fabric returning wrong data would: the engine exits 12, the check fails with FS-COLL-001."""
    rc, out, _ = _check(tmp_path, COLLECTIVE.replace("{sizes}", "96"), env={"FABSCOPE_TEST_CORRUPT_RESULT": "1:5"})
    assert rc == 11, out
    failed = [j for j in out["judgements"] if j["status"] == "fail"]
    assert [j["code"] for j in failed] == ["FS-COLL-001"], out["judgements"]
    assert "exited 12" in failed[0]["evidence"] and "element 5" in failed[0]["evidence"], failed[0]["evidence"]
    assert "algorithm" in failed[0]["fix"]
