# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope check` on the netns testbed: a scenario with absolute and baseline expectations
catches a slowed link (FS-BW-001, FS-BW-002) and a misroute (FS-PATH-001), each with its fault code,
names the link, and writes JUnit XML that a JUnit parser reads; a matrix check names a slow link
among four hosts (FS-LINK-003). Real runs between fs-a and fs-b
against a real `fabscope serve`; the baseline is made from the scenario's own clean runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import junitparser
import netns_helpers as nh
import pytest
from mpi_marks import needs_openmpi
from test_netns_engine import ENV, PORT, key_file, serve_in

from conftest import REPO
from fabscope.testbed import netns

pytestmark = [pytest.mark.netns, nh.needs_root]

BW_CHECK = """
[[checks]]
name = "fabric-bw"
kind = "run"
peer = "10.201.0.2:{port}"
repeat = 2
expect = ["bw_gbps >= 0.5"{baseline}]
[checks.options]
backend = "tcp"
device = "fabric0"
pattern = "bw"
sizes = "64K"
duration = 1
warmup-time = 0.3
key-file = "{key}"
"""
MISROUTE_CHECK = """
[[checks]]
name = "bound-to-fabric"
kind = "run"
peer = "10.202.0.2:{port}"
options = {{ backend = "tcp", bind = "10.201.0.1", pattern = "bw", sizes = "64K", iters = 500, key-file = "{key}" }}
expect = ["bw_gbps >= 0.001"]
"""


def check_in_a(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**ENV, "XDG_STATE_HOME": os.environ["XDG_STATE_HOME"]}  # conftest's: never the real home
    cmd = netns.ns_exec_argv("fs-a", ["env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m",
                                      "fabscope", *args])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def serving() -> Iterator[None]:
    for _ in nh.testbed("1gbit"):
        server = serve_in("fs-b", "0.0.0.0")
        try:
            yield
        finally:
            server.terminate()
            server.wait(timeout=10)


def test_a_slowed_link_and_a_misroute_are_named_with_their_fault_codes(serving: None, tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    clean = tmp_path / "clean.toml"
    clean.write_text('name = "fabric"\n' + BW_CHECK.format(port=PORT, key=key_file(), baseline=""))
    got = check_in_a("check", str(clean), "--store", str(db), "--tag", "golden-runs")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "# defective links: none" in got.stdout
    saved = check_in_a("baseline", "save", "golden-2026-12", "--tag", "golden-runs", "--store", str(db))
    assert saved.returncode == 0, saved.stderr

    scenario = tmp_path / "fabric.toml"
    scenario.write_text('name = "fabric"\n'
                        + BW_CHECK.format(port=PORT, key=key_file(),
                                          baseline=', \'bw_gbps within 20 % of baseline "golden-2026-12"\'')
                        + MISROUTE_CHECK.format(port=PORT, key=key_file()))
    assert check_in_a("check", str(scenario), "--validate", "--store", str(db)).returncode == 0
    netns.shape_pair("fs-a", "fs-b", "100mbit")  # the planted fault: one slow link
    try:
        junit = tmp_path / "check.xml"
        got = check_in_a("check", str(scenario), "--store", str(db), "--format", "json", "--junit", str(junit))
    finally:
        netns.shape_pair("fs-a", "fs-b", None)
    assert got.returncode == 11, got.stdout + got.stderr
    out: dict[str, Any] = json.loads(got.stdout)
    assert out["schema"] == "fabscope.check/1" and out["status"] == "fail"
    assert out["made_at"] < out["valid_until"]
    by = {(j["check"], j["code"]): j for j in out["judgements"]}
    slow_abs = by[("fabric-bw", "FS-BW-001")]
    assert slow_abs["status"] == "fail" and slow_abs["value"] < 0.11  # ~0.095 Gb/s through the 100mbit link
    slow_rel = by[("fabric-bw", "FS-BW-002")]
    assert slow_rel["status"] == "fail" and "regression" in slow_rel["evidence"]
    misrouted = by[("bound-to-fabric", "FS-PATH-001")]
    assert misrouted["status"] == "fail" and "mgmt0" in misrouted["evidence"]
    assert ("bound-to-fabric", "FS-BW-001") not in by  # the misroute went over the unshaped mgmt link
    assert not [j for j in out["judgements"] if j["status"] == "pass" and j["check"] == "fabric-bw"
                and j["expectation"] == "bw_gbps >= 0.5"]

    xml = junitparser.JUnitXml.fromfile(str(junit))
    failures = {(suite.name, result.type) for suite in xml for case in suite for result in case.result
                if isinstance(result, junitparser.Failure)}
    assert {("fabric-bw", "FS-BW-001"), ("fabric-bw", "FS-BW-002"), ("bound-to-fabric", "FS-PATH-001")} <= failures
    assert out["defective_links"] == ["fs-a<->fs-b"] and out["defective_nodes"] == []
    assert xml.failures == len([j for j in out["judgements"] if j["status"] == "fail"])



def check_on_testbed(scenario: Path, text: str, hosts: int, plant: Callable[[], None]) -> subprocess.CompletedProcess[str]:
    """`fabscope check` of ``text`` from the host, on a fresh testbed of ``hosts`` at 100 Mbit/s with
    ``plant``'s fault, under mpirun (the testbed's launcher environment); the testbed torn down after."""
    scenario.write_text(text)
    with netns.session():
        netns.up("100mbit", hosts=hosts)
        try:
            plant()
            env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **netns.launcher_env())
            return subprocess.run([sys.executable, "-m", "fabscope", "check", str(scenario), "--no-store", "--format",
                                   "json"], capture_output=True, text=True, timeout=400, env=env)
        finally:
            netns.down()


