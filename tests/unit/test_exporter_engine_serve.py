# SPDX-License-Identifier: BSD-3-Clause
"""The exporter's long-lived engine (`fabscope-engine --counters-serve`): the same snapshot as
--counters-json at every request, fresh values from the files it keeps open, devices that come and
go, a deadline on every answer, a restart when the engine dies; and the text format served whatever
the Accept header prefers."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, engine_bin
from fabscope import exporter
from fabscope.errors import EXIT_MEASURE, FabscopeError
from fabscope.exporter.snapshot import SnapshotEngine

FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
PMA = FIXTURES / "mlx5-pma-counters"
RXE = FIXTURES / "rxe-qemu" / "sys"


def one_shot(root: Path) -> dict[str, Any]:
    out = subprocess.run([str(engine_bin()), "--counters-json"], capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, FABSCOPE_SYSFS_ROOT=str(root)), check=True)
    snap: dict[str, Any] = json.loads(out.stdout)
    return snap


def port(snap: dict[str, Any], device: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [p for p in snap["rdma"] if p["device"] == device]
    assert len(found) == 1, found
    return found[0]


def test_serve_answers_each_request_with_the_one_shot_snapshot_and_fresh_values(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    shutil.copytree(RXE, root, symlinks=True)
    shutil.copytree(PMA / "class/infiniband/mlx5_1", root / "class/infiniband/mlx5_1", symlinks=True)
    engine = SnapshotEngine(engine_bin(), str(root))
    try:
        assert engine.snapshot() == one_shot(root)
        pid = engine.pid
        assert engine.snapshot() == one_shot(root)  # the second answer comes from the files kept open
        counters = root / "class/infiniband/mlx5_1/ports/1/counters"
        (counters / "port_xmit_data").write_text("123456789\n")  # rewritten in place, as sysfs values change
        (counters / "new_counter").write_text("7\n")  # a file that appears is found at the next listing
        snap = engine.snapshot()
        assert port(snap, "mlx5_1")["counters"]["port_xmit_data"] == 123456789
        assert port(snap, "mlx5_1")["counters"]["new_counter"] == 7
        assert snap == one_shot(root)
        # A device that goes away is gone; one re-created under the same name is read afresh (new inodes).
        shutil.rmtree(root / "class/infiniband/mlx5_1")
        snap = engine.snapshot()
        assert [p["device"] for p in snap["rdma"]] == ["rxe0"]
        shutil.copytree(PMA / "class/infiniband/mlx5_1", root / "class/infiniband/mlx5_1", symlinks=True)
        (root / "class/infiniband/mlx5_1/ports/1/counters/port_xmit_data").write_text("42\n")
        snap = engine.snapshot()
        assert port(snap, "mlx5_1")["counters"]["port_xmit_data"] == 42
        assert snap == one_shot(root)
        assert engine.pid == pid  # one engine all along
    finally:
        engine.close()


def test_the_collector_restarts_an_engine_that_died(tmp_path: Path) -> None:
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(RXE))
    try:
        first = exporter.render(collector).decode()
        assert "fabscope_exporter_scrape_error 0.0" in first
        pid = collector.snapshots.pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the engine this collector started
        second = exporter.render(collector).decode()
        assert "fabscope_exporter_scrape_error 0.0" in second
        assert 'counter="sent_pkts"' in second
        assert collector.snapshots.pid not in (None, pid)
    finally:
        collector.snapshots.close()


def _fake_engine(tmp_path: Path, body: str) -> Path:
    """A stand-in executable for an engine that misbehaves (a real process, not a mock)."""
    exe = tmp_path / "engine"
    exe.write_text(f"#!/bin/sh\n{body}\n")
    exe.chmod(0o755)
    return exe


# A wall-clock bound: `measures` keeps it out of scripts/test.sh's four-at-once stage, where it would lose it.
@pytest.mark.measures
def test_a_silent_engine_fails_the_snapshot_within_its_deadline(tmp_path: Path) -> None:
    engine = SnapshotEngine(_fake_engine(tmp_path, "exec sleep 60"), None, timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(FabscopeError, match="did not answer within 1 s") as err:
        engine.snapshot()
    assert time.monotonic() - start < 5.0  # 1 s deadline, plus a loaded machine's slack
    assert err.value.exit_code == EXIT_MEASURE
    assert engine.pid is None  # stopped, not left behind


def test_an_engine_that_exits_names_its_error(tmp_path: Path) -> None:
    engine = SnapshotEngine(_fake_engine(tmp_path, "echo 'unknown option --counters-serve' >&2; exit 2"), None)
    with pytest.raises(FabscopeError, match=r"ended \(exit status 2: unknown option --counters-serve\).*make setup"):
        engine.snapshot()


def test_served_metrics_are_the_text_format_even_when_openmetrics_is_preferred() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port_no = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabscope", "exporter", "--listen", f"127.0.0.1:{port_no}", "--sysfs-root", str(RXE)],
        env=dict(os.environ, PYTHONPATH=str(REPO / "python")), stderr=subprocess.PIPE, text=True,
    )
    # What Prometheus 2.x sends: OpenMetrics first.
    accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    try:
        deadline = time.monotonic() + 20
        while True:
            req = urllib.request.Request(f"http://127.0.0.1:{port_no}/metrics", headers={"Accept": accept})
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    ctype, text = resp.headers["Content-Type"], resp.read().decode()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the exporter did not answer within 20 s"
                time.sleep(0.1)
        assert ctype.startswith("text/plain"), ctype
        assert "# EOF" not in text and "fabscope_rdma_port_hw_stat_total{" in text
        # Prometheus asks for gzip: the same exposition, compressed (the duration line aside).
        req = urllib.request.Request(f"http://127.0.0.1:{port_no}/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            zipped = gzip.decompress(resp.read()).decode()

        def steady(t: str) -> list[str]:
            return [line for line in t.splitlines() if not line.startswith("fabscope_exporter_scrape_duration_seconds ")]

        assert steady(zipped) == steady(text)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
