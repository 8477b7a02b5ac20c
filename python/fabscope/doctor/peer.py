# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope doctor --peer`: the peer's `fabscope serve` runs its own checks and sends them with its
host facts; the client then compares the two hosts. Same framing and hello as engine runs."""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

from ..errors import EXIT_PEER, FabscopeError
from ..session import control
from ..session.auth import Key
from . import Context, run_doctor
from .core import Finding, Report
from .crosshost import collect_host_facts

TIMEOUT_S = 60.0  # the checks run external tools (ucx_info, ompi_info): allow them time


def _read_session_key(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return bytes.fromhex(f.read(64).decode("ascii"))


def answer(fd: int, key_fd: int | None = None) -> int:
    """Serve side, in a child process handed the accepted socket (hello already exchanged) and,
    in a keyed session, the session key on a pipe: the answer then carries its MAC."""
    sock = socket.socket(fileno=fd)
    try:
        session = _read_session_key(key_fd) if key_fd is not None else None
        ctx = Context()
        report = run_doctor(ctx)
        msg = {"type": "doctor", "report": report.to_dict(), "facts": collect_host_facts(ctx)}
        if session is not None:
            control.send_sealed(sock, msg, TIMEOUT_S, session, "s", 0)
        else:
            control.send(sock, msg, TIMEOUT_S)
    except (OSError, ValueError) as exc:
        print(f"fabscope serve: doctor answer failed: {exc}", file=sys.stderr)
        return 1
    finally:
        sock.close()
    return 0


def fetch(peer: str, timeout_s: float = TIMEOUT_S, key: Key | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Client side: the peer's report (as a dict) and its host facts. The hello and authentication
    are the same as for an engine run (control.open_session)."""
    sock, session = control.open_session_keyed(peer, "doctor", key, 10.0)
    host, port = control.split_hostport(peer)
    desc = f"{host}:{port}"
    with sock:
        reply = control.recv(sock, timeout_s, desc, (session, "s", 0) if session is not None else None)
    if reply.get("type") == "error":
        raise FabscopeError(f"{desc} reported: {reply.get('message')}", EXIT_PEER)
    if reply.get("type") != "doctor" or not isinstance(reply.get("report"), dict):
        raise FabscopeError(f"{desc} answered '{reply.get('type')}' instead of a doctor report", EXIT_PEER)
    facts = reply.get("facts")
    return reply["report"], facts if isinstance(facts, dict) else {}


def report_from_dict(data: dict[str, Any]) -> Report:
    keys = {"id", "severity", "title", "evidence", "why", "fix"}
    findings = [Finding(**{k: v for k, v in f.items() if k in keys}) for f in data.get("findings", [])]
    return Report(findings=findings, host=str(data.get("host", "peer")))


if __name__ == "__main__":
    sys.exit(answer(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None))
