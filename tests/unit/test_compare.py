"""`fabscope compare`: the rule on real loopback runs (a blocking receive against busy polling is a
regression, exit 9), one run is never called, identical sides are the same; the statistics
against known values. The full A/A validation is bench/compare_validation.py (bench/RESULTS.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, fabscope
from fabscope import runner
from fabscope.compare import EXIT_REGRESSION, Rule, Side, compare, welch_p
from fabscope.results import Histogram, Result, load_file, parse_record

RECORDS = REPO / "tests" / "fixtures" / "records"


def _run(poll: str) -> Result:
    outcome = runner.run_loopback(["--pattern=lat", "--sizes=8", "--iters=300", "--warmup=100", f"--poll={poll}",
                                   "--format=json"], 10.0)
    assert outcome.error is None and len(outcome.records) == 1, outcome.error
    return outcome.records[0]


@pytest.fixture(scope="module")
def busy_and_block() -> tuple[Side, Side]:
    """Five runs each, interleaved so the machine's load falls on both sides alike."""
    busy: list[list[Result]] = []
    block: list[list[Result]] = []
    for _ in range(5):
        busy.append([_run("busy")])
        block.append([_run("block")])
    return Side("busy", busy), Side("block", block)


def test_blocking_receive_is_a_regression_and_back_an_improvement(busy_and_block: tuple[Side, Side]) -> None:
    busy, block = busy_and_block
    (row,) = compare(busy, block)
    assert row.verdict == "regression", row
    assert row.change is not None and row.change > 0.5  # haltpoll wake-ups: several times slower
    assert row.p_runs is not None and row.p_runs < 0.01 and row.p_samples is not None and row.p_samples < 0.002
    assert row.runs == (5, 5) and row.transport == "tcp via lo"
    (back,) = compare(block, busy)
    assert back.verdict == "improvement"


def test_one_run_is_never_called(busy_and_block: tuple[Side, Side]) -> None:
    busy, block = busy_and_block
    (row,) = compare(Side("a", busy.runs[:1]), Side("b", block.runs[:1]))
    assert row.verdict == "same" and row.evidence.startswith("one run: no statistical evidence")
    assert row.change is not None and row.change > 0.5 and "Mann-Whitney U" in row.evidence


def test_a_side_against_itself_is_the_same(busy_and_block: tuple[Side, Side]) -> None:
    busy, _ = busy_and_block
    (row,) = compare(busy, busy)
    assert row.verdict == "same" and row.change == 0.0


def test_bandwidth_needs_repeated_runs() -> None:
    bw = load_file(RECORDS / "tcp-send-bw-loopback.jsonl")
    (row,) = compare(Side("a", [bw]), Side("b", [bw]))
    assert row.metric == "bandwidth [Gb/s]" and row.verdict == "same"
    assert "one run: no statistical evidence" in row.evidence


def test_cases_only_on_one_side_are_listed_not_called() -> None:
    lat = load_file(RECORDS / "tcp-send-lat-loopback.jsonl")
    rows = compare(Side("a", [lat]), Side("b", [lat[:1]]))
    assert [(r.size, r.verdict) for r in rows] == [(8, "same"), (4096, "only-baseline")]


def _shaped(p50_us: float) -> Result:
    """A real record whose latency is replaced by 2000 samples around ``p50_us`` (+-1 %)."""
    rec = json.loads((RECORDS / "tcp-send-lat-with-histogram.jsonl").read_text().splitlines()[0])
    samples = [p50_us * 1000 * (0.99 + 0.02 * i / 1999) for i in range(2000)]
    rec["latency_us"].update(min=samples[0] / 1000, p50=p50_us, p99=samples[-21] / 1000, max=samples[-1] / 1000,
                             histogram=Histogram.from_samples_ns(samples).to_json())
    return parse_record(rec)


