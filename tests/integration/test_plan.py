# SPDX-License-Identifier: BSD-3-Clause
"""plan.py, the one owner of what a run's engines are told: names checked against the engine's own
option table, a plan's options reaching the engine unchanged, and the one exit-code rule."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fabscope.errors import EXIT_MEASURE, EXIT_MISROUTED, EXIT_OK
from fabscope.launch import plan, runner
from fabscope.results import parse_record

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def test_a_plan_takes_only_the_engines_measurement_options() -> None:
    with pytest.raises(ValueError, match="listen"):
        plan.RunPlan.of({"backend": "tcp", "listen": "127.0.0.1:0"}, plan.Loopback())
    with pytest.raises(ValueError, match="no-such-option"):
        plan.RunPlan.of({"no-such-option": "1"}, plan.Loopback())
    p = plan.RunPlan.of([("backend", "tcp"), ("sizes", "8"), ("timeout", "7")], plan.Loopback())
    assert p.timeout_s == 7.0 and p.backend == "tcp"
    bw = p.with_options(pattern="bw", sizes="64K")
    assert bw.engine_args() == ["--backend=tcp", "--timeout=7", "--pattern=bw", "--sizes=64K"]
    assert p.engine_args() == ["--backend=tcp", "--sizes=8", "--timeout=7"]  # plans are values: p unchanged


def test_a_loopback_plan_runs_with_its_options() -> None:
    p = plan.RunPlan.of([("backend", "tcp"), ("pattern", "lat"), ("sizes", "8,64"), ("iters", "50"),
                         ("warmup", "5"), ("tcp-nodelay", "false")], plan.Loopback())
    got: list[object] = []
    outcome = plan.execute(p, got.append)
    assert plan.exit_code(outcome) == EXIT_OK, outcome.error
    assert [r.size for r in outcome.records] == [8, 64] and len(got) == 2
    # What the plan said is what the engine ran (the record echoes its effective configuration).
    config = outcome.records[0].raw["config"]
    assert (config["iters"], config["warmup"], config["backend_options"]["tcp-nodelay"]) == (50, 5, False), config


def test_the_exit_code_rule() -> None:
    misrouted = [parse_record(json.loads(line)) for line in
                 (RECORDS / "netns-tcp-bw-bind-misrouted.jsonl").read_text().splitlines() if line.strip()]
    assert misrouted and all(r.misrouted for r in misrouted)
    assert plan.exit_code(runner.RunOutcome(records=misrouted)) == EXIT_MISROUTED
    # An error outranks a misroute: the run did not finish.
    assert plan.exit_code(runner.RunOutcome(records=misrouted, error="x", exit_code=3)) == 3
    assert plan.exit_code(runner.RunOutcome(error="x")) == EXIT_MEASURE
    assert plan.exit_code(runner.RunOutcome()) == EXIT_OK


def test_a_damaged_engine_line_fails_the_run_instead_of_vanishing() -> None:
    """A launcher forwards each rank's stdout in chunks, not lines: under srun a 20 KB line of one task
    came back cut in two with another task's line inside (reproduced in the netns testbed), and the
    damaged record was skipped as "not JSON", so a suite row lost its 1 MiB figure without a word.
    An engine line that does not parse now fails the run, naming it; other chatter is still ignored."""
    good = (RECORDS / "tcp-send-bw-loopback.jsonl").read_text().strip()
    damaged = good[:3000] + "noise from another rank\n" + good[3000:]
    printed = "UCX WARN chatter\n" + good + "\n" + damaged + "\n"
    script = f"import sys; sys.stdout.write({printed!r})"
    outcome = runner.stream_client([sys.executable, "-c", script], 10.0, None)
    assert len(outcome.records) == 1, outcome
    assert outcome.exit_code == EXIT_MEASURE and "engine line came damaged" in (outcome.error or ""), outcome.error
    assert len(outcome.error or "") < 400, outcome.error  # the line cut, not 8 KB of it
    clean = runner.stream_client([sys.executable, "-c", f"print('UCX WARN chatter'); print({good!r})"], 10.0, None)
    assert clean.error is None and len(clean.records) == 1


def test_a_run_missing_a_size_fails_naming_the_sizes_that_came() -> None:
    """Every size asked has its result, or the run fails saying which came (never a shorter table)."""
    rec = parse_record(json.loads((RECORDS / "tcp-send-bw-loopback.jsonl").read_text()))
    p = plan.RunPlan.of([("backend", "tcp"), ("pattern", "bw"), ("sizes", "64K,1M")], plan.Loopback())
    outcome = plan._complete(p, runner.RunOutcome(records=[rec]))
    assert plan.exit_code(outcome) == EXIT_MEASURE, outcome
    assert "1 of the 2 sizes asked (--sizes 64K,1M): 65536 B" in (outcome.error or ""), outcome.error
    whole = plan._complete(p.with_options(sizes="64K"), runner.RunOutcome(records=[rec]))
    assert plan.exit_code(whole) == EXIT_OK, whole.error


def test_the_exit_rule_of_many_rows() -> None:
    misrouted = [parse_record(json.loads(line)) for line in
                 (RECORDS / "netns-tcp-bw-bind-misrouted.jsonl").read_text().splitlines() if line.strip()]
    failed = runner.RunOutcome(error="x", exit_code=3)
    unsupported = runner.RunOutcome(error="x", exit_code=6)
    # A misrouted row is the loudest (exit 5) even beside a failed one; a failed row is exit 1; a
    # row its backend cannot run is a note.
    assert plan.rows_exit_code([failed, runner.RunOutcome(records=misrouted)]) == EXIT_MISROUTED
    assert plan.rows_exit_code([runner.RunOutcome(), failed]) == EXIT_MEASURE
    assert plan.rows_exit_code([runner.RunOutcome(), unsupported]) == EXIT_OK
