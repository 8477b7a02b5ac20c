# SPDX-License-Identifier: BSD-3-Clause
"""Missing, dying, busy and mismatched peers: a clear error within the deadline, never a hang."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from serve_helpers import serve

from conftest import HISTORY_HOME, REPO, engine_bin, fabscope, json_lines
from fabscope.session import control

ENV = {"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin", "XDG_DATA_HOME": HISTORY_HOME}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_nothing_listening_exits_3_within_the_timeout_naming_the_address() -> None:
    port = free_port()
    t0 = time.monotonic()
    out = fabscope("run", "--peer", f"127.0.0.1:{port}", "--timeout", "2")
    elapsed = time.monotonic() - t0
    assert out.returncode == 3
    assert f"127.0.0.1:{port}" in out.stderr and "fabscope serve" in out.stderr
    assert "Traceback" not in out.stderr
    assert elapsed < 2 + 3  # the timeout plus process start-up


def test_server_killed_mid_sweep_keeps_measured_sizes_and_exits_3() -> None:
    engine = str(engine_bin())
    server = subprocess.Popen([engine, "--listen", "127.0.0.1:0", "--timeout", "3"], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    port = json.loads(server.stdout.readline())["port"]
    client = subprocess.Popen(
        [engine, "--peer", f"127.0.0.1:{port}", "--timeout", "3", "--sizes", "8:1M", "--iters", "3000",
         "--warmup", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert client.stdout is not None
    first = client.stdout.readline()  # one size done: now kill the server mid-sweep
    server.kill()
    server.wait()
    t0 = time.monotonic()
    rest, err = client.communicate(timeout=15)
    assert client.returncode == 3
    assert time.monotonic() - t0 < 3 + 2
    records = json_lines(first + rest)
    results = [r for r in records if r.get("schema") == "fabscope.result/1"]
    errors = [r for r in records if r.get("schema") == "fabscope.error/1"]
    assert results and results[0]["size"] == 8
    assert errors and errors[0]["exit_code"] == 3
    assert "peer" in err


def test_cli_keeps_measured_sizes_when_the_server_dies(tmp_path: Path) -> None:
    """Through `fabscope serve`: killing serve's engine (the PID its log names) mid-sweep."""
    with serve(tmp_path) as srv:
        client = subprocess.Popen(
            [sys.executable, "-m", "fabscope", "run", "--peer", srv.addr, "--timeout", "3",
             "--format", "json", "--sizes", "8:4M", "--iters", "3000", "--warmup", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        )
        assert client.stdout is not None
        first = client.stdout.readline()  # JSON lines stream: one size is measured
        (start,) = srv.wait_event("start")
        os.kill(int(start["pid"]), signal.SIGKILL)  # the engine serve started for this run, nothing else
        t0 = time.monotonic()
        out, err = client.communicate(timeout=20)
        assert client.returncode == 3, err
        assert time.monotonic() - t0 < 3 + 3
        assert json_lines(first + out)[0]["size"] == 8
        assert "measured before" in err


def test_serve_runs_a_client_and_answers_busy_to_a_second_one_at_once(tmp_path: Path) -> None:
    with serve(tmp_path) as srv:
        first = subprocess.Popen(
            [sys.executable, "-m", "fabscope", "run", "--peer", srv.addr, "--format", "json",
             "--duration", "8", "--warmup", "0", "--poll", "block"],  # block: two spinning engines
            # would starve the second client's start-up on a 2-CPU machine
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
        )
        srv.wait_event("start", timeout=30)  # serve's JSON log says when the first run is on
        t0 = time.monotonic()
        second = fabscope("run", "--peer", srv.addr, "--timeout", "5")
        assert second.returncode == 3
        assert "busy" in second.stderr
        # An answer, not a wait for the 8 s run (serve gives a run that is just ending 1 s; the
        # second client's own start-up on a loaded machine is the rest).
        assert time.monotonic() - t0 < 6
        out, err = first.communicate(timeout=20)
        assert first.returncode == 0, err
        (rec,) = json_lines(out)
        assert rec["transport"]["peer"]["kind"] == "tcp"


def test_version_mismatch_names_both_versions() -> None:
    """A fake server that greets with protocol 99."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    port = lsock.getsockname()[1]

    def greet() -> None:
        conn, _ = lsock.accept()
        body = json.dumps({"type": "hello", "proto": 99, "version": "9.9.9", "role": "server"}).encode()
        conn.sendall(struct.pack(">I", len(body)) + body)
        conn.settimeout(10)  # open until the client, having read the greeting, hangs up
        try:
            while conn.recv(4096):
                pass
        finally:
            conn.close()

    threading.Thread(target=greet, daemon=True).start()
    out = fabscope("run", "--peer", f"127.0.0.1:{port}", "--timeout", "3")
    lsock.close()
    assert out.returncode == 3
    assert "9.9.9" in out.stderr and "protocol 99" in out.stderr
    assert f"protocol {control.PROTO_VERSION})" in out.stderr


def test_a_peer_that_never_answers_times_out() -> None:
    """Accepts the TCP connection but says nothing (a hung or foreign server)."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(1)
    port = lsock.getsockname()[1]
    t0 = time.monotonic()
    out = fabscope("run", "--peer", f"127.0.0.1:{port}", "--timeout", "2")
    lsock.close()
    assert out.returncode == 3
    assert time.monotonic() - t0 < 6
    assert "no answer" in out.stderr


def test_usage_errors_exit_2_without_traceback() -> None:
    for args in (["run", "--loopback", "--sizes", "0"], ["run", "--loopback", "--device", "nosuch0"],
                 ["run", "--loopback", "--backend", "nope"], ["run"], ["frobnicate"],
                 ["run", "--loopback", "--tx-depth", "0"], ["run", "--loopback", "--op", "fadd"]):
        out = fabscope(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert "Traceback" not in out.stderr
    out = fabscope("run", "--loopback", "--device", "nosuch0")
    assert "nosuch0" in out.stderr and "lo" in out.stderr  # names what exists


def test_doctor_peer_runs_the_checks_on_both_hosts_through_serve(tmp_path: Path) -> None:
    with serve(tmp_path) as srv:
        out = fabscope("doctor", "--json", "--peer", srv.addr, timeout=180)
        assert out.returncode in (0, 1, 7), out.stderr
        both = json.loads(out.stdout)
        assert both["schema"] == "fabscope.doctor-pair/1"
        assert both["peer"]["findings"] and both["local"]["findings"]
        # Same host on both ends: the cross-host comparison finds no version difference.
        assert not [f for f in both["local"]["findings"] if f["id"].startswith("crosshost") and f["severity"] != "ok"]


def test_doctor_peer_missing_is_exit_3() -> None:
    out = fabscope("doctor", "--peer", f"127.0.0.1:{free_port()}")
    assert out.returncode == 3
    assert "fabscope serve" in out.stderr
