# SPDX-License-Identifier: BSD-3-Clause
"""Move real bytes between the netns testbed's namespaces and build result records.

Shared by tests/unit/test_path.py and tests/integration/test_netns_testbed.py.
Only the testbed's own addresses (10.201.0.x, 10.202.0.x inside fs-a/fs-b)
and loopback inside a namespace are ever used.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from fabscope.testbed import netns, sysfs_counters  # noqa: E402  (needs the sys.path line above)

IPERF_PORT = 5201
PINGPONG_PORT = 18515

needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="netns tests need root (CAP_NET_ADMIN) to create network namespaces and veth links",
)


def testbed(shape: str | None = None) -> Iterator[None]:
    """Fixture body: hold the testbed, bring it up, yield, always tear it down."""
    with netns.session():
        netns.up(shape)
        try:
            yield
        finally:
            netns.down()


def require_iperf3() -> None:
    if shutil.which("iperf3") is None:
        pytest.fail(
            "iperf3 is not installed; run `make setup` (deps/apt-packages.txt lists it)"
        )


def iperf3(
    client_ns: str,
    server_ns: str,
    *,
    server_bind: str,
    client_bind: str,
    dst: str,
    seconds: int = 3,
) -> dict[str, Any]:
    """A timed iperf3 run from client_ns to server_ns; returns iperf3's JSON.

    Timed only: `iperf3 -n BYTES` can finish with data still queued, so the
    receiver's counters sometimes see 10% less than BYTES (measured here).
    Byte-exact transfers use socket_run("bulk", ...).
    """
    require_iperf3()
    server = subprocess.Popen(
        netns.ns_exec_argv(
            server_ns,
            ["iperf3", "-s", "-1", "-B", server_bind, "-p", str(IPERF_PORT), "-J"],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_listening(server_ns, IPERF_PORT)
        amount = ["-t", str(seconds)]
        client = subprocess.run(
            netns.ns_exec_argv(
                client_ns,
                [
                    "iperf3",
                    "-c",
                    dst,
                    "-B",
                    client_bind,
                    "-p",
                    str(IPERF_PORT),
                    "-J",
                    *amount,
                ],
            ),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert client.returncode == 0, (
            f"iperf3 client failed: {client.stdout[-500:]} {client.stderr}"
        )
        server.wait(timeout=15)
        result: dict[str, Any] = json.loads(client.stdout)
        return result
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def wait_listening(ns: str, port: int, deadline_s: float = 5.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        out = subprocess.run(
            netns.ns_exec_argv(ns, ["ss", "-Hltn", f"sport = :{port}"]),
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if out.strip():
            return
        time.sleep(0.05)
    raise AssertionError(
        f"nothing listened on port {port} in {ns} within {deadline_s}s"
    )


# Fixed-size messages over TCP, as the engine's patterns move them:
#   pingpong - each message echoed back (lat);
#   bulk     - client -> server only (bw); the server acknowledges with one
#              byte after reading everything, so when the client exits every
#              payload byte has crossed the wire (iperf3 -n does not promise
#              that: it can stop with data still queued, which undercounts).
_SOCKET_SCRIPT = r"""
import socket, sys
mode, role, addr, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
size, count = int(sys.argv[5]), int(sys.argv[6])
def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise SystemExit("peer closed early")
        buf += chunk
    return bytes(buf)
if role == "server":
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(1); print("ready", flush=True)
    ls.settimeout(20); c, _ = ls.accept(); c.settimeout(20)
    for _ in range(count):
        msg = recv_exact(c, size)
        if mode == "pingpong":
            c.sendall(msg)
    if mode == "bulk":
        c.sendall(b"k")
    c.close()
else:
    s = socket.socket(); s.settimeout(20); s.bind((sys.argv[7], 0)); s.connect((addr, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"x" * size
    for _ in range(count):
        s.sendall(msg)
        if mode == "pingpong":
            recv_exact(s, size)
    if mode == "bulk":
        recv_exact(s, 1)
    s.close()
"""


def socket_run(
    mode: str,
    client_ns: str,
    server_ns: str,
    *,
    server_bind: str,
    client_bind: str,
    dst: str,
    size: int,
    count: int,
) -> None:
    """Move ``count`` messages of ``size`` bytes: mode "pingpong" or "bulk"."""

    def argv(ns: str, *args: str) -> list[str]:
        return netns.ns_exec_argv(
            ns, [sys.executable, "-c", _SOCKET_SCRIPT, mode, *args]
        )

    port = str(PINGPONG_PORT)
    server = subprocess.Popen(
        argv(server_ns, "server", server_bind, port, str(size), str(count)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline().strip()
        assert line == "ready", server.stderr.read() if server.stderr else line
        client = subprocess.run(
            argv(client_ns, "client", dst, port, str(size), str(count), client_bind),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert client.returncode == 0, client.stderr
        assert server.wait(timeout=20) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def record(
    *,
    local: dict[str, Any] | None,
    peer: dict[str, Any] | None,
    pattern: str,
    size: int,
    iterations: int,
    warmup: int = 0,
    device: str = "",
    bind: str = "",
    local_address: str,
    peer_address: str,
    transport_device: str | None = None,
) -> dict[str, Any]:
    """A result record shaped like the engine's, around real counter snapshots."""
    return {
        "pattern": pattern,
        "size": size,
        "iterations": iterations,
        "warmup": warmup,
        "config": {"device": device, "bind": bind},
        "transport": {
            "local_address": local_address,
            "peer_address": peer_address,
            "device": transport_device,
        },
        "counters": {"local": local, "peer": peer},
    }


def snapshots(*namespaces: str) -> dict[str, dict[str, Any]]:
    return {ns: netns.snapshot_ns(ns) for ns in namespaces}


def side(
    ns: str, before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    return sysfs_counters.side_counters(ns, before[ns], after[ns])
