# SPDX-License-Identifier: BSD-3-Clause
"""rsocket, the rspreload mode and --capture on a host WITHOUT an RDMA device (this build machine):
every one refuses before measuring, exit 2, naming what the host has, and never runs kernel TCP in
their place. The same features working on a real device: tests/softroce/test_rsocket_capture.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import engine_bin, fabscope

pytestmark = pytest.mark.skipif(
    os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband")),
    reason="this host has an RDMA device: the no-device refusals cannot be seen here",
)


def _needs_rsocket_backend() -> None:
    out = subprocess.run([str(engine_bin()), "--list-backends"], capture_output=True, text=True, timeout=30,
                         check=False)
    if "rsocket" not in out.stdout:
        pytest.skip("this engine was built without librdmacm (no rsocket backend)")


def _netdevs() -> list[str]:
    return sorted(os.listdir("/sys/class/net"))


def test_rsocket_without_an_rdma_device_is_exit_2_naming_what_exists() -> None:
    _needs_rsocket_backend()
    out = fabscope("run", "--loopback", "--backend", "rsocket", "--iters", "10", timeout=60)
    assert out.returncode == 2, out.stderr
    assert "--backend rsocket needs an RDMA device and this host has none" in out.stderr
    assert all(nd in out.stderr for nd in _netdevs())  # the devices that do exist
    assert "never falls back to kernel TCP" in out.stderr and "Traceback" not in out.stderr
    assert out.stdout.strip() == ""  # nothing measured


def test_rsocket_engine_refuses_before_connecting() -> None:
    """The engine itself (no front end): the check runs before the control connection, so no peer
    is needed for the refusal (port 9 of loopback has nobody listening)."""
    _needs_rsocket_backend()
    out = subprocess.run([str(engine_bin()), "--peer", "127.0.0.1:9", "--backend", "rsocket", "--device", "mlx5_0",
                          "--timeout", "5"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "needs an RDMA device" in out.stderr and "lo" in out.stderr


def test_rsocket_options_are_in_the_option_table() -> None:
    _needs_rsocket_backend()
    out = fabscope("run", "--help", timeout=60)
    for name in ("--rsocket-sqsize", "--rsocket-rqsize", "--rsocket-inline", "--rsocket-iomap"):
        assert name in out.stdout


@pytest.mark.parametrize("argv, expect", [
    (["--backend", "tcp", "--preload", "rsocket"], "--preload rsocket needs an RDMA device and this host has none"),
    (["--backend", "verbs", "--preload", "rsocket"], "--preload applies only to --backend tcp"),
    (["--backend", "tcp", "--preload", "/nonexistent/librspreload.so"], "--preload /nonexistent/librspreload.so: no such file"),
    (["--backend", "tcp", "--capture-snaplen", "100"], "--capture-snaplen applies only to --capture FILE.pcap"),
    (["--backend", "tcp", "--capture", "/nonexistent-dir/x.pcap"], "cannot write in /nonexistent-dir"),
])
def test_preload_and_capture_refusals(argv: list[str], expect: str, tmp_path: Path) -> None:
    out = fabscope("run", "--loopback", "--iters", "10", *argv, timeout=60)
    assert out.returncode == 2, out.stderr
    assert expect in out.stderr and "Traceback" not in out.stderr
    assert out.stdout.strip() == ""
