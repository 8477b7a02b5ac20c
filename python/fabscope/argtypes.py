# SPDX-License-Identifier: BSD-3-Clause
"""argparse `type=` helpers shared by every subcommand: a bad value is exit 2 with one line that
names the argument, the value and what is allowed, never a traceback.

Use them as `type=` of `add_argument`; argparse then prints "argument --port: 70000 is out of
range; allowed 1 to 65535" (the argument's name comes from argparse, the rest from here)::

    from fabscope import argtypes
    p.add_argument("--port", type=argtypes.port(), default=18515)
    p.add_argument("--timeout", type=argtypes.finite_float(0.1, 3600, unit=" s"), default=10.0)
    p.add_argument("--max-runs", type=argtypes.int_range(1, 10**9))
    p.add_argument("--allow", type=argtypes.cidr_list)
    p.add_argument("--key-file", type=argtypes.existing_file)
    p.add_argument("--hosts", type=argtypes.host_list)
    p.add_argument("--peer", type=argtypes.host_port(18515))
    p.add_argument("--out", type=argtypes.output_dir)

Every helper is a plain function of one string (or a factory returning one), raising
argparse.ArgumentTypeError; they can also be called outside argparse (`check(helper, "--x", v)`
turns the error into a FabscopeError with exit 2). Values in messages go through `shown()`, so a
non-UTF-8 argument (argv arrives decoded with surrogateescape) or a 1 MB one never breaks or floods
the terminal.

Options that the engine itself takes (--iters, --sizes, --timeout of `run`, ...) are validated by
the engine's option table (`fabscope-engine --validate-only`, see engine.validate_args), not here:
one owner per option. These helpers are for options only the front end reads. A rule between
options (one that does not apply to the chosen backend or mode) belongs in the subcommand's
`check` function (cli.py: set_defaults(check=...)), which runs before anything starts.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .errors import EXIT_USAGE, FabscopeError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Longest value quoted back in a message; the rest is summarised by its length.
_SHOWN_MAX = 60
_INT_RE = re.compile(r"[+-]?[0-9]{1,30}")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
# RFC 1123 host names: labels of letters, digits and inner hyphens, at most 253 characters.
_LABEL_RE = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
# Engine size grammar (engine/src/core/options.c fs_parse_size): digits, optionally K/M/G (binary,
# either case) spelled on as "KB", "Ki" or "KiB". tests/property/test_size_grammar.py holds the two
# readers to the same answers.
_SIZE_RE = re.compile(r"([0-9]{1,20})(?:([KMGkmg])(?:iB|B|i)?)?")
_SIZE_MULT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def shown(value: str) -> str:
    """`value` quoted for a message: printable on any terminal and stream (non-UTF-8 bytes and
    control characters escaped, as repr does), cut after 60 characters with the full length said."""
    if len(value) > _SHOWN_MAX:
        return f"{value[:_SHOWN_MAX]!r}... ({len(value)} characters)"
    return repr(value)


def _fmt(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def int_range(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """A whole number in decimal digits (no 1e3, no 1.5, no 0x10), with lo <= n <= hi (None = no
    bound on that side)."""

    def parse(text: str) -> int:
        if not _INT_RE.fullmatch(text.strip()):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number{_allowed(lo, hi)}")
        value = int(text)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{value} is out of range{_allowed(lo, hi)}")
        return value

    parse.__name__ = "whole number"
    return parse


def finite_float(lo: float | None = None, hi: float | None = None, unit: str = "") -> Callable[[str], float]:
    """A finite decimal number (no nan, inf, or hex floats), with lo <= x <= hi (None = no bound on
    that side). `unit` (e.g. "s") is only for the message."""

    def parse(text: str) -> float:
        if not _FLOAT_RE.fullmatch(text.strip()):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number{_allowed(lo, hi, unit)}")
        value = float(text)
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number{_allowed(lo, hi, unit)}")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{value:g}{unit} is out of range{_allowed(lo, hi, unit)}")
        return value

    parse.__name__ = "number"
    return parse


def _allowed(lo: float | None, hi: float | None, unit: str = "") -> str:
    if lo is not None and hi is not None:
        return f"; allowed {_fmt(lo)}{unit} to {_fmt(hi)}{unit}"
    if lo is not None:
        return f"; allowed {_fmt(lo)}{unit} or more"
    if hi is not None:
        return f"; allowed up to {_fmt(hi)}{unit}"
    return ""


def port(allow_zero: bool = False) -> Callable[[str], int]:
    """A TCP port: 1 to 65535 (0 too with allow_zero: "any free port")."""
    return int_range(0 if allow_zero else 1, 65535)


def _bytes(n: int) -> str:
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def byte_size(lo: int = 0, hi: int | None = None) -> Callable[[str], int]:
    """A byte count in the engine's size grammar: 4096, 4K, 8M, 2G, 4KiB, 4KB (K/M/G are 2^10,
    2^20, 2^30, as every peer tool's message sizes), with lo <= n <= hi (None: no upper bound)."""

    def parse(text: str) -> int:
        m = _SIZE_RE.fullmatch(text)
        if not m:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a size (examples: 8, 4K, 1M, 2G)")
        value = int(m.group(1)) * _SIZE_MULT[(m.group(2) or "").upper()]
        if value >= 1 << 64:  # as the engine: a size is a 64-bit count
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a size (larger than 2^64 - 1 bytes)")
        if value < lo or (hi is not None and value > hi):
            allowed = f"{_bytes(lo)} to {_bytes(hi)}" if hi is not None else f"{_bytes(lo)} or more"
            raise argparse.ArgumentTypeError(f"{value} bytes is out of range; allowed {allowed} bytes")
        return value

    parse.__name__ = "size"
    return parse


