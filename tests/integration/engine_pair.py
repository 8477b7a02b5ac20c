# SPDX-License-Identifier: BSD-3-Clause
"""Runs two real engines on loopback for the middleware tests: a server on 127.0.0.1:0 (its first
stdout line names the port) and a client pointed at it. The lead may replace this with the front
end's runner; it only starts processes and parses their JSON lines."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def engine_path() -> Path:
    env = os.environ.get("FABSCOPE_ENGINE")
    if env:
        return Path(env)
    return REPO / "build" / "engine" / "fabscope-engine"


def backend_available(name: str, engine: Path | None = None) -> bool:
    exe = engine or engine_path()
    if not exe.exists():
        return False
    out = subprocess.run([str(exe), "--list-backends"], capture_output=True, text=True, timeout=30, check=False)
    return any(line.split()[:1] == [name] for line in out.stdout.splitlines())


def free_port() -> int:
    """A loopback port with nothing listening on it (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_lines(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(result records, error records) from an engine's stdout."""
    records: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        if obj.get("schema") == "fabscope.result/1":
            records.append(obj)
        elif obj.get("schema") == "fabscope.error/1":
            errors.append(obj)
    return records, errors


@dataclass
class PairResult:
    rc: int
    records: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""
    server_stderr: str = ""
    elapsed_s: float = 0.0


def run_pair(
    client_args: list[str],
    server_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 90.0,
) -> PairResult:
    exe = str(engine_path())
    full_env = dict(os.environ, **(env or {}))
    server = subprocess.Popen(
        [exe, "--listen", "127.0.0.1:0", "--cpu", "0", "--timeout", "5", *(server_args or [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 15)
        if not ready:
            raise RuntimeError("the server engine did not report its port within 15 s")
        port = json.loads(server.stdout.readline())["port"]
        start = time.monotonic()
        client = subprocess.run(
            [exe, "--peer", f"127.0.0.1:{port}", "--cpu", "1", *client_args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout_s,
            check=False,
        )
        elapsed = time.monotonic() - start
        records, errors = parse_lines(client.stdout)
        try:
            _, serr = server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            _, serr = server.communicate()
        return PairResult(client.returncode, records, errors, client.stderr, serr, elapsed)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()


def run_client_alone(args: list[str], timeout_s: float = 30.0, exe: Path | None = None) -> PairResult:
    """A client against a port where nothing listens (the missing-peer case)."""
    start = time.monotonic()
    out = subprocess.run(
        [str(exe or engine_path()), "--peer", f"127.0.0.1:{free_port()}", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    records, errors = parse_lines(out.stdout)
    return PairResult(out.returncode, records, errors, out.stderr, "", time.monotonic() - start)


def check_latency(rec: dict[str, Any]) -> None:
    lat = rec["latency_us"]
    assert lat["min"] <= lat["p50"] <= lat["p99"] <= lat["max"], lat
    assert lat["p50"] > 0


def check_bandwidth(rec: dict[str, Any]) -> None:
    assert rec["bandwidth_MBps"] is not None and rec["bandwidth_MBps"] > 0, rec.get("bandwidth_MBps")
    assert rec["bandwidth_gbps"] > 0
