# SPDX-License-Identifier: BSD-3-Clause
"""A real `fabscope serve` on loopback for the serve tests: started as a user starts it, its JSON
log in a temporary file, stopped by the PID this helper started (never by name)."""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO / "python"))


class Serve:
    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log_path = log
        self.port = 0

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines() if self.log_path.exists() else []
        out = [json.loads(line) for line in lines if line.startswith("{")]
        return [e for e in out if kind is None or e["event"] == kind]

    def wait_event(self, kind: str, count: int = 1, timeout: float = 15.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events(kind)
            if len(found) >= count:
                return found
            assert self.proc.poll() is None, f"serve died: {self.proc.stderr.read() if self.proc.stderr else ''}"
            time.sleep(0.05)
        raise AssertionError(f"no {count} '{kind}' event(s) in the serve log within {timeout} s: {self.events()}")

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextmanager
def serve(tmp_path: Path, *args: str) -> Iterator[Serve]:
    log = tmp_path / f"serve-{time.monotonic_ns()}.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabscope", "serve", "--port", "0", "--log", str(log), *args],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=ENV,
    )
    srv = Serve(proc, log)
    try:
        srv.port = int(srv.wait_event("listening")[0]["port"])
        yield srv
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr:
            proc.stderr.close()


def make_key(path: Path) -> Path:
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return path


def frame(obj: dict[str, Any]) -> bytes:
    body = json.dumps(obj).encode()
    return struct.pack(">I", len(body)) + body


def read_frame(sock: socket.socket, timeout: float = 5.0) -> dict[str, Any]:
    sock.settimeout(timeout)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        assert chunk, "connection closed before a frame"
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        assert chunk, "connection closed inside a frame"
        body += chunk
    msg: dict[str, Any] = json.loads(body)
    return msg


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")
