"""`fabscope serve`: accepts clients, one run at a time. A second client gets an immediate "busy"
frame instead of a wait. Each run is an engine process handed the accepted socket."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType

from . import control
from .engine import engine_path
from .errors import EXIT_PEER, EXIT_USAGE, FabscopeError

HELLO_TIMEOUT_S = 10.0


def _listen(bind: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, port))
    except OSError as exc:
        sock.close()
        hint = (
            "another program holds the port; pick another with --port"
            if exc.errno == 98
            else "no interface here has that address; see `ip -brief addr`"
        )
        raise FabscopeError(f"cannot listen on {bind}:{port}: {exc.strerror} ({hint})", EXIT_USAGE) from exc
    sock.listen(8)
    return sock


class Server:
    def __init__(self, bind: str, port: int, engine_args: Sequence[str], max_runs: int | None = None) -> None:
        self.sock = _listen(bind, port)
        self.port = self.sock.getsockname()[1]
        self.engine_args = list(engine_args)
        self.max_runs = max_runs
        self.runs = 0
        self.child: subprocess.Popen[bytes] | None = None
        self.stopping = False

    def busy(self) -> bool:
        if self.child is not None and self.child.poll() is not None:
            self.child = None
        return self.child is not None

    def _refuse_busy(self, conn: socket.socket) -> None:
        try:
            control.send(
                conn,
                {"type": "busy", "message": "another run is in progress on this fabscope serve"},
                2.0,
            )
        except OSError:
            pass
        conn.close()

    def _handle(self, conn: socket.socket, addr: str) -> None:
        try:
            control.send(conn, control.server_hello(["engine", "doctor"]), HELLO_TIMEOUT_S)
            hello = control.recv(conn, HELLO_TIMEOUT_S, f"client {addr}")
            if hello.get("type") != "hello":
                raise FabscopeError(f"client {addr} did not say hello", EXIT_PEER)
            control.check_proto(hello, f"client {addr}")
            if hello.get("service") not in ("engine", "doctor"):
                raise FabscopeError(f"service {hello.get('service')!r} is not offered here", EXIT_PEER)
        except FabscopeError as exc:
            print(f"fabscope serve: {exc.message}", file=sys.stderr)
            try:
                control.send(conn, {"type": "error", "code": exc.exit_code, "message": exc.message}, 2.0)
            except OSError:
                pass
            conn.close()
            return
        except OSError as exc:
            print(f"fabscope serve: client {addr}: {exc}", file=sys.stderr)
            conn.close()
            return
        fd = conn.fileno()
        if hello.get("service") == "doctor":
            # A child like an engine run: this host stays "busy" while its checks run.
            cmd = [sys.executable, "-m", "fabscope.doctor.peer", str(fd)]
        else:
            cmd = [str(engine_path()), "--control-fd", str(fd), "--session-open", "1", *self.engine_args]
        self.child = subprocess.Popen(cmd, pass_fds=[fd], stdout=subprocess.DEVNULL)
        conn.close()  # the engine owns the connection now
        self.runs += 1
        print(f"fabscope serve: run {self.runs} for {addr}", file=sys.stderr, flush=True)

    def serve_forever(self) -> int:
        def stop(_sig: int, _frm: FrameType | None) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while not self.stopping:
            if self.max_runs is not None and self.runs >= self.max_runs and not self.busy():
                break
            ready, _, _ = select.select([self.sock], [], [], 0.2)
            if not ready:
                continue
            conn, peer = self.sock.accept()
            addr = f"{peer[0]}:{peer[1]}"
            if self.busy():
                self._refuse_busy(conn)
            else:
                self._handle(conn, addr)
        if self.child is not None and self.child.poll() is None:
            deadline = time.monotonic() + 5
            while self.child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.child.poll() is None:
                self.child.kill()
        self.sock.close()
        return 0


def serve(bind: str, port: int, engine_args: Sequence[str], max_runs: int | None = None) -> int:
    server = Server(bind, port, engine_args, max_runs)
    print(
        f"fabscope serve: listening on {bind}:{server.port} (pid {os.getpid()}); "
        f"clients run `fabscope run --peer THIS_HOST:{server.port}`",
        file=sys.stderr,
        flush=True,
    )
    return server.serve_forever()