def text(max_len: int = 255, allow_empty: bool = False) -> Callable[[str], str]:
    """A string of at most max_len characters, valid UTF-8 (it may be stored, e.g. in SQLite, or
    printed to stdout), without control characters: a name, a label."""

    def parse(value: str) -> str:
        if not value and not allow_empty:
            raise argparse.ArgumentTypeError("an empty value is not allowed")
        if len(value) > max_len:
            raise argparse.ArgumentTypeError(f"{shown(value)} is longer than {max_len} characters")
        if any("\udc80" <= c <= "\udcff" for c in value):  # surrogateescape'd bytes of argv
            raise argparse.ArgumentTypeError(f"{shown(value)} contains bytes that are not UTF-8 text")
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise argparse.ArgumentTypeError(f"{shown(value)} contains control characters")
        return value

    parse.__name__ = "text"
    return parse


def hostname(value: str) -> str:
    """A host: an IPv4 or IPv6 address, or an RFC 1123 name (letters, digits, '-', '.' ; at most
    253 characters). Not resolved here: a name that does not resolve is the connection's error."""
    if not value:
        raise argparse.ArgumentTypeError("an empty host name is not allowed")
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    name = value[:-1] if value.endswith(".") else value
    if len(name) > 253 or not name or not all(_LABEL_RE.fullmatch(label) for label in name.split(".")):
        raise argparse.ArgumentTypeError(
            f"{shown(value)} is not a host: give an IPv4/IPv6 address or a name of letters, digits, '-' and '.'")
    return value


def host_list(value: str) -> list[str]:
    """HOST[,HOST...]: comma-separated hosts (see hostname), no empty entries, no duplicates."""
    hosts = value.split(",")
    out: list[str] = []
    for h in hosts:
        h = h.strip()
        if not h:
            raise argparse.ArgumentTypeError(f"{shown(value)}: an empty entry in the host list (HOST[,HOST...])")
        hostname(h)
        if h in out:
            raise argparse.ArgumentTypeError(f"{shown(value)}: host {shown(h)} is listed twice")
        out.append(h)
    return out


def choice_list(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """NAME[,NAME...] with every NAME one of `allowed`: no empty entries, no duplicates."""

    def parse(value: str) -> list[str]:
        out: list[str] = []
        for name in value.split(","):
            name = name.strip()
            if name not in allowed:
                raise argparse.ArgumentTypeError(
                    f"{shown(value)}: {shown(name) if name else 'an empty entry'} is not one of {', '.join(allowed)}")
            if name in out:
                raise argparse.ArgumentTypeError(f"{shown(value)}: {shown(name)} is listed twice")
            out.append(name)
        return out

    parse.__name__ = "list"
    return parse


def host_port(default_port: int) -> Callable[[str], str]:
    """HOST[:PORT] or [IPv6]:PORT (control.split_hostport's forms), the host checked as in
    hostname() and the port 1 to 65535; returns the text unchanged (the engine parses it)."""
    from .session import control

    def parse(value: str) -> str:
        try:
            host, port_no = control.split_hostport(value, default_port)
        except FabscopeError as exc:
            raise argparse.ArgumentTypeError(f"{shown(value)} is not HOST, HOST:PORT or [IPv6]:PORT") from exc
        hostname(host)
        if not 1 <= port_no <= 65535:
            raise argparse.ArgumentTypeError(f"{shown(value)}: port {port_no} is out of range; allowed 1 to 65535")
        return value

    parse.__name__ = "HOST[:PORT]"
    return parse


def output_dir(value: str) -> Path:
    """A directory to write into: an existing writable directory, or one that can be created
    (its nearest existing parent is a writable directory and every name fits the file system).
    Nothing is created here."""
    if not value:
        raise argparse.ArgumentTypeError("an empty path is not a directory")
    path = Path(value)
    try:
        name_max = os.pathconf("/", "PC_NAME_MAX")
        too_long = [part for part in path.parts if len(os.fsencode(part)) > name_max]
        if too_long:
            raise argparse.ArgumentTypeError(
                f"{shown(value)}: the name {shown(too_long[0])} is longer than the {name_max} bytes a file name may have")
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if probe == path and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{shown(value)} exists and is not a directory")
        if not probe.is_dir():
            raise argparse.ArgumentTypeError(f"{shown(value)}: {shown(str(probe))} is not a directory")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{shown(value)}: {shown(str(probe))} is not writable by this user")
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{shown(value)}: {exc.strerror}") from exc
    return path


def bind_address(value: str) -> str:
    """An address to listen on: an IPv4/IPv6 address (0.0.0.0 or :: for all) or a host name."""
    return hostname(value)


def cidr_list(value: str) -> list[IPNetwork]:
    """CIDR[,CIDR...]: networks such as 10.0.0.0/8,fd00::/64 (a bare address is a /32 or /128).
    Host bits set under the mask (10.0.0.1/8) are refused: say the network you mean."""
    out: list[IPNetwork] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            raise argparse.ArgumentTypeError(f"{shown(value)}: an empty entry in the list (CIDR[,CIDR...])")
        try:
            out.append(ipaddress.ip_network(item, strict=True))
        except ValueError as exc:
            try:
                loose = ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{shown(item)} is not a network: give CIDR[,CIDR...] such as 10.0.0.0/8,192.168.1.7,fd00::/64"
                ) from exc
            raise argparse.ArgumentTypeError(f"{shown(item)} has host bits set; did you mean {loose}?") from exc
    return out


