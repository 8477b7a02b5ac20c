# SPDX-License-Identifier: BSD-3-Clause
"""Two rails on the netns testbed (testbed/netns_rails.py: a second switch, multipath routes to every
host's rail-independent address): `fabscope load` reports the split of each sender's bytes between
the rails from its own counters, and names a planted imbalance (next-hop weights 1:0, every flow
on fabric0) with the bytes as evidence."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import netns_helpers as nh
import pytest
from mpi_marks import needs_openmpi

from conftest import REPO
from fabscope.testbed import netns
from fabscope.testbed.netns_rails import RAILS, rails_up, shape_rail

pytestmark = [pytest.mark.netns, nh.needs_root, needs_openmpi]


def test_a_planted_rail_imbalance_is_named_with_the_bytes_per_rail() -> None:
    with netns.session():
        netns.up("100mbit", hosts=4)
        try:
            hosts = netns.host_names(4)
            rails_up(hosts, weights=(1, 0))
            for h in hosts:
                shape_rail(h, "fabric1", "100mbit")
            env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **netns.launcher_env())
            out = subprocess.run([sys.executable, "-m", "fabscope", "load", "permutation", "--hosts", ",".join(hosts),
                                  "--flows", "2", "--to-address-of", "rail0", "--rails", ",".join(RAILS), "--duration",
                                  "2", "--sizes", "64K", "--format", "json"],
                                 env=env, capture_output=True, text=True, timeout=300)
        finally:
            netns.down()
    doc = json.loads(out.stdout)
    assert all(f["error"] is None and f["gbps"] > 0 for f in doc["flows"]), out.stderr[-2000:]
    # every flow went to the receiver's rail0 address (10.210.0.x), routed over the rails
    assert all(f["record"]["transport"]["local"]["peer_address"].startswith("10.210.0.") for f in doc["flows"])
    split = doc["rail_bytes"]
    assert sorted(split) == hosts
    for host, rails in split.items():
        assert rails["fabric0"] > 10e6 and rails["fabric1"] < 0.01 * rails["fabric0"], (host, rails)
    found = {f["kind"]: f for f in doc["findings"]}
    assert "rail-imbalance" in found, doc["findings"]
    imb = found["rail-imbalance"]
    assert "fabric0 100%" in imb["summary"] and imb["evidence"]["host_on_rail"] == {h: "fabric0" for h in hosts}


def test_flows_on_a_slowed_rail_are_named() -> None:
    """fs-c's and fs-d's flows on fabric1, rate-limited to a tenth of fabric0 on those two hosts."""
    with netns.session():
        netns.up("100mbit", hosts=4)
        try:
            hosts = netns.host_names(4)
            rails_up(hosts, weights=(1, 0), on_rail1=["fs-c", "fs-d"])
            for h in hosts:
                shape_rail(h, "fabric1", "10mbit" if h in ("fs-c", "fs-d") else "100mbit")
            env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **netns.launcher_env())
            out = subprocess.run([sys.executable, "-m", "fabscope", "load", "permutation", "--hosts", ",".join(hosts),
                                  "--to-address-of", "rail0", "--rails", ",".join(RAILS), "--duration", "2",
                                  "--sizes", "64K", "--format", "json"],
                                 env=env, capture_output=True, text=True, timeout=300)
        finally:
            netns.down()
    doc = json.loads(out.stdout)
    assert all(f["error"] is None and f["gbps"] > 0 for f in doc["flows"]), out.stderr[-2000:]
    found = {f["kind"]: f for f in doc["findings"]}
    assert "slow-rail" in found, doc["findings"]
    slow = found["slow-rail"]
    assert slow["summary"].startswith("the flows on fabric1 (fs-c, fs-d)")
    medians = slow["evidence"]["median_gbps_per_rail"]
    assert medians["fabric1"] < 0.012 and medians["fabric0"] > 0.05  # 10 vs 100 Mbit/s, the shapers' truth
