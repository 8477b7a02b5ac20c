# SPDX-License-Identifier: BSD-3-Clause
"""`run --peer HOST --capture FILE.pcap`: the server's half of the capture, over serve's "capture"
service (a connection of its own beside the run's engine session, authenticated the same way).

The client asks before its engine starts; serve starts tcpdump (tcpdump.Capture) on the netdev its
--device names, else the one the client's address is routed through, and says "capturing" once
tcpdump listens (or why it cannot: exit 2, nothing measured). A client sees this host's packets, so
serve keeps headers only (the snap length is capped at tcpdump.CM_SNAPLEN) and, for the socket
backends, only TCP to and from the client's address. After the run the client says "stop";
serve stops tcpdump, decodes the file (summary.finish), and sends the summary, then the file in
chunks when it is at most MAX_TRANSFER bytes. The client writes it beside its own as
FILE.server.pcap; serve keeps nothing (its temporary directory goes with the session).
"""

from __future__ import annotations

import base64
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EXIT_PEER, EXIT_USAGE, FabscopeError
from ..session import control
from ..session.auth import Key

SERVICE = "capture"
# Bytes of a server's capture file sent back (a 352-byte snap length x the default 200000-packet cap
# is ~74 MB); a larger file's summary still comes back, and the answer says the file did not.
MAX_TRANSFER = 96 << 20
_CHUNK = 96 << 10  # raw bytes per frame: base64 of it stays below control.MAX_FRAME
_START_S = 60.0  # tcpdump and the counter snapshot on a slow (emulated) host
_SUMMARY_S = 600.0  # tshark on the server; the client waits this long for the answer


@dataclass
class _Channel:
    """Frames after the welcome; with a session key each carries its MAC and a per-direction count."""

    sock: socket.socket
    desc: str
    session: bytes | None
    mine: str  # "c" or "s"
    sent: int = 0
    got: int = 0

    def send(self, msg: dict[str, Any], timeout_s: float = 30.0) -> None:
        if self.session is None:
            control.send(self.sock, msg, timeout_s)
        else:
            control.send_sealed(self.sock, msg, timeout_s, self.session, self.mine, self.sent)
        self.sent += 1

    def recv(self, timeout_s: float) -> dict[str, Any]:
        theirs = "s" if self.mine == "c" else "c"
        msg = control.recv(self.sock, timeout_s, self.desc,
                           (self.session, theirs, self.got) if self.session is not None else None)
        self.got += 1
        return msg


# ---- client -------------------------------------------------------------------------------------


@dataclass
class PeerCapture:
    chan: _Channel
    netdev: str
    extra: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def start(peer: str, key: Key | None, backend: str, preload: bool, snaplen: int, max_packets: int) -> PeerCapture:
        """Asks the peer's serve to capture; returns once its tcpdump listens. FabscopeError (exit 2
        when the peer cannot capture, 3 when it cannot be reached) before anything is measured."""
        sock, session = control.open_session_keyed(peer, SERVICE, key, 10.0)
        chan = _Channel(sock, peer, session, "c")
        try:
            chan.send({"type": "capture", "backend": backend, "preload": preload, "snaplen": snaplen,
                       "max_packets": max_packets})
            reply = chan.recv(_START_S)
        except (FabscopeError, OSError) as exc:
            sock.close()
            raise FabscopeError(f"--capture on the peer {peer}: {exc}", EXIT_PEER) from exc
        if reply.get("type") != "capturing":
            sock.close()
            code = reply.get("code")
            raise FabscopeError(f"--capture on the peer {peer}: {str(reply.get('message'))[:600]}",
                                code if code in (EXIT_USAGE, EXIT_PEER) else EXIT_PEER)
        return PeerCapture(chan, str(reply.get("netdev")))

    def finish(self, local_file: Path) -> dict[str, Any]:
        """Stops the peer's capture; its summary (with "file": FILE.server.pcap when the file came
        back), or {"error": why} when it did not answer."""
        target = local_file.with_name(local_file.name.removesuffix(".pcap") + ".server.pcap")
        try:
            with self.chan.sock:
                self.chan.send({"type": "stop"})
                info = self.chan.recv(_SUMMARY_S)
                if info.get("type") != "captured":
                    return {"error": f"the peer did not send its capture: {str(info.get('message'))[:600]}"}
                result = info.get("capture")
                if not isinstance(result, dict):
                    return {"error": "the peer sent a capture answer without its summary"}
                if info.get("chunks"):
                    with open(target, "wb") as out:
                        for _ in range(int(info["chunks"])):
                            part = self.chan.recv(60.0)
                            out.write(base64.b64decode(str(part.get("data", ""))))
                    result["server_file"] = result.get("file")
                    result["file"] = str(target)
                else:  # the peer's temporary file is gone with its session
                    result["server_file"], result["file"] = result.get("file"), None
                return result
        except (FabscopeError, OSError, ValueError) as exc:
            return {"error": f"the peer's capture was lost: {exc}"}

    def abort(self) -> None:
        self.chan.sock.close()


