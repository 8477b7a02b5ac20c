# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope check` on loopback, real runs: a violated `warn` warns, a bound against a line rate the
device does not have is inconclusive (FS-FIG-002, never a pass), the exit status says the worst
(10: inconclusive, nothing failed), and the JUnit XML reads in a JUnit parser and in ElementTree
with the inconclusive call as <skipped> and the warning in <system-out>; the HTML report (strict
html5lib parse) opens with the check's section, then the runs' charts."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import html5lib
import junitparser

from conftest import fabscope

SCENARIO = """\
name = "loopback"
valid_for = "90m"

[[checks]]
name = "lat"
kind = "run"
loopback = true
options = { backend = "tcp", op = "send", pattern = "lat", sizes = "8", iters = 300 }
expect = ["p50_us <= 1e6"]
warn = ["p50_us <= 1e-6"]

[[checks]]
name = "bw"
kind = "run"
loopback = true
options = { backend = "tcp", pattern = "bw", sizes = "64K", iters = 300 }
expect = ["bw_gbps >= 0.9 * line_rate"]
"""


def test_warn_inconclusive_and_junit(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO)
    junit = tmp_path / "out.xml"
    page = tmp_path / "report.html"
    got = fabscope("check", str(scenario), "--no-store", "--format", "json", "--junit", str(junit), "--html", str(page),
                   timeout=240)
    assert got.returncode == 10, got.stdout + got.stderr
    out = json.loads(got.stdout)
    status = {(j["check"], j["expectation"]): (j["status"], j["code"]) for j in out["judgements"]}
    assert status[("lat", "p50_us <= 1e6")] == ("pass", None)
    assert status[("lat", "p50_us <= 1e-6")] == ("warn", "FS-LAT-001")
    assert status[("bw", "bw_gbps >= 0.9 * line_rate")] == ("inconclusive", "FS-FIG-002")
    assert out["counts"] == {"pass": 1, "warn": 1, "inconclusive": 1, "fail": 0}
    assert out["defective_nodes"] == [] and out["defective_links"] == []
    made = out["made_at"]
    assert all(j["made_at"] == made and j["valid_until"] == out["valid_until"] for j in out["judgements"])

    xml = junitparser.JUnitXml.fromfile(str(junit))
    assert (xml.tests, xml.failures, xml.skipped) == (3, 0, 1)
    cases = {case.name: case for suite in xml for case in suite}
    (skipped,) = cases["tcp send bw 65536 B: bw_gbps >= 0.9 * line_rate"].result
    assert isinstance(skipped, junitparser.Skipped) and "FS-FIG-002" in str(skipped.message)
    assert "WARN FS-LAT-001" in str(cases["tcp send lat 8 B: p50_us <= 1e-6"].system_out)
    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites" and [s.get("name") for s in root] == ["lat", "bw"]

    text = page.read_text()
    html5lib.HTMLParser(strict=True).parse(text)  # raises on any parse error
    section = text.split("<h2>Known-good check: loopback</h2>", 1)[1]
    assert "FS-FIG-002" in section and "FS-LAT-001" in section and "defective nodes: none" in section
    assert "<svg" in section and section.index("defective links") < section.index("<svg")  # then the runs' charts
