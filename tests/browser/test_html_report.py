# SPDX-License-Identifier: BSD-3-Clause
"""The HTML report in a real browser: headless Chromium opens it offline and must see no console
error, ask for nothing but the file itself, draw every chart at a sane size, and paint a screenshot
that is not blank. The same file validates under html5lib's strict parser."""

from __future__ import annotations

import io
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import html5lib
import pytest
from PIL import Image, ImageStat

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chromium import PageReport, chromium_binary, open_offline

from conftest import REPO, fabscope
from fabscope.report.charts import TrendPoint
from fabscope.report.html import History, ReportInput, render_html
from fabscope.report.inputs import read_inputs
from fabscope.results.matrix import Finding, MatrixRun, Measurement

pytestmark = pytest.mark.skipif(chromium_binary() is None,
                                reason="chromium is not installed (deps/apt-packages.txt; `make setup`)")

RECORDS = REPO / "tests" / "fixtures" / "records"


def small_matrix() -> MatrixRun:
    """Four hosts, bandwidth: fs-c is a bad node (slow with everyone), fs-a<->fs-b a bad link."""
    hosts = ["fs-a", "fs-b", "fs-c", "fs-d"]
    run = MatrixRun(hosts=hosts, patterns=["bw"], backend="tcp", schedule={"name": "all-pairs"},
                    rule={"bw_fraction_of_median": 0.8})
    for src in hosts:
        for dst in hosts:
            if src != dst:
                value = 0.25 if "fs-c" in (src, dst) else 0.4 if {src, dst} == {"fs-a", "fs-b"} else 0.95
                run.measurements.append(Measurement(src, dst, "bw", value, verdict="verified"))
    run.findings = [Finding("node", ["fs-c"], "fs-c slow with 3 of 3 partners"),
                    Finding("link", ["fs-a", "fs-b"], "fs-a<->fs-b at 42 % of the median")]
    return run


def trend() -> History:
    start = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    values = [4.1, 4.2, 4.0, 4.1, 5.3, 5.2]
    points = [TrendPoint(start + timedelta(days=i), v, f"run{i}", "regression" if i == 4 else "same")
              for i, v in enumerate(values)]
    return History("tcp send lat 8 B p50", "µs", points)


def full_report(tmp_path: Path) -> Path:
    """Every chart the report has: saved engine records, a history trend, a matrix heatmap."""
    inputs = read_inputs([str(RECORDS)])
    page = tmp_path / "report.html"
    page.write_text(render_html(ReportInput(inputs.records, title="fabscope report (test)", line_rates={"lo": 100.0},
                                            history=[trend()], matrices=[small_matrix()])))
    return page


def assert_not_blank(png: bytes, min_height: int) -> None:
    image = Image.open(io.BytesIO(png)).convert("L")
    assert image.width >= 1000 and image.height >= min_height, image.size
    stat = ImageStat.Stat(image)
    # A blank page is one grey level (variance 0); charts, text and tables give thousands.
    assert stat.var[0] > 500, stat.var
    dark = sum(image.histogram()[:128]) / (image.width * image.height)
    assert dark > 0.005, f"only {dark:.2%} of the pixels are dark: nothing was drawn"


def assert_clean(report: PageReport, page: Path) -> None:
    assert report.console == [], report.console
    # The file itself, and the images matplotlib inlines as data: URIs (the heatmap): nothing else.
    assert report.requests[0] == page.resolve().as_uri(), report.requests
    assert all(url.startswith("data:") for url in report.requests[1:]), report.requests


