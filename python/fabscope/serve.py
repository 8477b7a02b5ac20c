# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope serve`: answers `fabscope run --peer` (and `doctor --peer`) from other hosts, one run
at a time, on a network where not every client is honest.

- Handshakes run concurrently, each in its own thread with its own short deadline (independent of
  --timeout), so a silent, slow or garbage-sending connection never holds up an honest client.
- Connections that have not authenticated yet have a small budget of their own (--max-connections,
  --max-connections-per-source): when it is full, a new connection takes the slot of the oldest
  unauthenticated one (of its own address when that address holds its share, else of the address
  holding the most), and while more than half the slots are taken a handshake gets 1 s instead of
  3 s. So a flood of slow-loris connections, from any number of addresses, cannot keep an honest
  client (whose handshake takes milliseconds) from being served. Authenticated connections leave
  that budget.
- Off loopback a shared key is required (auth.py: HMAC-SHA256 challenge-response); --allow limits
  the source networks; serve_policy.py bounds what a client may ask (size, memory, time, rate).
- Each run is an engine (or a doctor child) handed the accepted, authenticated socket; a second
  run while one is in progress gets an immediate "busy".
- One JSON log line per run and per refusal (stderr, or --log FILE).
"""

from __future__ import annotations

import argparse
import datetime
import hmac
import ipaddress
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from . import argtypes, auth, control
from .engine import backends, engine_option, engine_path, validate_args
from .errors import EXIT_PEER, EXIT_USAGE, FabscopeError
from .serve_policy import (
    Limits,
    Network,
    RateLimiter,
    Refusal,
    check_request,
    format_bytes,
    parse_config,
    source_allowed,
)

# Hello + authentication must finish within this, whatever --timeout says: it bounds how long a
# silent or slow-loris connection holds one of the --max-connections slots.
HANDSHAKE_TIMEOUT_S = 3.0
# Under pressure (more than half of the handshake slots taken) a handshake gets only this long: an
# honest one takes milliseconds, a slow-loris one is dropped three times sooner.
HANDSHAKE_PRESSED_S = 1.0
# How often the accept loop looks for handshakes over their (load-dependent) deadline, while any
# is open. Otherwise it sleeps until a connection, a signal, the end of the run (its pidfd) or the
# run's time budget: a serve that woke every 0.1 s during a run took 1.9 % of a Soft-RoCE guest's
# one emulated CPU (1.9 ms of Python a wake under TCG), the CPU its engine measures on.
SWEEP_S = 0.1
# After "welcome" the client starts its engine, which sends the run's config: allow for a slow start.
CONFIG_TIMEOUT_S = 10.0
MAX_CONFIG_FRAME = 64 * 1024
MAX_MESSAGE = 1000  # characters of a refusal (frame and log line)
SERVICES = ["engine", "doctor", "capture"]  # capture: capture_peer.py
# A run is stopped when it outlives its time budget (--max-duration) by more than this plus
# 3 x --timeout: an engine that ignores its own deadlines must not hold the host forever.
RUN_GRACE_S = 30.0
# A client that arrives while the previous run's engine is still exiting waits this long before it
# is told "busy" (back-to-back runs from a suite or a matrix must not trip over each other).
BUSY_GRACE_S = 1.0
# Refusal log lines per second before they are counted instead of written (a flood stays one line).
REFUSAL_LOG_RATE = 20


def add_arguments(srv: argparse.ArgumentParser) -> None:
    """serve's options beyond --bind/--port/--device/--timeout (cli.py defines those)."""
    srv.add_argument("--preload", metavar="rsocket|PATH", default=None,
                     help="start every engine under this LD_PRELOAD library (`rsocket`: librdmacm's librspreload.so): "
                          "the peer of `fabscope run --backend tcp --preload rsocket`; run a second serve on another "
                          "--port for plain runs")
    sec = srv.add_argument_group("who may connect")
    sec.add_argument("--key-file", metavar="FILE", default=None,
                     help="shared key clients must prove they hold (HMAC-SHA256 challenge-response); required "
                          f"unless --bind is loopback. Make one: `{auth.MAKE_KEY}`")
    sec.add_argument("--insecure-no-auth", action="store_true",
                     help="listen off loopback without a key: anyone who reaches the port can run measurements")
    sec.add_argument("--allow", metavar="CIDR[,CIDR...]", type=argtypes.cidr_list, default=None,
                     help="accept connections only from these networks (default: any)")
    sec.add_argument("--max-connections", metavar="N", type=argtypes.int_range(1, 4096), default=Limits.max_connections,
                     help="unauthenticated connections (in their handshake) at once; when full, a new one takes the "
                          f"oldest one's slot (default {Limits.max_connections})")
    sec.add_argument("--max-connections-per-source", metavar="N", type=argtypes.int_range(1, 4096),
                     default=Limits.max_connections_per_source,
                     help="unauthenticated connections at once from one address; when full, its oldest gives way "
                          f"(default {Limits.max_connections_per_source})")
    lim = srv.add_argument_group("what a client may ask")
    lim.add_argument("--max-size", metavar="SIZE", type=argtypes.byte_size(1, 1 << 40), default=Limits.max_size,
                     help=f"largest message size (default {format_bytes(Limits.max_size)})")
    lim.add_argument("--max-memory", metavar="SIZE", type=argtypes.byte_size(1 << 20, 1 << 50), default=Limits.max_memory,
                     help="buffers and samples of one run: 2 x the largest size + 8 bytes per latency sample "
                          f"(default {format_bytes(Limits.max_memory)})")
    lim.add_argument("--max-duration", metavar="S", type=argtypes.finite_float(1, 7 * 86400, unit="s"),
                     default=Limits.max_duration_s,
                     help="seconds one run may take: sizes x (--duration + --warmup-time); a run that outlives "
                          f"it by far is stopped (default {Limits.max_duration_s:g})")
    lim.add_argument("--max-iters", metavar="N", type=argtypes.int_range(1, 10**9), default=Limits.max_iters,
                     help=f"largest --iters / --warmup per size (default {Limits.max_iters})")
    lim.add_argument("--max-runs-per-minute", metavar="N", type=argtypes.int_range(1, 10**6), default=Limits.max_runs_per_minute,
                     help=f"runs per minute from one client address (default {Limits.max_runs_per_minute})")
    srv.add_argument("--log", metavar="FILE", default=None, type=argtypes.file_to_use_or_create,
                     help="append the JSON log lines (one per run and per refusal) to FILE instead of stderr")


