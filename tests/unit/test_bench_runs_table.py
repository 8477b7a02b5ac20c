# SPDX-License-Identifier: BSD-3-Clause
"""bench/runs_table.py: several runs of a Soft-RoCE bench side by side (each run's verdicts, and
the sandwiches of all runs pooled), from the --json files both benches write."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from runs_table import main


def _verbs_row(name: str, used: list[float], left_out: list[int], lat: bool = True) -> dict[str, Any]:
    med = sorted(used)[len(used) // 2] if used else None
    goal = 1.05 if lat else 0.95
    met = None if med is None else (med <= goal if lat else med >= goal)
    return {"bench": name, "lat": lat, "goal": goal, "sandwich_ratio": med, "sandwich_ratios": used,
            "sandwich_left_out": left_out, "met": met}


def _write(tmp: Path, name: str, rows: list[dict[str, Any]]) -> Path:
    p = tmp / name
    p.write_text(json.dumps({"mode": "two-guests", "rows": rows}))
    return p


def _lines(out: str, row: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"| {row} |")]


def test_a_row_missed_in_one_run_is_not_met_in_all_while_its_pool_may_meet(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run1 = _write(tmp_path, "r1.json", [_verbs_row("send_lat", [1.06, 1.07, 1.08], [4]),
                                        _verbs_row("send_bw", [1.0, 1.01, 0.99], [], lat=False)])
    run2 = _write(tmp_path, "r2.json", [_verbs_row("send_lat", [1.00, 1.01, 1.02], []),
                                        _verbs_row("send_bw", [0.97, 0.98, 0.96], [], lat=False)])
    assert main([str(run1), str(run2)]) == 0
    out = capsys.readouterr().out
    per_run, pooled = _lines(out, "send_lat")
    # three sandwiches are too few for an interval: the miss is not a verdict
    assert per_run == ("| send_lat | 1.070 (3 of 4) NO (undecided) | 1.010 (3 of 3) (undecided) | <= 1.05 | "
                       "NO (undecided) |")
    # six sandwiches pooled: median (1.02 + 1.06) / 2 = 1.04, under the goal; the 95 % interval
    # of six is their whole range, 1.00-1.08, which holds the goal
    assert pooled == "| send_lat | 6 | 1.040 | 1.010-1.070 | 1.000-1.080 | <= 1.05 | yes (undecided) |"
    bw_run, bw_pool = _lines(out, "send_bw")
    assert bw_run.endswith("| >= 0.95 | yes (undecided) |")
    assert bw_pool.startswith("| send_bw | 6 | 0.985 |")
    assert "Goals met per run: 1 of 2, 2 of 2; decided by the interval: 0 of 2, 0 of 2." in out


def test_the_middleware_bench_rows_are_read_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    row = {"bench": "mpi_bw", "kind": "bw", "goal": 0.95, "sandwich": 0.9, "sandwich_ratios": [0.9, 0.9],
           "sandwich_left_out": [], "met": False}
    assert main([str(_write(tmp_path, "m.json", [row]))]) == 0
    out = capsys.readouterr().out
    assert _lines(out, "mpi_bw") == ["| mpi_bw | 0.900 (2 of 2) NO (undecided) | >= 0.95 | NO (undecided) |",
                                     "| mpi_bw | 2 | 0.900 | 0.900-0.900 | - | >= 0.95 | NO (undecided) |"]
    assert "The sandwiches of 1 run pooled:" in out


def test_runs_of_different_benches_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path, "a.json", [_verbs_row("send_lat", [1.0], [])])
    b = _write(tmp_path, "b.json", [_verbs_row("read_lat", [1.0], [])])
    assert main([str(a), str(b)]) == 2
    assert "run 2 has other rows than run 1" in capsys.readouterr().err


def test_a_file_that_is_not_a_bench_result_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "fabscope.result/1"}))
    assert main([str(p)]) == 2
    assert "no `rows`" in capsys.readouterr().err
    p.write_text(json.dumps({"rows": [{"bench": "send_lat"}]}))
    assert main([str(p)]) == 2
    assert "without the sandwich fields" in capsys.readouterr().err


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`runs_table.py ... | head -3`: the reader is gone before the tables are written; the script
    ends quietly with 0 instead of a BrokenPipeError traceback."""
    import subprocess

    run = _write(tmp_path, "r1.json", [_verbs_row(f"row{i}_lat", [1.0, 1.01, 1.02], []) for i in range(50)])
    script = Path(__file__).resolve().parents[2] / "bench" / "runs_table.py"
    p = subprocess.Popen([sys.executable, str(script), str(run)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # before the interpreter has even started: its first write meets a closed pipe
    err = p.stderr.read().decode()
    assert p.wait(timeout=30) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_run_whose_interval_clears_the_goal_is_decided(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Ten sandwiches: the interval is their 2nd to 9th, 0.99-1.08 in the first run (the goal 1.05
    # inside it: a miss that is not a verdict), 1.06-1.09 in the second (wholly above: a miss).
    wide = [0.95, 0.99, 1.0, 1.05, 1.06, 1.06, 1.07, 1.07, 1.08, 1.2]
    tight = [1.05, 1.06, 1.06, 1.07, 1.07, 1.07, 1.08, 1.08, 1.09, 1.10]
    run1 = _write(tmp_path, "w.json", [_verbs_row("send_lat", wide, [])])
    run2 = _write(tmp_path, "t.json", [_verbs_row("send_lat", tight, [])])
    assert main([str(run1), str(run2)]) == 0
    per_run, pooled = _lines(capsys.readouterr().out, "send_lat")
    assert per_run == ("| send_lat | 1.060 (10 of 10) [0.990-1.080] NO (undecided) | "
                       "1.070 (10 of 10) [1.060-1.090] NO | <= 1.05 | NO |")
    # twenty pooled: the interval (6th to 15th) is 1.06-1.08, wholly above the goal
    assert pooled.endswith("| 1.060-1.080 | <= 1.05 | NO |")
