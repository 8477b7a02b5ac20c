# SPDX-License-Identifier: BSD-3-Clause
"""The ReFrame test shipped with fabscope (deploy/reframe/fabscope_check.py), run for real by
ReFrame: a scenario's figures become performance variables with the scenario's bounds as
references; a bound the run misses fails ReFrame's performance stage, a failed scenario its sanity."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

TEST = REPO / "deploy" / "reframe" / "fabscope_check.py"
SCENARIO = """\
name = "rfm"
[[checks]]
name = "lat"
kind = "run"
loopback = true
options = {{ backend = "tcp", op = "send", pattern = "lat", sizes = "8", iters = 300 }}
expect = ["p50_us <= 1e6"]
warn = ["{warn}"]
"""


def reframe(tmp_path: Path, warn: str, fail: str = "p50_us >= 0") -> tuple[int, dict[str, Any]]:
    exe = shutil.which("reframe", path=str(Path(sys.executable).parent)) or shutil.which("reframe")
    if exe is None:
        pytest.fail("reframe is not installed; run `make setup` (deps/python-requirements.txt lists reframe-hpc)")
    tmp_path.mkdir(parents=True, exist_ok=True)
    scenario = tmp_path / "s.toml"
    scenario.write_text(SCENARIO.format(warn=warn).replace('"p50_us <= 1e6"', f'"p50_us <= 1e6", "{fail}"'))
    report = tmp_path / "report.json"
    env = dict(os.environ, FABSCOPE_SCENARIO=str(scenario), PYTHONPATH=str(REPO / "python"),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    got = subprocess.run([exe, "-c", str(TEST), "-r", "--prefix", str(tmp_path / "rfm"), "--report-file", str(report)],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    (case,) = json.loads(report.read_text())["runs"][0]["testcases"]
    return got.returncode, case


def test_figures_are_performance_variables_with_the_bounds_as_references(tmp_path: Path) -> None:
    rc, case = reframe(tmp_path, warn="p99_us <= 1e6")
    assert rc == 0 and case["result"] == "pass", case
    perf = {k.split(":", 2)[2]: v for k, v in case["perfvalues"].items()}
    value, ref, lower, upper, unit, result = perf["lat/tcp_send_lat_8_B/p50_us"]
    assert 0 < value < 1e6 and (ref, lower, upper, unit, result) == (1e6, None, 0.0, "us", "pass")
    assert perf["lat/tcp_send_lat_8_B/p50_us#2"][:4] == [value, 0.0, 0.0, None]  # p50_us >= 0: its own variable
    assert perf["lat/tcp_send_lat_8_B/p50_us"][0] <= perf["lat/tcp_send_lat_8_B/p99_us"][0]


def test_a_missed_bound_fails_performance_and_a_failed_scenario_fails_sanity(tmp_path: Path) -> None:
    rc, case = reframe(tmp_path / "warn", warn="p50_us <= 1e-6")  # fabscope warns: sanity passes
    assert rc != 0 and case["result"] == "fail" and case["fail_phase"] == "performance", case
    rc, case = reframe(tmp_path / "fail", warn="p99_us <= 1e6", fail="p50_us <= 1e-6")
    assert rc != 0 and case["result"] == "fail" and case["fail_phase"] == "sanity", case
