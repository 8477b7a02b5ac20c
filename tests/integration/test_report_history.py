# SPDX-License-Identifier: BSD-3-Clause
"""The report's history trend on real stored runs: five loopback TCP latency runs with busy polling
(tag busy), then five with blocking waits on an idle-prone VM (tag block, tens of microseconds more
per message): `fabscope report latest` draws the trend and marks the block runs as the regression
that `fabscope compare` calls. Five of each, not three: under CI load the block runs' p50 spread
enough that three against three once left Welch's t at p=0.022 for a +57% change (compare needs
p < 0.01), and a call must rest on runs that differ, not on a lower bar."""

from __future__ import annotations

from pathlib import Path

import html5lib

from conftest import fabscope


def test_report_trend_marks_the_regression_compare_calls(tmp_path: Path) -> None:
    store = str(tmp_path / "history.db")
    for poll in ["busy"] * 5 + ["block"] * 5:  # each run tagged with its --poll
        out = fabscope("run", "--loopback", "--backend", "tcp", "--pattern", "lat", "--sizes", "8", "--iters", "3000",
                       "--poll", poll, "--store", store, "--tag", poll, "--format", "json")
        assert out.returncode == 0, out.stderr
    called = fabscope("compare", "busy", "block", "--store", store)
    page = tmp_path / "report.html"
    out = fabscope("report", "latest", "--store", store, "--html", str(page), timeout=120)
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    html5lib.HTMLParser(strict=True).parse(text)
    assert "<h2>History: tcp send lat 8 B p50 (tcp via lo)</h2>" in text
    # one row per tag, in the order the tags first ran, naming its runs and the call against the tag before
    rows = {tag: [r for r in text.split("<tr>") if r.startswith(f'<td class="t">{tag}</td>')] for tag in ("busy", "block")}
    assert len(rows["busy"]) == 1 and len(rows["block"]) == 1, rows
    assert "1, 2, 3, 4, 5" in rows["busy"][0] and "6, 7, 8, 9, 10" in rows["block"][0]
    # compare calls --poll block a regression (bench/ validates that injection); the report marks
    # exactly that tag, and not the baseline.
    assert called.returncode == 9, called.stdout
    assert "regression" in rows["block"][0] and "regression" not in rows["busy"][0], rows
