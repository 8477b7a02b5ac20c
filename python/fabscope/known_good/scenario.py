# SPDX-License-Identifier: BSD-3-Clause
"""A scenario file (TOML, read with tomllib): where the checks run, which checks, and what each
must produce. Every mistake is a FabscopeError (exit 2) naming the file and line, found before
anything runs.

    name = "two-node RoCE"
    hosts = ["node1", "node2"]          # or: hostfile = "hosts.txt" (one host a line, # comments)
    launcher = "mpirun"                 # mpirun | srun (what starts processes on other hosts)
    valid_for = "24h"                   # how long a result holds (m, h, d)

    [[checks]]
    name = "lat"
    kind = "run"                        # doctor | run | matrix | suite | collective | load
    loopback = true                     # or: peer = "node2:18515"
    repeat = 3                          # runs of this check (a baseline call needs >= 2)
    options = { backend = "tcp", op = "send", pattern = "lat", sizes = "8" }
    expect = ["p50_us <= 50", 'p50_us within 10 % of baseline "golden"']
    warn = ["p99_us <= 40"]
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EXIT_USAGE, FabscopeError
from ..load.patterns import PATTERNS as LOAD_PATTERNS
from . import expectations
from .expectations import Expectation, ExpectationError

KINDS = ("doctor", "run", "matrix", "suite", "collective", "load")
# Kinds that run on the scenario's hosts under its launcher (collective and suite: or on loopback).
ON_HOSTS = ("matrix", "load")
LAUNCHERS = ("mpirun", "srun")
_DURATION = re.compile(r"^(\d+)([mhd])$")
_SECONDS = {"m": 60, "h": 3600, "d": 86400}

# key -> (type(s), what it is): the one list of what a scenario may say (docs/check.md shows it).
TOP_KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "name": (str, "the scenario's name"),
    "description": (str, "free text"),
    "hosts": (list, "the hosts, a list of names"),
    "hostfile": (str, "a file of host names, one a line"),
    "launcher": (str, "mpirun or srun"),
    "valid_for": (str, "how long a result holds: 90m, 24h, 7d"),
    "checks": (list, "the checks, [[checks]] tables"),
}
CHECK_KEYS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "name": (str, "the check's name (unique)"),
    "kind": (str, "doctor, run, matrix, suite, collective or load"),
    "loopback": (bool, "run, suite, collective: on this host alone"),
    "peer": (str, "run, suite: HOST[:PORT] of a `fabscope serve`"),
    "repeat": (int, "run: how many runs (1 to 20)"),
    "options": (dict, "run, matrix, suite, collective, load: their options, e.g. { backend = \"tcp\", sizes = \"8\" }"),
    "rows": (list, "suite: the rows whose figures are judged, by \"backend [op [pattern]]\" (default every row)"),
    "only": (list, "doctor: only these doctor checks or areas (memlock, ports.mtu, gid, ucx, cpu.numa, ...)"),
    "expect": (list, "expectations whose violation fails"),
    "warn": (list, "expectations whose violation warns"),
}


@dataclass(frozen=True)
class CheckSpec:
    name: str
    kind: str
    line: int
    loopback: bool = False
    peer: str | None = None
    repeat: int = 1
    options: dict[str, str] = field(default_factory=dict)
    expectations: tuple[Expectation, ...] = ()
    options_line: int = 0  # where the options are (an option `fabscope run` refuses points there)
    only: tuple[str, ...] = ()  # doctor: the doctor checks to run (names), none = all
    rows: tuple[str, ...] = ()  # suite: the rows whose figures are judged ("backend [op [pattern]]"), none = all

    def figures(self) -> dict[str, str]:
        return figures_of(self.kind, self.options)

    def matrix_argv(self, hosts: tuple[str, ...], launcher: str | None) -> list[str]:
        """`fabscope matrix`'s arguments for this check (without the format)."""
        argv = ["matrix", "--hosts", ",".join(hosts), "--launcher", launcher or "mpirun"]
        for key, value in self.options.items():
            argv += [f"--{key}", value]
        return argv

    def run_argv(self) -> list[str]:
        """`fabscope run`'s arguments for one run of this check (without store and format)."""
        argv = ["run", "--loopback"] if self.loopback else ["run", "--peer", str(self.peer)]
        for key, value in self.options.items():
            argv += [f"--{key}", value]
        return argv


