# SPDX-License-Identifier: BSD-3-Clause
"""The work per message does not grow unnoticed: fabscope's client is counted under callgrind
(bench/instr.py's guards: --poll block, two run lengths differenced) and compared with the count
committed in bench/instr_counts.json. Instruction counts do not follow this machine's load the way
times do; what load can add is turns (a wait that outlasts a block slice), so a count over the limit
is measured again, and only the least of three is judged. About 15 s a guard, serial stage."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import instr

GROWTH = 1.10  # a committed per-message count may grow by 10 % at most
ATTEMPTS = 3

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed (make setup)")


def committed() -> dict[str, float]:
    guards: dict[str, float] = json.loads(instr.COUNTS.read_text())["guards"]
    return guards


def test_every_guard_has_a_committed_count() -> None:
    assert set(committed()) == set(instr.guards())


@pytest.mark.parametrize("name", sorted(instr.guards()))
def test_per_message_count_has_not_grown(name: str, tmp_path: Path) -> None:
    limit = committed()[name] * GROWTH
    tool = instr.guards()[name]
    seen: list[float] = []
    for _ in range(ATTEMPTS):
        per_message, _turns = instr.per_message_block(tool, tmp_path)
        seen.append(per_message)
        if per_message <= limit:
            break
    assert min(seen) <= limit, (
        f"{name}: {min(seen):,.0f} instructions per message (least of {[round(x) for x in seen]}) against "
        f"{committed()[name]:,.0f} committed in bench/instr_counts.json (limit +{GROWTH - 1:.0%}): the per-message "
        "path grew; find what with callgrind_annotate on bench/instr.py's runs, or commit the new count with its reason"
    )
    # and it did not fall apart: a count far below the committed one means the guard counts something else
    assert min(seen) > committed()[name] / 2
