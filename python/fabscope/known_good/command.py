# SPDX-License-Identifier: BSD-3-Clause
"""One fabscope command that a check runs (run, matrix, suite, collective, load), as a child
process with a deadline: its exit status, stdout and stderr."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

# What one command of a check may take at most (the command's own deadlines end a dead peer within
# seconds; this bounds everything else).
RUN_DEADLINE_S = 900.0


@dataclass
class Ran:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def said(self) -> str:
        last = self.stderr.strip().splitlines()[-1] if self.stderr.strip() else "nothing on stderr"
        return f"`fabscope {' '.join(self.argv)}` exited {self.returncode}: {last}"


def run_fabscope(argv: list[str]) -> Ran:
    """`fabscope ARGV`, stopped after RUN_DEADLINE_S (said on its stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "fabscope", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        out, err = proc.communicate(timeout=RUN_DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"\nfabscope check: the command took more than {RUN_DEADLINE_S:g} s and was stopped"
    return Ran(argv, proc.returncode if proc.returncode is not None else -1, out, err)
