# SPDX-License-Identifier: BSD-3-Clause
"""The suites' "why" column and lines, and the two-host table's "% of expected" (issue 20, "Where it
shows"), on results parsed from saved real records (tests/fixtures): a row names the causes seen in
its results (``-`` when none is), the lines under the table are the explanation's own."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from conftest import REPO
from fabscope.report.figures import comparison_rows
from fabscope.report.inputs import read_inputs
from fabscope.report.markdown import comparison_markdown
from fabscope.results import Result, load_file, parse_record
from fabscope.suite import loopback as suite
from fabscope.suite.hosts import text_table

FIXTURES = REPO / "tests" / "fixtures"
FACTS = FIXTURES / "records" / "tcp-send-bw-32k-64k-explain-facts.jsonl"  # 32 KiB: nothing; 64 KiB: segmentation
FAR = FIXTURES / "records" / "softroce-numa-verbs-lat-cpu-far.jsonl"  # placement
SUITE = FIXTURES / "report" / "suite-peer-netns.jsonl"  # a real two-host suite (netns), nothing seen


def _seen_line(res: Result) -> str:
    assert res.explanation is not None
    (line,) = res.explanation.why_lines()
    return line


def test_loopback_table_has_a_why_column_and_the_lines_under_it() -> None:
    small, big = load_file(FACTS)
    (far,) = load_file(FAR)
    tcp, verbs = suite.Case("tcp", "send", "bw"), suite.Case("verbs", "send", "lat", (("device", "rxe0"),))
    measured = [(tcp, small), (tcp, big), (verbs, far)]
    rows = [suite._row(c, r) for c, r in measured] + [["ucx tag lat", "-", "FAILED (exit 4): x", "", "", ""]]
    table = suite.text_table(rows).splitlines()
    assert table[0].split() == ["backend", "op", "pattern", "bytes", "result", "carried", "by", "path", "why"]
    assert table[1].startswith("tcp send bw") and table[1].endswith("  -")
    assert table[2].startswith("tcp send bw") and table[2].endswith("  segmentation")
    assert table[3].startswith("verbs send lat (--device=rxe0)") and table[3].endswith("  placement")
    assert table[4].rstrip().endswith("FAILED (exit 4): x")
    assert suite.why_notes(measured) == [
        f"why (tcp send bw 65536 B): {_seen_line(big)}",
        f"why (verbs send lat (--device=rxe0) 8 B): {_seen_line(far)}",
    ]
    assert suite.why_notes(measured)[0].startswith("why (tcp send bw 65536 B): segmentation: 65,536 B per message "
                                                   "over MSS")


def test_two_host_table_has_a_why_column_and_the_rows_carry_their_lines() -> None:
    records = read_inputs([str(SUITE)]).records + load_file(FAR)
    rows = {r.label: r for r in comparison_rows(records)}
    verbs, tcp = rows["verbs send (device rxe0)"], rows["tcp send (device fabric0)"]
    assert (verbs.causes_seen, verbs.why_cell) == (("placement",), "placement")
    assert verbs.why == (f"why (verbs send (device rxe0) lat 8 B): {_seen_line(load_file(FAR)[0])}",)
    assert (tcp.causes_seen, tcp.why_cell, tcp.why) == ((), "-", ())
    text = text_table(list(rows.values())).splitlines()
    assert text[0].endswith("  why")
    assert "% of expected" in text[0] and "% line rate" not in text[0]
    by_label = {line.split("  ")[0]: line for line in text[1:]}
    assert by_label["verbs send (device rxe0)"].endswith("unverifiable  placement")
    assert by_label["tcp send (device fabric0)"].endswith("unverifiable  -")
    md = comparison_markdown(list(rows.values()))
    assert "| % of expected | carried by | path | why |" in md and "| unverifiable | placement |" in md
    summary_row: dict[str, Any] = json.loads(json.dumps(asdict(verbs)))  # suite.json's rows
    assert summary_row["causes_seen"] == ["placement"] and summary_row["why"] == list(verbs.why)


def _with_rate(res: Result, gbps: float) -> Result:
    """The record with the carrying port's rate reported (what the explanation's ceiling reads)."""
    rec: dict[str, Any] = json.loads(json.dumps(res.raw))
    rec["transport"]["local"]["rate_gbps"] = gbps
    return parse_record(rec, judge_path=False)


def test_percent_of_expected_is_the_explanations_fraction_else_the_line_rate() -> None:
    records = read_inputs([str(SUITE)]).records
    tcp_1m = next(r for r in records if r.backend == "tcp" and r.pattern == "bw" and r.size == 1 << 20)
    assert tcp_1m.bandwidth is not None and tcp_1m.bandwidth.gbps is not None
    label = "tcp send (device fabric0)"
    # Today's records carry no rate for a veth: neither is known, the cell says "-".
    plain = {r.label: r for r in comparison_rows(records)}[label]
    assert (plain.expected_pct, plain.line_rate_pct, plain.pct_of_expected) == (None, None, None)
    # This host's line rate for the carrying port, as before.
    by_host = {r.label: r for r in comparison_rows(records, {"fabric0": 1.0})}[label]
    assert by_host.expected_pct is None
    assert by_host.pct_of_expected == pytest.approx(100.0 * tcp_1m.bandwidth.gbps)
    # The record's own ceiling (its explanation's achieved fraction) wins over the host's table.
    rated = [_with_rate(r, 2.5) if r is tcp_1m else r for r in records]
    (exp_row,) = [r for r in comparison_rows(rated, {"fabric0": 1.0}) if r.label == label]
    fraction = next(r for r in rated if r.size == 1 << 20 and r.backend == "tcp").explanation
    assert fraction is not None and fraction.achieved_fraction is not None
    assert exp_row.pct_of_expected == pytest.approx(100.0 * fraction.achieved_fraction)
    # The ceiling is the link's rate less TCP/IP headers and Ethernet framing per MSS (explain._expected).
    mss = tcp_1m.transport.local["mss"]
    assert exp_row.pct_of_expected == pytest.approx(100.0 * tcp_1m.bandwidth.gbps / (2.5 * mss / (mss + 90)), rel=1e-3)
    line = next(line for line in text_table([exp_row]).splitlines() if line.startswith(label))
    assert f"  {100.0 * fraction.achieved_fraction:.1f}  " in line
