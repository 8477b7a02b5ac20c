# SPDX-License-Identifier: BSD-3-Clause
"""The report's renderers on saved records: golden text / Markdown / CSV, the comparison rows, the
charts (heatmap findings, histogram or percentile fallback), and the inputs' errors.

Golden files live in tests/fixtures/report/golden/; after an intended change of the output,
regenerate them with FABSCOPE_UPDATE_GOLDEN=1 (the only time a test writes into the tree) and
review the diff."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import REPO, fabscope
from fabscope.errors import FabscopeError
from fabscope.report import charts
from fabscope.report.command import markdown_report
from fabscope.report.figures import comparison_rows, distribution
from fabscope.report.inputs import read_inputs
from fabscope.report.markdown import markdown_table
from fabscope.report.render import render_csv, render_text
from fabscope.report.table import Column, Table
from fabscope.results import parse_record
from fabscope.results.matrix import Finding, MatrixRun, Measurement

FIXTURES = REPO / "tests" / "fixtures"
SUITE_RECORDS = FIXTURES / "report" / "suite-peer-netns.jsonl"
GOLDEN = FIXTURES / "report" / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("FABSCOPE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    assert path.exists(), f"{path} missing: run with FABSCOPE_UPDATE_GOLDEN=1 once and review it"
    assert text == path.read_bytes().decode(), f"{name} differs from its golden file (FABSCOPE_UPDATE_GOLDEN=1 to accept)"


def test_golden_text_markdown_csv_of_a_two_host_suite() -> None:
    inputs = read_inputs([str(SUITE_RECORDS)])
    assert len(inputs.records) == 12
    check_golden("suite-peer-netns.txt", render_text(inputs.records))
    check_golden("suite-peer-netns.md", markdown_report("fabscope suite to 10.201.0.2", inputs))
    check_golden("suite-peer-netns.csv", render_csv(inputs.records))


def test_comparison_rows_one_per_transport() -> None:
    rows = {r.label: r for r in comparison_rows(read_inputs([str(SUITE_RECORDS)]).records, {"fabric0": 1.0})}
    assert set(rows) == {"tcp send (device fabric0)", "ucx tag (ucx-tls tcp, device fabric0)",
                         "ofi send (provider tcp, device fabric0)"}
    tcp = rows["tcp send (device fabric0)"]
    assert tcp.lat8_p50_us is not None and tcp.lat8_p99_us is not None and tcp.lat4k_p50_us is not None
    assert tcp.lat8_p50_us <= tcp.lat8_p99_us
    assert tcp.bw64k_gbps is not None and tcp.bw1m_gbps is not None and 0.3 < tcp.bw1m_gbps < 1.1  # 1 Gbit/s shaping
    assert tcp.line_rate_pct == pytest.approx(100.0 * tcp.bw1m_gbps)  # carried by fabric0, 1 Gb/s given
    assert tcp.carried_by == "tcp via fabric0"
    # libfabric ignored --device fabric0 between the hosts: the worst verdict of the row says so.
    assert rows["ofi send (provider tcp, device fabric0)"].path == "misrouted"


def test_markdown_is_real_tables() -> None:
    table = Table([Column("name", "transport"), Column("v", "p50[µs]", "{:.2f}")], [["a|b", 1.0], ["c", None]])
    assert markdown_table(table) == "| transport | p50[µs] |\n|:---|---:|\n| a\\|b | 1.00 |\n| c | - |\n"
    md = markdown_report("t", read_inputs([str(SUITE_RECORDS)]))
    assert "```" not in md and "| tcp send (device fabric0) |" in md


def small_matrix() -> MatrixRun:
    hosts = ["h1", "h2", "h3"]
    run = MatrixRun(hosts=hosts, patterns=["bw", "lat"], backend="tcp", schedule={}, rule={"bw_fraction": 0.8})
    for src in hosts:
        for dst in hosts:
            if src != dst:
                slow = "h3" in (src, dst)
                run.measurements.append(Measurement(src, dst, "bw", 0.2 if slow else 0.9))
                run.measurements.append(Measurement(src, dst, "lat", 90.0 if slow else 30.0))
    run.findings = [Finding("node", ["h3"], "h3 slow with every partner")]
    return run


def test_matrix_heatmap_marks_the_bad_node() -> None:
    heatmaps = charts.matrix_heatmaps(small_matrix())  # the matrix's own object, as `fabscope matrix` holds it
    assert [c.title for c in heatmaps] == ["Fabric matrix (3 hosts, bw)", "Fabric matrix (3 hosts, lat)"]
    bw = heatmaps[0]
    assert bw.table.rows[2] == ["h3", 0.2, 0.2, None] and bw.table.rows[0] == ["h1", None, 0.9, 0.2]
    assert "node h3" in bw.caption and "bandwidth in Gb/s, measured at the receiver" in bw.caption
    assert 'fill="#d62728"' in bw.svg or "#d62728" in bw.svg  # the red frame and label
    assert "half round trip" in heatmaps[1].caption
    # The same object as JSON (what `fabscope matrix --format json` writes) draws the same table.
    assert charts.matrix_heatmaps(MatrixRun.parse(small_matrix().to_json()))[0].table.rows == bw.table.rows


def test_report_command_reads_a_matrix_file(tmp_path: Path) -> None:
    matrix_file = tmp_path / "matrix.json"
    matrix_file.write_text(json.dumps(small_matrix().to_json(), indent=1))
    out = fabscope("report", str(matrix_file), "--html", str(tmp_path / "m.html"), "--no-history")
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "m.html").read_text()
    assert "<h2>Fabric matrix (3 hosts, bw)</h2>" in page and "<h2>Fabric matrix (3 hosts, lat)</h2>" in page


def test_distribution_uses_the_histogram_when_the_record_has_one() -> None:
    with_hist = read_inputs([str(FIXTURES / "records" / "tcp-send-lat-with-histogram.jsonl")]).records
    dist = distribution(with_hist)
    assert dist is not None and dist.buckets and sum(b[2] for b in dist.buckets) == with_hist[-1].latency.samples  # type: ignore[union-attr]
    chart = charts.latency_distribution(dist, "half round trip")
    assert "Histogram of every measured sample" in chart.caption
    # A record from before the histogram (0.1): its percentiles are drawn instead.
    raw = dict(with_hist[-1].raw, latency_us={k: v for k, v in with_hist[-1].raw["latency_us"].items()
                                              if k != "histogram"})
    fallback = distribution([parse_record(raw, judge_path=False)])
    assert fallback is not None and not fallback.buckets and set(fallback.percentiles) == {"min", "p50", "p99", "p999", "max"}
    assert "carries no histogram" in charts.latency_distribution(fallback, "half round trip").caption


def test_svg_ids_are_unique_across_charts() -> None:
    import re

    records = read_inputs([str(SUITE_RECORDS)]).records
    from fabscope.report.html import ReportInput, render_html

    page = render_html(ReportInput(records))
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert ids and len(ids) == len(set(ids))
    assert "http://" not in page.replace("http://www.w3.org/", "") and "https://" not in page


def test_report_inputs_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(SUITE_RECORDS.read_text().splitlines()[0] + "\n{not json\n")
    with pytest.raises(FabscopeError) as exc:
        read_inputs([str(bad)])
    assert f"{bad}:2" in exc.value.message and exc.value.exit_code == 2
    out = fabscope("report", str(tmp_path / "missing.jsonl"), "--md", str(tmp_path / "r.md"))
    assert out.returncode == 2 and "no such file" in out.stderr and "Traceback" not in out.stderr


# ---- reports of many runs (issue 23) ---------------------------------------------------------------

def _tagged_store(db: Path, tags: dict[str, float], runs_per_tag: int) -> None:
    """Stored runs of real records (tcp send lat 8 B and 64 KiB) with every latency figure scaled per
    tag and run, the histogram's samples with them (each moved to the bucket of its scaled value)."""
    from fabscope.results.histogram import Histogram, bucket_index
    from fabscope.store import open_store

    raw = [json.loads(line) for line in (FIXTURES / "records" / "tcp-send-lat-with-histogram.jsonl").read_text()
           .splitlines()]
    with open_store(db) as store:
        for i in range(runs_per_tag):
            for tag, scale in tags.items():
                recs = []
                for rec in raw:
                    lat = dict(rec["latency_us"])
                    factor = scale * (1.0 + 0.02 * i)
                    for key in ("min", "p50", "mean", "p99", "p999", "max"):
                        lat[key] = lat[key] * factor
                    hist = lat["histogram"]
                    moved: dict[int, int] = {}
                    for index, count in hist["buckets"]:
                        lo, hi = Histogram(hist["sub_buckets"], ()).bounds_ns(index)
                        new = bucket_index((lo + hi) / 2 * factor, hist["sub_buckets"])
                        moved[new] = moved.get(new, 0) + count
                    lat["histogram"] = dict(hist, buckets=[[i, c] for i, c in sorted(moved.items())])
                    recs.append(parse_record(dict(rec, latency_us=lat), judge_path=False))
                store.add_run("run", ["run", "--tag", tag], recs, tag=tag)


