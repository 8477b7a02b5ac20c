# SPDX-License-Identifier: BSD-3-Clause
"""The two-host comparison suite in the netns testbed: `suite --peer` from fs-a against `fabscope serve`
(with a shared key) on fs-b over a fabric0 shaped to 1 Gbit/s, `--device fabric0` on every row; and
`suite --hosts fs-a,fs-b`, whose MPI rows mpirun starts inside the two hosts."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import html5lib
import netns_helpers as nh
import pytest
from mpi_marks import needs_openmpi

from conftest import REPO
from fabscope.session import auth
from fabscope.testbed import netns
from fabscope.testbed import slurm as slurmbed

pytestmark = [pytest.mark.netns, nh.needs_root]
ENV = {"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
PORT = 18515


def fabscope_argv(*args: str) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in ENV.items()), sys.executable, "-m", "fabscope", *args]


@pytest.fixture
def shaped_1g() -> Iterator[None]:
    yield from nh.testbed("1gbit")


def rows_of(out_dir: Path) -> dict[str, dict[str, object]]:
    summary = json.loads((out_dir / "suite.json").read_text())
    assert summary["schema"] == "fabscope.suite/1"
    return {str(r["label"]): r for r in summary["rows"]}


@contextlib.contextmanager
def serve_on_b(tmp_path: Path, *extra: str) -> Iterator[None]:
    """`fabscope serve` on fs-b (keyed, all addresses), ready once its log says it listens; stopped by
    the PID this test started."""
    log = tmp_path / f"serve-{time.monotonic_ns()}.jsonl"
    server = subprocess.Popen(netns.ns_exec_argv("fs-b", fabscope_argv(
        "serve", "--bind", "0.0.0.0", "--port", str(PORT), "--key-file", str(key_of(tmp_path)), "--log", str(log),
        *extra)), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while '"listening"' not in (log.read_text() if log.exists() else ""):
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read() if server.stderr else ""
            time.sleep(0.05)
        yield
    finally:
        server.terminate()
        server.wait(timeout=15)
        if server.stderr:
            server.stderr.close()


def key_of(tmp_path: Path) -> Path:
    """One key file per test directory."""
    key = tmp_path / "key"
    return key if key.exists() else auth.random_key_file(key)


def suite_from_a(tmp_path: Path, out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(netns.ns_exec_argv("fs-a", fabscope_argv(
        "suite", "--peer", f"{netns.fabric_ip('fs-b')}:{PORT}", "--device", "fabric0", "--key-file", str(key_of(tmp_path)),
        "--quick", "--no-store", "--out", str(tmp_path / out), *extra)), capture_output=True, text=True, timeout=900)


def test_suite_peer_between_two_hosts_every_row_verified(shaped_1g: None, tmp_path: Path) -> None:
    """Every row of the two-host suite goes over fabric0, asked with --device on the client only; the serve
    is started as a cluster-wide unit would start it (no --device), then with its own --device. The ofi rows
    were all misrouted over mgmt0 (the client took the provider's first domain, not the one asked), and the
    sockets provider's rows took 10 ms a round trip (its progress thread's wait)."""
    for serve_extra, out_dir in (((), "plain"), (("--device", "fabric0"), "device")):
        with serve_on_b(tmp_path, *serve_extra):
            out = suite_from_a(tmp_path, out_dir)
        report = out.stdout[-4000:] + out.stderr[-3000:]
        rows = rows_of(tmp_path / out_dir)
        assert out.returncode == 0, report
        assert not [(label, r["path"]) for label, r in rows.items() if r["path"] != "verified"], report
        # TCP and UCX over the shaped fabric: both measured, on fabric0, near the 1 Gbit/s shaping.
        tcp, ucx = rows["tcp send (device fabric0)"], rows["ucx tag (ucx-tls tcp, device fabric0)"]
        assert tcp["carried_by"] == "tcp via fabric0" and ucx["carried_by"] == "ucx tcp on fabric0", (tcp, ucx)
        for row in rows.values():  # every figure measured (udp's reliability layer is slow on a tbf link)
            assert all(isinstance(row[k], float) and row[k] > 0 for k in ("lat8_p50_us", "lat4k_p50_us", "bw1m_gbps")), row
        for row in (tcp, ucx, rows["ofi send (provider tcp, device fabric0)"]):
            assert 0.3 < float(str(row["bw1m_gbps"])) < 1.1, row  # shaped to 1 Gbit/s
        ofi = {label: r for label, r in rows.items() if label.startswith("ofi send (provider ")}
        assert ofi and all(str(r["carried_by"]).endswith("on fabric0") for r in ofi.values()), ofi
        # The sockets provider's rows took 10 ms a round trip: its progress thread's default wait between
        # passes. Both engines now run it with no wait, and their records say so.
        records = [json.loads(line) for line in (tmp_path / out_dir / "hosts.jsonl").read_text().splitlines()]
        sockets = [r["transport"] for r in records if r["transport"]["local"].get("provider") == "sockets"]
        for side in [t[s] for t in sockets for s in ("local", "peer")]:
            assert str(side.get("progress_thread", "")).startswith("FI_SOCKETS_PE_WAITTIME=0 "), side
        assert all("device fabric0" in label for label in rows), rows.keys()  # --device on every row
    # No RDMA device here: one line says why verbs is absent and how to try it.
    assert "verbs: not in this table: this host has no RDMA device" in out.stdout
    assert "fabscope testbed softroce" in out.stdout
    md = (tmp_path / "device" / "hosts.md").read_text()
    assert "| tcp send (device fabric0) |" in md and "```" not in md
    html5lib.HTMLParser(strict=True).parse((tmp_path / "device" / "report.html").read_text())


def test_suite_peer_names_a_real_misroute(shaped_1g: None, tmp_path: Path) -> None:
    """Host routes send each host's fabric address over mgmt0: the bytes asked for fabric0 really go over
    the management network, and the suite says so (exit 5, the row named with where its bytes went).
    UCX's tcp transport binds its sockets to the interface's address, not to the interface, so the
    routes move it (fabscope's tcp backend binds to the device, SO_BINDTODEVICE, and cannot be moved)."""
    for here, there in (("fs-a", "fs-b"), ("fs-b", "fs-a")):
        subprocess.run(netns.ns_exec_argv(here, ["ip", "route", "add", f"{netns.fabric_ip(there)}/32", "via",
                                                 netns.mgmt_ip(there), "dev", "mgmt0"]), check=True)
    with serve_on_b(tmp_path, "--device", "fabric0"):
        out = suite_from_a(tmp_path, "out", "--backends", "ucx")
    rows = rows_of(tmp_path / "out")
    assert out.returncode == 5, out.stdout[-3000:] + out.stderr[-3000:]
    assert rows["ucx tag (ucx-tls tcp, device fabric0)"]["path"] == "misrouted", rows
    assert "# ucx tag (--ucx-tls=tcp --device=fabric0) lat 8 B: MISROUTED:" in out.stdout, out.stdout
    assert "mgmt0" in out.stdout.split("MISROUTED:", 1)[1].splitlines()[0], out.stdout


def test_suite_peer_without_serve_fails_fast(shaped_1g: None, tmp_path: Path) -> None:
    started = time.monotonic()
    out = subprocess.run(netns.ns_exec_argv("fs-a", fabscope_argv(
        "suite", "--peer", f"{netns.fabric_ip('fs-b')}:{PORT}", "--timeout", "3", "--quick", "--no-store",
        "--out", str(tmp_path / "out"))), capture_output=True, text=True, timeout=120)
    assert out.returncode == 3, out.stderr
    assert netns.fabric_ip("fs-b") in out.stderr
    assert time.monotonic() - started < 60


@needs_openmpi
def test_suite_hosts_adds_mpi_rows(shaped_1g: None, tmp_path: Path) -> None:
    env = dict(os.environ, **netns.launcher_env(), PYTHONPATH=str(REPO / "python"))
    out = subprocess.run([sys.executable, "-m", "fabscope", "suite", "--hosts", "fs-a,fs-b", "--quick", "--no-store",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=600, env=env)
    rows = rows_of(tmp_path / "out")
    # Open MPI per selection (its default, and pml ucx), MPICH, each with its own row.
    ob1, ucx = rows.get("mpi send (openmpi)"), rows.get("mpi send (openmpi, pml ucx)")
    assert ob1 is not None and ucx is not None, (rows.keys(), out.stdout[-2000:], out.stderr[-2000:])
    for row in (ob1, ucx):
        assert isinstance(row["lat8_p50_us"], float) and isinstance(row["bw1m_gbps"], float), row
    assert str(ob1["carried_by"]).startswith("mpi pml ob1") and ucx["carried_by"] == "mpi pml ucx", (ob1, ucx)
    records = [json.loads(line) for line in (tmp_path / "out" / "hosts.jsonl").read_text().splitlines()]
    hosts = {(r["host"]["hostname"], r["peer_host"]["hostname"]) for r in records if r["backend"] == "mpi"}
    assert hosts == {("fs-a", "fs-b")}, hosts


@needs_openmpi
def test_suite_hosts_under_srun(shaped_1g: None, tmp_path: Path) -> None:
    """The MPI rows with srun placing the ranks: one slurmd inside each testbed host."""
    missing = slurmbed.missing_tools()
    if missing:
        pytest.skip(f"Slurm is not installed here ({', '.join(missing)} missing); `make setup` installs it")
    with slurmbed.running(tmp_path / "slurm", timeout_s=30, netns_hosts=["fs-a", "fs-b"]) as cluster:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(netns.launcher_env(), **cluster.env(), PYTHONPATH=str(REPO / "python"))
        out = subprocess.run([sys.executable, "-m", "fabscope", "suite", "--hosts", "fs-a,fs-b", "--launcher", "srun",
                              "--device", "fabric0", "--quick", "--no-store", "--out", str(tmp_path / "out")],
                             capture_output=True, text=True, timeout=600, env=env)
    rows = rows_of(tmp_path / "out")
    openmpi = rows.get("mpi send (openmpi, device fabric0)")
    assert openmpi is not None, (rows.keys(), out.stdout[-2000:], out.stderr[-2000:])
    # A row that lost a figure says why (its path column names the failed pattern, the notes the reason).
    notes = json.loads((tmp_path / "out" / "suite.json").read_text())["notes"]
    assert isinstance(openmpi["bw1m_gbps"], float) and openmpi["path"] in ("verified", "unverifiable"), (openmpi, notes)
    records = [json.loads(line) for line in (tmp_path / "out" / "hosts.jsonl").read_text().splitlines()]
    assert {r["transport"]["launcher"]["name"] for r in records} == {"srun"}
    assert {(r["host"]["hostname"], r["peer_host"]["hostname"]) for r in records} == {("fs-a", "fs-b")}


def test_suite_hosts_bad_input(tmp_path: Path) -> None:
    from conftest import fabscope

    twice = fabscope("suite", "--hosts", "fs-a,fs-a", "--out", str(tmp_path))
    assert twice.returncode == 2 and "listed twice" in twice.stderr
    three = fabscope("suite", "--hosts", "fs-a,fs-b,fs-c", "--out", str(tmp_path))
    assert three.returncode == 2 and "exactly two hosts" in three.stderr
