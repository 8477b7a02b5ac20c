# SPDX-License-Identifier: BSD-3-Clause
"""The path causes planted on the netns testbed, each named by itself, and clean runs naming none
(issue 51): `delay` (a deep queue on a shaped forward path: delay without loss, tbf with a large
limit) with the round trips that show it, against the same case's clean runs in a temporary history,
which themselves name nothing, and `route` (a host route for the peer's fabric address
over mgmt0) with the kernel's route and the command that removes it. One testbed, one serve on
fs-b, a few short runs from fs-a."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netns_helpers as nh
import pytest

from conftest import REPO
from fabscope.session import auth
from fabscope.testbed import netns

pytestmark = [pytest.mark.netns, nh.needs_root]
ENV = {"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
PORT = 18515
# A shaper whose queue holds seconds of data: TCP fills it without a loss, and every round trip waits.
DEEP_QUEUE = ["tbf", "rate", "5mbit", "burst", "32kb", "limit", "16mb"]


def _fabscope(*args: str) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in ENV.items()), sys.executable, "-m", "fabscope", *args]


@contextlib.contextmanager
def _serve_on_b(tmp: Path, key: Path) -> Iterator[None]:
    """`fabscope serve --device fabric0` on fs-b, ready once its log says it listens; stopped by its PID."""
    log = tmp / "serve.jsonl"
    server = subprocess.Popen(netns.ns_exec_argv("fs-b", _fabscope(
        "serve", "--bind", "0.0.0.0", "--port", str(PORT), "--key-file", str(key), "--log", str(log),
        "--device", "fabric0")), stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while '"listening"' not in (log.read_text() if log.exists() else ""):
            assert server.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.05)
        yield
    finally:
        server.terminate()
        server.wait(timeout=15)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[int, list[dict[str, Any]]]]]:
    tmp = tmp_path_factory.mktemp("path-causes")
    key = auth.random_key_file(tmp / "key")
    out: dict[str, tuple[int, list[dict[str, Any]]]] = {}

    history = tmp / "history.db"

    def run(name: str, *args: str, keep: bool = False) -> None:
        store = ("--store", str(history)) if keep else ("--no-store",)
        got = subprocess.run(netns.ns_exec_argv("fs-a", _fabscope(
            "run", "--peer", f"{netns.fabric_ip('fs-b')}:{PORT}", "--key-file", str(key), "--device", "fabric0",
            "--format", "json", *store, "--timeout", "20", *args)), capture_output=True, text=True, timeout=300)
        out[name] = (got.returncode, [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")])
        assert out[name][1], f"{name}: exit {got.returncode}: {got.stderr[-2000:]}"

    bw = ("--pattern", "bw", "--sizes", "1M", "--iters", "40", "--warmup", "5")
    ucx = ("--backend", "ucx", "--ucx-tls", "tcp", "--op", "tag")
    queued = ("--pattern", "bw", "--sizes", "512K", "--iters", "10", "--warmup", "2")
    for _ in nh.testbed(None):
        with _serve_on_b(tmp, key):
            run("clean", *bw)
            run("clean_ucx", *ucx, *bw)
            for i in range(2):  # the history: clean runs of the deep-queue case
                run(f"clean_history_{i}", *queued, keep=True)
            subprocess.run(["tc", "-n", "fs-a", "qdisc", "replace", "dev", "fabric0", "root", *DEEP_QUEUE], check=True)
            run("deep_queue", *queued, keep=True)
            subprocess.run(["tc", "-n", "fs-a", "qdisc", "del", "dev", "fabric0", "root"], check=True)
            run("clean_after", *queued, keep=True)  # against the same history (the queued run is not clean)
            subprocess.run(netns.ns_exec_argv("fs-a", ["ip", "route", "add", f"{netns.fabric_ip('fs-b')}/32", "via",
                                                       netns.mgmt_ip("fs-b"), "dev", "mgmt0"]), check=True)
            subprocess.run(netns.ns_exec_argv("fs-b", ["ip", "route", "add", f"{netns.fabric_ip('fs-a')}/32", "via",
                                                       netns.mgmt_ip("fs-a"), "dev", "mgmt0"]), check=True)
            run("host_route", *ucx, *bw)
        yield out


def _cause(rec: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in rec["explanation"]["causes"] if c["cause"] == name)


def test_clean_runs_name_neither_delay_nor_route(runs: dict[str, tuple[int, list[dict[str, Any]]]]) -> None:
    for name in ("clean", "clean_ucx"):
        rc, recs = runs[name]
        assert rc == 0, (name, recs)
        for rec in recs:
            assert rec["path"]["verdict"] == "verified", name
            assert _cause(rec, "route")["state"] == "clear", name
            assert _cause(rec, "delay")["state"] != "seen", (name, _cause(rec, "delay"))
    assert _cause(runs["clean"][1][0], "delay")["state"] == "clear"  # tcp reports its round trips


def test_a_clean_run_against_its_clean_history_names_nothing(runs: dict[str, tuple[int, list[dict[str, Any]]]]) -> None:
    rc, (rec,) = runs["clean_after"]
    assert rc == 0 and rec["path"]["verdict"] == "verified"
    delay = _cause(rec, "delay")
    assert delay["state"] == "clear", delay
    # The two clean runs before the queue, not the queued run between: it named delay.
    assert "on this path's last 2 clean runs of this case" in delay["evidence"], delay
    assert rec["explanation"]["delay_reference"]["run_ids"] == [2, 1], rec["explanation"]["delay_reference"]
    assert [c["cause"] for c in rec["explanation"]["causes"] if c["cause"] in ("delay", "route") and c["seen"]] == []


def test_a_deep_queue_names_delay_with_the_round_trips(runs: dict[str, tuple[int, list[dict[str, Any]]]]) -> None:
    rc, (rec,) = runs["deep_queue"]
    assert rc == 0 and rec["path"]["verdict"] == "verified"
    delay = _cause(rec, "delay")
    assert delay["state"] == "seen", delay
    local = rec["transport"]["local"]
    assert f"{local['rtt_us']:,} us" in delay["evidence"] and f"{local['min_rtt_us']:,} us" in delay["evidence"]
    assert "rate <= window / round trip" in delay["evidence"] and "tc -s qdisc" in delay["fix"]
    # Against what the same case showed on its clean runs in the history, and the window that implies.
    clean = [r["transport"]["local"]["rtt_us"] for name in ("clean_history_0", "clean_history_1")
             for r in runs[name][1]]
    ref = rec["explanation"]["delay_reference"]
    assert ref["run_ids"] == [2, 1] and ref["rtt_us"]["local"] == sum(clean) / 2, (ref, clean)
    assert (f"round trip {local['rtt_us']:,} us at the end of the run against {round(sum(clean) / 2):,} us on this "
            "path's last 2 clean runs of this case (runs 2, 1, median)") in delay["evidence"], delay
    assert "us of each round trip waited in a queue (" in delay["evidence"]
    assert "the same window over the " in delay["evidence"]
    # Delay without loss: the queue was deep enough that nothing was dropped.
    assert _cause(rec, "retransmission")["state"] != "seen", _cause(rec, "retransmission")
    assert _cause(rec, "route")["state"] == "clear"


def test_a_host_route_over_mgmt0_names_the_kernels_route(runs: dict[str, tuple[int, list[dict[str, Any]]]]) -> None:
    rc, (rec,) = runs["host_route"]
    assert rc == 5 and rec["path"]["verdict"] == "misrouted"
    assert rec["transport"]["local"]["route_to_peer"]["dev"] == "mgmt0"
    route = _cause(rec, "route")
    peer = netns.fabric_ip("fs-b")
    assert route["state"] == "seen" and f"the kernel's route to the peer {peer} leaves by mgmt0" in route["evidence"]
    assert f"ip route del {peer} dev mgmt0" in route["fix"]
    assert _cause(rec, "delay")["state"] != "seen"