def _median_us(buckets: list[tuple[float, float, int]]) -> float:
    """The middle of the bucket that holds the median sample of a drawn distribution."""
    half, seen = sum(c for _, _, c in buckets) / 2, 0
    for lo, hi, count in buckets:
        seen += count
        if seen >= half:
            return (lo + hi) / 2
    raise AssertionError("no samples")


def test_a_report_of_two_tags_draws_one_series_per_tag_with_its_spread(tmp_path: Path) -> None:
    from fabscope.report.figures import distributions, latency_series

    db = tmp_path / "h.db"
    _tagged_store(db, {"before": 1.0, "after": 1.5}, runs_per_tag=3)
    inputs = read_inputs(["before", "after"], str(db))
    series = latency_series(inputs.records)
    assert [s.label for s in series] == ["tcp send [tag before]", "tcp send [tag after]"]
    before = series[0]
    assert list(before.sizes) == [8, 65536] and before.runs[0] == "1, 3, 5"
    assert before.p50_lo[0] < before.p50_us[0] < before.p50_hi[0]  # the median of 3 runs inside their spread
    assert series[1].p50_us[0] == pytest.approx(1.5 * before.p50_us[0])
    chart = charts.latency_vs_size(series, "half round trip")
    assert [c.title for c in chart.table.columns][-1] == "runs" and chart.table.columns[0].title == "transport [tag]"
    dists = distributions(inputs.records)
    assert [d.label for d in dists] == ["tcp send [tag before, 3 runs merged]", "tcp send [tag after, 3 runs merged]"]
    assert all(d.size == 65536 and d.buckets for d in dists)
    # Each tag draws its own distribution: the merged histograms' medians are the tags' 1 : 1.5
    # (within a bucket, 1/32 of an octave, of each other's).
    assert _median_us(dists[1].buckets) == pytest.approx(1.5 * _median_us(dists[0].buckets), rel=0.04)
    # one tag, many runs: still the median line with the spread, not one zigzag through every run
    (one,) = latency_series(read_inputs(["before"], str(db)).records)
    assert one.label == "tcp send [tag before]" and one.p50_lo


