# SPDX-License-Identifier: BSD-3-Clause
"""The control protocol's framing in Python (the engine's ctl.c is the reference): a 4-byte
big-endian length, then one JSON object with a string "type"; a size cap; a deadline on reads."""

from __future__ import annotations

import hmac
import json
import os
import socket
import struct
import time
from typing import Any

from .. import __version__, hostport
from ..argtypes import shown
from ..errors import EXIT_PEER, EXIT_USAGE, FabscopeError
from . import auth

# 2: `fabscope serve` authenticates (auth.py) and each size's counters follow both sides' phase_done
PROTO_VERSION = 2
MAX_FRAME = 256 * 1024
DEFAULT_PORT = 18515


def encode(msg: dict[str, Any]) -> bytes:
    body = json.dumps(msg, separators=(",", ":")).encode()
    if not body or len(body) > MAX_FRAME:
        raise ValueError(f"control message of {len(body)} bytes exceeds the {MAX_FRAME} cap")
    return struct.pack(">I", len(body)) + body


def send(sock: socket.socket, msg: dict[str, Any], timeout_s: float) -> None:
    sock.settimeout(timeout_s)
    sock.sendall(encode(msg))


def _read_exact(sock: socket.socket, n: int, deadline: float, peer: str) -> bytes:
    chunks: list[bytes] = []
    while n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FabscopeError(f"no answer from {peer} in time (peer stalled or link cut)", EXIT_PEER)
        sock.settimeout(left)
        try:
            chunk = sock.recv(n)
        except TimeoutError:
            continue
        if not chunk:
            raise FabscopeError(f"{peer} closed the connection", EXIT_PEER)
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def send_sealed(sock: socket.socket, msg: dict[str, Any], timeout_s: float, session: bytes, direction: str,
                seq: int) -> None:
    """send() of a frame after the welcome of a keyed session: its MAC follows its body
    (auth.frame_mac; `direction` 'c' or 's', `seq` this side's count of frames sent)."""
    data = encode(msg)
    sock.settimeout(timeout_s)
    sock.sendall(data + auth.frame_mac(session, direction, seq, data[4:]))


def recv(sock: socket.socket, timeout_s: float, peer: str = "the peer",
         sealed: tuple[bytes, str, int] | None = None) -> dict[str, Any]:
    """One frame. `sealed` = (session key, the sender's direction, its sequence number): the frame
    carries a MAC, checked before its body is read (a failure ends the session, exit 3)."""
    deadline = time.monotonic() + timeout_s
    (length,) = struct.unpack(">I", _read_exact(sock, 4, deadline, peer))
    if length == 0 or length > MAX_FRAME:
        raise FabscopeError(
            f"{peer} sent a control frame of {length} bytes (allowed 1 to {MAX_FRAME}): "
            "not a fabscope peer of this protocol",
            EXIT_PEER,
        )
    body = _read_exact(sock, length, deadline, peer)
    if sealed is not None:
        session, direction, seq = sealed
        tag = _read_exact(sock, auth.MAC_BYTES, deadline, peer)
        if not hmac.compare_digest(tag, auth.frame_mac(session, direction, seq, body)):
            raise FabscopeError(f"control frame {seq} from {peer} failed its authentication (changed, replayed, "
                                "dropped or reordered on the way): session ended", EXIT_PEER)
    try:
        msg = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested beyond Python's stack
        raise FabscopeError(f"{peer} sent a control frame that is not JSON ({str(exc)[:80]})", EXIT_PEER) from exc
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise FabscopeError(f"{peer} sent a control frame without a string 'type'", EXIT_PEER)
    return msg


def server_hello(services: list[str], nonce: str | None) -> dict[str, Any]:
    """`fabscope serve`'s greeting; with a nonce it asks the client to authenticate (auth.py)."""
    return {
        "type": "hello",
        "proto": PROTO_VERSION,
        "tool": "fabscope",
        "version": __version__,
        "role": "server",
        "services": services,
        "auth": auth.SCHEME if nonce else "none",
        **({"nonce": nonce} if nonce else {}),
    }


