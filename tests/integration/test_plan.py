"""plan.py, the one owner of what a run's engines are told: names checked against the engine's own
option table, a plan's options reaching the engine unchanged, and the one exit-code rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabscope import plan, runner
from fabscope.errors import EXIT_MEASURE, EXIT_MISROUTED, EXIT_OK
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