def test_every_series_has_its_own_colour_and_marker_and_plain_ticks() -> None:
    pairs = [charts.style(i) for i in range(40)]
    assert len(set(pairs)) == 40 and len({c for c, _ in pairs[:20]}) == 20
    assert [charts.plain_number(v) for v in (0.5, 1, 10, 100, 400, 20000)] == ["0.5", "1", "10", "100", "400",
                                                                               "20 000"]
    series = [charts.LatencySeries(f"t{i}", [8, 64], [100.0 + i, 200.0 + i], [300.0 + i, 450.0 + i])
              for i in range(14)]
    svg = charts.latency_vs_size(series, "half round trip").svg
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert texts[:6] == ["8", "16", "32", "64", "message size [bytes]", "100"] and "200" in texts  # plain numbers
    assert "t13 p50" in texts


def test_report_size_not_measured_and_output_over_an_input_are_refused(tmp_path: Path) -> None:
    rec = FIXTURES / "records" / "tcp-send-lat-loopback.jsonl"
    out = fabscope("report", str(rec), "--size", "3", "--html", str(tmp_path / "r.html"))
    assert out.returncode == 2 and "--size 3" in out.stderr and "8 B, 4096 B" in out.stderr
    assert not (tmp_path / "r.html").exists()
    copy = tmp_path / "x.jsonl"
    copy.write_text(rec.read_text())
    before = copy.read_text()
    out = fabscope("report", str(copy), "--html", str(copy))
    assert out.returncode == 2 and "that is an input of this report" in out.stderr
    assert copy.read_text() == before
    out = fabscope("report", str(copy), "--md", str(tmp_path / "same"), "--csv", str(tmp_path / "same"))
    assert out.returncode == 2 and "writes to the same file" in out.stderr