# ---- start-time checks: everything that can be wrong is exit 2 before serve listens ----------


def _is_loopback(bind: str) -> bool:
    """A loopback address (127/8, ::1) or `localhost`; any other name counts as reachable from the
    network (no DNS lookup decides whether a key is needed)."""
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def check_engine_args(engine_args: Sequence[str]) -> None:
    """The engine options serve passes to every run, checked by the engine itself. --device names a
    device of whichever backend a client asks for, so it is valid when any backend here knows it
    (the tcp netdevs, an RDMA device, a UCX or libfabric device)."""
    try:
        validate_args(engine_args)
        return
    except FabscopeError as first:
        device = engine_option(engine_args, "device")
        if not device or first.exit_code != EXIT_USAGE:  # '' is refused as it is, by every backend
            raise
        from .devices import discover

        rdma = [d.name for d in discover().rdma_devices]
        if all(name in rdma for name in device.split(",")):
            return  # one RDMA device, or several for verbs (its queue pairs spread over them)
        for name in backends():
            if name in ("tcp", "verbs"):
                continue
            try:
                validate_args([*engine_args, f"--backend={name}"])
                return
            except FabscopeError:
                continue
        raise FabscopeError(
            f"serve --device {argtypes.shown(device)}: no backend here knows that device. {first.message}; "
            f"RDMA devices: {', '.join(rdma) or 'none'}",
            EXIT_USAGE,
        ) from first


def check_auth(bind: str, port: int, key_file: str | None, insecure: bool) -> auth.Key | None:
    if key_file and insecure:
        raise FabscopeError("serve: --key-file and --insecure-no-auth contradict each other; give one", EXIT_USAGE)
    if key_file:
        return auth.load_key(key_file)
    if not insecure and not _is_loopback(bind):
        raise FabscopeError(
            f"serve --bind {bind} would let anyone who reaches port {port} run measurements on this host. Give it "
            f"a shared key: `{auth.MAKE_KEY.replace('KEYFILE', '/etc/fabscope/key')}`, copy the file to the client "
            "hosts, and pass --key-file /etc/fabscope/key to serve and to `fabscope run --peer`. To listen without "
            "a key anyway, say --insecure-no-auth",
            EXIT_USAGE,
        )
    return None


