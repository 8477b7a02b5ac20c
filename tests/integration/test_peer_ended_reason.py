# SPDX-License-Identifier: BSD-3-Clause
"""A tcp bandwidth run whose peer ends first says why the peer ended, in the peer's own words
(issue 21: under heavy loss the client said only "the peer closed the data connection (peer
process ended)").

The peer's reason travels on the control connection, which may arrive after the data connection
has closed (loss delays one and not the other). Here that order is made certain: the control
connection runs through a relay that holds the server's frames, the client is stopped until the
server gives up on it ("no progress"), and the server's frames are released only after the client
has resumed and found its data connection gone."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

from engine_pair import engine_path
from frame_relay import shut_both

# The server's no-progress deadline: long enough that a loaded 2-CPU machine does not trip it during
# the set-up, short enough for a quick test.
SERVER_TIMEOUT_S = 3.0


def _received_on(port: int) -> int:
    """Bytes received so far by the connection whose local port is `port` (ss -ti: the kernel's own
    count for that one socket, whatever else crosses the loopback)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", "sport", "=", f":{port}"], capture_output=True,
                         text=True, timeout=10, check=False).stdout
    found = re.search(r"bytes_received:(\d+)", out)
    return int(found.group(1)) if found else 0


def _close_wait_to(port: int) -> bool:
    """Whether a connection to `port` is in CLOSE_WAIT: its peer has closed, its owner not yet."""
    out = subprocess.run(["ss", "-tnH", "state", "close-wait", "dport", "=", f":{port}"], capture_output=True,
                         text=True, timeout=10, check=False).stdout
    return bool(out.strip())


class HoldingRelay:
    """127.0.0.1:port -> target, one connection; server-to-client bytes wait while `hold` is set."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.hold = threading.Event()
        self.data_port = 0  # the server engine's data port, read from its frames
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.lsock.getsockname()[1])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _pipe(self, src: socket.socket, dst: socket.socket, holds: bool) -> None:
        seen = b""
        try:
            while chunk := src.recv(65536):
                if holds and not self.data_port:  # the server's frames: look for its data address
                    seen += chunk
                    while len(seen) >= 4 and len(seen) >= 4 + int.from_bytes(seen[:4], "big"):
                        n = int.from_bytes(seen[:4], "big")
                        address = json.loads(seen[4:4 + n]).get("address") or {}
                        self.data_port = int(address.get("port", 0))
                        seen = seen[4 + n:]
                while holds and self.hold.is_set():
                    time.sleep(0.01)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            shut_both(dst, src)

    def _run(self) -> None:
        self.lsock.settimeout(30)
        client, _ = self.lsock.accept()
        server = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        server.settimeout(None)
        client.settimeout(None)
        up = threading.Thread(target=self._pipe, args=(client, server, False), daemon=True)
        up.start()
        self._pipe(server, client, True)
        up.join(10)
        client.close()
        server.close()
        self.lsock.close()


def test_the_peer_that_ended_first_is_quoted() -> None:
    exe = str(engine_path())
    server = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--backend", "tcp", "--timeout", str(SERVER_TIMEOUT_S),
                               "--cpu", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client: subprocess.Popen[str] | None = None
    try:
        assert server.stdout is not None
        port = int(json.loads(server.stdout.readline())["port"])
        relay = HoldingRelay(port)
        client = subprocess.Popen([exe, "--peer", f"127.0.0.1:{relay.port}", "--backend", "tcp", "--timeout", "10",
                                   "--pattern", "bw", "--sizes", "64K", "--duration", "20", "--warmup", "10",
                                   "--cpu", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not relay.data_port or _received_on(relay.data_port) < 64 << 20:  # the measured stream flows
            if client.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no data flowed: {client.communicate(timeout=10)[1] if client.poll() else ''}")
            time.sleep(0.005)
        assert client.poll() is None and server.poll() is None, (client.poll(), server.poll())
        relay.hold.set()
        os.kill(client.pid, signal.SIGSTOP)
        server_rc = server.wait(timeout=20)  # the server gives up on the stopped client: "no progress"
        os.kill(client.pid, signal.SIGCONT)
        # The client finds its data connection gone before the server's reason arrives: its end of
        # that connection leaves CLOSE_WAIT (the server's FIN came while it was stopped) once it has
        # read the end and closed it.
        deadline = time.monotonic() + 10
        while _close_wait_to(relay.data_port):
            assert time.monotonic() < deadline, "the client did not close its data connection within 10 s"
            time.sleep(0.01)
        relay.hold.clear()
        _, err = client.communicate(timeout=30)
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait()
    server_err = server.stderr.read() if server.stderr else ""
    assert server_rc == 3 and f"no progress for {SERVER_TIMEOUT_S:.1f} s" in server_err, (server_rc, server_err)
    assert client.returncode == 3, err
    assert "data connection" in err, err  # what the client saw itself ...
    assert f"ended first and said why: no progress for {SERVER_TIMEOUT_S:.1f} s" in err, err  # ... and why, in the peer's words
