# SPDX-License-Identifier: BSD-3-Clause
"""After the handshake, every control frame of a keyed session is authenticated (issue 21): a relay
on the path that passes the handshake on untouched and then changes ONE byte of one later frame
ends the session, and the end is logged with its reason (serve's JSON log for a frame the server
side checks, the client's error for one the client side checks). The same relay changing nothing
leaves the run intact, so the failure is the MAC's doing and not the relay's."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from frame_relay import MAC_BYTES, FrameRelay
from serve_helpers import make_key, serve

from conftest import REPO, fabscope
from fabscope.session import auth

QUICK = ("--iters", "100", "--warmup", "10", "--sizes", "8", "--timeout", "5")


def _sockaddr_in(name_hex: str) -> tuple[str, int]:
    """libfabric's FI_SOCKADDR_IN name (struct sockaddr_in, as the engine reports it in hex)."""
    raw = bytes.fromhex(name_hex)
    return socket.inet_ntoa(raw[4:8]), int.from_bytes(raw[2:4], "big")


def _tcp_stranger(addr: str, port: int, sent: threading.Event) -> str:
    """Connects to the server's tcp data port first (as anyone on the path could), sends what is not
    the session's token and then "data" (then sets ``sent``); says what the server did with that
    connection."""
    with socket.create_connection((addr, port), timeout=5) as s:
        s.sendall(b"\x00" * auth.MAC_BYTES + b"x" * 4096)
        sent.set()
        try:
            return "closed" if s.recv(1) == b"" else "answered"
        except ConnectionResetError:
            return "closed"
        except TimeoutError:
            return "kept"


def _start(stranger: Callable[[threading.Event], None]) -> None:
    """The stranger goes first: the relay holds serve's frame (the client has not heard of the data
    address yet) until the stranger has connected and sent its bytes."""
    sent = threading.Event()
    threading.Thread(target=stranger, args=(sent,), daemon=True).start()
    assert sent.wait(15), "the stranger did not reach the server's data port within 15 s"


def _wait_for(seen: list[str]) -> None:
    deadline = time.monotonic() + 15
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)


def test_the_relays_mac_length_is_the_sessions() -> None:
    assert MAC_BYTES == auth.MAC_BYTES


def test_an_untouched_relay_leaves_the_run_intact(tmp_path: Path) -> None:
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(("127.0.0.1", srv.port), None)
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
        relay = FrameRelay(("127.0.0.1", srv.port), tamper)
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
    seen: list[str] = []

    def stranger(body: dict[str, Any]) -> None:
        address = body.get("address") or {}
        if "port" in address:
            _start(lambda sent: seen.append(_tcp_stranger(str(address["addr"]), int(address["port"]), sent)))

    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(("127.0.0.1", srv.port), on_server_frame=stranger)
        out = fabscope("run", "--peer", f"127.0.0.1:{relay.port}", "--key-file", str(key), "--backend", "tcp",
                       *QUICK, "--format", "json", "--no-store", timeout=60)
    assert out.returncode == 0, out.stderr
    _wait_for(seen)
    assert seen == ["closed"]
    assert json.loads(out.stdout.splitlines()[0])["transport"]["peer"]["strangers_rejected"] == 1


def test_a_stranger_on_the_ofi_msg_port_is_rejected(tmp_path: Path, engine: Path) -> None:
    """ofi msg: a libfabric connection request to the server's endpoint whose data is not the session's
    token (fs-ofi-stranger, a real fi_connect) is rejected (FI_ECONNREFUSED), counted, and the run
    goes on with the real client's request."""
    tool = next((p for p in (engine.parent / "fs-ofi-stranger", REPO / "build" / "engine" / "fs-ofi-stranger")
                 if p.exists()), None)
    assert tool, "fs-ofi-stranger is built with the engine's tests (engine/CMakeLists.txt)"
    key = make_key(tmp_path / "key")
    strangers: list[subprocess.Popen[str]] = []

    def stranger(body: dict[str, Any]) -> None:
        name = (body.get("address") or {}).get("name")
        if body.get("type") == "ready" and name:
            addr, port = _sockaddr_in(str(name))
            # the stranger's request is out before the client hears of the address; the server's
            # answer to it is read after the run
            proc = subprocess.Popen([str(tool), "tcp", addr, str(port)], stdout=subprocess.PIPE, text=True)
            strangers.append(proc)
            assert proc.stdout and proc.stdout.readline().strip() == "sent"

    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(("127.0.0.1", srv.port), on_server_frame=stranger)
        out = fabscope("run", "--peer", f"127.0.0.1:{relay.port}", "--key-file", str(key), "--backend", "ofi",
                       "--provider", "tcp", "--ofi-ep", "msg", *QUICK, "--format", "json", "--no-store", timeout=60)
    assert out.returncode == 0, out.stderr
    assert len(strangers) == 1
    said, _ = strangers[0].communicate(timeout=30)
    # never connected: the tcp provider's reject reaches the stranger as a refusal or, when the
    # server's close overtakes it, as a reset
    assert said.split("\n", 1)[0] in ("rejected", "error Connection reset by peer"), said
    peer = json.loads(out.stdout.splitlines()[0])["transport"]["peer"]
    # rejected by the engine's check, not refused for want of a listener
    assert peer["session_bound"] is True and peer["strangers_rejected"] == 1, peer


def test_a_changed_doctor_answer_is_refused(tmp_path: Path) -> None:
    """`doctor --peer`: the serve's one answer after the welcome is MACed too."""
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        relay = FrameRelay(("127.0.0.1", srv.port), ("s", 2))
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