@dataclass
class ServeConfig:
    bind: str
    port: int
    engine_args: list[str]
    key: auth.Key | None
    allow: list[Network] | None
    limits: Limits
    timeout_s: float = 10.0
    log_path: str | None = None
    max_runs: int | None = None
    engine_env: dict[str, str] | None = None  # --preload: the engines' environment


def _check_log_path(path: str) -> None:
    """--log must be appendable; checked without creating it (a check has no side effects)."""
    target = Path(path)
    try:
        where = target if target.exists() else target.parent
        if target.exists() and not target.is_file():
            why = "not a regular file"
        elif not where.is_dir() and not target.exists():
            why = f"no directory {argtypes.shown(str(where))}"
        elif not os.access(where, os.W_OK):
            why = "not writable by this user"
        else:
            return
    except OSError as exc:  # a name too long for the file system, a loop of links, ...
        why = exc.strerror or str(exc)
    raise FabscopeError(f"serve --log {argtypes.shown(path)}: {why}", EXIT_USAGE)


def config_from_args(ns: argparse.Namespace, engine_args: list[str]) -> ServeConfig:
    """serve's options, checked (exit 2 with the fix for anything wrong), before it listens."""
    key = check_auth(ns.bind, ns.port, ns.key_file, ns.insecure_no_auth)
    check_engine_args(engine_args)
    log_path = None if ns.log is None else str(ns.log)
    if log_path is not None:
        _check_log_path(log_path)
    timeout = float(engine_option(engine_args, "timeout") or 10.0)
    limits = Limits(max_size=ns.max_size, max_memory=ns.max_memory, max_duration_s=ns.max_duration,
                    max_iters=ns.max_iters, max_runs_per_minute=ns.max_runs_per_minute,
                    max_connections=ns.max_connections, max_connections_per_source=ns.max_connections_per_source)
    engine_env = None
    if getattr(ns, "preload", None):
        from . import rspreload

        library = rspreload.find_library(ns.preload)
        rspreload.check_host(None)
        engine_env = rspreload.engine_env(library)
    return ServeConfig(ns.bind, ns.port, engine_args, key, ns.allow, limits, timeout, log_path, ns.max_runs,
                       engine_env)


# ---- the log ------------------------------------------------------------------------------------


