# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope matrix-agent`: the one process the launcher starts on each host of a matrix.

It connects back to the coordinator (`fabscope matrix` on the launch node) within a deadline,
proves it was started by that run (the one-time token, from FABSCOPE_MATRIX_TOKEN, so it is not
on any command line; proved with auth.py's HMAC challenge-response, as `fabscope serve` clients
prove their key, so the token never crosses the wire), says who it is (host name, launcher rank, IPv4 addresses per netdev), and
then does what it is told, one thing at a time (no host is ever in two measurements at once):

- ``listen``: start `fabscope-engine --listen ADDR:0 ...` (a server for one client), answer with
  its port, and answer again when it has ended;
- ``connect``: run `fabscope-engine --peer ADDR:PORT ...` (the client), answer with its records
  (path verdict attached, as `fabscope run` gets them) or its error;
- ``bye``: exit.

It never listens itself, never starts anything the coordinator did not ask for, and exits when
the coordinator goes away or stays silent longer than --idle-timeout. The engines run with the
same options as `fabscope run`; the agent adds only the mode (--listen/--peer) and --format json.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import EXIT_PEER, EXIT_USAGE, FabscopeError
from ..launch.engine import engine_path
from ..launch.runner import read_line_within
from ..session import auth, control

TOKEN_ENV = "FABSCOPE_MATRIX_TOKEN"
# 2: the token is proved with auth.py's challenge-response (the coordinator greets with a nonce)
AGENT_PROTO = 2
# The service name in the MACs' transcript: an agent's proof is useless to a serve and back.
AGENT_SERVICE = "matrix-agent"
# Generous: the coordinator may be busy with other pairs for several rounds.
DEFAULT_IDLE_S = 600.0


def read_token_file(path: Path, option: str = "--token-file") -> str:
    """The one-time token of a matrix run from a file (--launcher external): a regular file only its
    owner can read, as a key file; the first line, stripped."""
    from ..session.auth import check_owner_only

    check_owner_only(path, option, f"`fabscope matrix --launcher external --token-file {path}` creates it",
                     "join the matrix as an agent")
    try:
        token = path.read_text(errors="replace").split("\n", 1)[0].strip()
    except OSError as exc:
        raise FabscopeError(f"{option} {path}: {exc.strerror or exc}", EXIT_USAGE) from exc
    if len(token) < 16:
        raise FabscopeError(f"{option} {path}: the token in it is {len(token)} characters; at least 16 are needed "
                            f"(remove the file and `fabscope matrix --launcher external` writes a fresh one)", EXIT_USAGE)
    return token


