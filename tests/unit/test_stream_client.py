# SPDX-License-Identifier: BSD-3-Clause
"""runner.stream_client ends what it started: a launcher that outlives its guard is stopped with its
whole process group (a `timeout` killed alone left srun and its ranks holding the pipes for ever),
and an engine's stderr note reaches the user even when the run succeeded."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from fabscope.launch.runner import stream_client


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose: its parent (the stopped shell) has not reaped it yet.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


# A wall-clock bound: `measures` keeps it out of scripts/test.sh's four-at-once stage, where it would lose it.
@pytest.mark.measures
def test_a_silent_command_is_stopped_with_the_children_that_hold_its_pipes(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # The grandchild ignores SIGTERM and keeps stdout and stderr open, as srun waiting on a hung rank.
    script = f"sh -c 'trap \"\" TERM; echo $$ > {pidfile}; while :; do sleep 1; done' & wait"
    started = time.monotonic()
    outcome = stream_client(["sh", "-c", script], timeout_s=1, on_record=None, guard_s=1.0)
    took = time.monotonic() - started
    assert outcome.exit_code != 0 and "printed nothing for 1 s" in str(outcome.error)
    assert took < 15, took
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_a_note_on_stderr_of_a_successful_engine_is_kept() -> None:
    note = "rank 1: MPI_Finalize did not return within 3 s"
    outcome = stream_client(["sh", "-c", f"echo 'fabscope-engine-mpi: note: {note}' >&2; echo noise >&2"],
                            timeout_s=1, on_record=None)
    assert outcome.exit_code == 0 and outcome.error is None
    assert outcome.notes == [note]


RECORD = Path(__file__).parent.parent / "fixtures" / "records" / "mpi-openmpi-lat-ucxnetdev.jsonl"
FINALIZE_NOTE = ("rank 1: MPI_Finalize did not return within 5 s after the measurement ended (the MPI library's "
                 "shutdown waited on its peer); the results printed are complete; exiting without it")


def _launcher_that_failed(note: str, record: bool = True) -> list[str]:
    """What mpiexec (hydra) did in CI: the records came, a rank left finalize, the job exited 143."""
    show = f"head -n 1 {RECORD}; " if record else ""
    return ["sh", "-c", f"{show}echo {shlex.quote('fabscope-engine-mpi: note: ' + note)} >&2; exit 143"]


def test_a_launcher_failing_a_job_whose_rank_left_finalize_at_its_deadline_keeps_the_run() -> None:
    outcome = stream_client(_launcher_that_failed(FINALIZE_NOTE), timeout_s=1, on_record=None)
    assert outcome.exit_code == 0 and outcome.error is None and len(outcome.records) == 1
    assert outcome.notes[0] == FINALIZE_NOTE
    assert "the launcher exited with 143" in outcome.notes[-1]


def test_a_launcher_failure_without_the_finalize_note_or_without_results_fails_the_run() -> None:
    other = stream_client(_launcher_that_failed("rank 1: something else"), timeout_s=1, on_record=None)
    assert other.exit_code == 143 and other.error
    nothing = stream_client(_launcher_that_failed(FINALIZE_NOTE, record=False), timeout_s=1, on_record=None)
    assert nothing.exit_code == 143 and nothing.error