class Log:
    """JSON lines, one per event, safe to call from any thread; refusals are rate limited so a flood
    of hostile connections costs a line a second, not a line each."""

    def __init__(self, path: str | None) -> None:
        self.stream: IO[str] = open(path, "a", encoding="utf-8") if path else sys.stderr
        self.lock = threading.Lock()
        self.window = 0.0
        self.in_window = 0
        self.suppressed = 0

    def event(self, event: str, message: str, **fields: Any) -> None:
        now = time.time()
        with self.lock:
            if event == "refused":
                if now - self.window >= 1.0:
                    self.window, self.in_window = now, 0
                self.in_window += 1
                if self.in_window > REFUSAL_LOG_RATE:
                    self.suppressed += 1
                    return
            line: dict[str, Any] = {
                "time": datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(timespec="milliseconds"),
                "event": event, **fields, "message": message,
            }
            if self.suppressed:
                line["refusals_not_logged"], self.suppressed = self.suppressed, 0
            try:
                self.stream.write(json.dumps(line, default=str) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # a full disk or a closed stderr must not stop serve

    def close(self) -> None:
        if self.stream is not sys.stderr:
            self.stream.close()


# ---- the server ---------------------------------------------------------------------------------


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


def _exit_fd(pid: int) -> int | None:
    """A descriptor that becomes readable when process `pid` ends, or None without pidfds."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _drained(fd: int) -> bool:
    """Reads what a non-blocking pipe holds; False once it is empty."""
    try:
        return bool(os.read(fd, 512))
    except BlockingIOError:
        return False


def _listen(bind: str, port: int) -> socket.socket:
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


def _send_quietly(sock: socket.socket, msg: dict[str, Any], session: bytes | None = None) -> None:
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


def _peek_frame(sock: socket.socket, deadline: float, desc: str, session: bytes | None = None) -> dict[str, Any]:
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


def _consume_frame(sock: socket.socket, trailer: int = 0) -> None:
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


class Server:
    def __init__(self, cfg: ServeConfig, log: Log) -> None:
        self.cfg = cfg
        self.log = log
        self.sock = _listen(cfg.bind, cfg.port)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.run: Run | None = None
        self.finished: list[Run] = []  # ended runs that a handshake thread took off self.run
        self.runs = 0
        # Connections in their handshake, oldest first (dicts keep insertion order); authenticated
        # ones waiting for their run's config are counted apart and never evicted.
        self.pending: dict[int, Pending] = {}
        self.authenticated = 0
        self.rate = RateLimiter(cfg.limits.max_runs_per_minute)
        self.stopping = False
        # Wakes the accept loop from its select: a handshake thread that started a run (its end and
        # its budget are then waited for), and signals (signal.set_wakeup_fd).
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    # -- accept (main thread): never blocks on a client -------------------------------------------

    def _idle_locked(self) -> bool:
        """No run, or one whose process has ended (it is logged by the main thread)."""
        if self.run is not None and self.run.proc.poll() is not None:
            self.finished.append(self.run)
            self.run = None
        return self.run is None

    def busy(self) -> bool:
        with self.lock:
            return not self._idle_locked()

    def _wait_idle(self) -> None:
        give_up = time.monotonic() + BUSY_GRACE_S
        while self.busy():
            if time.monotonic() >= give_up:
                raise Refusal("another run is in progress on this fabscope serve", EXIT_PEER, "busy")
            time.sleep(0.02)

    def _refuse(self, conn: Conn, reason: str, message: str, code: int = EXIT_PEER, engine_reads: bool = False,
                session: bytes | None = None, **fields: Any) -> None:
        """Tells the client why (a frame) and logs it. `engine_reads`: the client's engine, not its
        front end, reads this frame, and an engine knows only "error" frames."""
        message = message[:MAX_MESSAGE]  # parts of it come from the client
        kind = "busy" if reason == "busy" and not engine_reads else "error"
        if reason == "busy" and engine_reads:
            message = f"busy: {message}"
        frame = {"type": kind, "code": code, "reason": reason, "message": message}
        # The client's engine reads it as the session's first frame from this side: MACed then.
        _send_quietly(conn.sock, frame, session if engine_reads else None)
        self.log.event("refused", message, client=conn.desc, reason=reason, **fields)

    def _accept_one(self) -> None:
        try:
            sock, peer = self.sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        except OSError as exc:  # EMFILE and friends: say so, breathe, keep serving
            self.log.event("error", f"accept failed: {exc.strerror or exc}")
            time.sleep(0.1)
            return
        conn = Conn(sock, str(peer[0]), int(peer[1]))
        if not source_allowed(conn.host, self.cfg.allow):
            self._refuse(conn, "allow", f"this fabscope serve does not accept connections from {conn.host} "
                                        "(not in its --allow list); ask its operator to add your network")
            return
        now = time.monotonic()
        with self.lock:
            victim = self._victim_locked(conn.host)
            if victim is not None:
                del self.pending[id(victim.conn)]
            self.pending[id(conn)] = Pending(conn, now)
        if victim is not None:
            self._evict(victim, victim.evicted or "")
        try:
            threading.Thread(target=self._handshake, args=(conn,), daemon=True).start()
        except RuntimeError as exc:  # cannot start a thread: refuse this one, keep serving
            self._release(conn)
            self._refuse(conn, "connections", f"serve is out of resources ({exc})")

    def _victim_locked(self, host: str) -> Pending | None:
        """The handshake that makes room for a new connection from `host`, if the budget is full:
        the oldest from that host when it holds --max-connections-per-source, else the oldest of
        the source holding the most slots (so a flood from a few addresses evicts its own)."""
        lim = self.cfg.limits
        mine = [p for p in self.pending.values() if p.conn.host == host]
        if len(mine) >= lim.max_connections_per_source:
            victim, option = mine[0], ("--max-connections-per-source", lim.max_connections_per_source)
        elif len(self.pending) >= lim.max_connections:
            per_host: dict[str, list[Pending]] = {}
            for p in self.pending.values():
                per_host.setdefault(p.conn.host, []).append(p)
            victim = max(per_host.values(), key=len)[0]
            option = ("--max-connections", lim.max_connections)
        else:
            return None
        victim.evicted = (f"dropped unauthenticated: a newer connection needed its handshake slot ({option[1]}, "
                          f"{option[0]} of this serve); connect and authenticate without delay, or ask the "
                          "operator to raise it")
        return victim

    def _evict(self, victim: Pending, message: str) -> None:
        """Ends a handshake from this thread: its own thread, blocked in a read, sees the end of
        the stream, and closes the socket (never closed here: the fd could be reused under it)."""
        sock = victim.conn.sock
        try:
            frame = control.encode({"type": "error", "code": EXIT_PEER, "reason": "connections",
                                    "message": message[:MAX_MESSAGE]})
            sock.send(frame, socket.MSG_DONTWAIT)
        except (OSError, ValueError):
            pass
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.log.event("refused", message, client=victim.conn.desc, reason="connections")

    def _handshake_limit(self) -> float:
        """A handshake's deadline: shorter while more than half of the slots are taken."""
        return HANDSHAKE_PRESSED_S if 2 * len(self.pending) > self.cfg.limits.max_connections else HANDSHAKE_TIMEOUT_S

    def _sweep(self) -> None:
        """Drops handshakes over their deadline, which shortens under pressure (main thread)."""
        now = time.monotonic()
        with self.lock:
            limit = self._handshake_limit()
            if limit >= HANDSHAKE_TIMEOUT_S:
                return  # no pressure: each handshake's own deadline ends it, with its own words
            late = [p for p in self.pending.values() if now - p.started > limit]
            for p in late:
                del self.pending[id(p.conn)]
                p.evicted = (f"no hello and authentication within {limit:g} s (the handshake deadline while this "
                             "serve has many connections in their handshake)")
        for p in late:
            self._evict(p, p.evicted or "")

    def _authenticated(self, conn: Conn) -> None:
        """The connection proved the key (or none is needed): it leaves the handshake budget.
        Raises OSError if it was evicted meanwhile (its socket is shut)."""
        with self.lock:
            p = self.pending.pop(id(conn), None)
            if p is None:
                raise ConnectionAbortedError("evicted from its handshake slot")
            if self.authenticated >= self.cfg.limits.max_connections:
                self.pending[id(conn)] = p  # released by the caller's _release
                raise Refusal(f"too many authenticated connections waiting ({self.cfg.limits.max_connections}, "
                              "--max-connections of this serve); try again in a few seconds", EXIT_PEER, "connections")
            self.authenticated += 1

    def _release(self, conn: Conn, authenticated: bool = False) -> None:
        with self.lock:
            if authenticated:
                self.authenticated -= 1
            else:
                self.pending.pop(id(conn), None)

    def _was_evicted(self, conn: Conn) -> bool:
        with self.lock:
            return id(conn) not in self.pending

    # -- one handshake (its own thread) -------------------------------------------------------------

    def _handshake(self, conn: Conn) -> None:
        handed_over = False
        authed = False
        hs: Handshake | None = None
        peeked = False  # the client's config frame waits unread in the socket
        try:
            with self.lock:
                deadline = time.monotonic() + self._handshake_limit()
            hs = server_handshake(conn.sock, conn.desc, self.cfg.key, deadline)
            self._authenticated(conn)
            authed = True
            if hs.service == "capture":  # beside a run, not one: it never waits for one or makes serve busy
                control.send(conn.sock, hs.welcome, max(deadline - time.monotonic(), 0.01))
                self._capture(conn, hs)
                return
            self._wait_idle()
            control.send(conn.sock, hs.welcome, max(deadline - time.monotonic(), 0.01))
            if hs.service == "engine":
                msg = _peek_frame(conn.sock, time.monotonic() + CONFIG_TIMEOUT_S, conn.desc, hs.session)
                peeked = True
                hs.options = {k: msg.get(k) for k in ("core", "backend")}
                hs.timeout_s = adopted_timeout(msg, self.cfg)
                check_request(parse_config(msg), self.cfg.limits)
            self._start(conn, hs)
            handed_over = True
        except (Refusal, FabscopeError, OSError) as exc:
            if not authed and self._was_evicted(conn):
                pass  # told why and logged by _evict; its stream was cut under this thread
            elif isinstance(exc, Refusal):
                session = hs.session if hs else None
                if peeked:
                    _consume_frame(conn.sock, auth.MAC_BYTES if session else 0)
                extra = {"key_id": hs.key_id, "options": hs.options} if hs else {}
                # After the welcome the client's engine reads the refusal; a frame that failed its
                # authentication gets an unauthenticated one, which that engine then refuses too.
                reads = peeked or exc.reason == "frame-auth"
                self._refuse(conn, exc.reason, exc.message, exc.exit_code, engine_reads=reads,
                             session=session if exc.reason != "frame-auth" else None, **extra)
                handed_over = True  # _refuse closed it
            elif isinstance(exc, FabscopeError):  # not a fabscope client, another version, silent, closed: say why
                self._refuse(conn, "protocol", exc.message, exc.exit_code)
                handed_over = True
            else:
                self.log.event("refused", f"client {conn.desc}: {exc.strerror or exc}", client=conn.desc,
                               reason="connection")
        except Exception as exc:  # a bug here must cost one connection, not the serve
            self.log.event("error", f"internal error in a handshake: {type(exc).__name__}: {exc}", client=conn.desc)
        finally:
            self._release(conn, authenticated=authed)
            if not handed_over:
                conn.sock.close()

    def _capture(self, conn: Conn, hs: Handshake) -> None:
        """`run --peer --capture`: this host's capture of the run, for as long as a run may take."""
        from .capture_peer import serve_capture

        device = engine_option(self.cfg.engine_args, "device")
        budget = self.cfg.limits.max_duration_s + RUN_GRACE_S + 3 * self.cfg.timeout_s
        self.log.event("capture", "capture requested", client=conn.desc, key_id=hs.key_id)
        serve_capture(conn.sock, conn.desc, conn.host, hs.session, device, budget,
                      lambda why: self.log.event("refused", f"capture: {why}", client=conn.desc, reason="capture"))

    def _start(self, conn: Conn, hs: Handshake) -> None:
        with self.lock:
            if not self._idle_locked():
                raise Refusal("another run is in progress on this fabscope serve", EXIT_PEER, "busy")
            self.rate.admit(conn.host)
            fd = conn.sock.fileno()
            conn.sock.setblocking(True)
            if hs.service == "doctor":
                cmd = [sys.executable, "-m", "fabscope.doctor.peer", str(fd)]
            else:
                cmd = [str(engine_path()), "--control-fd", str(fd), "--session-open", "1", *self.cfg.engine_args]
                if hs.timeout_s is not None:
                    cmd.append(f"--timeout={hs.timeout_s:g}")  # the last --timeout wins
            # A keyed session: the engine (or doctor child) gets the session key on a pipe and MACs
            # every frame after the welcome.
            key_args, key_fds = control.engine_session_args(hs.session)
            if hs.service == "doctor":
                cmd += [str(kfd) for kfd in key_fds]
            else:
                cmd[5:5] = key_args  # after --session-open 1
            err = tempfile.TemporaryFile()  # closed when the run is reaped
            try:
                proc = subprocess.Popen(cmd, pass_fds=[fd, *key_fds], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=err, env=self.cfg.engine_env if hs.service != "doctor" else None)
            except OSError:
                err.close()
                raise
            finally:
                for kfd in key_fds:
                    os.close(kfd)
            now = time.monotonic()
            budget = self.cfg.limits.max_duration_s + RUN_GRACE_S + 3 * (hs.timeout_s or self.cfg.timeout_s)
            self.run = Run(proc, conn.desc, hs.key_id, hs.service, hs.options, now, now + budget, err,
                           exit_fd=_exit_fd(proc.pid))
            self.runs += 1
        self._wake()
        self.log.event("start", f"run {self.runs} started", client=conn.desc, key_id=hs.key_id, service=hs.service,
                       pid=proc.pid, timeout_s=hs.timeout_s)
        conn.sock.close()  # the child owns the connection now

    # -- runs ---------------------------------------------------------------------------------------

    def _reap(self) -> None:
        """Logs ended runs; stops one that outlived its time budget (main thread only)."""
        with self.lock:
            self._idle_locked()
            done, self.finished = self.finished, []
            run = self.run
        if run is not None and time.monotonic() >= run.deadline:
            run.proc.kill()
            run.killed = True
            run.proc.wait()
            with self.lock:
                self._idle_locked()
                done += self.finished
                self.finished = []
        for ended in done:
            self._log_run(ended)

    def _log_run(self, run: Run) -> None:
        rc = run.proc.returncode
        run.stderr.seek(0)
        tail = run.stderr.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
        run.stderr.close()
        if run.exit_fd is not None:
            os.close(run.exit_fd)
            run.exit_fd = None
        detail = tail[-1].removeprefix("fabscope-engine: ") if tail else ""
        if run.killed:
            outcome, detail = "killed", (f"stopped after {time.monotonic() - run.started:.0f} s: over the time budget "
                                         "(--max-duration) plus grace")
        else:
            outcome = "ok" if rc == 0 else "failed"
        self.log.event("run", detail or outcome, client=run.client, key_id=run.key_id, service=run.service,
                       options=run.options, outcome=outcome, exit_code=rc,
                       duration_s=round(time.monotonic() - run.started, 3))

    def serve_forever(self) -> int:
        def stop(_sig: int, _frm: FrameType | None) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        # A signal's handler runs between bytecodes, and select() is retried after it (PEP 475):
        # the byte the signal writes here is what ends a long select.
        old_wakeup = signal.set_wakeup_fd(self._wake_w)
        try:
            return self._accept_loop()
        finally:
            signal.set_wakeup_fd(old_wakeup)

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full: the loop is woken already

    def _loop_wait(self) -> tuple[list[int], float | None]:
        """What the accept loop's select waits on besides the listening socket and the wake pipe,
        and for how long at most (None: no limit)."""
        with self.lock:
            run, pending = self.run, bool(self.pending)
        fds: list[int] = []
        waits: list[float] = []
        if pending:
            waits.append(SWEEP_S)
        if run is not None:
            waits.append(max(run.deadline - time.monotonic(), 0.0))
            if run.exit_fd is not None:
                fds.append(run.exit_fd)
            else:
                waits.append(SWEEP_S)
        return fds, min(waits) if waits else None

    def _accept_loop(self) -> int:
        while not self.stopping:
            try:
                self._reap()
                if self.cfg.max_runs is not None and self.runs >= self.cfg.max_runs and not self.busy():
                    break
                self._sweep()
                fds, wait_s = self._loop_wait()
                listening = self.sock.fileno()
                ready, _, _ = select.select([listening, self._wake_r, *fds], [], [], wait_s)
                if self._wake_r in ready:
                    while _drained(self._wake_r):
                        pass
                if listening in ready:
                    self._accept_one()
            except Exception as exc:  # serve must outlive anything a client does
                self.log.event("error", f"internal error: {type(exc).__name__}: {exc}")
                time.sleep(0.1)
        with self.lock:
            run = self.run
        if run is not None:
            deadline = time.monotonic() + 5
            while run.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if run.proc.poll() is None:
                run.proc.kill()
                run.proc.wait()
        self._reap()
        from .capture_peer import stop_all

        stop_all()
        self.sock.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        return 0


def serve(cfg: ServeConfig) -> int:
    log = Log(cfg.log_path)
    try:
        server = Server(cfg, log)
        mode = f"clients authenticate with key {cfg.key.key_id}" if cfg.key else "no authentication"
        if cfg.key is None and not _is_loopback(cfg.bind):
            print(f"fabscope serve: WARNING: --insecure-no-auth: anyone who reaches {cfg.bind}:{server.port} can run "
                  "measurements on this host", file=sys.stderr, flush=True)
        print(
            f"fabscope serve: listening on {cfg.bind}:{server.port} (pid {os.getpid()}; {mode}); "
            f"clients run `fabscope run --peer THIS_HOST:{server.port}"
            f"{' --key-file KEYFILE' if cfg.key else ''}`",
            file=sys.stderr,
            flush=True,
        )
        log.event("listening", f"listening on {cfg.bind}:{server.port}", bind=cfg.bind, port=server.port,
                  auth=auth.SCHEME if cfg.key else "none", key_id=cfg.key.key_id if cfg.key else None,
                  allow=[str(n) for n in cfg.allow] if cfg.allow else None, limits=asdict(cfg.limits))
        return server.serve_forever()
    finally:
        log.close()


def main(ns: argparse.Namespace, engine_args: list[str]) -> int:
    """cli.py's `serve`: the config its check step built (or build it now), then serve."""
    cfg = getattr(ns, "serve_config", None)
    return serve(cfg if isinstance(cfg, ServeConfig) else config_from_args(ns, engine_args))
