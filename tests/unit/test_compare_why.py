# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope compare` names the causes that differ when B is slower than A (issue 20, "Where it
shows"): stores built from the saved real records (tests/fixtures/records), compared the way the
CLI does it (load_side reads the store; each result's explanation is derived when it is parsed).

A record whose latency is moved is the far-placement record with its figures shifted (its facts,
and so its explanation, unchanged): the real far run was no slower than the auto one, since qemu
emulates the NUMA topology, not its cost."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import REPO, fabscope
from fabscope.compare import Rule, compare
from fabscope.compare.command import load_side, render
from fabscope.errors import EXIT_REGRESSION
from fabscope.results import Histogram, Result, load_file, parse_record
from fabscope.store import open_store

RECORDS = REPO / "tests" / "fixtures" / "records"
AUTO = RECORDS / "softroce-numa-verbs-lat-cpu-auto.jsonl"
FAR = RECORDS / "softroce-numa-verbs-lat-cpu-far.jsonl"
BUFFERS = RECORDS / "tcp-send-bw-32k-sndbuf-explain-buffers.jsonl"  # autotuned, then --tcp-sndbuf 4096


def _one(path: Path, line: int = 0) -> Result:
    return load_file(path)[line]


def _store(db: Path, sides: dict[str, list[Result]]) -> None:
    """One stored run per result, tagged with its side."""
    with open_store(db) as store:
        for tag, results in sides.items():
            for r in results:
                store.add_run("run", ["run", "--tag", tag], [r], tag=tag)


def _slower(res: Result, factor: float) -> Result:
    """The record with its latency moved by ``factor`` (2000 samples around the new p50, +-1 %)."""
    rec: dict[str, Any] = json.loads(json.dumps(res.raw))
    p50 = rec["latency_us"]["p50"] * factor
    samples = [p50 * 1000 * (0.99 + 0.02 * i / 1999) for i in range(2000)]
    rec["latency_us"].update(min=samples[0] / 1000, p50=p50, p99=samples[-21] / 1000, max=samples[-1] / 1000,
                             histogram=Histogram.from_samples_ns(samples).to_json())
    return parse_record(rec)


def test_a_fixed_send_buffer_is_named_as_the_cause_seen_in_b(tmp_path: Path) -> None:
    """Real records, two stored runs a side: the bandwidth drop is a regression, and the one cause
    that tells the sides apart is B's fixed send buffer, with B's evidence, cost and fix."""
    auto, fixed = load_file(BUFFERS)
    db = tmp_path / "h.db"
    _store(db, {"auto": [auto, auto], "fixed": [fixed, fixed]})
    a, b = load_side("auto", str(db)), load_side("fixed", str(db))
    (row,) = compare(a, b)
    assert row.verdict == "regression" and row.causes is not None
    (diff,) = row.causes.differ
    assert (diff.seen_in, diff.cause.cause, diff.runs_seen, diff.runs) == ("B", "buffers", 2, 2)
    assert fixed.explanation is not None and diff.cause == fixed.explanation.seen[0]  # B's own cause, as explained
    assert diff.other is not None and diff.other.state == "clear"
    text = render([row], a, b, Rule())
    head, _, rest = text.partition("\ncase ")
    table_row, why, *_ = rest.splitlines()[1:]
    assert "backend_options.tcp-sndbuf: 0 -> 4096" in head  # the settings that differ, above the table
    assert table_row.startswith("tcp send bw 32768 B (tcp via lo)") and "REGRESSION" in table_row
    assert why == "# why B differs (seen in 2 of B's 2 runs; clear in A): " + diff.cause.why_line()
    assert why.startswith("# why B differs (seen in 2 of B's 2 runs; clear in A): buffers: the client's send buffer "
                          "fixed by --tcp-sndbuf 4,096 B")

    out = fabscope("compare", "auto", "fixed", "--store", str(db), "--format", "json")
    assert out.returncode == EXIT_REGRESSION, out.stdout + out.stderr
    (js,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert js["causes_differ"] == [{
        "cause": "buffers", "seen_in": "B", "runs_seen": 2, "runs": 2, "evidence": diff.cause.evidence,
        "cost": diff.cause.cost, "fix": diff.cause.fix, "other_state": "clear",
        "other_evidence": diff.other.evidence}]
    assert js["causes_seen_in_both"] == [] and "causes" not in js
    txt = fabscope("compare", "auto", "fixed", "--store", str(db))
    assert txt.returncode == EXIT_REGRESSION and why in txt.stdout.splitlines(), txt.stdout


def test_far_placement_in_b_is_named_with_b_evidence() -> None:
    """The brief's pair: --cpu auto as A, --cpu far as B (made slower): placement, seen in B, clear
    in A; one run a side is inconclusive, yet B is slower beyond the threshold: the causes show."""
    auto, far = _one(AUTO), _one(FAR)
    from fabscope.compare import Side

    a, b = Side("auto", [[auto]]), Side("far", [[_slower(far, 1.5)]])
    (row,) = compare(a, b)
    assert row.verdict == "inconclusive" and row.change is not None and row.change > 0.4
    assert row.causes is not None
    (diff,) = row.causes.differ
    assert (diff.seen_in, diff.cause.cause) == ("B", "placement")
    assert "the local engine ran on CPU 1 (NUMA node 0), and rxe0 (on eth0) is on node 1 (--cpu far)" in \
        diff.cause.evidence
    assert diff.other is not None and diff.other.state == "clear" and "the node of rxe0" in diff.other.evidence
    lines = [line for line in render([row], a, b, Rule()).splitlines() if line.startswith("# why")]
    assert lines == ["# why B differs (seen in 1 of B's 1 run; clear in A): " + diff.cause.why_line()]
    js = row.to_json()
    assert [(d["cause"], d["seen_in"], d["other_state"]) for d in js["causes_differ"]] == [("placement", "B", "clear")]
    json.dumps(js)  # serialisable as the CLI writes it


def test_a_cause_seen_only_in_a_is_named_as_a_difference_too(tmp_path: Path) -> None:
    """The real figures the other way round: far as A, auto as B (4 % slower: a regression at a 2 %
    threshold, two stored runs a side). B is slower although A had the far placement: said so."""
    db = tmp_path / "h.db"
    _store(db, {"far": [_one(FAR)] * 2, "auto": [_one(AUTO)] * 2})
    a, b = load_side("far", str(db)), load_side("auto", str(db))
    (row,) = compare(a, b, Rule(threshold=0.02))
    assert row.verdict == "regression" and row.causes is not None
    (diff,) = row.causes.differ
    assert (diff.seen_in, diff.cause.cause, diff.runs_seen) == ("A", "placement", 2)
    assert [line for line in render([row], a, b, Rule(threshold=0.02)).splitlines() if line.startswith("# why")] == \
        ["# why A differs (seen in 2 of A's 2 runs; clear in B): " + diff.cause.why_line()]


def test_b_faster_says_nothing_about_causes() -> None:
    """The real auto/far pair as recorded: B (far) is no slower, so no cause line and JSON null."""
    from fabscope.compare import Side

    a, b = Side("auto", [[_one(AUTO)]]), Side("far", [[_one(FAR)]])
    (row,) = compare(a, b)
    assert row.verdict == "same" and row.causes is None
    assert "# why" not in render([row], a, b, Rule())
    js = row.to_json()
    assert js["causes_differ"] is None and js["causes_seen_in_both"] is None


def test_the_same_causes_on_both_sides_are_said_in_one_line(tmp_path: Path) -> None:
    """Two 64 KiB loopback runs, both with segmentation (B slower); two 32 KiB ones with nothing seen."""
    db = tmp_path / "h.db"
    seg_a, seg_b = _one(RECORDS / "tcp-send-bw-device-lo.jsonl"), _one(RECORDS / "tcp-send-bw-loopback.jsonl")
    clean_a, clean_b = _one(BUFFERS), _one(RECORDS / "tcp-send-bw-32k-64k-explain-facts.jsonl")
    _store(db, {"a": [seg_a, clean_a], "b": [seg_b, clean_b]})
    a, b = load_side("a", str(db)), load_side("b", str(db))
    rows = compare(a, b)
    assert [(r.size, r.verdict) for r in rows] == [(32768, "inconclusive"), (65536, "inconclusive")]
    assert all(r.causes is not None and r.causes.differ == () for r in rows)
    whys = [line for line in render(rows, a, b, Rule()).splitlines() if line.startswith("# why")]
    assert whys == [
        "# why: the same causes in A and B (none seen; unchecked in a run: placement, cpu, link, delay)",
        "# why: the same causes in A and B (segmentation seen in both; unchecked in a run: retransmission, mtu, "
        "placement, cpu, link, delay)",
    ]
    js = [r.to_json() for r in rows]
    assert [j["causes_differ"] for j in js] == [[], []]
    assert [j["causes_seen_in_both"] for j in js] == [[], ["segmentation"]]