# ---- server (serve's handshake thread) ----------------------------------------------------------

_one_at_a_time = threading.Lock()
_running: list[Any] = []  # the capture in progress (tcpdump.Capture), for stop_all


def stop_all() -> None:
    """serve is ending: no tcpdump of its may outlive it (its session thread dies with it)."""
    for cap in list(_running):
        cap.stop()
        shutil.rmtree(cap.path.parent, ignore_errors=True)


def serve_capture(sock: socket.socket, desc: str, client_host: str, session: bytes | None, device: str | None,
                  budget_s: float, on_error: Callable[[str], None]) -> None:
    """The server half, in the thread that authenticated the connection. One capture at a time per
    serve; tcpdump never outlives the session (``budget_s`` bounds how long it may run)."""
    from . import summary, tcpdump

    chan = _Channel(sock, desc, session, "s")
    try:
        ask = chan.recv(10.0)
    except (FabscopeError, OSError):
        return
    if ask.get("type") != "capture":
        return
    if not _one_at_a_time.acquire(blocking=False):
        chan.send({"type": "error", "code": EXIT_PEER, "message": "another capture is in progress on this serve"})
        return
    cap = None
    workdir = Path("/nonexistent")
    try:
        workdir = Path(tempfile.mkdtemp(prefix="fabscope-capture-"))
        # Headers (and whole CM MADs), never payloads: the client sees this host's packets
        snaplen = min(_bounded(ask.get("snaplen"), 64, 65535, tcpdump.DEFAULT_SNAPLEN), tcpdump.CM_SNAPLEN)
        max_packets = _bounded(ask.get("max_packets"), 1, 10**8, tcpdump.DEFAULT_MAX_PACKETS)
        try:
            netdev = tcpdump.netdev_for(device) or tcpdump.route_netdev(client_host)
            if not netdev:
                raise FabscopeError(f"cannot tell which netdev reaches {client_host}; start serve with --device",
                                    EXIT_USAGE)
            bpf = tcpdump.capture_filter(str(ask.get("backend")), bool(ask.get("preload")))
            if bpf == "tcp":  # a socket backend's connections: the client's, not every TCP stream of this host
                bpf = f"tcp and host {client_host}"
            cap = tcpdump.Capture.start(workdir / "server.pcap", netdev, bpf, snaplen, max_packets)
            _running.append(cap)
        except FabscopeError as exc:
            why = str(exc).replace(f"--capture {workdir / 'server.pcap'}: ", "")  # its temporary file: noise there
            chan.send({"type": "error", "code": exc.exit_code, "message": f"this serve cannot capture: {why}"})
            on_error(str(exc))
            return
        chan.send({"type": "capturing", "netdev": netdev, "filter": bpf})
        try:
            stop = chan.recv(budget_s)
        except (FabscopeError, OSError):
            stop = {}
        _running.remove(cap)
        info = summary.finish(cap)
        cap = None
        if stop.get("type") != "stop":
            return  # the client went away: nothing to send it
        size = (workdir / "server.pcap").stat().st_size if (workdir / "server.pcap").exists() else 0
        chunks = -(-size // _CHUNK) if 0 < size <= MAX_TRANSFER else 0
        if size > MAX_TRANSFER:
            info["transfer"] = f"not sent: {size} bytes, over the {MAX_TRANSFER} bytes a serve sends back"
        chan.send({"type": "captured", "capture": info, "chunks": chunks}, 60.0)
        if chunks:
            with open(workdir / "server.pcap", "rb") as f:
                for _ in range(chunks):
                    chan.send({"type": "chunk", "data": base64.b64encode(f.read(_CHUNK)).decode()}, 60.0)
    except (FabscopeError, OSError) as exc:
        on_error(str(exc))
    finally:
        if cap is not None:
            if cap in _running:
                _running.remove(cap)
            cap.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        _one_at_a_time.release()


def _bounded(value: Any, low: int, high: int, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high else default
