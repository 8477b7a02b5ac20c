"""The control protocol's framing in Python (the engine's ctl.c is the reference): a 4-byte
big-endian length, then one JSON object with a string "type"; a size cap; a deadline on reads."""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

from . import __version__
from .errors import EXIT_PEER, FabscopeError

PROTO_VERSION = 1
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


def recv(sock: socket.socket, timeout_s: float, peer: str = "the peer") -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    (length,) = struct.unpack(">I", _read_exact(sock, 4, deadline, peer))
    if length == 0 or length > MAX_FRAME:
        raise FabscopeError(
            f"{peer} sent a control frame of {length} bytes (allowed 1 to {MAX_FRAME}): "
            "not a fabscope peer of this protocol",
            EXIT_PEER,
        )
    try:
        msg = json.loads(_read_exact(sock, length, deadline, peer))
    except ValueError as exc:
        raise FabscopeError(f"{peer} sent a control frame that is not JSON ({exc})", EXIT_PEER) from exc
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise FabscopeError(f"{peer} sent a control frame without a string 'type'", EXIT_PEER)
    return msg


def server_hello(services: list[str]) -> dict[str, Any]:
    return {
        "type": "hello",
        "proto": PROTO_VERSION,
        "tool": "fabscope",
        "version": __version__,
        "role": "server",
        "services": services,
    }


def client_hello(service: str) -> dict[str, Any]:
    return {"type": "hello", "proto": PROTO_VERSION, "version": __version__, "role": "client", "service": service}


def check_proto(msg: dict[str, Any], who: str) -> None:
    if msg.get("proto") != PROTO_VERSION:
        raise FabscopeError(
            f"version mismatch: this host runs fabscope {__version__} (control protocol {PROTO_VERSION}), "
            f"{who} runs fabscope {msg.get('version', 'unknown')} (control protocol {msg.get('proto')}). "
            "Install the same fabscope version on both hosts",
            EXIT_PEER,
        )


def split_hostport(text: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not host or (port and not port.isdigit()) or (port and not 0 <= int(port) <= 65535):
        raise FabscopeError(f"'{text}' is not HOST, HOST:PORT or [IPv6]:PORT")
    return host, int(port) if port else default_port
