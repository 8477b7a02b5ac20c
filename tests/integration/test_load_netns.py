# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope load incast` 7 -> 1 for real on the netns testbed (10 hosts: 8 loaded, 2 the victim
pair), agents under mpirun, the receiver's switch port at 100 Mbit/s with a queue of a known depth:

- shallow (45 kB, 30 packets): the queue overflows: tc's own drop count is the ground truth; the
  load must name oversubscription, loss (retransmissions), the receiver's port as the hot spot, and
  unfair flows;
- deep (8 MB, every flow's window bounded by --tcp-rcvbuf 128K so the queue always holds them):
  tc drops nothing; the load must name oversubscription and nothing else.

The victim's impact factor is reported in both, with its interval. The victim pair shares no link with
the load (its own two switch ports), only this machine's CPUs with the load's engines: a slowdown is
named as that host effect (`victim-host`), never as the fabric's `victim`. One `up` for both runs; each
run ~25 s (mpirun starting 10 agents on this shared 2-CPU machine is most of it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import netns_helpers as nh
import pytest
from mpi_marks import needs_openmpi

from conftest import REPO
from fabscope.testbed import netns
from fabscope.testbed.netns_queue import port_drops, set_port_queue

pytestmark = [pytest.mark.netns, nh.needs_root, needs_openmpi]

RATE, RATE_GBPS = "100mbit", 0.1
# tbf meters whole frames and the engines count payload (1448 of every 1514 bytes at MTU 1500), so what
# the flows carried together is below the port's rate; the 3 % is for the bucket's one burst (32 kB)
# and a receiver's window opening a control message before its first byte.
PORT_CEILING = RATE_GBPS * 1.03
# Within one interval a receiver may also read bytes that crossed the port in the one before (what its
# socket held: twice --tcp-rcvbuf, as the kernel doubles it) and counts a 64K message when its last
# byte is read: per 0.75 s interval the flows can show up to 7 x (256K + 64K) more than the port
# carried in it. (Over a whole window no: each began with its buffers drained by the warmup.)
HELD_BITS = 7 * (2 * 128 + 64) * 1024 * 8
SHALLOW, DEEP = 45_000, 8_000_000
# Each flow's window (receive buffer) and its backlog at the sender (send buffer, messages posted)
# bounded: 7 windows fit the deep queue, and warmup data queued at the sender drains within a
# fraction of an interval, so the receivers' measured phases start together.
BOUNDED = ["--tcp-rcvbuf", "128K", "--tcp-sndbuf", "128K", "--tx-depth", "4"]


def incast(hosts: list[str]) -> tuple[int, dict[str, Any], str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **netns.launcher_env())
    out = subprocess.run([sys.executable, "-m", "fabscope", "load", "incast", "--hosts", ",".join(hosts[:8]),
                          "--receiver", hosts[0], "--victim", ",".join(hosts[8:10]), "--device", "fabric0",
                          "--line-rate", str(RATE_GBPS), "--duration", "3", "--sizes", "64K", *BOUNDED,
                          "--poll", "block", "--format", "json"], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip(), f"nothing printed (exit {out.returncode}): {out.stderr[-2000:]}"
    return out.returncode, json.loads(out.stdout), out.stderr


def kinds(doc: dict[str, Any]) -> list[str]:
    return [f["kind"] for f in doc["findings"]]


def check_common(doc: dict[str, Any], hosts: list[str]) -> None:
    assert [f["src"] for f in doc["flows"]] == hosts[1:8] and {f["dst"] for f in doc["flows"]} == {hosts[0]}
    assert all(f["error"] is None and f["gbps"] > 0 for f in doc["flows"]), doc["flows"]
    assert all(f["ce_marked_segments"] == 0 for f in doc["flows"])  # tbf drops, it never marks CE
    b = doc["bottleneck"]
    assert (b["host"], b["links_in"], b["flows"]) == (hosts[0], 7, 7)
    assert b["fair_share_gbps"] == pytest.approx(RATE_GBPS / 7)
    over = doc["findings"][0]
    assert over["kind"] == "oversubscription" and "oversubscribed 7:1" in over["summary"]
    # the port's rate is the ceiling of what the flows carried together: over the union of their
    # windows, and in every interval they all measured (on common boundaries)
    assert 0 < doc["total_gbps"] <= PORT_CEILING, doc["notes"]
    length = doc["flows"][0]["record"]["intervals"]["length_s"]
    totals = doc["interval_totals_gbps"]
    assert all(t <= PORT_CEILING + HELD_BITS / length / 1e9 for t in totals), totals
    if totals:
        assert doc["concurrent_gbps"] <= PORT_CEILING + HELD_BITS / (len(totals) * length) / 1e9, totals
    assert doc["start_spread_s"] < 0.3
    impacts = doc["victim"]["impact"]
    assert [i["q"] for i in impacts] == [0.5, 0.99]
    for i in impacts:
        assert i["interval"][0] <= i["factor"] <= i["interval"][1]
    assert "victim" not in kinds(doc) and "victim-unexplained" not in kinds(doc), doc["findings"]
    for f in doc["findings"]:
        if f["kind"] == "victim-host":
            assert f["evidence"]["shared_cpus"]["load_engines_on_it"] == 14, f


def test_incast_shallow_queue_drops_and_is_unfair_deep_queue_is_only_full() -> None:
    with netns.session():
        netns.up(RATE, hosts=10)
        try:
            hosts = netns.host_names(10)
            set_port_queue(hosts[0], RATE, SHALLOW)
            rc_shallow, shallow, err_shallow = incast(hosts)
            dropped_shallow = port_drops(hosts[0])
            set_port_queue(hosts[0], RATE, DEEP)  # tc changes the qdisc in place: its drop count goes on
            before = port_drops(hosts[0])
            rc_deep, deep, err_deep = incast(hosts)
            dropped_deep = port_drops(hosts[0]) - before
        finally:
            netns.down()
    check_common(shallow, hosts)
    assert dropped_shallow > 0  # the ground truth: the queue did drop
    assert rc_shallow == 13, err_shallow
    found = kinds(shallow)
    assert {"loss", "hot-spot", "unfair"} <= set(found), shallow["findings"]
    loss = next(f for f in shallow["findings"] if f["kind"] == "loss")
    assert loss["evidence"]["retransmitted_segments"] == sum(f["retransmitted_segments"] for f in shallow["flows"]) > 0
    hot = next(f for f in shallow["findings"] if f["kind"] == "hot-spot")
    assert hot["evidence"]["host"] == hosts[0]

    check_common(deep, hosts)
    assert dropped_deep == 0
    assert [k for k in kinds(deep) if k != "victim-host"] == ["oversubscription"], deep["findings"]
    assert rc_deep == 0, err_deep
    assert all(f["retransmitted_segments"] == 0 for f in deep["flows"])
