# SPDX-License-Identifier: BSD-3-Clause
"""The engine between two network namespaces: bandwidth against a tbf-shaped link (ground truth),
and the path verdict on real traffic: verified, misrouted (naming the link that carried it)."""

from __future__ import annotations

import atexit
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import netns_helpers as nh
import pytest

from conftest import REPO, json_lines
from fabscope.testbed import netns

pytestmark = [pytest.mark.netns, nh.needs_root]
ENV = {"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
PORT = 18515


@functools.cache
def key_file() -> str:
    """serve off loopback needs a shared key (mode 600, outside the source tree)."""
    fd, path = tempfile.mkstemp(prefix="fabscope-netns-key-")
    os.write(fd, os.urandom(32))
    os.close(fd)
    atexit.register(os.unlink, path)
    return path


def serve_in(ns: str, bind: str, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        netns.ns_exec_argv(ns, ["env", *(f"{k}={v}" for k, v in ENV.items()), sys.executable, "-m", "fabscope",
                                "serve", "--bind", bind, "--port", str(PORT), "--key-file", key_file(), *extra]),
        stderr=subprocess.PIPE, text=True,
    )
    nh.wait_listening(ns, PORT, deadline_s=15.0)
    return proc


def run_in(ns: str, *args: str, timeout: float = 90) -> tuple[int, list[dict[str, Any]], str]:
    cmd = netns.ns_exec_argv(ns, ["env", *(f"{k}={v}" for k, v in ENV.items()), sys.executable, "-m", "fabscope",
                                  "run", "--format", "json", "--key-file", key_file(), *args])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return out.returncode, json_lines(out.stdout), out.stderr


def run_against_serve(*args: str) -> tuple[int, list[dict[str, Any]], str]:
    """`fabscope run ARGS` on fs-a against a serve on fs-b that was given no --device."""
    server = serve_in("fs-b", "0.0.0.0")
    try:
        return run_in("fs-a", *args)
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def shaped_1g() -> Iterator[None]:
    yield from nh.testbed("1gbit")


@pytest.fixture
def shaped_100m() -> Iterator[None]:
    yield from nh.testbed("100mbit")


def bandwidth_over_fabric(seconds: str) -> float:
    rc, recs, err = run_against_serve("--peer", f"10.201.0.2:{PORT}", "--device", "fabric0", "--pattern", "bw",
                                      "--sizes", "64K", "--duration", seconds, "--warmup-time", "0.5")
    assert rc == 0, err
    (rec,) = recs
    assert rec["path"]["verdict"] == "verified", rec["path"]
    return float(rec["bandwidth_gbps"]) * 1000


def best_bandwidth(seconds: str, ceiling: float) -> float:
    """Best of up to three runs: load on the shared build machine only ever lowers the figure
    (iperf3 on the same link at load 8: 75-96 Mbit/s at 100mbit), never raises it."""
    runs: list[float] = []
    for _ in range(3):
        runs.append(bandwidth_over_fabric(seconds))
        assert runs[-1] <= 1.02 * ceiling, f"{runs[-1]:.1f} Mbit/s is above the {ceiling} ceiling"
        if runs[-1] == pytest.approx(ceiling, rel=0.02):
            break
    return max(runs)


def test_bandwidth_matches_a_1gbit_tbf_link(shaped_1g: None) -> None:
    # Goodput ceiling for 1448-byte payloads in 1514-byte frames at 1 Gbit/s: 956.4 Mbit/s.
    assert best_bandwidth("3", 956.4) == pytest.approx(956.4, rel=0.02)


def test_bandwidth_matches_a_100mbit_tbf_link(shaped_100m: None) -> None:
    # 95.6 Mbit/s ceiling; iperf3 measures 96.2 here (the 256 kB tbf burst adds ~0.6 %).
    assert best_bandwidth("4", 95.6) == pytest.approx(95.6, rel=0.02)


@pytest.fixture
def plain() -> Iterator[None]:
    yield from nh.testbed(None)


def test_device_fabric0_is_verified_on_both_sides(plain: None) -> None:
    rc, recs, err = run_against_serve("--peer", f"10.201.0.2:{PORT}", "--device", "fabric0", "--pattern", "bw",
                                      "--sizes", "64K", "--iters", "2000")
    assert rc == 0, err
    (rec,) = recs
    path = rec["path"]
    assert path["verdict"] == "verified" and path["requested"] == "fabric0"
    assert set(path["sides"]) == {"local", "peer"}  # both hosts' counters were judged


def test_bind_to_fabric_address_towards_mgmt_is_misrouted_and_exits_5(plain: None) -> None:
    """--bind 10.201.0.1 (fabric0's address) to the peer's mgmt address: the kernel sends over
    mgmt0 with fabric0's source address. fabscope must say so, loudly, with exit 5."""
    server = serve_in("fs-b", "0.0.0.0")
    try:
        rc, recs, err = run_in("fs-a", "--peer", f"10.202.0.2:{PORT}", "--bind", "10.201.0.1", "--pattern", "bw",
                               "--sizes", "64K", "--iters", "2000")
        text = subprocess.run(
            netns.ns_exec_argv("fs-a", ["env", *(f"{k}={v}" for k, v in ENV.items()), sys.executable, "-m",
                                        "fabscope", "run", "--peer", f"10.202.0.2:{PORT}", "--key-file", key_file(),
                                        "--bind", "10.201.0.1", "--pattern", "bw", "--sizes", "64K", "--iters", "500"]),
            capture_output=True, text=True, timeout=60,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert rc == 5, err
    (rec,) = recs
    path = rec["path"]
    assert path["verdict"] == "misrouted"
    assert path["requested"] == "fabric0"
    assert "mgmt0" in path["summary"]
    assert rec["transport"]["local"]["address_owner"] == "fabric0"
    assert text.returncode == 5
    assert "!! MISROUTED" in text.stdout and "mgmt0" in text.stdout


def test_ucx_net_devices_bypassed_by_routing_is_caught(plain: None) -> None:
    """The published UCX_NET_DEVICES case: UCX is told fabric0 on both hosts, but a route sends the
    peer's fabric0 address out through mgmt0. UCX reports fabric0; the counters prove mgmt0."""
    ucx = ["--backend", "ucx", "--ucx-tls", "tcp", "--device", "fabric0", "--op", "tag", "--pattern", "bw",
           "--sizes", "64K", "--iters", "1000"]
    server = serve_in("fs-b", "0.0.0.0", "--device", "fabric0")
    try:
        rc, recs, err = run_in("fs-a", "--peer", f"10.201.0.2:{PORT}", *ucx)
        assert rc == 0, err
        assert recs[0]["path"]["verdict"] == "verified"
        subprocess.run(netns.ns_exec_argv("fs-a", ["ip", "route", "add", "10.201.0.2/32", "dev", "mgmt0"]), check=True)
        rc, recs, err = run_in("fs-a", "--peer", f"10.201.0.2:{PORT}", *ucx)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert rc == 5, err
    (rec,) = recs
    assert rec["transport"]["local"]["requested"]["UCX_NET_DEVICES"] == "fabric0"
    assert rec["path"]["verdict"] == "misrouted" and "mgmt0" in rec["path"]["summary"]


@pytest.mark.parametrize("backend", [
    ["--backend", "ofi", "--provider", "tcp;ofi_rxm", "--ofi-ep", "rdm"],
    ["--backend", "ofi", "--provider", "tcp", "--ofi-ep", "msg"],
    ["--backend", "tcp"],
], ids=["ofi-rxm", "ofi-msg", "tcp"])
def test_device_fabric0_with_control_over_mgmt_is_carried_by_fabric0(plain: None, backend: list[str]) -> None:
    """Control reaches the server over mgmt0 and serve was given no --device: the client's
    --device fabric0 still decides the path. The client names fabric0's network in its config
    and the server's engine puts its data endpoint on its own address there (before, ofi's went
    on the mgmt0 address control came in on: every byte on mgmt0, misrouted)."""
    rc, recs, err = run_against_serve("--peer", f"10.202.0.2:{PORT}", *backend, "--device", "fabric0",
                                      "--pattern", "bw", "--sizes", "64K", "--iters", "2000")
    assert rc == 0, err
    (rec,) = recs
    path = rec["path"]
    assert path["verdict"] == "verified" and path["requested"] == "fabric0", path
    assert set(path["sides"]) == {"local", "peer"}  # the server's counters say fabric0 too
