"""After the handshake, every control frame of a keyed session is authenticated (issue 21): a relay
on the path that passes the handshake on untouched and then changes ONE byte of one later frame
ends the session, and the end is logged with its reason (serve's JSON log for a frame the server
side checks, the client's error for one the client side checks). The same relay changing nothing
leaves the run intact, so the failure is the MAC's doing and not the relay's."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest
from serve_helpers import make_key, serve, shut_both

from conftest import fabscope
from fabscope import auth

QUICK = ("--iters", "100", "--warmup", "10", "--sizes", "8", "--timeout", "5")


def _exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


class FrameRelay:
    """Client <-> serve, frame by frame. Frames before the welcome (the client's hello; the
    serve's hello and welcome) have no MAC; every later one has 32 bytes of MAC after its body.
    `tamper` = (direction 'c' or 's', index of the frame in that direction): a digit in that
    frame's body is changed (the JSON stays valid: only the MAC can tell)."""

    def __init__(self, target_port: int, tamper: tuple[str, int] | None, rogue: bool = False) -> None:
        self.target_port = target_port
        self.tamper = tamper
        self.tampered = threading.Event()
        # rogue: on seeing the server's data address go by, connect to it first (as anyone on the
        # path could) and record what the server did with that connection.
        self.rogue = rogue
        self.rogue_result: list[str] = []
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
                mac = _exact(src, auth.MAC_BYTES) if index >= plain else b""
                if self.rogue and direction == "s" and index >= plain:
                    address = json.loads(bytes(body)).get("address") or {}
                    if "port" in address:
                        threading.Thread(target=self._rogue, args=(str(address["addr"]), int(address["port"])),
                                         daemon=True).start()
                        time.sleep(0.2)  # the stranger is on the data port before the client hears of it
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

    def _rogue(self, addr: str, port: int) -> None:
        with socket.create_connection((addr, port), timeout=5) as s:
            s.sendall(b"\x00" * auth.MAC_BYTES + b"x" * 4096)  # not the session's token, then "data"
            try:
                self.rogue_result.append("closed" if s.recv(1) == b"" else "answered")
            except ConnectionResetError:
                self.rogue_result.append("closed")
            except TimeoutError:
                self.rogue_result.append("kept")

    def _run(self) -> None:
        self.lsock.settimeout(60)
        client, _ = self.lsock.accept()
        server = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        for s in (client, server):
            s.settimeout(None)
        up = threading.Thread(target=self._pipe, args=(client, server, "c"), daemon=True)
        up.start()
        self._pipe(server, client, "s")
        up.join(30)
        client.close()
        server.close()
        self.lsock.close()


def test_an_untouched_relay_leaves_the_run_intact(tmp_path: Path) -> None:
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(srv.port, None)
        out = fabscope("run", "--peer", f"127.0.0.1:{relay.port}", "--key-file", str(key), *QUICK, timeout=60)
        assert out.returncode == 0, out.stderr


@pytest.mark.parametrize(("tamper", "who"), [
    (("c", 1), "serve"),   # the run's configuration, checked by serve before any engine starts
    (("c", 3), "server engine"),  # a frame in the middle of the run, checked by the server's engine
    (("s", 3), "client engine"),  # one from the server's engine, checked by the client's engine
])
def test_one_changed_byte_after_the_handshake_ends_the_session_with_a_logged_reason(
        tmp_path: Path, tamper: tuple[str, int], who: str) -> None:
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(srv.port, tamper)
        out = fabscope("run", "--peer", f"127.0.0.1:{relay.port}", "--key-file", str(key), *QUICK, timeout=60)
        assert relay.tampered.is_set(), "the relay never saw that frame"
        assert out.returncode == 3, (out.returncode, out.stderr)
        assert "Traceback" not in out.stderr
        if who == "serve":
            refused = srv.wait_event("refused")
            assert any(e["reason"] == "frame-auth" and "failed its authentication" in e["message"]
                       for e in refused), refused
        elif who == "server engine":
            runs = srv.wait_event("run")
            assert runs[0]["outcome"] == "failed" and "failed its authentication" in runs[0]["message"], runs
        else:
            assert "failed its authentication" in out.stderr, out.stderr
        assert srv.proc.poll() is None


def test_a_stranger_on_the_tcp_data_port_is_not_taken_for_the_client(tmp_path: Path) -> None:
    """The data connection of a keyed session starts with a token only the session key makes: a
    stranger that reaches the server's data port first is closed, and the run goes on with the
    real client's connection (before, the server took the first connection to arrive)."""
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(srv.port, None, rogue=True)
        out = fabscope("run", "--peer", f"127.0.0.1:{relay.port}", "--key-file", str(key), "--backend", "tcp",
                       *QUICK, timeout=60)
        assert out.returncode == 0, out.stderr
        deadline = time.monotonic() + 10
        while not relay.rogue_result and time.monotonic() < deadline:
            time.sleep(0.05)
        assert relay.rogue_result == ["closed"], relay.rogue_result


def test_a_changed_doctor_answer_is_refused(tmp_path: Path) -> None:
    """`doctor --peer`: the serve's one answer after the welcome is MACed too."""
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(srv.port, ("s", 2))
        out = fabscope("doctor", "--peer", f"127.0.0.1:{relay.port}", "--key-file", str(key), timeout=120)
        assert relay.tampered.is_set(), "the relay never saw the answer"
        assert out.returncode == 3 and "failed its authentication" in out.stderr, (out.returncode, out.stderr)
        assert "Traceback" not in out.stderr


@pytest.mark.parametrize("backend", [("--backend", "tcp"), ("--backend", "ofi", "--provider", "tcp", "--ofi-ep", "msg")],
                         ids=["tcp", "ofi-msg"])
def test_the_data_connection_is_bound_to_a_keyed_session(tmp_path: Path, backend: tuple[str, ...]) -> None:
    """Where fabscope owns the data connection (tcp and rsocket streams, ofi msg endpoints) it carries
    the session's token: the run works only if the server found it (a wrong or missing token is
    refused: the stranger test above), and both ends' records say the connection was bound."""
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        out = fabscope("run", "--peer", srv.addr, "--key-file", str(key), *backend, *QUICK, "--format", "json",
                       "--no-store", timeout=60)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout.splitlines()[0])
    sides = record["transport"]["local"], record["transport"]["peer"]
    assert [side.get("session_bound") for side in sides] == [True, True], sides