def create_token_file(path: Path) -> str:
    """A fresh one-time token written to a new owner-only file (O_EXCL: never over another's file)."""
    token = secrets.token_urlsafe(24)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            fix = f"create the directory {path.parent} first, or name a file in one that exists"
        elif exc.errno == errno.EEXIST:
            fix = "another run created it just now; give each run its own file"
        else:
            fix = ("name a file in a directory you can write (a shared home or scratch directory the "
                   "agents' hosts also see), or make the file yourself, owner-only (chmod 600), and pass it")
        raise FabscopeError(
            f"--token-file {path}: cannot create it: {exc.strerror or exc}. Fix: {fix}", EXIT_USAGE
        ) from exc
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def ipv4_addresses() -> dict[str, list[str]]:
    """{netdev: [IPv4 addresses]} of this host (iproute2's JSON), loopback left out."""
    try:
        out = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, timeout=10,
                             check=False)
        data = json.loads(out.stdout or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
    result: dict[str, list[str]] = {}
    for dev in data if isinstance(data, list) else []:
        name = dev.get("ifname")
        if not isinstance(name, str) or name == "lo":
            continue
        addrs = [str(a.get("local")) for a in dev.get("addr_info") or [] if a.get("family") == "inet" and a.get("local")]
        result[name] = addrs
    return result


def launcher_rank() -> int | None:
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        value = os.environ.get(var)
        if value is not None and value.isdigit():
            return int(value)
    return None


def _engine(mode: list[str], args: list[str], timeout_s: float) -> list[str]:
    return [str(engine_path()), *mode, "--timeout", f"{timeout_s:g}", *args, "--format", "json"]


class Agent:
    def __init__(self, sock: socket.socket, idle_s: float) -> None:
        self.sock = sock
        self.idle_s = idle_s

    def send(self, msg: dict[str, Any]) -> None:
        control.send(self.sock, msg, 30.0)

    def serve(self) -> int:
        while True:
            try:
                msg = control.recv(self.sock, self.idle_s, "the matrix coordinator")
            except FabscopeError:
                return 0  # the coordinator went away (or ended without bye): nothing left to do here
            kind = msg["type"]
            if kind == "bye":
                return 0
            if kind == "listen":
                self.listen(msg)
            elif kind == "connect":
                self.connect(msg)
            elif kind == "load":  # `fabscope load`: many engines here at once (load/agent.py)
                from ..load.agent import serve_load

                serve_load(msg, self.send, lambda t: control.recv(self.sock, t, "the load coordinator"))
            else:
                self.send({"type": "error", "id": msg.get("id"), "message": f"unknown command {kind[:40]!r}"})

    def listen(self, msg: dict[str, Any]) -> None:
        timeout_s = float(msg.get("timeout", 10))
        cmd = _engine(["--listen", f"{msg['bind']}:0"], list(msg.get("args") or []), timeout_s)
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              stdin=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            port = None
            try:
                line = read_line_within(proc.stdout, time.monotonic() + timeout_s)
                port = int(json.loads(line)["port"]) if line else None
            except (ValueError, KeyError, TypeError):
                port = None
            if port is None:
                proc.kill()
                err = proc.stderr.read().strip().removeprefix("fabscope-engine: ")
                self.send({"type": "done", "id": msg["id"], "rc": proc.wait(), "error": err or "the server engine did not start"})
                return
            self.send({"type": "listening", "id": msg["id"], "port": port})
            # The engine ends by itself: after its client, or --timeout after no client came.
            guard = float(msg.get("guard", timeout_s * 6 + 60))
            try:
                rc = proc.wait(timeout=guard)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            err = proc.stderr.read().strip().removeprefix("fabscope-engine: ")
            self.send({"type": "done", "id": msg["id"], "rc": rc, "error": err if rc else None})

    def connect(self, msg: dict[str, Any]) -> None:
        from ..launch.runner import stream_client

        timeout_s = float(msg.get("timeout", 10))
        cmd = _engine(["--peer", str(msg["peer"])], list(msg.get("args") or []), timeout_s)
        outcome = stream_client(cmd, timeout_s, None)
        self.send({"type": "result", "id": msg["id"], "records": [r.to_json() for r in outcome.records],
                   "error": outcome.error, "exit_code": outcome.exit_code})


def _connect_within(host: str, port: int, timeout_s: float) -> socket.socket:
    """The coordinator may not be up yet when a site's own starter runs the agents (or its host not
    yet reachable: no route while it boots): every failure but a name that does not resolve is tried
    again until the deadline. Each try (control.connect, itself retrying a refusal for up to 5 s) that
    fails is said on stderr: one line every ~5 s while the coordinator is not up."""
    deadline = time.monotonic() + timeout_s
    until = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + timeout_s))
    while True:
        try:
            return control.connect(host, port, max(0.5, min(5.0, deadline - time.monotonic())))
        except FabscopeError as exc:
            if isinstance(exc.__cause__, socket.gaierror):
                raise
            cause = exc.__cause__
            why = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(exc)
            if time.monotonic() + 0.5 >= deadline:
                raise FabscopeError(f"matrix-agent: could not reach the coordinator at {host}:{port} within "
                                    f"{timeout_s:g} s (--connect-timeout): {why}. Is `fabscope matrix` running "
                                    "there with that --coordinator, and is its port open to this host?",
                                    EXIT_PEER) from exc
            refused = isinstance(cause, ConnectionRefusedError)
            print(f"fabscope matrix-agent: coordinator {host}:{port} {'not listening' if refused else 'not reachable'} "
                  f"yet ({why}); trying again until {until} (--connect-timeout {timeout_s:g} s)",
                  file=sys.stderr, flush=True)
            time.sleep(0.5)


def run_agent(coordinator: str, connect_timeout_s: float, idle_s: float, token_file: Path | None = None) -> int:
    token = read_token_file(token_file) if token_file is not None else os.environ.get(TOKEN_ENV)
    if not token:
        raise FabscopeError(
            f"matrix-agent: {TOKEN_ENV} is not set; the agent is started by `fabscope matrix` through its launcher, "
            "which passes the run's one-time token in the environment (with --launcher external, give the agent "
            "--token-file FILE, the file the matrix names)", EXIT_USAGE)
    host, port = control.split_hostport(coordinator, 0)
    if not port:
        raise FabscopeError(f"matrix-agent: --coordinator {coordinator}: give HOST:PORT", EXIT_USAGE)
    sock = _connect_within(host, port, connect_timeout_s)
    try:
        key = auth.key_from_secret(token.encode(), "the matrix token")
        challenge = control.recv(sock, 30.0, "the matrix coordinator")
        server_nonce = challenge.get("nonce")
        if challenge["type"] != "challenge" or not auth.is_nonce(server_nonce):
            raise FabscopeError(f"matrix-agent: {coordinator} did not greet as a fabscope matrix coordinator of this "
                                f"version (agent protocol {AGENT_PROTO}); install the same fabscope on every host",
                                EXIT_PEER)
        assert isinstance(server_nonce, str)
        client_nonce = auth.new_nonce()
        control.send(sock, {"type": "hello", "proto": AGENT_PROTO, "version": __version__, "nonce": client_nonce,
                            "mac": auth.mac(key, "client", AGENT_SERVICE, server_nonce, client_nonce),
                            "hostname": socket.gethostname(), "rank": launcher_rank(), "pid": os.getpid(),
                            "addresses": ipv4_addresses(), "local_address": sock.getsockname()[0]}, 30.0)
        reply = control.recv(sock, connect_timeout_s + 30.0, "the matrix coordinator")
        if reply["type"] != "welcome":
            print(f"fabscope matrix-agent: the coordinator refused this agent: {reply.get('message')}", file=sys.stderr)
            return EXIT_PEER
        if not auth.verify(key, "server", AGENT_SERVICE, server_nonce, client_nonce, reply.get("mac")):
            print(f"fabscope matrix-agent: {coordinator} welcomed this agent but could not prove it holds the run's "
                  "token: it is not the coordinator of this matrix", file=sys.stderr)
            return EXIT_PEER
        return Agent(sock, idle_s).serve()
    finally:
        sock.close()
