# SPDX-License-Identifier: BSD-3-Clause
"""Preflight checks the testbeds share (netns, Slurm): the programs a step needs, and root.

Each testbed raises its own error class with its own fix; these only hold the rule."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable


def not_on_path(programs: Iterable[str]) -> list[str]:
    """The programs of ``programs`` that are not on PATH, in their order."""
    return [p for p in programs if shutil.which(p) is None]


def require_root(error: Callable[[str], Exception], why: str, command: str) -> None:
    """Raise ``error(message)`` unless this process runs as root: ``why`` says what needs root,
    ``command`` how to run the step as root."""
    uid = os.geteuid()
    if uid != 0:
        raise error(f"{why}; this process runs as uid {uid}. Run it as root, e.g. `{command}`")
