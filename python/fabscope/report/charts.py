# SPDX-License-Identifier: BSD-3-Clause
"""Charts for the HTML report: matplotlib figures turned into inline SVG elements.

Every function takes plain series (numbers with their labels), never result records: the mapping
from records to series lives in ``report/figures.py``, so the pictures do not depend on the
record schema. Each returns a :class:`Chart`: the ``<svg>`` element, a caption saying what was
measured and how, and the table of the plotted numbers (drawn under the chart).

The SVG is made to live inside one HTML document with other charts: the XML prolog, DOCTYPE and
metadata are dropped, every ``id`` (and every reference to one) gets a per-chart prefix so that
several charts never share an id, and the fixed width/height give way to the viewBox so the page's
CSS sizes the picture. Text stays text (``svg.fonttype = none``), so no font is embedded or fetched:
the browser draws it with a local sans-serif font.
"""

from __future__ import annotations

import functools
import io
import itertools
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..results.matrix import MatrixRun
from .table import Column, Table

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


@functools.cache
def _mpl() -> Any:
    """matplotlib, imported on first use: the report's only non-stdlib dependency, ~1 s of start-up
    (measured: 1.16 of `fabscope run`'s 1.36 s) that the measuring side (run, serve, the matrix
    agents a launcher starts on every node) never needs. None where it is not installed."""
    try:
        import matplotlib
        import matplotlib.colors
        import matplotlib.figure
        import matplotlib.patches
        import matplotlib.ticker
    except ImportError:  # pragma: no cover - exercised only where matplotlib is absent
        return None
    return matplotlib


MISSING_MATPLOTLIB = (
    "the HTML report draws its charts with matplotlib, which is not installed for this Python; "
    "install it (`.venv/bin/pip install matplotlib` or `apt-get install python3-matplotlib`), "
    "or ask for --md / --csv, which need nothing"
)

_counter = itertools.count(1)

# Distinguishable colours (matplotlib's tab10 order, then the dark halves of tab20b/tab20c).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
           "#e6550d", "#31a354", "#756bb1", "#636363")
# Markers cycled beside the colours: 20 colours x 7 markers give 140 distinct (colour, marker)
# pairs, so two series never look alike even in grey print.
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
BAD = "#d62728"


def style(index: int) -> tuple[str, str]:
    """The (colour, marker) of the index-th series of a chart: distinct for every series."""
    return COLOURS[index % len(COLOURS)], MARKERS[index % len(MARKERS)]


def _legend_outside(ax: Axes, entries: int) -> None:
    """The legend to the right of the plot, never over the points (constrained layout makes room)."""
    if entries:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  ncols=1 if entries <= 16 else 2)


def plain_number(value: float) -> str:
    """A tick label as people write numbers: 0.5, 1, 10, 100, 1000, 20000 (never 4x10^2)."""
    if value <= 0 or not math.isfinite(value):
        return ""
    return f"{value:,.0f}".replace(",", " ") if value >= 1 else f"{value:.3g}"


def _plain_log_axis(axis: Any) -> None:
    """Plain labels on a log axis: the powers of ten, and 2 and 5 times them when the axis spans
    less than two decades (else the minor ticks stay unlabelled)."""
    def minor(value: float, _pos: int) -> str:
        lo, hi = axis.get_view_interval()
        if lo <= 0 or hi / lo > 100:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value)) if value > 0 else 0
        return plain_number(value) if round(mantissa, 6) in (2.0, 5.0) else ""

    axis.set_major_formatter(_mpl().ticker.FuncFormatter(lambda v, _pos: plain_number(v)))
    axis.set_minor_formatter(_mpl().ticker.FuncFormatter(minor))


@dataclass(frozen=True)
class Chart:
    """One picture of the report with what it needs around it."""

    title: str
    svg: str
    caption: str
    table: Table


@dataclass(frozen=True)
class LatencySeries:
    """Latency of one transport against message size: p50 with the p99 above it (microseconds)."""

    label: str
    sizes: Sequence[int]
    p50_us: Sequence[float]
    p99_us: Sequence[float]
    # Several stored runs: p50_us / p99_us are their medians, p50_lo..p50_hi their spread, and
    # runs the ids of the runs behind each size (empty for one record per size).
    p50_lo: Sequence[float] = ()
    p50_hi: Sequence[float] = ()
    runs: Sequence[str] = ()


