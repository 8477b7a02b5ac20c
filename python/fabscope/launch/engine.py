# SPDX-License-Identifier: BSD-3-Clause
"""Finding the measurement engine and reading its option table (the single source of options)."""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

from ..errors import EXIT_MEASURE, EXIT_USAGE, FabscopeError


def engine_option(args: Sequence[str], name: str) -> str | None:
    """The value of engine option --NAME in an engine's arguments (``--NAME V`` or ``--NAME=V``),
    the last one given, as the engine's own parser takes it; None when absent. The one reader of
    an option back out of a command line that fabscope built (runner, mpirun, serve)."""
    value = None
    for i, arg in enumerate(args):
        if arg == f"--{name}" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
    return value

ENGINE_NAME = "fabscope-engine"


def _candidates(name: str) -> list[Path]:
    found: list[Path] = []
    env = os.environ.get("FABSCOPE_ENGINE_DIR")
    if env:
        found.append(Path(env) / name)
    # Installed into the same prefix as this Python (the repo's .venv, a pip-built venv, /usr from the
    # .deb): the normal case. `pip install --user` puts it in the user scheme's scripts directory.
    found.append(Path(sys.prefix) / "bin" / name)
    found.append(Path(sysconfig.get_path("scripts", f"{os.name}_user")) / name)
    which = shutil.which(name)
    if which:
        found.append(Path(which))
    # A source checkout that was built but not installed (the Soft-RoCE guests run the checkout they
    # mount): python/fabscope/launch/engine.py -> the checkout is three directories up.
    found.append(Path(__file__).resolve().parents[3] / "build" / "engine" / name)
    return found


def locate(name: str) -> tuple[Path | None, list[Path]]:
    """The first executable `name` among the candidates (None if none is), and where it looked."""
    looked = _candidates(name)
    for path in looked:
        if path.is_file() and os.access(path, os.X_OK):
            return path, looked
    return None, looked


def find_binary(name: str) -> Path:
    if name == ENGINE_NAME and os.environ.get("FABSCOPE_ENGINE"):
        forced = Path(os.environ["FABSCOPE_ENGINE"])
        if not os.access(forced, os.X_OK):
            raise FabscopeError(f"FABSCOPE_ENGINE={forced} is not an executable file", EXIT_MEASURE)
        return forced
    found, looked = locate(name)
    if found is not None:
        return found
    raise FabscopeError(
        f"cannot find {name}: looked in {', '.join(str(p.parent) for p in looked)}. "
        "Run `make setup` in the fabscope checkout (it builds and installs the engine), "
        "or point FABSCOPE_ENGINE at the binary",
        EXIT_MEASURE,
    )


def engine_path() -> Path:
    return find_binary(ENGINE_NAME)


@functools.cache
def option_table() -> dict[str, Any]:
    """The engine's `--options-json`: core rows, op semantics, and each built backend's rows."""
    out = subprocess.run(
        [str(engine_path()), "--options-json"], capture_output=True, text=True, timeout=30, check=False
    )
    if out.returncode != 0:
        raise FabscopeError(f"{engine_path()} --options-json failed: {out.stderr.strip()}", EXIT_MEASURE)
    table: dict[str, Any] = json.loads(out.stdout)
    return table


def process_option_names(table: dict[str, Any] | None = None) -> frozenset[str]:
    """The options that set one engine process's role, sockets, CPU or output (the table's
    `process` rows): two engines on one host never share them (runner's loopback server)."""
    table = table or option_table()
    rows = list(table["core"]) + [row for be in table["backends"].values() for row in be["options"]]
    return frozenset(str(row["name"]) for row in rows if row.get("process"))


def mode_option_names(table: dict[str, Any] | None = None) -> frozenset[str]:
    """The options that choose what one engine process is (client, server, a listing) or how it talks
    to its caller (the table's `mode` rows): the front end sets them for each process it starts, so
    neither a run plan nor the CLI's measurement options carry them."""
    table = table or option_table()
    return frozenset(str(row["name"]) for row in table["core"] if row.get("mode"))


