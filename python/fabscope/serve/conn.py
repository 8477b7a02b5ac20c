# SPDX-License-Identifier: BSD-3-Clause
"""One connection to serve before its run: the listening socket, the hello and authentication
(server_handshake), the run's configuration frame peeked for the engine that will read it, and
refusals sent without blocking."""

from __future__ import annotations

import hmac
import json
import math
import os
import select
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import IO, Any

from ..errors import EXIT_PEER, EXIT_USAGE, FabscopeError
from ..session import auth, control
from .config import ServeConfig
from .policy import (
    Refusal,
)

# After "welcome" the client starts its engine, which sends the run's config: allow for a slow start.
CONFIG_TIMEOUT_S = 10.0
MAX_CONFIG_FRAME = 64 * 1024
MAX_MESSAGE = 1000  # characters of a refusal (frame and log line)
SERVICES = ["engine", "doctor", "capture"]  # capture: capture/peer.py


@dataclass
class Run:
    proc: subprocess.Popen[bytes]
    client: str
    key_id: str | None
    service: str
    options: dict[str, Any] | None
    started: float
    deadline: float
    stderr: IO[bytes]
    killed: bool = False
    # Readable once the process has ended (os.pidfd_open, Linux 5.3+), opened before anything can
    # reap it; None where pidfds are missing: the accept loop then looks every SWEEP_S.
    exit_fd: int | None = None


