"""The shared key of `fabscope serve` and its clients: reading it safely, naming it without showing
it, and the HMAC-SHA256 challenge-response both ends compute.

The handshake (one owner: this module computes every MAC; control.py carries the frames):
  server hello: {"auth": "hmac-sha256", "nonce": Ns}            Ns fresh per connection
  client hello: {"nonce": Nc, "key_id": id, "mac": HMAC(key, transcript("client", service, Ns, Nc))}
  welcome:      {"mac": HMAC(key, transcript("server", service, Ns, Nc))}
The key never crosses the wire; a recorded client MAC is useless on another connection (Ns differs),
and the role in the transcript keeps one side's MAC from being reflected as the other's.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from .errors import EXIT_USAGE, FabscopeError

SCHEME = "hmac-sha256"
NONCE_BYTES = 32
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


def check_owner_only(path: Path, option: str, fix: str, lets: str) -> None:
    """A secret's file must be a regular file that only its owner can read or write: anyone who can
    read it can `lets` (exit 2 otherwise, with the chmod to run)."""
    try:
        st = path.stat()
    except OSError as exc:
        raise FabscopeError(f"{option} {path}: {exc.strerror or exc}; {fix}", EXIT_USAGE) from exc
    if not stat.S_ISREG(st.st_mode):
        raise FabscopeError(f"{option} {path}: not a regular file; {fix}", EXIT_USAGE)
    if st.st_mode & 0o077:
        raise FabscopeError(
            f"{option} {path}: readable or writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"anyone who can read it can {lets}. Fix: `chmod 600 {path}`",
            EXIT_USAGE,
        )


def load_key(path: str | Path) -> Key:
    """Reads a key file: it must be a regular file that only its owner can read, with 16 to 4096
    bytes (a trailing newline, as `echo` or an editor leaves, is not part of the key)."""
    p = Path(path)
    fix = f"make one with `{MAKE_KEY.replace('KEYFILE', str(p))}` and copy it to every host"
    check_owner_only(p, "--key-file", fix, "run measurements here")
    try:
        with open(p, "rb") as f:
            secret = f.read(MAX_KEY_BYTES + 3)
    except OSError as exc:
        raise FabscopeError(f"--key-file {p}: {exc.strerror or exc} (run as its owner, or fix its owner)",
                            EXIT_USAGE) from exc
    secret = secret.removesuffix(b"\n").removesuffix(b"\r")
    if len(secret) < MIN_KEY_BYTES or len(secret) > MAX_KEY_BYTES:
        raise FabscopeError(
            f"--key-file {p}: {len(secret)} bytes; a key has {MIN_KEY_BYTES} to {MAX_KEY_BYTES} bytes. {fix}",
            EXIT_USAGE,
        )
    return Key(secret, key_id(secret), str(p))


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


def random_key_file(path: Path) -> Path:
    """Writes a fresh 32-byte key with mode 600 (tests and `serve` setup helpers)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    os.chmod(path, 0o600)
    return path