@dataclass(frozen=True)
class Scenario:
    path: Path
    name: str
    hosts: tuple[str, ...]
    launcher: str | None
    valid_for_s: int
    checks: tuple[CheckSpec, ...]

    def baselines(self) -> dict[str, int]:
        """Every baseline named, and the first line naming it."""
        out: dict[str, int] = {}
        for c in self.checks:
            for e in c.expectations:
                if isinstance(e.rule, expectations.Relative):
                    out.setdefault(e.rule.baseline, e.line)
        return out


def figures_of(kind: str, options: dict[str, str]) -> dict[str, str]:
    if kind == "doctor":
        return dict(expectations.DOCTOR_FIGURES)
    if kind == "matrix":
        return dict(expectations.MATRIX_FIGURES)
    if kind == "suite":
        return dict(expectations.SUITE_FIGURES)
    if kind == "collective":
        return dict(expectations.COLLECTIVE_FIGURES)
    if kind == "load":
        return dict(expectations.LOAD_FIGURES)
    pattern = options.get("pattern", "lat")
    return dict(expectations.RUN_LATENCY_FIGURES if pattern == "lat" else expectations.RUN_BANDWIDTH_FIGURES)


class _Lines:
    """Where things are in the file: tomllib gives values, not lines, so the lines of table headers,
    keys and strings are found in the text (enough to point at the mistake)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.check_lines: list[int] = [i + 1 for i, ln in enumerate(self.lines) if ln.strip().startswith("[[checks]]")]

    def _span(self, check: int | None) -> tuple[int, int]:
        if check is None:
            return 1, (self.check_lines[0] - 1 if self.check_lines else len(self.lines))
        start = self.check_lines[check] if check < len(self.check_lines) else 1
        end = self.check_lines[check + 1] - 1 if check + 1 < len(self.check_lines) else len(self.lines)
        return start, end

    def key(self, name: str, check: int | None = None) -> int:
        start, end = self._span(check)
        pat = re.compile(rf"^\s*(?:\"{re.escape(name)}\"|{re.escape(name)})\s*=|[{{,]\s*{re.escape(name)}\s*=")
        for n in range(start, end + 1):
            if pat.search(self.lines[n - 1]):
                return n
        return start

    def text(self, needle: str, check: int | None, fallback: int) -> int:
        start, end = self._span(check)
        for n in range(start, end + 1):
            if needle in self.lines[n - 1]:
                return n
        return fallback


def _err(path: Path, line: int, message: str) -> FabscopeError:
    return FabscopeError(f"{path}:{line}: {message}; nothing was run", EXIT_USAGE)


def _typed(path: Path, line: int, where: str, key: str, value: Any, keys: dict[str, tuple[Any, str]]) -> None:
    if key not in keys:
        raise _err(path, line, f"unknown key {key!r} {where} (known: {', '.join(keys)})")
    want, what = keys[key]
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise _err(path, line, f"{key} = {value!r} {where}: expected {getattr(want, '__name__', want)} ({what})")


def load(path: Path) -> Scenario:
    """The scenario in ``path``, every part checked; a FabscopeError (exit 2) naming the line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise FabscopeError(f"scenario {path}: {exc.strerror or exc}; give an existing TOML file", EXIT_USAGE) from exc
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        got = re.search(r"line (\d+)", str(exc))
        at = int(got.group(1)) if got else len(text.splitlines()) if "end of document" in str(exc) else 1
        raise _err(path, at, f"not valid TOML ({exc})") from exc
    where = _Lines(text)
    for key, value in doc.items():
        _typed(path, where.key(key), "at the top level", key, value, TOP_KEYS)
    hosts = _hosts(path, doc, where)
    launcher = doc.get("launcher")
    if launcher is not None and launcher not in LAUNCHERS:
        raise _err(path, where.key("launcher"), f"launcher = {launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    valid = str(doc.get("valid_for", "24h"))
    got = _DURATION.match(valid)
    if not got or int(got.group(1)) == 0:
        raise _err(path, where.key("valid_for"), f"valid_for = {valid!r}: expected a duration such as 90m, 24h, 7d")
    raw_checks = doc.get("checks", [])
    if not raw_checks:
        raise _err(path, 1, "no [[checks]]: a scenario states at least one check")
    checks = tuple(_check(path, i, c, where) for i, c in enumerate(raw_checks))
    for c in checks:
        if (c.kind in ON_HOSTS or (c.kind == "collective" and not c.loopback)) and len(hosts) < 2:
            raise _err(path, c.line, f"check {c.name!r}: a {c.kind} needs the scenario's hosts (hosts or "
                                     f"hostfile, at least 2; got {len(hosts)})"
                                     + ("; or say loopback = true" if c.kind == "collective" else ""))
        if c.kind == "suite" and not (c.loopback or c.peer) and len(hosts) != 2:
            raise _err(path, c.line, f"check {c.name!r}: a suite check runs with loopback = true, against peer = "
                                     f"\"HOST\", or between the scenario's two hosts (got {len(hosts)} hosts)")
    seen: set[str] = set()
    for c in checks:
        if c.name in seen:
            raise _err(path, c.line, f"two checks are named {c.name!r}: names are unique (they name results)")
        seen.add(c.name)
    return Scenario(path, str(doc.get("name", path.stem)), hosts, launcher,
                    int(got.group(1)) * _SECONDS[got.group(2)], checks)


def _hosts(path: Path, doc: dict[str, Any], where: _Lines) -> tuple[str, ...]:
    if "hosts" in doc and "hostfile" in doc:
        raise _err(path, where.key("hostfile"), "give hosts or hostfile, not both")
    if "hostfile" in doc:
        file = (path.parent / doc["hostfile"])
        try:
            names = [ln.split("#")[0].split()[0] for ln in file.read_text().splitlines() if ln.split("#")[0].strip()]
        except OSError as exc:
            raise _err(path, where.key("hostfile"), f"hostfile {str(file)!r}: {exc.strerror or exc}") from exc
        return tuple(names)
    hosts = doc.get("hosts", [])
    for h in hosts:
        if not isinstance(h, str) or not h:
            raise _err(path, where.key("hosts"), f"hosts: {h!r} is not a host name")
    return tuple(hosts)


def _check(path: Path, index: int, raw: Any, where: _Lines) -> CheckSpec:
    line = where.check_lines[index] if index < len(where.check_lines) else 1
    if not isinstance(raw, dict):
        raise _err(path, line, "checks: each check is a [[checks]] table")
    label = f"in check {raw.get('name', index + 1)!r}"
    for key, value in raw.items():
        _typed(path, where.key(key, index), label, key, value, CHECK_KEYS)
    for required in ("name", "kind"):
        if required not in raw:
            raise _err(path, line, f"check {index + 1} has no {required}")
    kind = raw["kind"]
    if kind not in KINDS:
        raise _err(path, where.key("kind", index), f"kind = {kind!r} {label}: expected one of {', '.join(KINDS)}")
    options: dict[str, str] = {}
    for key, value in raw.get("options", {}).items():
        if isinstance(value, bool):
            options[key] = "yes" if value else "no"
        elif isinstance(value, (str, int, float)):
            options[key] = str(value)
        else:
            raise _err(path, where.key(key, index), f"options.{key} = {value!r} {label}: expected a string, "
                                                    "number or boolean")
    loopback, peer = bool(raw.get("loopback", False)), raw.get("peer")
    repeat = raw.get("repeat", 1)
    if kind == "run":
        if loopback == (peer is not None):
            raise _err(path, line, f"{label}: a run check says where it runs: loopback = true, or peer = \"HOST\"")
        if not 1 <= repeat <= 20:
            raise _err(path, where.key("repeat", index), f"repeat = {repeat} {label}: expected 1 to 20")
    elif kind in ("matrix", "load", "collective", "suite"):
        allowed = {"collective": ("loopback",), "suite": ("loopback", "peer")}.get(kind, ())
        extra = [k for k in ("loopback", "peer", "repeat") if k in raw and k not in allowed]
        if extra:
            raise _err(path, where.key(extra[0], index), f"{extra[0]} {label}: a {kind} check runs once "
                                                         + ("on the scenario's hosts" if not allowed else
                                                            f"(it takes {' or '.join(allowed)})"))
        if kind == "suite" and loopback and peer is not None:
            raise _err(path, where.key("peer", index), f"peer {label}: the loopback suite has no peer; drop one")
        if kind == "load" and options.get("pattern") not in LOAD_PATTERNS:
            raise _err(path, where.key("pattern", index) if "pattern" in options else line,
                       f"options.pattern = {options.get('pattern')!r} {label}: a load check names its pattern, one "
                       f"of {', '.join(LOAD_PATTERNS)}")
    else:
        extra = [k for k in ("loopback", "peer", "repeat", "options") if k in raw]
        if extra:
            raise _err(path, where.key(extra[0], index), f"{extra[0]} {label}: applies only to kind = \"run\"")
    only = _doctor_checks(path, where.key("only", index), label, raw.get("only", [])) if kind == "doctor" else ()
    if kind != "doctor" and "only" in raw:
        raise _err(path, where.key("only", index), f"only {label}: applies only to kind = \"doctor\"")
    rows = raw.get("rows", [])
    if rows and kind != "suite":
        raise _err(path, where.key("rows", index), f"rows {label}: applies only to kind = \"suite\"")
    if not all(isinstance(r, str) and r.split() for r in rows):
        raise _err(path, where.key("rows", index), f"rows = {rows!r} {label}: each is \"backend [op [pattern]]\", "
                                                   "e.g. \"tcp\", \"ucx tag lat\"")
    if rows:
        from ..launch.engine import known_backends

        known = [b.name for b in known_backends()]
        for r in rows:
            if r.split()[0] not in known:
                raise _err(path, where.key("rows", index), f"rows: {r!r} {label} does not start with a backend "
                                                           f"(known: {', '.join(known)})")
    figures = figures_of(kind, options)
    exps: list[Expectation] = []
    for level in ("expect", "warn"):
        for text in raw.get(level, []):
            at = where.text(str(text), index, where.key(level, index))
            if not isinstance(text, str):
                raise _err(path, at, f"{level}: {text!r} {label} is not a string")
            try:
                exps.append(expectations.parse(text, level, at, figures))
            except ExpectationError as exc:
                raise _err(path, at, f"{exc} ({label})") from exc
            if kind != "run" and isinstance(exps[-1].rule, expectations.Relative):
                raise _err(path, at, f"{text!r} {label}: a baseline judges the figures of run checks only; bound "
                                     f"a {kind} check's figures by a number")
    return CheckSpec(str(raw["name"]), kind, line, loopback, peer, int(repeat), options, tuple(exps),
                     where.key("options", index) if "options" in raw else line, only,
                     tuple(" ".join(str(r).split()) for r in rows))


def _doctor_checks(path: Path, line: int, label: str, only: list[Any]) -> tuple[str, ...]:
    """The doctor check names a doctor check's `only` stands for (a name, or an area: all of it)."""
    from ..doctor import core  # the package registers every check

    names: list[str] = []
    for item in only:
        got = [n for n, c in core.CHECKS.items() if item in (n, c.area)] if isinstance(item, str) else []
        if not got:
            known = sorted({*core.CHECKS, *(c.area for c in core.CHECKS.values())})
            raise _err(path, line, f"only: {item!r} {label} is not a doctor check or area (known: {', '.join(known)})")
        names += [n for n in got if n not in names]
    return tuple(names)
