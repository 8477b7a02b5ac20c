# SPDX-License-Identifier: BSD-3-Clause
"""Collective results in `fabscope report` (issue 47's report; issue 51's "why" in every output):
a saved `fabscope.collective/1` file, alone or beside pair results, gives each operation's table in
text, Markdown, CSV and HTML, and a misrouted one its path per host and why, with the fix, in each.
From a real record (the netns alltoall Open MPI sent over mgmt0)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import html5lib

from conftest import REPO, fabscope

RECORDS = REPO / "tests" / "fixtures" / "records"
MISROUTED = RECORDS / "collective" / "netns-mpi-alltoall-3hosts-misrouted.jsonl"
PAIR = RECORDS / "tcp-send-bw-loopback.jsonl"
WHY = "why: route: Open MPI ran pml ob1 (pml = ^ucx"
FIX = "fix: `fabscope ... --device fabric0` (it sets btl_tcp_if_include=fabric0"


def test_text_shows_the_table_the_path_per_host_and_why() -> None:
    out = fabscope("report", str(MISROUTED), "--no-history")
    assert out.returncode == 0, out.stderr
    assert "# collective alltoall | 3 ranks on 3 host(s)" in out.stdout
    assert " 98304  24576     10 " in out.stdout  # the size's row: size, count, iterations
    assert "#   fs-b: fabric0 counted 0 B rx, the algorithm must move at least 655360 B there" in out.stdout
    assert f"# {WHY}" in out.stdout and FIX in out.stdout


def test_html_has_a_section_per_operation_with_why_marked_bad(tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    out = fabscope("report", str(MISROUTED), "--no-history", "--html", str(page))
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    html5lib.HTMLParser(strict=True).parse(text)  # raises on any parse error
    assert "<h2>collective alltoall | 3 ranks on 3 host(s)" in text
    assert "<td>98304</td><td>24576</td><td>10</td>" in text
    assert f'<p class="bad">{WHY}' in text and FIX in text
    assert '<p class="bad">path 98304 B: misrouted (fabric0 on every host)</p>' in text


def test_beside_pair_results_both_are_reported(tmp_path: Path) -> None:
    md, table = tmp_path / "r.md", tmp_path / "r.csv"
    out = fabscope("report", str(PAIR), str(MISROUTED), "--no-history", "--md", str(md), "--csv", str(table))
    assert out.returncode == 0, out.stderr
    assert "## Collectives" in md.read_text() and "| 98304 | 24576 | 10 |" in md.read_text()
    results, collectives = table.read_text().split("\n\n")  # two tables, a blank line between
    assert next(csv.reader(io.StringIO(results)))[0] != "pattern"
    rows = list(csv.DictReader(io.StringIO(collectives)))
    assert [(r["pattern"], r["size_B"], r["verified"]) for r in rows] == [("alltoall", "98304", "yes")]


def test_a_file_of_another_kind_is_still_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"schema": "fabscope.gremlin/1"}\n')
    out = fabscope("report", str(bad), "--no-history")
    assert out.returncode == 2 and "fabscope.gremlin/1" in out.stderr and "fabscope.collective/1" in out.stderr
