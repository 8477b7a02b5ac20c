# SPDX-License-Identifier: BSD-3-Clause
"""The shared key of `fabscope serve` and its clients: reading it safely, naming it without showing
it, and the HMAC-SHA256 challenge-response both ends compute.

The handshake (one owner: this module computes every MAC; control.py carries the frames):
  server hello: {"auth": "hmac-sha256", "nonce": Ns}            Ns fresh per connection
  client hello: {"nonce": Nc, "key_id": id, "mac": HMAC(key, transcript("client", service, Ns, Nc))}
  welcome:      {"mac": HMAC(key, transcript("server", service, Ns, Nc))}
After the welcome, every control frame of an engine session carries, after its body,
HMAC(session key, direction, sequence number, body), the session key being
HMAC(key, transcript("session", service, Ns, Nc)): a relay that passed the handshake on can neither
change, replay, drop, reorder nor inject a frame without the session ending.
The key never crosses the wire; a recorded client MAC is useless on another connection (Ns differs),
and the role in the transcript keeps one side's MAC from being reflected as the other's.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from ..argtypes import shown
from ..errors import EXIT_USAGE, FabscopeError

SCHEME = "hmac-sha256"
NONCE_BYTES = 32
MAC_BYTES = 32  # the frame MAC after each body (HMAC-SHA256)
MIN_KEY_BYTES = 16
MAX_KEY_BYTES = 4096
MAKE_KEY = "head -c 32 /dev/urandom > KEYFILE && chmod 600 KEYFILE"


@dataclass(frozen=True)
class Key:
    secret: bytes
    key_id: str  # a short hash that names the key in logs and messages; not the key
    path: str

    def __repr__(self) -> str:  # never print the secret, even in a debugger or a traceback
        return f"Key(key_id={self.key_id!r}, path={self.path!r})"


def key_id(secret: bytes) -> str:
    return hashlib.sha256(b"fabscope key id\0" + secret).hexdigest()[:12]


def _in_command(path: Path) -> str:
    """The path as it goes into a command we suggest: itself when short and plain, else KEYFILE."""
    text = str(path)
    return shlex.quote(text) if len(text) <= 255 and text.isprintable() else "KEYFILE"


def check_owner_only(path: Path, option: str, fix: str, lets: str) -> None:
    """A secret's file must be a regular file that only its owner can read or write: anyone who can
    read it can `lets` (exit 2 otherwise, with the chmod to run)."""
    named = shown(str(path))
    try:
        st = path.stat()
    except OSError as exc:
        raise FabscopeError(f"{option} {named}: {exc.strerror or exc}; {fix}", EXIT_USAGE) from exc
    if not stat.S_ISREG(st.st_mode):
        raise FabscopeError(f"{option} {named}: not a regular file; {fix}", EXIT_USAGE)
    if st.st_mode & 0o077:
        raise FabscopeError(
            f"{option} {named}: readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"anyone who can read it can {lets}. Fix: `chmod 600 {_in_command(path)}`",
            EXIT_USAGE,
        )


def load_key(path: str | Path) -> Key:
    """Reads a key file: it must be a regular file that only its owner can read, with 16 to 4096
    bytes (a trailing newline, as `echo` or an editor leaves, is not part of the key)."""
    p = Path(path)
    fix = f"make one with `{MAKE_KEY.replace('KEYFILE', _in_command(p))}` and copy it to every host"
    check_owner_only(p, "--key-file", fix, "run measurements here")
    try:
        with open(p, "rb") as f:
            secret = f.read(MAX_KEY_BYTES + 3)
    except OSError as exc:
        raise FabscopeError(f"--key-file {shown(str(p))}: {exc.strerror or exc} (run as its owner, or fix its owner)",
                            EXIT_USAGE) from exc
    secret = secret.removesuffix(b"\n").removesuffix(b"\r")
    if len(secret) < MIN_KEY_BYTES or len(secret) > MAX_KEY_BYTES:
        raise FabscopeError(
            f"--key-file {shown(str(p))}: {len(secret)} bytes; a key has {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes. {fix}",
            EXIT_USAGE,
        )
    return Key(secret, key_id(secret), str(p))


def key_from_secret(secret: bytes, source: str) -> Key:
    """A Key from a secret that is not a key file (the matrix's one-time token): the same
    challenge-response (mac/verify) then works with it."""
    return Key(secret, key_id(secret), source)


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def is_nonce(value: object) -> bool:
    """A nonce on the wire: exactly NONCE_BYTES as lowercase hex (anything else is refused)."""
    return (
        isinstance(value, str)
        and len(value) == 2 * NONCE_BYTES
        and all(c in "0123456789abcdef" for c in value)
    )


def transcript(role: str, service: str, server_nonce: str, client_nonce: str) -> bytes:
    return b"\0".join(
        [b"fabscope-auth/1", role.encode(), service.encode(), server_nonce.encode(), client_nonce.encode()]
    )


def mac(key: Key, role: str, service: str, server_nonce: str, client_nonce: str) -> str:
    return hmac.new(key.secret, transcript(role, service, server_nonce, client_nonce), hashlib.sha256).hexdigest()


def verify(key: Key, role: str, service: str, server_nonce: str, client_nonce: str, claimed: object) -> bool:
    """Constant-time check of a MAC that came off the wire (any type: it is untrusted)."""
    if not isinstance(claimed, str) or len(claimed) != 64:
        return False
    expected = mac(key, role, service, server_nonce, client_nonce)
    return hmac.compare_digest(expected.encode(), claimed.encode("utf-8", "replace"))


def session_key(key: Key, service: str, server_nonce: str, client_nonce: str) -> bytes:
    """The key of one session (32 bytes): both nonces make it fresh per connection, so frames of
    one session are useless in another. Computed by both ends after the handshake; the engines
    get it on a pipe (control.session_key_fd), never on the wire."""
    return hmac.new(key.secret, transcript("session", service, server_nonce, client_nonce), hashlib.sha256).digest()


def frame_mac(session: bytes, direction: str, seq: int, body: bytes) -> bytes:
    """MAC of one control frame after the welcome (the engine's ctl.c fs_ctl_frame_mac is the
    same): direction 'c' (client to server) or 's', seq counted by both ends from 0, never sent."""
    head = b"fabscope-frame/1\0" + direction.encode() + b"\0" + seq.to_bytes(8, "big")
    return hmac.new(session, head + body, hashlib.sha256).digest()


def random_key_file(path: Path) -> Path:
    """Writes a fresh 32-byte key with mode 600 (tests and `serve` setup helpers)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    os.chmod(path, 0o600)
    return path