@dataclass
class Conn:
    sock: socket.socket
    host: str
    port: int

    @property
    def desc(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass
class Pending:
    """A connection still in its handshake: not authenticated, so it holds one of the small
    --max-connections budget of handshake slots, and may be evicted for a newer one."""

    conn: Conn
    started: float
    evicted: str | None = None  # why it was dropped (said to it, logged once)


@dataclass
class Handshake:
    service: str
    key_id: str | None
    welcome: dict[str, Any]
    options: dict[str, Any] | None = None  # the run's config as the client sent it (for the log)
    session: bytes | None = None  # the session key: every frame after the welcome carries its MAC
    timeout_s: float | None = None  # the client's --timeout, as adopted (adopted_timeout)


def adopted_timeout(msg: dict[str, Any], cfg: ServeConfig) -> float:
    """The peer engine's --timeout: the client's own (its config's "timeout"), so that a client given
    more time on a slow fabric is not left by a peer that gave up first; never below serve's --timeout
    and never above its --max-duration (serve's limit on a run)."""
    want = msg.get("timeout")
    if isinstance(want, bool) or not isinstance(want, (int, float)) or not math.isfinite(want):
        return cfg.timeout_s
    return min(max(float(want), cfg.timeout_s), max(cfg.limits.max_duration_s, cfg.timeout_s))


def exit_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when process `pid` ends, or None without pidfds."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def drained(fd: int) -> bool:
    """Reads what a non-blocking pipe holds; False once it is empty."""
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def listen_socket(bind: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise FabscopeError(f"cannot listen on {bind}:{port}: {exc.strerror} (see `ip -brief addr`)", EXIT_USAGE) from exc
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        hint = (
            "another program holds the port; pick another with --port"
            if exc.errno == 98
            else "no interface here has that address; see `ip -brief addr`"
        )
        raise FabscopeError(f"cannot listen on {bind}:{port}: {exc.strerror} ({hint})", EXIT_USAGE) from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


def send_quietly(sock: socket.socket, msg: dict[str, Any], session: bytes | None = None) -> None:
    """A refusal frame (MACed as the server's frame 0 with a session key), sent without ever
    blocking (a peer that does not read gets nothing), then the connection is closed in order
    (FIN, not RST, so the frame is read)."""
    try:
        sock.setblocking(False)
        data = control.encode(msg)
        if session is not None:
            data += auth.frame_mac(session, "s", 0, data[4:])
        sock.send(data)
        sock.shutdown(socket.SHUT_WR)
    except (OSError, ValueError):  # ValueError: a frame over the cap (messages are cut, so: a bug)
        pass
    sock.close()


def peek_frame(sock: socket.socket, deadline: float, desc: str, session: bytes | None = None) -> dict[str, Any]:
    """The next frame, left in the socket (MSG_PEEK) for the engine that will read it; with a
    session key, its MAC (the client's frame 0) is checked before anything in it is read."""
    trailer = auth.MAC_BYTES if session is not None else 0
    want = 4
    poller = select.poll()  # not select(): connection fds may be above FD_SETSIZE
    poller.register(sock, select.POLLIN)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Refusal(f"{desc} sent no run configuration within {CONFIG_TIMEOUT_S:g} s", EXIT_PEER, "timeout")
        if not poller.poll(left * 1000):
            continue
        data = sock.recv(want, socket.MSG_PEEK)
        if not data:
            raise Refusal(f"{desc} closed the connection before sending its run configuration", EXIT_PEER, "closed")
        if len(data) >= 4:
            length = int.from_bytes(data[:4], "big")
            if length == 0 or length > MAX_CONFIG_FRAME:
                raise Refusal(f"{desc} sent a configuration frame of {length} bytes (allowed 1 to {MAX_CONFIG_FRAME})",
                              EXIT_PEER, "protocol")
            want = 4 + length + trailer
        if len(data) >= want:
            body = data[4:want - trailer]
            if session is not None and not hmac.compare_digest(auth.frame_mac(session, "c", 0, body),
                                                               data[want - trailer:want]):
                raise Refusal(f"{desc}: the run configuration failed its authentication (changed on the way, or "
                              "not from the client that authenticated); session ended", EXIT_PEER, "frame-auth")
            try:
                msg = json.loads(body)
            except (ValueError, RecursionError) as exc:
                raise Refusal(f"{desc} sent a configuration that is not JSON", EXIT_PEER, "protocol") from exc
            if not isinstance(msg, dict):
                raise Refusal(f"{desc} sent a configuration that is not an object", EXIT_PEER, "protocol")
            return msg
        time.sleep(0.005)  # part of the frame is here: select would report "readable" at once


def consume_frame(sock: socket.socket, trailer: int = 0) -> None:
    """Reads the (peeked) frame of a refused run (and its MAC, `trailer` bytes): closing a socket
    with unread data sends RST, and the client would see "connection reset" instead of the refusal."""
    try:
        sock.settimeout(1.0)
        length = int.from_bytes(sock.recv(4), "big") + trailer
        while length > 0:
            chunk = sock.recv(min(length, 65536))
            if not chunk:
                break
            length -= len(chunk)
    except OSError:
        pass


def server_handshake(sock: socket.socket, desc: str, key: auth.Key | None, deadline: float) -> Handshake:
    """Hello and authentication on the server side. Raises Refusal (said to the client, logged) or
    FabscopeError/OSError (the connection failed: logged). Everything read is untrusted."""
    server_nonce = auth.new_nonce() if key else None
    control.send(sock, control.server_hello(SERVICES, server_nonce), max(deadline - time.monotonic(), 0.01))
    hello = control.recv(sock, max(deadline - time.monotonic(), 0.0), f"client {desc}")
    if hello["type"] != "hello":
        raise Refusal(f"expected 'hello', got '{hello['type'][:40]}'", EXIT_PEER, "protocol")
    control.check_proto(hello, f"client {desc}")
    service = hello.get("service")
    if service not in SERVICES:
        raise Refusal(f"service {str(service)[:40]!r} is not offered here (offered: {', '.join(SERVICES)})",
                      EXIT_PEER, "protocol")
    assert isinstance(service, str)
    client_nonce = hello.get("nonce")
    if not auth.is_nonce(client_nonce):
        raise Refusal(
            "connect with the fabscope front end of the same version (`fabscope run --peer`, `fabscope doctor "
            "--peer`): it authenticates and hands the connection to its engine",
            EXIT_PEER, "protocol",
        )
    assert isinstance(client_nonce, str)
    key_id = None
    if key is not None:
        assert server_nonce is not None
        if not auth.verify(key, "client", service, server_nonce, client_nonce, hello.get("mac")):
            claimed = hello.get("key_id")
            shown = claimed[:16] if isinstance(claimed, str) else "none"
            raise Refusal(f"authentication failed (client key id {shown!r})", EXIT_PEER, "auth")
        key_id = key.key_id
    welcome: dict[str, Any] = {"type": "welcome"}
    session = None
    if key is not None and server_nonce is not None:
        welcome["mac"] = auth.mac(key, "server", service, server_nonce, client_nonce)
        session = auth.session_key(key, service, server_nonce, client_nonce)
    return Handshake(service, key_id, welcome, session=session)