def client_hello(service: str, nonce: str) -> dict[str, Any]:
    return {"type": "hello", "proto": PROTO_VERSION, "version": __version__, "role": "client", "service": service,
            "nonce": nonce}


def check_proto(msg: dict[str, Any], who: str) -> None:
    if msg.get("proto") != PROTO_VERSION:
        raise FabscopeError(
            f"version mismatch: this host runs fabscope {__version__} (control protocol {PROTO_VERSION}), "
            f"{who} runs fabscope {str(msg.get('version', 'unknown'))[:40]} (control protocol {str(msg.get('proto'))[:20]}). "
            "Install the same fabscope version on both hosts",
            EXIT_PEER,
        )


def split_hostport(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    try:
        return hostport.split(text, default_port)
    except ValueError:
        raise FabscopeError(f"{shown(text)} is not HOST, HOST:PORT or [IPv6]:PORT") from None


# ---- the client side of a session with `fabscope serve` (run --peer, doctor --peer, suite, matrix) ----


def connect(host: str, port: int, timeout_s: float) -> socket.socket:
    """TCP to host:port; a refused connection is retried until the deadline (the serve may still be
    starting), then named with the fix, as the engine's own connect does."""
    desc = f"{host}:{port}"
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return socket.create_connection((host, port), timeout=max(left, 0.05))
        except socket.gaierror as exc:
            raise FabscopeError(f"cannot resolve peer host '{host}': {exc.strerror}", EXIT_PEER) from exc
        except ConnectionRefusedError as exc:
            if time.monotonic() + 0.1 >= deadline:
                raise FabscopeError(
                    f"nothing is listening at {desc} (connection refused for {timeout_s:g} s). Start the server "
                    f"there first: `fabscope serve --bind ADDR --port {port}`, or use `fabscope run --loopback` "
                    "to test this host alone",
                    EXIT_PEER,
                ) from exc
            time.sleep(0.1)
        except OSError as exc:
            why = exc.strerror or ("timed out" if isinstance(exc, TimeoutError) else str(exc))
            raise FabscopeError(
                f"could not reach {desc} within {timeout_s:g} s: {why}. Check the address, that `fabscope serve` "
                f"runs there, and that no firewall drops TCP port {port}",
                EXIT_PEER,
            ) from exc


class PeerBusy(FabscopeError):
    """The serve is in another run: a caller running many back to back (a suite) may try again."""


def _refused(msg: dict[str, Any], desc: str) -> FabscopeError:
    text = msg.get("message")
    text = text if isinstance(text, str) else "(no reason given)"
    if msg.get("type") == "busy":
        return PeerBusy(f"the peer {desc} is busy: {text}. Wait for it or use another host", EXIT_PEER)
    code = msg.get("code")
    return FabscopeError(f"the peer {desc} refused: {text}", code if code in (EXIT_USAGE, EXIT_PEER) else EXIT_PEER)


def client_handshake(sock: socket.socket, desc: str, service: str, key: auth.Key | None,
                     timeout_s: float) -> bytes | None:
    """Hello and authentication on a connected socket; raises FabscopeError (exit 3 unless said).
    Returns the session key (auth.session_key) when the serve authenticated, else None."""
    greeting = recv(sock, timeout_s, desc)
    kind = greeting["type"]
    if kind in ("busy", "error"):
        raise _refused(greeting, desc)
    if kind != "hello":
        raise FabscopeError(
            f"{desc} does not speak the fabscope protocol (first message '{kind[:40]}'); is it a `fabscope serve`?",
            EXIT_PEER,
        )
    check_proto(greeting, desc)
    services = greeting.get("services")
    if not isinstance(services, list) or service not in services:
        raise FabscopeError(f"{desc} does not offer the '{service}' service (a different fabscope version?)", EXIT_PEER)
    scheme = greeting.get("auth")
    client_nonce = auth.new_nonce()
    if scheme is None and service == "engine" and key is None:
        # A bare `fabscope-engine --listen` (engine-to-engine, no serve): it takes the plain hello.
        send(sock, client_hello(service, client_nonce), timeout_s)
        return None
    hello = client_hello(service, client_nonce)
    server_nonce = greeting.get("nonce")
    if scheme == auth.SCHEME:
        if key is None:
            raise FabscopeError(
                f"{desc} requires authentication: pass --key-file with a copy of the key file that serve was "
                "started with",
                EXIT_PEER,
            )
        if not auth.is_nonce(server_nonce):
            raise FabscopeError(f"{desc} sent a malformed authentication challenge", EXIT_PEER)
        assert isinstance(server_nonce, str)
        hello["key_id"] = key.key_id
        hello["mac"] = auth.mac(key, "client", service, server_nonce, client_nonce)
    elif scheme == "none":
        if key is not None:
            raise FabscopeError(
                f"--key-file was given, but {desc} does not authenticate (a serve on loopback without --key-file, "
                "or one started with --insecure-no-auth), so it cannot prove it is yours. Start that serve with "
                "--key-file, or leave --key-file out here",
                EXIT_PEER,
            )
    else:
        raise FabscopeError(
            f"{desc} cannot authenticate this client (its hello offers {str(scheme)[:40]!r}); install the same "
            "fabscope version on both hosts",
            EXIT_PEER,
        )
    send(sock, hello, timeout_s)
    reply = recv(sock, timeout_s, desc)
    if reply["type"] == "error" and reply.get("reason") == "auth" and key is not None:
        raise FabscopeError(
            f"authentication failed: the serve at {desc} did not accept key {key.key_id} (from {key.path}); "
            "use a copy of the key file that serve was started with",
            EXIT_PEER,
        )
    if reply["type"] in ("busy", "error"):
        raise _refused(reply, desc)
    if reply["type"] != "welcome":
        raise FabscopeError(f"protocol error: expected 'welcome' from {desc}, got '{reply['type'][:40]}'", EXIT_PEER)
    if key is not None:
        assert isinstance(server_nonce, str)
        if not auth.verify(key, "server", service, server_nonce, client_nonce, reply.get("mac")):
            raise FabscopeError(
                f"authentication failed: {desc} accepted us but could not prove it holds key {key.key_id}; "
                "it is not the fabscope serve you started (check the address)",
                EXIT_PEER,
            )
        assert isinstance(server_nonce, str)
        return auth.session_key(key, service, server_nonce, client_nonce)
    return None


def open_session(peer: str, service: str, key: auth.Key | None, timeout_s: float) -> socket.socket:
    """A connected, authenticated socket to `fabscope serve` at peer (HOST[:PORT]), in blocking mode,
    ready to speak `service` on (an engine session needs its session key too: open_session_keyed)."""
    return open_session_keyed(peer, service, key, timeout_s)[0]


def session_key_fd(session: bytes) -> int:
    """A pipe's read end holding the session key as 64 hex digits, for an engine's
    `--session-key-fd N` (pass it with pass_fds, close it after the engine started)."""
    rfd, wfd = os.pipe()
    try:
        os.write(wfd, session.hex().encode())
    finally:
        os.close(wfd)
    return rfd


def engine_session_args(session: bytes | None) -> tuple[list[str], list[int]]:
    """The engine options and descriptors that hand it the session key (none without a key)."""
    if session is None:
        return [], []
    fd = session_key_fd(session)
    return ["--session-key-fd", str(fd)], [fd]


def open_session_keyed(peer: str, service: str, key: auth.Key | None,
                       timeout_s: float) -> tuple[socket.socket, bytes | None]:
    """open_session, and the session key when the serve authenticated (None otherwise): an engine
    handed this socket (`--peer-fd N --session-open 1`) gets it with engine_session_args, and then
    every frame it exchanges is authenticated."""
    host, port = split_hostport(peer)
    desc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    sock = connect(host, port, timeout_s)
    try:
        session = client_handshake(sock, desc, service, key, timeout_s)
        sock.settimeout(None)
        return sock, session
    except (FabscopeError, OSError) as exc:
        sock.close()
        if isinstance(exc, OSError):
            raise FabscopeError(f"lost the connection to {desc}: {exc.strerror or exc}", EXIT_PEER) from exc
        raise
