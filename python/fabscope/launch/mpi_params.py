# SPDX-License-Identifier: BSD-3-Clause
"""The names of MPI tuning parameters, as the MPI library on this host reports them, so that a
misspelt one is refused (exit 2, with the closest names) instead of being ignored by MPI.

- Open MPI: every MCA parameter `ompi_info --all --parsable` lists (plus `prte_info`'s, where
  Open MPI 5's launcher has its own), synonyms included. Used for `--mca NAME=VALUE` and for
  `--env OMPI_MCA_NAME=VALUE`.
- MPICH: its control variables (MPI_T CVARs) as `mpivars` lists them, for `--env MPIR_CVAR_NAME=...`.

The lists are read once per process (about 0.3 s for ompi_info) and kept.
"""

from __future__ import annotations

import difflib
import functools
import re
import shutil
import subprocess
from collections.abc import Iterable

from ..argtypes import shown
from ..errors import EXIT_USAGE, FabscopeError

_TIMEOUT_S = 30.0
_CVAR_RE = re.compile(r"^\s*(MPIR_CVAR_[A-Z0-9_]+)\s*=", re.MULTILINE)


def _run(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise FabscopeError(f"`{' '.join(cmd)}` did not answer within {_TIMEOUT_S:g} s, so the MPI parameter names "
                            "cannot be checked", EXIT_USAGE) from exc
    except OSError as exc:
        raise FabscopeError(f"cannot run {cmd[0]}: {exc.strerror}", EXIT_USAGE) from exc
    return out.stdout.decode("utf-8", "replace")


def _tool(name: str, what: str, package: str, instead: str) -> str:
    """The path of the MPI tool that lists `what`; FabscopeError (exit 2) saying how to get it."""
    path = shutil.which(name)
    if path is None:
        raise FabscopeError(f"cannot check {what}: {name} is not on PATH (it comes with {package}); install it, "
                            f"or {instead}", EXIT_USAGE)
    return path


@functools.lru_cache(maxsize=4)
def openmpi_names(ompi_info: str = "ompi_info") -> frozenset[str]:
    """Every MCA parameter name Open MPI reports here (FabscopeError when ompi_info is missing)."""
    path = _tool(ompi_info, "MCA parameter names", "Open MPI's mpirun: openmpi-bin on Debian", "leave --mca out")
    names: set[str] = set()
    tools = [[path, "--all", "--parsable"]]
    prte = shutil.which("prte_info")
    if prte:
        tools.append([prte, "--all", "--parsable"])
    for cmd in tools:
        for line in _run(cmd).splitlines():
            parts = line.split(":")
            if len(parts) > 5 and parts[0] == "mca" and parts[3] == "param":
                names.add(parts[4])
    if not names:
        raise FabscopeError(f"`{path} --all --parsable` listed no MCA parameters, so --mca names cannot be "
                            "checked; see whether Open MPI works here (`ompi_info`)", EXIT_USAGE)
    return frozenset(names)


@functools.lru_cache(maxsize=4)
def mpich_cvars(mpivars: str = "mpivars") -> frozenset[str]:
    """MPICH's control variables (MPIR_CVAR_*) as its `mpivars` tool lists them."""
    path = _tool(mpivars, "MPIR_CVAR_* names", "MPICH: mpich on Debian", "leave the variable out")
    names = frozenset(_CVAR_RE.findall(_run([path])))
    if not names:
        raise FabscopeError(f"`{path}` listed no MPIR_CVAR_* variables, so their names cannot be checked",
                            EXIT_USAGE)
    return names


def _unknown(flag: str, name: str, known: frozenset[str], source: str) -> FabscopeError:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; closest: {', '.join(close)}" if close else ""
    return FabscopeError(f"{flag} {shown(name)}: the MPI library here has no such parameter ({source} lists "
                         f"{len(known)}){hint}. MPI would ignore it silently", EXIT_USAGE)


def check_names(mpi: str, mca: Iterable[str], env: Iterable[str]) -> None:
    """Refuses (exit 2, naming the closest known names) an MCA parameter or MPICH control variable
    that the MPI library of flavour `mpi` does not have. `mca`: names given with --mca; `env`:
    variable names given with --env (OMPI_MCA_* for Open MPI, MPIR_CVAR_* for MPICH)."""
    mca, env = list(mca), list(env)
    if mpi == "openmpi":
        wanted = [("--mca", n, n) for n in mca]
        wanted += [("--env", n, n.removeprefix("OMPI_MCA_")) for n in env if n.startswith("OMPI_MCA_")]
        if wanted:
            known = openmpi_names()
            for flag, given, name in wanted:
                if name not in known:
                    raise _unknown(flag, given if flag == "--mca" else name, known, "ompi_info --all")
    elif mpi == "mpich":
        cvars = [n for n in env if n.startswith("MPIR_CVAR_")]
        if cvars:
            known = mpich_cvars()
            for name in cvars:
                if name not in known:
                    raise _unknown("--env", name, known, "mpivars")