@dataclass(frozen=True)
class BandwidthSeries:
    """Bandwidth of one transport against message size (Gb/s at the receiver), with the line rate
    of the port that carried it when that is known."""

    label: str
    sizes: Sequence[int]
    gbps: Sequence[float]
    line_rate_gbps: float | None = None
    lo: Sequence[float] = ()  # several stored runs: gbps is their median, lo..hi their spread
    hi: Sequence[float] = ()
    runs: Sequence[str] = ()


@dataclass(frozen=True)
class Distribution:
    """The latency distribution of one size: histogram buckets when the record has them
    (lower edge, upper edge, count; microseconds), else its percentiles."""

    label: str
    size: int
    buckets: Sequence[tuple[float, float, int]] = ()
    percentiles: Mapping[str, float] = field(default_factory=dict)  # e.g. {"min": .., "p50": .., "max": ..}


@dataclass(frozen=True)
class ComparisonRow:
    """One transport in the suite's comparison (None where the figure was not measured)."""

    label: str
    lat8_p50_us: float | None
    lat8_p99_us: float | None
    lat4k_p50_us: float | None
    bw64k_gbps: float | None
    bw1m_gbps: float | None
    line_rate_pct: float | None  # 1 MiB bandwidth against the carrying port's line rate on this host
    carried_by: str
    path: str
    expected_pct: float | None = None  # 1 MiB bandwidth against its explanation's expected ceiling
    causes_seen: tuple[str, ...] = ()  # the causes seen in any of the row's results (results/explain/)
    why: tuple[str, ...] = ()  # their lines, "why (LABEL PATTERN SIZE B): cause: ..." (report.render)

    @property
    def pct_of_expected(self) -> float | None:
        """The "% of expected" cell: against the explanation's ceiling (the owner of "expected"),
        else against this host's line rate for the carrying port; None when neither is known."""
        return self.expected_pct if self.expected_pct is not None else self.line_rate_pct

    @property
    def why_cell(self) -> str:
        return ",".join(self.causes_seen) or "-"


@dataclass(frozen=True)
class TrendPoint:
    """One stored run of one case: when it ran, its figure, and the compare verdict against the
    run before it (``regression`` marks the point)."""

    when: datetime
    value: float
    run: str
    verdict: str = "same"  # regression | improvement | tail regression | inconclusive | same
    group: str = ""  # the tag (or the untagged run) it belongs to: its runs get a median line


def available() -> bool:
    """Whether charts can be drawn here (matplotlib importable)."""
    return _mpl() is not None


def require_matplotlib() -> None:
    if _mpl() is None:
        from ..errors import EXIT_USAGE, FabscopeError

        raise FabscopeError(MISSING_MATPLOTLIB, EXIT_USAGE)


def _figure(width_in: float = 8.0, height_in: float = 4.2) -> Figure:
    require_matplotlib()
    fig: Figure = _mpl().figure.Figure(figsize=(width_in, height_in), layout="constrained")
    return fig


def _svg(fig: Figure) -> str:
    """The figure as an <svg> element fit for inlining next to others in one HTML page."""
    prefix = f"c{next(_counter)}-"
    buf = io.StringIO()
    with _mpl().rc_context({"svg.fonttype": "none", "svg.hashsalt": prefix,
                                "font.family": "sans-serif"}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'\sid="([^"]+)"', lambda m: f' id="{prefix}{m.group(1)}"', text)
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})", text)
    text = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}{m.group(1)}"', text)
    # Size from the viewBox and the page's CSS, not from fixed points.
    text = re.sub(r'^<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1 class="chart" role="img"', text, count=1)
    return text.strip()