MATRIX_SCENARIO = """\
name = "fabric-matrix"
hosts = ["fs-a", "fs-b", "fs-c", "fs-d"]
launcher = "mpirun"

[[checks]]
name = "matrix"
kind = "matrix"
expect = ["bad_links == 0", "bad_nodes == 0", "misrouted_pairs == 0", "unreachable_hosts == 0"]
[checks.options]
pattern = "bw"
device = "fabric0"
sizes = "64K"
iters = 60
warmup = 10
timeout = 10
bw-fraction = 0.5
"""


@needs_openmpi
def test_a_matrix_check_names_the_slow_link(tmp_path: Path) -> None:
    """A matrix check on four hosts, fs-a <-> fs-b slowed to a quarter: FS-LINK-003 naming that link."""
    got = check_on_testbed(tmp_path / "matrix.toml", MATRIX_SCENARIO, 4, lambda: netns.shape_pair("fs-a", "fs-b", "25mbit"))
    assert got.returncode == 11, got.stdout + got.stderr
    out = json.loads(got.stdout)
    failed = [(j["code"], j["nodes"]) for j in out["judgements"] if j["status"] == "fail"]
    assert failed == [("FS-LINK-003", ["fs-a", "fs-b"])], out["judgements"]
    assert out["defective_links"] == ["fs-a<->fs-b"] and out["defective_nodes"] == []
    passed = {j["expectation"] for j in out["judgements"] if j["status"] == "pass"}
    assert passed == {"bad_nodes == 0", "misrouted_pairs == 0", "unreachable_hosts == 0"}


LOAD_SCENARIO = """\
name = "fabric-load"
hosts = ["fs-a", "fs-b", "fs-c"]
launcher = "mpirun"

[[checks]]
name = "incast"
kind = "load"
expect = ["total_gbps >= 0.001", "total_gbps >= 1", "fraction_of_bottleneck <= 3", "victim_p99_factor <= 2"]
[checks.options]
pattern = "incast"
device = "fabric0"
line-rate = 0.1
duration = 2
warmup-time = 0.3
sizes = "64K"
"""


@needs_openmpi
def test_a_load_check_judges_an_incast(tmp_path: Path) -> None:
    """An incast of fs-b and fs-c into fs-a through 100 Mbit/s links, agents under mpirun: the total
    and its fraction of the bottleneck judged from the load's own run (1 Gb/s cannot pass through a
    100 Mbit/s port: FS-LOAD-006, naming the receiver), a victim figure without a victim inconclusive, never a pass."""
    got = check_on_testbed(tmp_path / "load.toml", LOAD_SCENARIO, 3, lambda: None)
    assert got.returncode == 11, got.stdout + got.stderr
    out = json.loads(got.stdout)
    by = {j["expectation"]: j for j in out["judgements"] if j["case"] == "load"}
    assert {e: (j["status"], j["code"]) for e, j in by.items()} == {
        "total_gbps >= 0.001": ("pass", None), "total_gbps >= 1": ("fail", "FS-LOAD-006"),
        "fraction_of_bottleneck <= 3": ("pass", None), "victim_p99_factor <= 2": ("inconclusive", "FS-FIG-002")}
    assert 0.001 < by["total_gbps >= 1"]["value"] < 0.3  # what two flows carry into a 100 Mbit/s port
    assert by["total_gbps >= 1"]["nodes"] == ["fs-a"] and out["defective_nodes"] == ["fs-a"]  # the receiver
    # anything else is a congestion finding of the load, a warning with its code
    others = [j for j in out["judgements"] if j["case"] != "load"]
    assert all(j["status"] == "warn" and j["code"].startswith("FS-LOAD-") for j in others), others
