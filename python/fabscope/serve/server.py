# SPDX-License-Identifier: BSD-3-Clause
"""serve's accept loop: handshakes in threads with their budget, one run at a time as an engine
(or a doctor or capture child) handed the authenticated socket, the busy answer, the log line of
each run."""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from types import FrameType
from typing import Any

from ..errors import EXIT_PEER, FabscopeError
from ..launch.engine import engine_option, engine_path
from ..session import auth, control
from .config import ServeConfig, config_from_args, is_loopback
from .conn import (
    CONFIG_TIMEOUT_S,
    MAX_MESSAGE,
    Conn,
    Handshake,
    Pending,
    Run,
    adopted_timeout,
    consume_frame,
    drained,
    exit_fd,
    listen_socket,
    peek_frame,
    send_quietly,
    server_handshake,
)
from .log import Log
from .policy import (
    RateLimiter,
    Refusal,
    check_request,
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
# A run is stopped when it outlives its time budget (--max-duration) by more than this plus
# 3 x --timeout: an engine that ignores its own deadlines must not hold the host forever.
RUN_GRACE_S = 30.0
# A client that arrives while the previous run's engine is still exiting waits this long before it
# is told "busy" (back-to-back runs from a suite or a matrix must not trip over each other).
BUSY_GRACE_S = 1.0


class Server:
    def __init__(self, cfg: ServeConfig, log: Log) -> None:
        self.cfg = cfg
        self.log = log
        self.sock = listen_socket(cfg.bind, cfg.port)
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
        send_quietly(conn.sock, frame, session if engine_reads else None)
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
                msg = peek_frame(conn.sock, time.monotonic() + CONFIG_TIMEOUT_S, conn.desc, hs.session)
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
                    consume_frame(conn.sock, auth.MAC_BYTES if session else 0)
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
        from ..capture.peer import serve_capture

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
                           exit_fd=exit_fd(proc.pid))
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
                    while drained(self._wake_r):
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
        from ..capture.peer import stop_all

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
        if cfg.key is None and not is_loopback(cfg.bind):
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
