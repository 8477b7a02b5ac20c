# SPDX-License-Identifier: BSD-3-Clause
"""HOST, HOST:PORT and [IPv6]:PORT: the one reader of an address with a port, for what users type
(strict: split) and for what records and peers report (lenient: host_of). The engine's reader
(fs_split_hostport, core/ctl.c) takes the same forms."""
from __future__ import annotations


def _parts(text: str) -> tuple[str, str | None] | None:
    """(host, the port's text, None where no colon gives one), or None where it is no address form
    (an unclosed bracket, or text after one that is not ':PORT')."""
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            return None
        return host, rest[1:] if rest else None
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, port
    return text, None  # a name, bare IPv4 or bare IPv6


def split(text: str, default_port: int) -> tuple[str, int]:
    """HOST[:PORT] or [IPv6]:PORT -> (host, port); ValueError where it is neither. A port is ASCII
    digits, 0 to 65535 (str.isdigit() and int() also take '２８２５０', fullwidth, and '²')."""
    parts = _parts(text)
    if parts is None or not parts[0]:
        raise ValueError(text)
    host, port = parts
    if port is None:
        return host, default_port
    if not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(text)
    return host, int(port)


def host_of(address: object) -> str | None:
    """The host of an address a record or a peer reported ('10.0.0.1:4000', '[fe80::1]:4000', a
    bare address); None for nothing usable."""
    if not isinstance(address, str) or not address.strip():
        return None
    parts = _parts(address.strip())
    return (parts[0] or None) if parts else None
