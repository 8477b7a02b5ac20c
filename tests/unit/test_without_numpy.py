# SPDX-License-Identifier: BSD-3-Clause
"""What runs inside the Soft-RoCE guests (and on a bare cluster node) has only Python's standard
library: serve, run, suite and the matrix (coordinator and agent) must load without numpy. A
module-level numpy import in the matrix schedule once broke `fabscope` in every guest."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

GUEST_MODULES = ("fabscope.cli", "fabscope.serve", "fabscope.launch.runner", "fabscope.suite", "fabscope.suite_hosts",
                 "fabscope.matrix.cli", "fabscope.matrix.agent", "fabscope.matrix.coordinator",
                 "fabscope.matrix.driver", "fabscope.matrix.execute", "fabscope.matrix.schedule",
                 "fabscope.matrix.rules", "fabscope.matrix.findings", "fabscope.matrix.render")


def test_guest_side_modules_load_without_numpy() -> None:
    # sys.modules[name] = None makes `import name` raise ImportError, as on a host without it.
    code = ("import importlib, sys\n"
            "sys.modules['numpy'] = None\n"
            f"for m in {GUEST_MODULES!r}:\n"
            "    importlib.import_module(m)\n"
            "from fabscope.matrix import schedule\n"
            "assert len(schedule.AllPairs(6).round(0)) == 3\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-3000:]