def existing_file(value: str) -> Path:
    """A path to an existing regular file this process can read."""
    path = Path(value)
    if not value:
        raise argparse.ArgumentTypeError("an empty path is not a file")
    try:
        if not path.is_file():
            what = "is a directory" if path.is_dir() else "does not exist"
            raise argparse.ArgumentTypeError(f"{shown(value)} {what}; give the path of a file")
    except OSError as exc:  # e.g. a name too long for the file system
        raise argparse.ArgumentTypeError(f"{shown(value)}: {exc.strerror}") from exc
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{shown(value)} is not readable by this user")
    return path


def file_to_use_or_create(value: str) -> Path:
    """A file that exists (a regular file) or can be created: its directory exists. Nothing is created here."""
    if not value:
        raise argparse.ArgumentTypeError("an empty path is not a file")
    path = Path(value)
    try:
        if path.exists() and not path.is_file():
            raise argparse.ArgumentTypeError(f"{shown(value)} exists and is not a regular file")
        if not path.exists() and not path.absolute().parent.is_dir():
            raise argparse.ArgumentTypeError(f"{shown(value)}: its directory {shown(str(path.absolute().parent))} "
                                             "does not exist")
    except OSError as exc:  # e.g. a name too long for the file system
        raise argparse.ArgumentTypeError(f"{shown(value)}: {exc.strerror}") from exc
    return path


def existing_dir(value: str) -> Path:
    """A path to an existing directory."""
    path = Path(value)
    try:
        ok = bool(value) and path.is_dir()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{shown(value)}: {exc.strerror}") from exc
    if not ok:
        raise argparse.ArgumentTypeError(f"{shown(value)} is not a directory")
    return path


def key_value(value: str) -> tuple[str, str]:
    """KEY=VALUE with KEY a name of letters, digits, '_', '.' or '-' (an MCA parameter, an
    environment variable)."""
    key, sep, val = value.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}", key):
        raise argparse.ArgumentTypeError(
            f"{shown(value)} is not KEY=VALUE (KEY: letters, digits, '_', '.', '-'; e.g. UCX_NET_DEVICES=eth0)")
    return key, val


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose "unrecognized arguments" quotes each one with shown(): an empty, non-UTF-8
    or control-character argument is visible in the message instead of printing as nothing or
    as raw bytes. Use it as the top-level parser (subparsers hand their leftovers up to it).

    No abbreviations: argparse would take `--backend tcp` given to `suite` as its `--backends tcp`
    (and `--size` as `--sizes`), running something other than what was written without a word.
    An option is its whole name, or it is refused."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            hint = _whole_names(self, ns, [a.split("=", 1)[0] for a in extras if a.startswith("--")])
            self.error("unrecognized arguments: " + " ".join(shown(a) for a in extras) + hint)
        return ns


def _whole_names(parser: argparse.ArgumentParser, ns: Any, given: list[str]) -> str:
    """For an option given short of its whole name (`--size`): the options of the command given
    (the subcommands chosen in ``ns``) that it begins, named."""
    names: set[str] = set()
    todo = [parser]
    while todo:
        p = todo.pop()
        for action in p._actions:  # argparse keeps no public list of a parser's options
            names.update(o for o in action.option_strings if o.startswith("--"))
            chosen = getattr(ns, action.dest, None) if isinstance(action, argparse._SubParsersAction) else None
            if isinstance(action, argparse._SubParsersAction) and chosen in action.choices:
                todo.append(action.choices[chosen])
    hints = [f"{g}: no such option, and abbreviations are not taken; did you mean "
             f"{' or '.join(sorted(n for n in names if n.startswith(g)))}?"
             for g in given if g not in names and any(n.startswith(g) for n in names)]
    return f" ({'; '.join(hints)})" if hints else ""


def check(helper: Callable[[str], object], flag: str, value: str) -> object:
    """Runs a helper outside argparse; a bad value becomes FabscopeError(exit 2) naming `flag`."""
    try:
        return helper(value)
    except argparse.ArgumentTypeError as exc:
        raise FabscopeError(f"argument {flag}: {exc}", EXIT_USAGE) from exc