def test_report_opens_offline_with_every_chart_drawn(tmp_path: Path) -> None:
    page = full_report(tmp_path)
    text = page.read_text()
    html5lib.HTMLParser(strict=True).parse(text)  # raises on any parse error
    charts = text.count('<svg ')
    assert charts >= 6, charts  # comparison, latency, bandwidth, distribution, history, matrix
    report = open_offline(page, tmp_path / "profile")
    assert_clean(report, page)
    assert len(report.svg_sizes) == charts
    for width, height in report.svg_sizes:
        assert 300 <= width <= 1280 and 150 <= height <= 1500, report.svg_sizes
    assert_not_blank(report.screenshot_png, min_height=2000)
    (tmp_path / "report.png").write_bytes(report.screenshot_png)


def test_the_browser_check_catches_a_fetch_and_a_console_error(tmp_path: Path) -> None:
    """The checker itself: a page that fetches from the network and logs an error must fail it."""
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>bad</title></head><body>'
                    '<img src="http://cdn.fabscope.invalid/x.png" alt="x">'
                    "<script>console.error('boom')</script></body></html>")
    report = open_offline(page, tmp_path / "profile")
    assert any("boom" in line for line in report.console), report.console
    assert "http://cdn.fabscope.invalid/x.png" in report.requests, report.requests


def test_report_command_writes_html_markdown_and_csv(tmp_path: Path) -> None:
    out = fabscope("report", str(RECORDS), "--html", str(tmp_path / "r.html"), "--md", str(tmp_path / "r.md"),
                   "--csv", str(tmp_path / "r.csv"), timeout=120)
    assert out.returncode == 0, out.stderr
    html5lib.HTMLParser(strict=True).parse((tmp_path / "r.html").read_text())
    report = open_offline(tmp_path / "r.html", tmp_path / "profile")
    assert_clean(report, tmp_path / "r.html")
    assert report.svg_sizes and all(w >= 300 and h >= 150 for w, h in report.svg_sizes)
    assert_not_blank(report.screenshot_png, min_height=1000)
    assert (tmp_path / "r.md").read_text().startswith("# fabscope report")
    assert (tmp_path / "r.csv").read_text().startswith("backend,op,pattern,size")


def test_a_report_of_200_runs_in_5_tags_is_readable(tmp_path: Path) -> None:
    """200 stored runs in 5 tags (tcp send lat 8 B and 64 KiB, real records with their latency
    scaled per tag): one line per tag with its spread, a distribution per tag, trend charts with
    the median of each tag's runs; the page opens offline, every chart at a sane size, not blank."""
    import json

    from fabscope.results import parse_record
    from fabscope.store import open_store

    db = tmp_path / "h.db"
    raw = [json.loads(line) for line in (RECORDS / "tcp-send-lat-with-histogram.jsonl").read_text().splitlines()]
    scales = {"v1.0": 1.0, "v1.1": 1.02, "v1.2": 1.4, "v1.3": 1.38, "v1.4": 1.05}
    with open_store(db) as store:
        for i in range(40):
            for tag, scale in scales.items():
                recs = []
                for rec in raw:
                    factor = scale * (1.0 + 0.03 * ((i * 7) % 5) / 4)
                    lat = {k: v * factor if k in ("min", "p50", "mean", "p99", "p999", "max") else v
                           for k, v in rec["latency_us"].items()}
                    recs.append(parse_record(dict(rec, latency_us=lat), judge_path=False))
                store.add_run("run", ["run", "--tag", tag], recs, tag=tag)
    page = tmp_path / "many.html"
    out = fabscope("report", *scales, "--store", str(db), "--html", str(page), timeout=300)
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    html5lib.HTMLParser(strict=True).parse(text)
    for tag in scales:
        assert f"tcp send [tag {tag}]" in text and f"[tag {tag}, 40 runs merged]" in text
    assert "median of runs" in text and "History: tcp send lat 8 B p50" in text
    report = open_offline(page, tmp_path / "profile")
    assert_clean(report, page)
    for width, height in report.svg_sizes:
        assert 300 <= width <= 1280 and 150 <= height <= 1500, report.svg_sizes
    assert_not_blank(report.screenshot_png, min_height=2000)
    (tmp_path / "many.png").write_bytes(report.screenshot_png)
