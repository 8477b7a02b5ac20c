# SPDX-License-Identifier: BSD-3-Clause
"""A relay between `fabscope run` and a keyed `fabscope serve`, frame by frame, as anyone on the
control path could be. Standard library only (plus the MAC length), so the Soft-RoCE guests run
the same file (tests/softroce/cm_stranger.py imports it from the repository mounted in the client guest).

Frames before the welcome (the client's hello; the serve's hello and welcome) have no MAC; every
later one has 32 bytes of MAC after its body.
- `tamper` = (direction 'c' or 's', index of the frame in that direction): a digit in that frame's
  body is changed (the JSON stays valid: only the MAC can tell).
- `on_server_frame`: called with each MACed frame from serve, parsed, BEFORE it is passed on (the
  client hears of it only when the call returns): a stranger started there reaches the server's
  data port before the real client can."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any

MAC_BYTES = 32  # fabscope.session.auth.MAC_BYTES (HMAC-SHA256); tests/integration/test_serve_session_mac.py checks it


def _exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def shut_both(*socks: socket.socket) -> None:
    """Ends a relayed stream in both directions (for the relays the serve tests put on the path)."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class FrameRelay:
    def __init__(self, target: tuple[str, int], tamper: tuple[str, int] | None = None,
                 on_server_frame: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.target = target
        self.tamper = tamper
        self.tampered = threading.Event()
        self.on_server_frame = on_server_frame
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.lsock.getsockname()[1])
        threading.Thread(target=self._run, daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, direction: str) -> None:
        plain = 1 if direction == "c" else 2  # frames before the MACs start
        index = 0
        try:
            while True:
                head = _exact(src, 4)
                body = bytearray(_exact(src, int.from_bytes(head, "big")))
                mac = _exact(src, MAC_BYTES) if index >= plain else b""
                if self.on_server_frame and direction == "s" and index >= plain:
                    self.on_server_frame(json.loads(bytes(body)))
                if self.tamper == (direction, index):
                    at = next(i for i, b in enumerate(body) if chr(b).isdigit())
                    body[at] = ord("1") if body[at] != ord("1") else ord("2")
                    self.tampered.set()
                dst.sendall(head + bytes(body) + mac)
                index += 1
        except (EOFError, OSError, StopIteration):
            pass
        finally:
            shut_both(dst, src)

    def _run(self) -> None:
        self.lsock.settimeout(120)
        client, _ = self.lsock.accept()
        server = socket.create_connection(self.target, timeout=10)
        for s in (client, server):
            s.settimeout(None)
        up = threading.Thread(target=self._pipe, args=(client, server, "c"), daemon=True)
        up.start()
        self._pipe(server, client, "s")
        up.join(30)
        client.close()
        server.close()
        self.lsock.close()