def size_label(size: int) -> str:
    """8, 4K, 64K, 1M: message sizes as the CLI writes them (K/M/G = 2^10/2^20/2^30)."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def _size_axis(ax: Axes) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(_mpl().ticker.FuncFormatter(lambda v, _pos: size_label(int(v)) if v >= 1 else f"{v:g}"))
    ax.set_xlabel("message size [bytes]")
    ax.grid(True, which="major", alpha=0.3)


def _positive(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and v > 0 and math.isfinite(v)]


def latency_vs_size(series: Sequence[LatencySeries], definition: str) -> Chart:
    """p50 lines with a band up to p99, log-log, one line per transport (per transport and tag for
    several stored runs: the median over the runs, the band their spread)."""
    fig = _figure(10.0, 4.6)
    ax = fig.add_subplot()
    rows: list[list[Any]] = []
    many = any(s.p50_lo for s in series)
    for i, s in enumerate(series):
        colour, marker = style(i)
        ax.plot(s.sizes, s.p50_us, marker=marker, color=colour, label=f"{s.label} p50")
        if s.p50_lo:
            ax.fill_between(s.sizes, s.p50_lo, s.p50_hi, color=colour, alpha=0.2, linewidth=0)
        else:
            ax.fill_between(s.sizes, s.p50_us, s.p99_us, color=colour, alpha=0.18 if len(series) < 4 else 0.07,
                            linewidth=0)
            ax.plot(s.sizes, s.p99_us, color=colour, linestyle=":", linewidth=1, marker=marker, markersize=3)
        runs = list(s.runs) or [""] * len(s.sizes)
        for k, size in enumerate(s.sizes):
            spread = [s.p50_lo[k], s.p50_hi[k]] if s.p50_lo else [None, None]
            rows.append([s.label, size, s.p50_us[k], *spread, s.p99_us[k], runs[k]])
    _size_axis(ax)
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_ylabel("latency [µs]")
    _legend_outside(ax, len(series))
    columns = [Column("transport", "transport [tag]" if many else "transport"), Column("size", "#bytes"),
               Column("p50", "p50[µs]" + (" median of runs" if many else ""), "{:.3f}")]
    if many:
        columns += [Column("lo", "lowest p50[µs]", "{:.3f}"), Column("hi", "highest p50[µs]", "{:.3f}")]
    columns.append(Column("p99", "p99[µs]" + (" median" if many else ""), "{:.3f}"))
    if any(s.runs for s in series):
        columns.append(Column("runs", "runs"))
    table = Table(columns, [_pick(columns, row) for row in rows])
    if many:
        how = ("One line per transport and tag (or untagged run): the median p50 over that tag's runs; shaded: "
               "the spread of their p50, lowest to highest run. The table names the runs behind each point.")
    else:
        how = "Line: median (p50); shaded band up to p99 (dotted)."
    caption = (f"Latency against message size, log-log. {how} One sample is the {definition}. Percentiles over every "
               "measured sample, warmup excluded.")
    return Chart("Latency against message size", _svg(fig), caption, table)


_ROW_KEYS = ("transport", "size", "p50", "lo", "hi", "p99", "runs")


def _pick(columns: Sequence[Column], row: Sequence[Any]) -> list[Any]:
    """The cells of a latency row for the columns shown (rows carry every key of _ROW_KEYS)."""
    full = dict(zip(_ROW_KEYS, row, strict=True))
    return [full[c.key] for c in columns]


def bandwidth_vs_size(series: Sequence[BandwidthSeries], measured_at: str) -> Chart:
    """Bandwidth lines, log-log, one per transport (and tag); the line rate of the carrying port dashed."""
    fig = _figure(10.0, 4.6)
    ax = fig.add_subplot()
    rows: list[list[Any]] = []
    drawn_rates: set[float] = set()
    many = any(s.lo for s in series)
    for i, s in enumerate(series):
        colour, marker = style(i)
        ax.plot(s.sizes, s.gbps, marker=marker, color=colour, label=s.label)
        if s.lo:
            ax.fill_between(s.sizes, s.lo, s.hi, color=colour, alpha=0.2, linewidth=0)
        if s.line_rate_gbps and s.line_rate_gbps not in drawn_rates:
            drawn_rates.add(s.line_rate_gbps)
            ax.axhline(s.line_rate_gbps, color=colour, linestyle="--", linewidth=1,
                       label=f"line rate {s.line_rate_gbps:g} Gb/s")
        runs = list(s.runs) or [""] * len(s.sizes)
        rows += [[s.label, size, g, *([s.lo[k], s.hi[k]] if many and s.lo else [None, None] if many else []),
                  (100.0 * g / s.line_rate_gbps) if s.line_rate_gbps else None,
                  *([runs[k]] if any(x.runs for x in series) else [])]
                 for k, (size, g) in enumerate(zip(s.sizes, s.gbps, strict=True))]
    _size_axis(ax)
    ax.set_yscale("log")
    _plain_log_axis(ax.yaxis)
    ax.set_ylabel("bandwidth [Gb/s]  (10^9 bit/s)")
    _legend_outside(ax, len(series) + len(drawn_rates))
    columns = [Column("transport", "transport [tag]" if many else "transport"), Column("size", "#bytes"),
               Column("gbps", "BW[Gb/s]" + (" median of runs" if many else ""), "{:.3f}")]
    if many:
        columns += [Column("lo", "lowest[Gb/s]", "{:.3f}"), Column("hi", "highest[Gb/s]", "{:.3f}")]
    columns.append(Column("pct", "% of line rate", "{:.1f}"))
    if any(s.runs for s in series):
        columns.append(Column("runs", "runs"))
    table = Table(columns, rows)
    rate_note = ("Dashed: the line rate of the port that carried the bytes." if drawn_rates
                 else "No line rate is known for the devices that carried these runs.")
    spread = (" One line per transport and tag: the median over its runs, shaded from the lowest to the highest run."
              if many else "")
    caption = (f"Bandwidth against message size, log-log, measured at the {measured_at}.{spread} {rate_note} Atomic "
               "operations (8 B, judged by their rate) are not drawn: the comparison and the per-size tables have them.")
    return Chart("Bandwidth against message size", _svg(fig), caption, table)


PERCENTILE_ORDER = (("min", 0.0), ("p50", 50.0), ("p99", 99.0), ("p999", 99.9), ("max", 100.0))


def latency_distribution(dist: Distribution, definition: str) -> Chart:
    """A histogram of the samples when the record carries one, else the percentiles as a
    cumulative curve (what share of messages took at most this long)."""
    fig = _figure(8.0, 3.8)
    ax = fig.add_subplot()
    if dist.buckets:
        lows = [b[0] for b in dist.buckets]
        widths = [b[1] - b[0] for b in dist.buckets]
        counts = [b[2] for b in dist.buckets]
        ax.bar(lows, counts, width=widths, align="edge", color=COLOURS[0], edgecolor="white", linewidth=0.3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _plain_log_axis(ax.yaxis)
        ax.set_ylabel("samples")
        rows = _bucket_rows(dist.buckets)
        table = Table([Column("lo", "from[µs]", "{:.3f}"), Column("hi", "to[µs]", "{:.3f}"),
                       Column("n", "samples"), Column("cum", "cumulative[%]", "{:.2f}")], rows)
        how = ("Histogram of every measured sample (the record's compact histogram, log-spaced buckets; the table "
               "adds up each power of two when there are many buckets).")
    else:
        points = [(dist.percentiles[k], q) for k, q in PERCENTILE_ORDER if dist.percentiles.get(k) is not None]
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", marker="o", color=COLOURS[0])
        for x, q in points:
            ax.annotate(f"{x:.2f}", (x, q), textcoords="offset points", xytext=(4, -10), fontsize="small")
        ax.set_xscale("log")
        ax.set_ylabel("share of messages [%]")
        ax.set_ylim(-2, 102)
        rows = [[k, dist.percentiles[k]] for k, _ in PERCENTILE_ORDER if dist.percentiles.get(k) is not None]
        table = Table([Column("q", "percentile"), Column("v", "latency[µs]", "{:.3f}")], rows)
        how = ("The record carries no histogram: its percentiles (min, p50, p99, p99.9, max) as a cumulative "
               "curve instead.")
    _plain_log_axis(ax.xaxis)
    ax.set_xlabel("latency [µs]")
    ax.grid(True, alpha=0.3)
    caption = f"Latency distribution of {dist.label} at {size_label(dist.size)} B; one sample is the {definition}. {how}"
    return Chart(f"Latency distribution, {dist.label}, {size_label(dist.size)} B", _svg(fig), caption, table)


def _bucket_rows(buckets: Sequence[tuple[float, float, int]], max_rows: int = 24) -> list[list[Any]]:
    """Table rows for histogram buckets: as they are when few, else summed per power of two of
    nanoseconds (the octaves of the log2-linear scheme), with the cumulative share."""
    kept = [b for b in buckets if b[2]]
    if len(kept) > max_rows:
        octaves: dict[int, list[float]] = {}
        for lo, hi, n in kept:
            o = math.floor(math.log2(max(lo * 1e3, 1.0)))
            row = octaves.setdefault(o, [lo, hi, 0.0])
            row[0], row[1], row[2] = min(row[0], lo), max(row[1], hi), row[2] + n
        kept = [(r[0], r[1], int(r[2])) for _, r in sorted(octaves.items())]
    total = sum(n for _, _, n in kept) or 1
    rows: list[list[Any]] = []
    running = 0
    for lo, hi, n in kept:
        running += n
        rows.append([lo, hi, n, 100.0 * running / total])
    return rows


COMPARISON_COLUMNS = [
    Column("label", "transport"),
    Column("lat8_p50_us", "8 B p50[µs]", "{:.2f}"),
    Column("lat8_p99_us", "8 B p99[µs]", "{:.2f}"),
    Column("lat4k_p50_us", "4 KiB p50[µs]", "{:.2f}"),
    Column("bw64k_gbps", "64 KiB BW[Gb/s]", "{:.2f}"),
    Column("bw1m_gbps", "1 MiB BW[Gb/s]", "{:.2f}"),
    Column("pct_of_expected", "% of expected", "{:.1f}"),
    Column("carried_by", "carried by"),
    Column("path", "path"),
    Column("why_cell", "why"),
]


def comparison_table(rows: Sequence[ComparisonRow]) -> Table:
    return Table(list(COMPARISON_COLUMNS), [[getattr(r, c.key) for c in COMPARISON_COLUMNS] for r in rows])


def comparison_chart(rows: Sequence[ComparisonRow]) -> Chart:
    """Two panels side by side: 8 B latency (p50 bar, p99 whisker) and bandwidth at 64 KiB and 1 MiB
    per transport; a panel with nothing measured says so instead of drawing an empty axis."""
    fig = _figure(7.0, max(2.4, 0.36 * len(rows) + 1.2))
    lat_ax, bw_ax = fig.subplots(1, 2, sharey=True)
    ys = list(range(len(rows)))
    labels = [r.label for r in rows]
    p50 = [r.lat8_p50_us or 0.0 for r in rows]
    p99_err = [max(0.0, (r.lat8_p99_us or 0.0) - (r.lat8_p50_us or 0.0)) for r in rows]
    lat_ax.barh(ys, p50, xerr=[[0.0] * len(rows), p99_err], color=COLOURS[0], capsize=2,
                error_kw={"elinewidth": 0.8})
    lat_ax.set_yticks(ys, labels, fontsize="small")
    lat_ax.invert_yaxis()
    lat_ax.set_xlabel("8 B latency [µs] (bar p50, whisker p99)")
    if _positive(p50) and max(_positive(p50)) / max(min(_positive(p50)), 1e-9) > 50:
        lat_ax.set_xscale("log")
    height = 0.4
    bw64 = [r.bw64k_gbps or 0.0 for r in rows]
    bw1m = [r.bw1m_gbps or 0.0 for r in rows]
    bw_ax.barh([y - height / 2 for y in ys], bw64, height=height, color="#98df8a", label="64 KiB")
    bw_ax.barh([y + height / 2 for y in ys], bw1m, height=height, color=COLOURS[2], label="1 MiB")
    bw_ax.set_xlabel("bandwidth [Gb/s]")
    if _positive(bw64 + bw1m):
        bw_ax.legend(fontsize="x-small", loc="lower right")
        bw_ax.set_xlim(left=0)
    else:
        bw_ax.set_xlim(0, 1)
        bw_ax.text(0.5, 0.5, "no bandwidth measured", transform=bw_ax.transAxes, ha="center", va="center")
    for ax, values in ((lat_ax, p50), (bw_ax, bw64 + bw1m)):
        ax.grid(True, axis="x", alpha=0.3)
        if not _positive(values) and ax is lat_ax:
            ax.set_xlim(0, 1)
            ax.text(0.5, 0.5, "no 8 B latency measured", transform=ax.transAxes, ha="center", va="center")
    caption = ("The suite's comparison, one row per transport: 8 B latency as half round trip (bar: p50, whisker: "
               "p99) and bandwidth at the receiver at 64 KiB (light) and 1 MiB (dark). A missing bar was not "
               "measured (see the table).")
    return Chart("Comparison of transports", _svg(fig), caption, comparison_table(rows))


def compact_runs(ids: Sequence[str], keep: int = 6) -> str:
    """Run ids for a table cell: all of a few, else how many with the first and last ones."""
    shown = [i for i in ids if i]
    if len(shown) <= keep:
        return ", ".join(shown)
    return f"{len(shown)} runs: {', '.join(shown[:3])}, ..., {shown[-1]}"


VERDICT_MARKS = (  # verdict, marker, colour, filled
    ("regression", "o", BAD, False), ("tail regression", "s", BAD, False),
    ("improvement", "^", COLOURS[2], True), ("inconclusive", "D", COLOURS[7], False),
)


def history_trend(case: str, unit: str, points: Sequence[TrendPoint]) -> Chart:
    """One case over stored runs, the asv view: one column per tag (or untagged run) in the order
    they first ran, every run of it a point, a line through the tags' medians, and the call
    `fabscope compare` makes against the tag before marked on the median."""
    fig = _figure(10.0, 4.0)
    ax = fig.add_subplot()
    ordered = sorted(points, key=lambda p: p.when)
    groups: dict[str, list[TrendPoint]] = {}
    for p in ordered:
        groups.setdefault(p.group or p.run, []).append(p)
    names = list(groups)
    xs = list(range(len(names)))
    many = any(len(g) > 1 for g in groups.values())
    for x, name in zip(xs, names, strict=True):
        runs = groups[name]
        spread = [x + (0.3 * (k / (len(runs) - 1) - 0.15) if len(runs) > 1 else 0.0) for k in range(len(runs))]
        ax.scatter(spread, [p.value for p in runs], s=14, color=COLOURS[0], alpha=0.6, zorder=2,
                   label="_nolegend_" if x else "a run")
    medians = [statistics.median(p.value for p in groups[n]) for n in names]
    ax.plot(xs, medians, color="#222222", linewidth=1.5, marker="_", markersize=16, zorder=3,
            label="median of a tag's runs" if many else "run")
    for verdict, marker, colour, filled in VERDICT_MARKS:
        marked = [(x, m) for x, n, m in zip(xs, names, medians, strict=True) if groups[n][-1].verdict == verdict]
        if marked:
            ax.scatter([x for x, _ in marked], [m for _, m in marked], marker=marker, s=130, linewidths=2, zorder=4,
                       facecolors=colour if filled else "none", edgecolors=colour, label=verdict)
    step = max(1, len(names) // 14)
    ax.set_xticks(xs[::step], [f"{n}\n{groups[n][0].when.strftime('%m-%d %H:%M')}" for n in names[::step]],
                  rotation=30 if len(names) > 6 else 0, ha="right" if len(names) > 6 else "center", fontsize="small")
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel(f"[{unit}]")
    ax.set_title(case, fontsize="medium")
    ax.set_xlabel("tag (or untagged run), in the order they first ran; time of its first run (UTC)")
    ax.grid(True, alpha=0.3)
    _legend_outside(ax, len(ax.get_legend_handles_labels()[0]))
    rows: list[list[Any]] = []
    for n, m in zip(names, medians, strict=True):
        runs = groups[n]
        rows.append([n, runs[0].when.strftime("%Y-%m-%d %H:%M"), compact_runs([p.run.split(" ")[0] for p in runs]),
                     m, min(p.value for p in runs), max(p.value for p in runs), runs[-1].verdict])
    table = Table([Column("tag", "tag / run"), Column("when", "first run (UTC)"), Column("runs", "runs"),
                   Column("median", f"median[{unit}]", "{:.3f}"), Column("lo", f"lowest[{unit}]", "{:.3f}"),
                   Column("hi", f"highest[{unit}]", "{:.3f}"), Column("verdict", "compare vs the tag before")], rows)
    caption = (f"History of {case} [{unit}] over the stored runs: one column per tag (an untagged run is a column of "
               "its own), in the order they first ran; dots: its runs; black: the median of its runs. Marked on the "
               "median, the call `fabscope compare` makes against the column before: red circle a regression, red "
               "square a tail (p99) regression, green triangle an improvement, grey diamond inconclusive (a change "
               "beyond the threshold without the evidence to call it: more runs under that tag would settle it). "
               "An untagged run is one run, which compare cannot call.")
    return Chart(f"History: {case}", _svg(fig), caption, table)


def matrix_heatmaps(run: MatrixRun) -> list[Chart]:
    """One heatmap per pattern the matrix measured."""
    return [matrix_heatmap(run, p) for p in run.patterns]


def matrix_heatmap(run: MatrixRun, pattern: str | None = None) -> Chart:
    """The N x N heatmap of a matrix run (bandwidth, or latency p50 for lat), sender
    on the rows, receiver on the columns; a pair measured more than once (retests) shows its last
    measurement. Findings are drawn on it: a bad node's row and column framed in red and its name in
    red, a bad link's two cells framed in red, a misrouted pair's cells hatched."""
    hosts = run.hosts
    pattern = pattern or run.patterns[0]
    lat = pattern == "lat"
    index = {h: i for i, h in enumerate(hosts)}
    n = len(hosts)
    grid: list[list[float | None]] = [[None] * n for _ in range(n)]
    for m in run.measurements:  # in the order measured: a retest's figure replaces the screen's
        if m.pattern == pattern and m.src in index and m.dst in index and m.value is not None:
            grid[index[m.src]][index[m.dst]] = m.value
    fig = _figure(7.0, 6.0)
    ax = fig.add_subplot()
    nan = float("nan")
    data = [[nan if v is None else v for v in row] for row in grid]
    # Good is green either way: high bandwidth, low latency.
    cmap = _mpl().colors.LinearSegmentedColormap.from_list("fs", ["#b2182b", "#fddbc7", "#1a9850"] if not lat
                                             else ["#1a9850", "#fddbc7", "#b2182b"]).with_extremes(bad="#eeeeee")
    image = ax.imshow(data, cmap=cmap, aspect="equal")
    unit = "latency p50 [µs]" if lat else "bandwidth [Gb/s]"
    fig.colorbar(image, ax=ax, label=unit, shrink=0.8)
    ax.set_xticks(range(n), hosts, rotation=45, ha="right")
    ax.set_yticks(range(n), hosts)
    ax.set_xlabel("receiver (server)")
    ax.set_ylabel("sender (client)")
    for i, j in itertools.product(range(n), range(n)):
        v = grid[i][j]
        if v is not None:
            ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize="x-small")
    found: list[str] = []
    for f in run.findings:
        named = [h for h in f.hosts if h in index]
        found.append(f"{f.kind} {', '.join(f.hosts)}" + (f" ({f.summary})" if f.summary else ""))
        if f.kind == "node":
            for h in named:
                k = index[h]
                ax.add_patch(_mpl().patches.Rectangle((-0.5, k - 0.5), n, 1, fill=False, edgecolor=BAD, linewidth=2))
                ax.add_patch(_mpl().patches.Rectangle((k - 0.5, -0.5), 1, n, fill=False, edgecolor=BAD, linewidth=2))
                ax.get_xticklabels()[k].set_color(BAD)
                ax.get_yticklabels()[k].set_color(BAD)
        elif f.kind in ("link", "misrouted") and len(named) == 2:
            a, b = index[named[0]], index[named[1]]
            for i, j in ((a, b), (b, a)):
                ax.add_patch(_mpl().patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=BAD, linewidth=2.5,
                                       hatch="///" if f.kind == "misrouted" else None))
    table = Table([Column("sender", "sender ↓ / receiver →")] + [Column(h, h, "{:.3g}") for h in hosts],
                  [[hosts[i], *grid[i]] for i in range(n)])
    rule_text = f" Rule: {_evidence_text(run.rule)}." if run.rule else ""
    how = "latency p50 in µs, half round trip" if lat else "bandwidth in Gb/s, measured at the receiver"
    caption = (f"Fabric matrix, {pattern}: {how}, one cell per ordered pair (grey: not measured). "
               f"Red frames: findings (a bad node frames its row and column, a bad link its two cells, a misrouted "
               f"pair is hatched). Findings: {'; '.join(found) or 'none'}.{rule_text}")
    return Chart(f"Fabric matrix ({n} hosts, {pattern})", _svg(fig), caption, table)


def _evidence_text(evidence: object) -> str:
    if isinstance(evidence, Mapping):
        return ", ".join(f"{k} {v}" for k, v in evidence.items())
    return "" if evidence is None else str(evidence)
