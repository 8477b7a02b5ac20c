# SPDX-License-Identifier: BSD-3-Clause
"""A real Prometheus scrapes `fabscope exporter` inside a netns testbed host while fabscope measures
TCP bandwidth over fabric0 from fs-a to fs-b: the bytes Prometheus saw arrive on fs-b's fabric0
match the bytes fabscope's own record counted there, within 2 %.

The exporter and Prometheus run inside fs-b, the receiving host (on its loopback, so scrapes add
no bytes to fabric0 or mgmt0). The receiver is compared because its counter snapshot follows the
last byte; the sender's is taken when its last send returns, with up to a socket buffer still
queued (measured: +1.6 % on fs-a's tx at 1 Gbit/s). The testbed lock is held throughout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netns_helpers as nh
import pytest

from conftest import REPO, engine_bin
from fabscope.results import parse_record
from fabscope.testbed import netns

pytestmark = [pytest.mark.netns, nh.needs_root]

HOST = netns.NS_B  # where the exporter and Prometheus run: the receiver
EXPORTER = "127.0.0.1:9730"  # inside HOST
PROMETHEUS = "127.0.0.1:9090"  # inside HOST
ENGINE_PORT = 18516


@pytest.fixture
def shaped_1g() -> Iterator[None]:
    yield from nh.testbed("1gbit")


def _get_in(ns: str, url: str, timeout_s: float = 10) -> str:
    """GET from inside a namespace (its loopback is not this one's)."""
    script = "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())"
    out = subprocess.run(netns.ns_exec_argv(ns, [sys.executable, "-c", script, url]), capture_output=True, text=True,
                         timeout=timeout_s, check=False)
    if out.returncode != 0:
        raise OSError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"GET {url} failed")
    return out.stdout


def _promql(query: str) -> list[dict[str, Any]]:
    url = f"http://{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    answer = json.loads(_get_in(HOST, url))
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def _wait(what: str, check: Any, deadline_s: float, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < end:
        assert proc.poll() is None, f"{what}: the process exited ({proc.returncode}): {proc.stderr.read() if proc.stderr else ''}"
        try:
            if check():
                return
        except (OSError, ValueError, KeyError) as exc:
            last = str(exc)
        time.sleep(0.3)
    raise AssertionError(f"{what} within {deadline_s:.0f} s; last: {last}")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _engine_bw_over_fabric() -> dict[str, Any]:
    """fabscope's engines: server in fs-b, client in fs-a with --device fabric0; the client's record."""
    exe = str(engine_bin())
    server = subprocess.Popen(
        netns.ns_exec_argv(netns.NS_B, [exe, "--listen", f"{netns.FABRIC.ip_b}:{ENGINE_PORT}", "--timeout", "10",
                                        "--format", "json"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        assert json.loads(server.stdout.readline()).get("event") == "listening"
        client = subprocess.run(
            netns.ns_exec_argv(netns.NS_A, [exe, "--peer", f"{netns.FABRIC.ip_b}:{ENGINE_PORT}", "--device", "fabric0",
                                            "--pattern", "bw", "--sizes", "64K", "--duration", "2",
                                            "--timeout", "10", "--format", "json"]),
            capture_output=True, text=True, timeout=90, check=False,
        )
        assert client.returncode == 0, client.stderr
        server.wait(timeout=20)
    finally:
        _stop(server)
    (line,) = [ln for ln in client.stdout.splitlines() if '"fabscope.result/' in ln]
    rec: dict[str, Any] = json.loads(line)
    return rec


def test_prometheus_sees_the_bytes_fabscope_counted_on_fabric0(shaped_1g: None, tmp_path: Path) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus is not installed; run `make setup` (deps/apt-packages.txt lists it)")
    env = [f"PYTHONPATH={REPO / 'python'}", f"XDG_DATA_HOME={tmp_path}", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"]
    exporter = subprocess.Popen(
        netns.ns_exec_argv(HOST, ["env", *env, sys.executable, "-m", "fabscope", "exporter", "--listen", EXPORTER]),
        stderr=subprocess.PIPE, text=True,
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: fabscope\n    static_configs:\n      - targets: ['{EXPORTER}']\n"
    )
    prom = subprocess.Popen(
        netns.ns_exec_argv(HOST, [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                        f"--web.listen-address={PROMETHEUS}", "--log.level=warn"]),
        stderr=subprocess.PIPE, text=True,
    )
    try:
        _wait("the exporter answers /metrics", lambda: "fabscope_netdev_transmit_bytes_total" in _get_in(
            HOST, f"http://{EXPORTER}/metrics"), 30, exporter)
        fabric = 'fabscope_netdev_receive_bytes_total{job="fabscope", netdev="fabric0"}'
        _wait("Prometheus has scraped fabric0's counter", lambda: len(_promql(fabric)) == 1, 60, prom)

        t_before = time.time()  # the sample Prometheus holds at this instant predates the run
        rec = _engine_bw_over_fabric()
        t_done = time.time()
        # A scrape after the last byte: the fabric counter's newest sample is younger than the run.
        _wait("Prometheus has scraped fabric0 after the run", lambda: float(_promql(f"timestamp({fabric})")[0][
            "value"][1]) > t_done, 30, prom)
        t_after = time.time()

        moved = _promql(f"{fabric} @ {t_after:.3f} - {fabric} @ {t_before:.3f}")
        mgmt = 'fabscope_netdev_receive_bytes_total{job="fabscope", netdev="mgmt0"}'
        mgmt_moved = _promql(f"{mgmt} @ {t_after:.3f} - {mgmt} @ {t_before:.3f}")
    finally:
        _stop(prom)
        _stop(exporter)

    result = parse_record(rec)  # fabscope's own reading of its counters: the path verdict
    assert result.path.verdict == "verified", result.path.summary
    counted = result.path.raw["sides"]["peer"]["devices"]["fabric0"]["rx_bytes"]  # fs-b, the server
    assert counted > 100e6, f"the run moved only {counted} bytes"
    seen = float(moved[0]["value"][1])
    print(f"fs-b fabric0 rx: Prometheus {seen:.0f} B, fabscope's record {counted} B ({seen / counted - 1:+.3%}); "
          f"mgmt0 rx {float(mgmt_moved[0]['value'][1]):.0f} B")
    # Prometheus also saw the connection set-up and control messages (kilobytes) outside the record's window.
    assert seen == pytest.approx(counted, rel=0.02), f"Prometheus {seen:.0f} B vs record {counted} B"
    assert float(mgmt_moved[0]["value"][1]) < 0.01 * counted, "bytes on mgmt0: the wrong device"