def option_help(row: dict[str, Any]) -> str:
    """One option-table row's help as every listing shows it: the text, the allowed values, the default."""
    text = str(row["help"])
    if row.get("allowed"):
        text += f" [{', '.join(row['allowed'])}]"
    if row.get("default"):
        text += f" (default {row['default']})"
    return text


def backends() -> dict[str, Any]:
    """The backends built into this engine, by name: summary, ops, patterns, option rows."""
    result: dict[str, Any] = option_table()["backends"]
    return result


@dataclass(frozen=True)
class KnownBackend:
    """A backend this fabscope knows (the engine's `known_backends`), built here or not; `package` is
    the Debian package whose presence at build time builds it. mpi is never built into the plain engine:
    it lives in engines of its own (fabscope-engine-mpi-FLAVOUR), which mpirun.find_mpi_engine finds."""

    name: str
    built: bool
    package: str


def known_backends() -> list[KnownBackend]:
    return [KnownBackend(str(b["name"]), bool(b["built"]), str(b["package"])) for b in option_table()["known_backends"]]


class KnownBackendNames(Sequence[str]):
    """The names of known_backends(), asked of the engine when first read: a parser can take it as its
    allowed values without starting the engine for every command line."""

    def _names(self) -> list[str]:
        return [b.name for b in known_backends()]

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())


def validate_args(engine_args: Sequence[str], binary: Path | None = None) -> None:
    """Asks the engine whether `engine_args` would start a run (`--validate-only`: the option
    table's types and ranges, each option's backend scope, op/pattern/size combinations, device
    names), without connecting or listening. A refusal is FabscopeError with the engine's message
    (it names the option, the value and what is allowed) and its exit code: 2 for bad usage."""
    cmd = [str(binary or engine_path()), "--validate-only", *engine_args]
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise FabscopeError(f"{cmd[0]} --validate-only did not answer within 60 s", EXIT_MEASURE) from exc
    except OSError as exc:
        if exc.errno == errno.E2BIG:  # an argument longer than the kernel passes to a program
            longest = max(engine_args, key=len, default="")
            raise FabscopeError(f"{longest.split('=', 1)[0]}: a value of {len(longest)} characters is too long to "
                                f"pass to the engine ({exc.strerror})", EXIT_USAGE) from exc
        raise FabscopeError(f"cannot start {cmd[0]}: {exc.strerror}; `make setup` rebuilds and installs it",
                            EXIT_MEASURE) from exc
    if out.returncode == 0:
        return
    # The engine echoes what the user typed, which may be bytes that are not UTF-8.
    lines = [ln for ln in out.stderr.decode("utf-8", "backslashreplace").splitlines() if ln.strip()]
    own = [ln for ln in lines if ln.startswith("fabscope-engine")]  # not an MPI library's chatter
    message = (own or lines or [f"exited with {out.returncode}"])[-1].removeprefix("fabscope-engine: ")
    raise FabscopeError(message, out.returncode if out.returncode > 0 else EXIT_MEASURE)


def version_report() -> tuple[str, bool]:
    """`fabscope --version`: this front end's version, the engine it runs (path, version, the backends
    it was built with) and the MPI engines found; ok is False when the engine is missing or reports
    another version than the front end (one fabscope is one version, everywhere)."""
    from .. import __version__
    from .mpirun import MPI_FLAVOURS, _engine_name

    lines = [f"fabscope {__version__}"]
    try:
        path = engine_path()
        table = option_table()
    except FabscopeError as exc:
        return "\n".join([*lines, f"engine: unusable: {exc.message}"]), False
    version = str(table.get("version", "?"))
    ok = version == __version__
    lines.append(f"engine: {path} (version {version})" if ok else
                 f"engine: {path} reports version {version}, but this front end is {__version__}: install both "
                 "from one fabscope (`make setup` in a checkout, or one package)")
    lines.append(f"backends built: {', '.join(backends())}")
    mpi = [f"{flavour} ({found})" for flavour in MPI_FLAVOURS if (found := locate(_engine_name(flavour))[0])]
    lines.append(f"MPI engines: {', '.join(mpi) if mpi else 'none found'}")
    return "\n".join(lines), ok
