# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope health --drain / --undrain` on the Slurm testbed with one node per netns host (real
slurmctld, one `slurmd -N HOST` inside each host): with a wrong MTU planted on fs-b and fs-c's
fabric link down, each of them (and only they) is drained with its fault code in the reason, the
clean fs-a stays idle; an inconclusive check never drains; once the faults are removed, `--undrain`
returns exactly the nodes fabscope drained and leaves a node drained by someone else alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netns_helpers as nh
import pytest

from conftest import REPO
from fabscope.testbed import netns
from fabscope.testbed import slurm as slurmbed

pytestmark = [pytest.mark.netns, nh.needs_root]
HOSTS = ("fs-a", "fs-b", "fs-c")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmbed.Cluster]:
    missing = slurmbed.missing_tools()
    if missing:
        pytest.skip(f"Slurm is not installed here ({', '.join(missing)} missing); `make setup` installs it")
    with netns.session():
        netns.up(None, len(HOSTS))
        try:
            with slurmbed.running(tmp_path_factory.mktemp("slurm-health"), timeout_s=30, netns_hosts=HOSTS) as c:
                yield c
        finally:
            netns.down()


def in_host(cluster: slurmbed.Cluster, host: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(REPO / "python"), "PATH": os.environ["PATH"], **cluster.env()}
    for home in ("XDG_DATA_HOME", "XDG_STATE_HOME"):  # conftest's temporary ones: never the real home
        env[home] = os.environ[home]
    argv = netns.ns_exec_argv(host, ["env", *(f"{k}={v}" for k, v in env.items()), *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def health(cluster: slurmbed.Cluster, host: str, tmp: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    got = in_host(cluster, host, sys.executable, "-m", "fabscope", "health", "--format", "json", "--node", host,
                  "--state", str(tmp / f"{host}.json"), *extra)
    assert got.stdout.startswith("{"), got.stderr
    return got.returncode, json.loads(got.stdout)


def node(cluster: slurmbed.Cluster, name: str) -> tuple[str, str]:
    got = subprocess.run(["scontrol", "show", "node", name, "--oneliner"], capture_output=True, text=True,
                         timeout=10, env=dict(os.environ, **cluster.env()))
    state = got.stdout.split("State=", 1)[1].split(" ", 1)[0]
    reason = got.stdout.split("Reason=", 1)[1].strip() if "Reason=" in got.stdout else ""
    return state, reason


def test_planted_faults_drain_exactly_their_nodes(cluster: slurmbed.Cluster, tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    made = in_host(cluster, "fs-a", sys.executable, "-m", "fabscope", "run", "--loopback", "--backend", "tcp",
                   "--sizes", "8", "--iters", "100", "--store", str(db), "--tag", "ports-ok")
    assert made.returncode == 0, made.stderr
    saved = in_host(cluster, "fs-a", sys.executable, "-m", "fabscope", "baseline", "save", "ports", "--tag",
                    "ports-ok", "--store", str(db))
    assert saved.returncode == 0, saved.stderr
    base = ("--baseline", "ports", "--store", str(db))

    # an inconclusive check never drains: the counters' state file cannot be written
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    got = in_host(cluster, "fs-a", sys.executable, "-m", "fabscope", "health", "--drain", "--node", "fs-a",
                  "--state", str(blocker / "state.json"), *base)
    assert got.returncode == 10, got.stdout + got.stderr
    assert node(cluster, "fs-a")[0] == "IDLE"

    subprocess.run(netns.ns_exec_argv("fs-b", ["ip", "link", "set", "fabric0", "mtu", "1400"]), check=True)
    subprocess.run(netns.ns_exec_argv("fs-c", ["ip", "link", "set", "fabric0", "down"]), check=True)
    try:
        results = {h: health(cluster, h, tmp_path, "--drain", *base) for h in HOSTS}
        assert results["fs-a"][0] == 0 and results["fs-a"][1]["action"] is None, results["fs-a"]
        assert results["fs-b"][0] == 11 and results["fs-c"][0] == 11
        codes = {h: {j["code"] for j in r[1]["judgements"] if j["status"] == "fail"} for h, r in results.items()}
        assert codes == {"fs-a": set(), "fs-b": {"FS-MTU-001"}, "fs-c": {"FS-LINK-002"}}
        assert node(cluster, "fs-a") == ("IDLE", "")
        state_b, reason_b = node(cluster, "fs-b")
        assert "DRAIN" in state_b and reason_b.startswith("fabscope FS-MTU-001: fabric0 mtu 1400 (baseline 1500)")
        state_c, reason_c = node(cluster, "fs-c")
        assert "DRAIN" in state_c and reason_c.startswith("fabscope FS-LINK-002: fabric0 is down")
        # still failing: --undrain leaves it drained
        assert health(cluster, "fs-b", tmp_path, "--undrain", *base)[0] == 11
        assert "DRAIN" in node(cluster, "fs-b")[0]
    finally:
        subprocess.run(netns.ns_exec_argv("fs-b", ["ip", "link", "set", "fabric0", "mtu", "1500"]), check=True)
        subprocess.run(netns.ns_exec_argv("fs-c", ["ip", "link", "set", "fabric0", "up"]), check=True)

    others = dict(os.environ, **cluster.env())
    subprocess.run(["scontrol", "update", "NodeName=fs-a", "State=DRAIN", "Reason=maintenance"], check=True,
                   timeout=10, env=others)
    for h in HOSTS:
        rc, out = health(cluster, h, tmp_path, "--undrain", *base)
        assert rc == 0, out
    for h in ("fs-b", "fs-c"):
        state = node(cluster, h)[0]
        # IDLE, not drained; fs-c may still carry NOT_RESPONDING from while its fabric link was down
        assert state.split("+")[0] == "IDLE" and "DRAIN" not in state, (h, state)
    state_a, reason_a = node(cluster, "fs-a")
    assert "DRAIN" in state_a and reason_a.startswith("maintenance")  # someone else's drain: left alone
    subprocess.run(["scontrol", "update", "NodeName=fs-a", "State=RESUME"], check=True, timeout=10, env=others)