@pytest.mark.parametrize(("shift", "verdict"), [(1.03, "same"), (1.08, "regression"), (0.92, "improvement")])
def test_effect_size_and_evidence_both_needed(shift: float, verdict: str) -> None:
    """3 % slower with tiny spread is statistically clear on both tests, but below 5 %: 'same'."""
    base = Side("a", [[_shaped(p)] for p in (10.0, 10.05, 9.95)])
    cur = Side("b", [[_shaped(p * shift)] for p in (10.0, 10.05, 9.95)])
    (row,) = compare(base, cur)
    assert row.p_runs is not None and row.p_runs < 0.01
    assert row.verdict == verdict
    (loose,) = compare(base, cur, Rule(threshold=0.02))
    assert loose.verdict == ("regression" if shift > 1 else "improvement")


def test_welch_against_known_values() -> None:
    assert welch_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.021311641128756727, rel=1e-9)  # scipy ttest_ind
    assert welch_p([1, 1.1], [1, 1.1]) == pytest.approx(1.0)
    assert welch_p([1.0], [2.0, 3.0]) is None


def test_cli_compare_tags_and_files(tmp_path: Path) -> None:
    """Through the CLI: tags in a store (all their runs; exit 9 on the regression), latest~1 vs
    latest after real runs, and result files. The stored runs are real records with their latency
    set to known values, so the exit status does not depend on this machine's load."""
    from fabscope.store import open_store

    db = tmp_path / "h.db"
    with open_store(db) as store:
        for p50 in (10.0, 10.05, 9.95):
            store.add_run("run", ["run"], [_shaped(p50)], tag="fast")
            store.add_run("run", ["run"], [_shaped(p50 * 1.5)], tag="slow")
    out = fabscope("compare", "fast", "slow", "--store", str(db))
    assert out.returncode == EXIT_REGRESSION, out.stdout + out.stderr
    assert "REGRESSION" in out.stdout and "runs 1, 3, 5" in out.stdout and "+50.0%" in out.stdout
    back = fabscope("compare", "slow", "fast", "--store", str(db))
    assert back.returncode == 0 and "improvement" in back.stdout
    js = fabscope("compare", "fast", "slow", "--store", str(db), "--format", "json")
    (row,) = [json.loads(line) for line in js.stdout.splitlines()]
    assert row["verdict"] == "regression" and row["runs"] == [3, 3]
    for poll in ("busy", "block"):
        ran = fabscope("run", "--loopback", "--sizes", "8", "--iters", "300", "--poll", poll, "--store", str(db))
        assert ran.returncode == 0, ran.stderr
    one = fabscope("compare", "latest~1", "latest", "--store", str(db))
    assert one.returncode == 0 and "one run: no statistical evidence" in one.stdout, one.stdout
    files = fabscope("compare", str(RECORDS / "tcp-send-lat-loopback.jsonl"),
                     str(RECORDS / "tcp-send-lat-with-histogram.jsonl"))
    assert files.returncode == 0 and "only-baseline" in files.stdout and "only-current" in files.stdout
    bad = fabscope("compare", "nosuchtag", "latest", "--store", str(db))
    assert bad.returncode == 2 and "tags there: fast, slow" in bad.stderr


def _bw(gbps: float) -> Result:
    rec = json.loads((RECORDS / "tcp-send-bw-loopback.jsonl").read_text().splitlines()[0])
    rec.update(bandwidth_gbps=gbps, bandwidth_MBps=gbps * 125.0)
    return parse_record(rec)


def test_bandwidth_with_repeated_runs_is_called() -> None:
    base = Side("a", [[_bw(g)] for g in (10.0, 10.2, 9.9)])
    drop = compare(base, Side("b", [[_bw(g)] for g in (8.0, 8.1, 7.9)]))[0]
    assert (drop.verdict, drop.metric) == ("regression", "bandwidth [Gb/s]")
    assert drop.change is not None and drop.change == pytest.approx(8.0 / 10.0 - 1)
    rise = compare(base, Side("b", [[_bw(g)] for g in (12.0, 12.1, 11.9)]))[0]
    assert rise.verdict == "improvement"
    noisy = compare(base, Side("b", [[_bw(g)] for g in (6.0, 12.0, 9.0)]))[0]
    assert noisy.verdict == "same" and noisy.p_runs is not None and noisy.p_runs > 0.01
