"""The two-host comparison suite in the netns testbed: `suite --peer` from fs-a against `fabscope serve`
(with a shared key) on fs-b over a fabric0 shaped to 1 Gbit/s, `--device fabric0` on every row; and
`suite --hosts fs-a,fs-b`, whose MPI rows mpirun starts inside the two hosts."""

from __future__ import annotations

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
from fabscope import auth
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


def test_suite_peer_between_two_hosts(shaped_1g: None, tmp_path: Path) -> None:
    key = auth.random_key_file(tmp_path / "key")
    server = subprocess.Popen(netns.ns_exec_argv("fs-b", fabscope_argv(
        "serve", "--bind", "0.0.0.0", "--port", str(PORT), "--key-file", str(key), "--device", "fabric0")),
        stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        out = subprocess.run(netns.ns_exec_argv("fs-a", fabscope_argv(
            "suite", "--peer", f"{netns.fabric_ip('fs-b')}:{PORT}", "--device", "fabric0", "--key-file", str(key),
            "--quick", "--no-store", "--out", str(tmp_path / "out"))), capture_output=True, text=True, timeout=900)
    finally:
        server.terminate()
        server.wait(timeout=15)
    rows = rows_of(tmp_path / "out")
    report = out.stdout + out.stderr
    # TCP and UCX over the shaped fabric: both measured, on fabric0, near the 1 Gbit/s shaping.
    tcp, ucx = rows["tcp send (device fabric0)"], rows["ucx tag (ucx-tls tcp, device fabric0)"]
    for row in (tcp, ucx):
        assert row["carried_by"] in ("tcp via fabric0", "ucx tcp on fabric0"), row
        assert row["path"] in ("verified", "unverifiable"), row
        assert isinstance(row["lat8_p50_us"], float) and isinstance(row["lat4k_p50_us"], float), row
        assert isinstance(row["bw1m_gbps"], float) and 0.3 < row["bw1m_gbps"] < 1.1, row  # shaped to 1 Gbit/s
    assert any(label.startswith("ofi send (provider ") for label in rows), rows.keys()
    assert all("device fabric0" in label for label in rows), rows.keys()  # --device on every row
    # No RDMA device here: one line says why verbs is absent and how to try it.
    assert "verbs: not in this table: this host has no RDMA device" in out.stdout
    assert "fabscope testbed softroce" in out.stdout
    # The exit code says what the table shows: 5 when any row's bytes went elsewhere, 4 a failed row.
    misrouted = any(r["path"] == "misrouted" for r in rows.values())
    failed = "FAILED" in out.stdout
    assert out.returncode == (5 if misrouted else 4 if failed else 0), report[-3000:]
    md = (tmp_path / "out" / "hosts.md").read_text()
    assert "| tcp send (device fabric0) |" in md and "```" not in md
    html5lib.HTMLParser(strict=True).parse((tmp_path / "out" / "report.html").read_text())


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
    assert isinstance(openmpi["bw1m_gbps"], float) and openmpi["path"] in ("verified", "unverifiable"), openmpi
    records = [json.loads(line) for line in (tmp_path / "out" / "hosts.jsonl").read_text().splitlines()]
    assert {r["transport"]["launcher"]["name"] for r in records} == {"srun"}
    assert {(r["host"]["hostname"], r["peer_host"]["hostname"]) for r in records} == {("fs-a", "fs-b")}


def test_suite_hosts_bad_input(tmp_path: Path) -> None:
    from conftest import fabscope

    twice = fabscope("suite", "--hosts", "fs-a,fs-a", "--out", str(tmp_path))
    assert twice.returncode == 2 and "listed twice" in twice.stderr
    three = fabscope("suite", "--hosts", "fs-a,fs-b,fs-c", "--out", str(tmp_path))
    assert three.returncode == 2 and "exactly two hosts" in three.stderr
