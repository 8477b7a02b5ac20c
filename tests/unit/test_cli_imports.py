# SPDX-License-Identifier: BSD-3-Clause
"""What a command loads before it measures: each subcommand builds only its own options, so `run`
(started on every host a launcher reaches, and under emulation in the Soft-RoCE guests, where each
module body costs tens of milliseconds) does not load serve, compare, the matrix or the charts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import REPO

# Modules a command must not load unless it is that command (matplotlib: only where a chart is drawn).
HEAVY = ("fabscope.serve", "fabscope.serve.server", "fabscope.serve.policy", "fabscope.compare", "fabscope.matrix.cli",
         "fabscope.matrix.schedule", "fabscope.report.charts", "fabscope.report.markdown", "matplotlib")

PROBE = """
import json, sys
from fabscope.cli import main
rc = main(sys.argv[1:], execute=False)
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def loaded(*argv: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"}, check=False)
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["rc"] == 0, out.stderr
    return set(doc["modules"])


@pytest.mark.parametrize("argv", [
    ("run", "--loopback", "--sizes", "8"),
    ("run", "--peer", "127.0.0.1", "--format", "json"),
])
def test_run_loads_none_of_the_other_commands(argv: tuple[str, ...]) -> None:
    mods = loaded(*argv)
    assert "fabscope.launch.plan" in mods or "fabscope.history" in mods  # it did build run's options
    assert sorted(m for m in HEAVY if m in mods) == []


@pytest.mark.parametrize(("argv", "needs"), [
    (("serve", "--port", "0"), "fabscope.serve"),
    (("compare", "a.jsonl", "b.jsonl"), "fabscope.compare"),
    (("history", "list"), "fabscope.history"),
])
def test_each_command_loads_its_own_module_and_not_the_others(argv: tuple[str, ...], needs: str) -> None:
    mods = loaded(*argv)
    assert needs in mods
    others = [m for m in HEAVY if m in mods and not m.startswith(needs)]
    assert others == [], others
