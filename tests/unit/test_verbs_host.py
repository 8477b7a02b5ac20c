# SPDX-License-Identifier: BSD-3-Clause
"""The verbs backend on a host without RDMA: it is built and registered, its options are in the
table, and asking for it fails cleanly (exit 2, what is missing and what to do), never a hang or a
crash. The real device tests run in the Soft-RoCE guest (tests/softroce/test_verbs.py)."""
from __future__ import annotations

import json
import os
import select
import subprocess
from pathlib import Path

import pytest


def _has_verbs(engine: Path) -> bool:
    out = subprocess.run([str(engine), "--list-backends"], capture_output=True, text=True, timeout=30).stdout
    return any(line.split()[:1] == ["verbs"] for line in out.splitlines())


def _host_has_rdma() -> bool:
    try:
        return any(os.scandir("/sys/class/infiniband"))
    except OSError:
        return False


@pytest.fixture
def verbs_engine(engine: Path) -> Path:
    if not _has_verbs(engine):
        pytest.skip("engine built without the verbs backend (libibverbs-dev/librdmacm-dev missing at build time)")
    return engine


def _pair(engine: Path, client_args: list[str], server_args: list[str] | None = None,
          timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], int, str]:
    srv = subprocess.Popen([str(engine), "--listen", "127.0.0.1:0", "--backend", "verbs", "--timeout", "10",
                            *(server_args or [])], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([srv.stdout], [], [], 30)
        assert ready, "the server engine printed no 'listening' line"
        assert srv.stdout is not None
        port = json.loads(srv.stdout.readline())["port"]
        cli = subprocess.run([str(engine), "--peer", f"127.0.0.1:{port}", "--backend", "verbs", "--timeout", "10",
                              *client_args], capture_output=True, text=True, timeout=timeout)
        _, srv_err = srv.communicate(timeout=30)
        return cli, srv.returncode, srv_err
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()


def test_verbs_registered_with_its_options(verbs_engine: Path) -> None:
    dump = json.loads(subprocess.run([str(verbs_engine), "--options-json"], capture_output=True, text=True,
                                     timeout=30, check=True).stdout)
    vb = dump["backends"]["verbs"]
    assert set(vb["ops"]) == {"send", "write", "write_imm", "read", "fadd", "cswap"}
    assert set(vb["patterns"]) == {"lat", "bw", "bibw"}
    names = {o["name"] for o in vb["options"]}
    assert {"qp-type", "inline", "cq-mod", "qps", "mtu", "ib-port", "gid-index", "cm", "verify"} <= names
    help_text = subprocess.run([str(verbs_engine), "--help"], capture_output=True, text=True, timeout=30).stdout
    assert "--gid-index" in help_text and "RoCE v2" in help_text


@pytest.mark.skipif(_host_has_rdma(), reason="this host has RDMA devices; the no-device path cannot be shown")
def test_no_rdma_device_is_a_clear_usage_error(verbs_engine: Path) -> None:
    cli, srv_rc, srv_err = _pair(verbs_engine, ["--op", "send"])
    assert cli.returncode == 2, cli.stderr
    for text in ("no RDMA devices found on this host", "/sys/class/infiniband", "rdma link add",
                 "fabscope testbed softroce run"):
        assert text in cli.stderr, cli.stderr
    assert "Traceback" not in cli.stderr and "Sanitizer" not in cli.stderr
    err = [json.loads(x) for x in cli.stdout.splitlines() if x.startswith("{")]
    assert err and err[-1]["schema"] == "fabscope.error/1" and err[-1]["exit_code"] == 2
    assert srv_rc == 2 and "no RDMA devices" in srv_err


@pytest.mark.parametrize("args, text", [
    (["--qp-type", "xrc"], "xrc"),
    (["--mtu", "8192"], "--mtu"),
    (["--qps", "0"], "--qps"),
    (["--gid-index", "-2"], "--gid-index"),
])
def test_bad_option_values_exit_2(verbs_engine: Path, args: list[str], text: str) -> None:
    r = subprocess.run([str(verbs_engine), "--peer", "127.0.0.1:9", "--backend", "verbs", *args],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert text in r.stderr


def test_verbs_option_with_another_backend_is_named(verbs_engine: Path) -> None:
    r = subprocess.run([str(verbs_engine), "--peer", "127.0.0.1:9", "--backend", "tcp", "--gid-index", "3"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "belongs to backend verbs" in r.stderr


@pytest.mark.parametrize("device, extra, text", [
    ("rxe0,,rxe1", [], "an empty name in the list"),
    ("rxe0,rxe1,rxe0", [], "names rxe0 twice; for more queue pairs on one device use --qps N"),
    (",".join(f"d{i}" for i in range(9)), [], "at most 8 devices in one run"),
    ("rxe0,rxe1", ["--cm"], "--cm with --device rxe0,rxe1"),
])
def test_a_device_list_that_cannot_be_honoured_is_refused_before_any_device_is_opened(
    verbs_engine: Path, device: str, extra: list[str], text: str
) -> None:
    """The list is checked before the devices are looked up, so this host (no RDMA) shows it too."""
    r = subprocess.run([str(verbs_engine), "--peer", "127.0.0.1:9", "--backend", "verbs", "--device", device, *extra],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert text in r.stderr


@pytest.mark.parametrize("backend", ["tcp", "ofi"])
def test_a_device_list_is_refused_by_a_backend_that_runs_on_one(engine: Path, backend: str) -> None:
    r = subprocess.run([str(engine), "--peer", "127.0.0.1:9", "--backend", backend, "--device", "lo,lo2"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert f"--device lo,lo2 names several devices, and backend {backend} runs on one" in r.stderr
