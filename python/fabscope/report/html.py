# SPDX-License-Identifier: BSD-3-Clause
"""The self-contained HTML report: one file, inline SVG charts, inline CSS, no script, no request.

Opened anywhere (a laptop on a plane, a ticket attachment) it shows the same thing: nothing is
fetched, no font, no library. Each chart sits above the table of the numbers it draws and a caption
saying how they were measured.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..results import Result
from ..results.collective import CollectiveResult
from ..results.matrix import MatrixRun
from . import charts
from .charts import Chart, ComparisonRow, TrendPoint
from .figures import bandwidth_series, comparison_rows, distributions, latency_series, transport_label
from .table import Table, cell

STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
figure { margin: 1em 0; }
svg.chart { width: 100%; max-width: 900px; height: auto; display: block; }
figcaption { font-size: 0.9em; color: #444; margin: 0.4em 0; max-width: 900px; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th:first-child, td:first-child, td.t { text-align: left; }
th { background: #f2f2f2; }
.side { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
.side > figure { flex: 1 1 520px; min-width: 0; margin: 0; }
.side > div { flex: 1 1 600px; }  /* no shrinking below the table's width: it wraps under the chart */
.bad { color: #b2182b; font-weight: bold; }
.note { font-size: 0.9em; color: #444; }
"""


@dataclass
class History:
    """One case's stored runs, for a trend chart (from the history store and compare)."""

    case: str
    unit: str
    points: Sequence[TrendPoint]


@dataclass
class ReportInput:
    """Everything one report shows; only ``records`` is required."""

    records: Sequence[Result]
    title: str = "fabscope report"
    line_rates: Mapping[str, float] = field(default_factory=dict)  # device -> Gb/s
    notes: Sequence[str] = ()
    history: Sequence[History] = ()
    matrices: Sequence[MatrixRun] = ()
    collectives: Sequence[CollectiveResult] = ()
    distribution_size: int | None = None
    generated: datetime | None = None


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


TEXT_CELL = ' class="t"'  # names and verdicts: left-aligned; numbers stay right-aligned


def table_html(table: Table) -> str:
    head = "".join(f"<th>{_esc(c.title)}</th>" for c in table.columns)
    body = "".join(
        "<tr>" + "".join(f"<td{TEXT_CELL if isinstance(v, str) else ''}>{_esc(cell(c, v))}</td>"
                         for c, v in zip(table.columns, row, strict=True)) + "</tr>"
        for row in table.rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def chart_html(chart: Chart, beside: bool = False) -> str:
    figure = (f'<figure>{chart.svg}<figcaption>{_esc(chart.caption)}</figcaption></figure>')
    if beside:
        return f'<h2>{_esc(chart.title)}</h2><div class="side">{figure}<div>{table_html(chart.table)}</div></div>'
    return f"<h2>{_esc(chart.title)}</h2>{figure}{table_html(chart.table)}"


def _header(data: ReportInput) -> str:
    records = data.records
    hosts = sorted({h for r in records for h in r.hosts if h})
    versions = sorted({r.version for r in records if r.version})
    when = (data.generated or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    facts = [f"generated {when}", f"{len(records)} result(s)"]
    if hosts:
        facts.append("hosts " + ", ".join(hosts))
    if versions:
        facts.append("fabscope " + ", ".join(versions))
    out = [f"<h1>{_esc(data.title)}</h1>", f'<p class="note">{_esc("; ".join(facts))}</p>']
    misrouted: dict[str, list[Result]] = {}
    for rec in records:
        if rec.misrouted:
            misrouted.setdefault(f"{transport_label(rec)} {rec.pattern}", []).append(rec)
    for label, recs in misrouted.items():  # one line per transport and pattern: its sizes, the largest's summary
        sizes = ", ".join(f"{r.size} B" for r in recs)
        out.append(f'<p class="bad">MISROUTED: {_esc(label)} ({_esc(sizes)}): {_esc(recs[-1].path.summary)}</p>')
        # What chose the device that carried them (the explanation's route cause), with its fix.
        route = [c for c in (recs[-1].explanation.seen if recs[-1].explanation else ()) if c.cause == "route"]
        out += [f'<p class="bad">why: {_esc(c.why_line())}</p>' for c in route]
    no_effect = dict.fromkeys(s for r in records for s in r.settings_without_effect)
    out += [f'<p class="bad">Setting had no effect: {_esc(s)}</p>' for s in no_effect]
    out += [f'<p class="note">{_esc(n)}</p>' for n in data.notes]
    return "\n".join(out)


def charts_for(data: ReportInput) -> list[tuple[Chart, bool]]:
    """The report's charts in page order; True where the table goes beside the chart."""
    records = data.records
    lat_def = next((r.latency_definition for r in records if r.latency_definition), "half round trip (ping-pong)")
    bw_at = next((r.bandwidth.measured_at for r in records if r.bandwidth and r.bandwidth.measured_at), "receiver")
    out: list[tuple[Chart, bool]] = []
    rows: list[ComparisonRow] = comparison_rows(records, data.line_rates)
    if len(rows) > 1:
        out.append((charts.comparison_chart(rows), True))
    lat = latency_series(records)
    if lat:
        out.append((charts.latency_vs_size(lat, lat_def), False))
    for pattern in ("bw", "bibw"):
        bw = bandwidth_series(records, data.line_rates, pattern)
        if bw:
            chart = charts.bandwidth_vs_size(bw, bw_at if pattern == "bw" else f"{bw_at}s (both directions added)")
            if pattern == "bibw":
                chart = Chart("Bidirectional bandwidth against message size", chart.svg, chart.caption, chart.table)
            out.append((chart, False))
    for dist in distributions(records, data.distribution_size):  # one per tag for several stored runs
        out.append((charts.latency_distribution(dist, lat_def), False))
    out += [(charts.history_trend(h.case, h.unit, h.points), False) for h in data.history]
    out += [(chart, False) for m in data.matrices for chart in charts.matrix_heatmaps(m)]
    return out


def collectives_html(results: Sequence[CollectiveResult]) -> str:
    """Each collective operation's table (one row per size, the figures of report/collective.py) and
    under it what its text shows: where the ranks ran, the expected ceiling, the hosts that held it
    back, the path per host and, when misrouted, why (the route cause, with its fix)."""
    from .collective import COLUMNS, groups, path_lines, placement_lines, row, title

    out: list[str] = []
    for group in groups(results):
        head = "".join(f"<th>{_esc(c)}</th>" for c in COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{_esc(v)}</td>" for v in row(r)) + "</tr>" for r in group)
        out.append(f"<h2>{_esc(title(group[0]).removeprefix('# '))}</h2>")
        out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        lines = placement_lines(group[0]) + [line for r in group for line in path_lines(r)]
        for line in lines:
            text = line.removeprefix("# ")
            bad = text.startswith(("why:", "oversubscribed", "held back")) or "misrouted" in text.split(":", 1)[-1][:20]
            out.append(f'<p class="{"bad" if bad else "note"}">{_esc(text)}</p>')
    return "\n".join(out)


def render_html(data: ReportInput) -> str:
    """The whole report as one HTML5 document."""
    charts.require_matplotlib()
    body = [_header(data)]
    if not data.records and not data.matrices and not data.history and not data.collectives:
        body.append('<p class="note">No results to show.</p>')
    body += [chart_html(chart, beside) for chart, beside in charts_for(data)]
    if data.collectives:
        body.append(collectives_html(data.collectives))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_esc(data.title)}</title>\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<style>{STYLE}</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )
