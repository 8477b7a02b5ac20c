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

import io
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .table import Column, Table

try:  # the report's only non-stdlib dependency; the measuring side of fabscope never needs it
    import matplotlib
    from matplotlib.axes import Axes
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter
except ImportError:  # pragma: no cover - exercised only where matplotlib is absent
    matplotlib = None  # type: ignore[assignment]

MISSING_MATPLOTLIB = (
    "the HTML report draws its charts with matplotlib, which is not installed for this Python; "
    "install it (`.venv/bin/pip install matplotlib` or `apt-get install python3-matplotlib`), "
    "or ask for --md / --csv, which need nothing"
)

_counter = itertools.count(1)

# Distinguishable colours (matplotlib's tab10 order), cycled per line.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
BAD = "#d62728"


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


@dataclass(frozen=True)
class BandwidthSeries:
    """Bandwidth of one transport against message size (Gb/s at the receiver), with the line rate
    of the port that carried it when that is known."""

    label: str
    sizes: Sequence[int]
    gbps: Sequence[float]
    line_rate_gbps: float | None = None


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
    line_rate_pct: float | None
    carried_by: str
    path: str


@dataclass(frozen=True)
class TrendPoint:
    """One stored run of one case: when it ran, its figure, and the compare verdict against the
    run before it (``regression`` marks the point)."""

    when: datetime
    value: float
    run: str
    verdict: str = "same"


def available() -> bool:
    """Whether charts can be drawn here (matplotlib importable)."""
    return matplotlib is not None


def require_matplotlib() -> None:
    if matplotlib is None:
        from ..errors import EXIT_USAGE, FabscopeError

        raise FabscopeError(MISSING_MATPLOTLIB, EXIT_USAGE)


def _figure(width_in: float = 8.0, height_in: float = 4.2) -> Figure:
    require_matplotlib()
    fig = Figure(figsize=(width_in, height_in), layout="constrained")
    return fig


def _svg(fig: Figure) -> str:
    """The figure as an <svg> element fit for inlining next to others in one HTML page."""
    prefix = f"c{next(_counter)}-"
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": prefix,
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
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: size_label(int(v)) if v >= 1 else f"{v:g}"))
    ax.set_xlabel("message size [bytes]")
    ax.grid(True, which="major", alpha=0.3)


def _positive(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None and v > 0 and math.isfinite(v)]


def latency_vs_size(series: Sequence[LatencySeries], definition: str) -> Chart:
    """p50 lines with a band up to p99, log-log, one line per transport."""
    fig = _figure()
    ax = fig.add_subplot()
    rows: list[list[Any]] = []
    for s, colour in zip(series, itertools.cycle(COLOURS), strict=False):
        ax.plot(s.sizes, s.p50_us, marker="o", color=colour, label=f"{s.label} p50")
        ax.fill_between(s.sizes, s.p50_us, s.p99_us, color=colour, alpha=0.18 if len(series) < 4 else 0.07,
                        linewidth=0)
        ax.plot(s.sizes, s.p99_us, color=colour, linestyle=":", linewidth=1, marker="v", markersize=4)
        rows += [[s.label, size, p50, p99] for size, p50, p99 in zip(s.sizes, s.p50_us, s.p99_us, strict=True)]
    _size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("latency [µs]")
    if series:
        ax.legend(fontsize="small", loc="upper left")
    table = Table([Column("transport", "transport"), Column("size", "#bytes"),
                   Column("p50", "p50[µs]", "{:.3f}"), Column("p99", "p99[µs]", "{:.3f}")], rows)
    caption = (f"Latency against message size, log-log. Line: median (p50); shaded band up to p99 (dotted, ▼). "
               f"One sample is the {definition}. Percentiles over every measured sample, warmup excluded.")
    return Chart("Latency against message size", _svg(fig), caption, table)


def bandwidth_vs_size(series: Sequence[BandwidthSeries], measured_at: str) -> Chart:
    """Bandwidth lines, log-log, one per transport; the line rate of the carrying port dashed."""
    fig = _figure()
    ax = fig.add_subplot()
    rows: list[list[Any]] = []
    drawn_rates: set[float] = set()
    for s, colour in zip(series, itertools.cycle(COLOURS), strict=False):
        ax.plot(s.sizes, s.gbps, marker="o", color=colour, label=s.label)
        if s.line_rate_gbps and s.line_rate_gbps not in drawn_rates:
            drawn_rates.add(s.line_rate_gbps)
            ax.axhline(s.line_rate_gbps, color=colour, linestyle="--", linewidth=1,
                       label=f"line rate {s.line_rate_gbps:g} Gb/s")
        rows += [[s.label, size, g, (100.0 * g / s.line_rate_gbps) if s.line_rate_gbps else None]
                 for size, g in zip(s.sizes, s.gbps, strict=True)]
    _size_axis(ax)
    ax.set_yscale("log")
    ax.set_ylabel("bandwidth [Gb/s]  (10^9 bit/s)")
    if series:
        ax.legend(fontsize="small", loc="upper left")
    table = Table([Column("transport", "transport"), Column("size", "#bytes"),
                   Column("gbps", "BW[Gb/s]", "{:.3f}"), Column("pct", "% of line rate", "{:.1f}")], rows)
    rate_note = ("Dashed: the line rate of the port that carried the bytes." if drawn_rates
                 else "No line rate is known for the devices that carried these runs.")
    caption = (f"Bandwidth against message size, log-log, measured at the {measured_at}. {rate_note} Atomic "
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
    Column("line_rate_pct", "% line rate", "{:.1f}"),
    Column("carried_by", "carried by"),
    Column("path", "path"),
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


def history_trend(case: str, unit: str, points: Sequence[TrendPoint]) -> Chart:
    """One case's figure over stored runs; runs that compare called a regression are marked."""
    fig = _figure(8.0, 3.6)
    ax = fig.add_subplot()
    ordered = sorted(points, key=lambda p: p.when)
    # Runs in time order, evenly spaced (a run a week apart is no more interesting than one an hour apart);
    # the axis labels say when each ran.
    xs = list(range(len(ordered)))
    ax.plot(xs, [p.value for p in ordered], marker="o", color=COLOURS[0], label=case)
    bad = [(x, p) for x, p in zip(xs, ordered, strict=True) if p.verdict == "regression"]
    if bad:
        ax.scatter([x for x, _ in bad], [p.value for _, p in bad], s=120, facecolors="none", edgecolors=BAD,
                   linewidths=2, zorder=3, label="regression")
    good = [(x, p) for x, p in zip(xs, ordered, strict=True) if p.verdict == "improvement"]
    if good:
        ax.scatter([x for x, _ in good], [p.value for _, p in good], marker="^", s=60, color=COLOURS[2], zorder=3,
                   label="improvement")
    step = max(1, len(ordered) // 12)
    ax.set_xticks(xs[::step], [p.when.strftime("%m-%d %H:%M") for p in ordered[::step]], rotation=30, ha="right")
    ax.set_ylabel(f"[{unit}]")
    ax.set_title(case, fontsize="medium")
    ax.set_xlabel("time of run (UTC)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    rows: list[list[Any]] = [[p.when.strftime("%Y-%m-%d %H:%M"), p.run, p.value, p.verdict] for p in ordered]
    table = Table([Column("when", "time (UTC)"), Column("run", "run"), Column("value", f"{case}[{unit}]", "{:.3f}"),
                   Column("verdict", "compare vs the runs before")], rows)
    caption = (f"History of {case} [{unit}] over the stored runs, oldest first. Circled in red: runs that `fabscope "
               "compare` called a regression against the runs before them (a change beyond its threshold AND "
               "statistical evidence). Runs sharing a --tag are compared as one group of repeated runs; an untagged "
               "run is a group of one, which compare cannot call (no statistical evidence from one run).")
    return Chart(f"History: {case}", _svg(fig), caption, table)


def _matrix_json(matrix: Mapping[str, Any] | Any) -> Mapping[str, Any]:
    """A ``fabscope.matrix/1`` object: the JSON mapping, or the matrix's own object (``to_json()``)."""
    if isinstance(matrix, Mapping):
        return matrix
    as_json = getattr(matrix, "to_json", None)
    if callable(as_json):
        out = as_json()
        if isinstance(out, Mapping):
            return out
    raise TypeError(f"not a fabscope.matrix/1 object: {type(matrix).__name__}")


def _pair_value(pair: Mapping[str, Any], pattern: str) -> float | None:
    """The judged figure of one pair: ``matrix.value`` (Gb/s, or p50 µs for lat), else the record's own."""
    judged = pair.get("matrix")
    if isinstance(judged, Mapping) and "value" in judged:
        v = judged.get("value")
    elif pattern == "lat":
        lat = pair.get("latency_us")
        v = lat.get("p50") if isinstance(lat, Mapping) else None
    else:
        v = pair.get("bandwidth_gbps")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pair_pattern(pair: Mapping[str, Any]) -> str:
    judged = pair.get("matrix")
    if isinstance(judged, Mapping) and judged.get("pattern"):
        return str(judged["pattern"])
    return str(pair.get("pattern") or "")


def matrix_heatmaps(matrix: Mapping[str, Any] | Any) -> list[Chart]:
    """One heatmap per pattern the matrix measured."""
    obj = _matrix_json(matrix)
    patterns = obj.get("pattern")
    names = [str(p) for p in patterns] if isinstance(patterns, list) else [str(patterns or "bw")]
    return [matrix_heatmap(obj, p) for p in names]


def matrix_heatmap(matrix: Mapping[str, Any] | Any, pattern: str | None = None) -> Chart:
    """The N x N heatmap of a ``fabscope.matrix/1`` object (bandwidth, or latency p50 for lat), sender
    on the rows, receiver on the columns; a pair measured more than once (retests) shows its last
    measurement. Findings are drawn on it: a bad node's row and column framed in red and its name in
    red, a bad link's two cells framed in red, a misrouted pair's cells hatched."""
    obj = _matrix_json(matrix)
    hosts = [str(h) for h in obj.get("hosts") or []]
    if pattern is None:
        given = obj.get("pattern")
        pattern = str(given[0] if isinstance(given, list) and given else given or "bw")
    lat = pattern == "lat"
    index = {h: i for i, h in enumerate(hosts)}
    n = len(hosts)
    grid: list[list[float | None]] = [[None] * n for _ in range(n)]
    for pair in obj.get("pairs") or []:
        if not isinstance(pair, Mapping) or _pair_pattern(pair) not in (pattern, ""):
            continue
        src, dst = str(pair.get("src_host") or pair.get("src")), str(pair.get("dst_host") or pair.get("dst"))
        if src in index and dst in index:
            value = _pair_value(pair, pattern)
            if value is not None:
                grid[index[src]][index[dst]] = value
    findings = [f for f in obj.get("findings") or [] if isinstance(f, Mapping)]
    fig = _figure(7.0, 6.0)
    ax = fig.add_subplot()
    nan = float("nan")
    data = [[nan if v is None else v for v in row] for row in grid]
    # Good is green either way: high bandwidth, low latency.
    cmap = LinearSegmentedColormap.from_list("fs", ["#b2182b", "#fddbc7", "#1a9850"] if not lat
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
    for f in findings:
        kind = str(f.get("kind"))
        named = [str(h) for h in f.get("hosts") or [] if str(h) in index]
        found.append(f"{kind} {', '.join(str(h) for h in f.get('hosts') or [])}"
                     + (f" ({f['summary']})" if f.get("summary") else ""))
        if kind == "node":
            for h in named:
                k = index[h]
                ax.add_patch(Rectangle((-0.5, k - 0.5), n, 1, fill=False, edgecolor=BAD, linewidth=2))
                ax.add_patch(Rectangle((k - 0.5, -0.5), 1, n, fill=False, edgecolor=BAD, linewidth=2))
                ax.get_xticklabels()[k].set_color(BAD)
                ax.get_yticklabels()[k].set_color(BAD)
        elif kind in ("link", "misrouted") and len(named) == 2:
            a, b = index[named[0]], index[named[1]]
            for i, j in ((a, b), (b, a)):
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=BAD, linewidth=2.5,
                                       hatch="///" if kind == "misrouted" else None))
    table = Table([Column("sender", "sender ↓ / receiver →")] + [Column(h, h, "{:.3g}") for h in hosts],
                  [[hosts[i], *grid[i]] for i in range(n)])
    rule = obj.get("rule")
    rule_text = f" Rule: {_evidence_text(rule)}." if isinstance(rule, Mapping) and rule else ""
    how = "latency p50 in µs, half round trip" if lat else "bandwidth in Gb/s, measured at the receiver"
    caption = (f"Fabric matrix, {pattern}: {how}, one cell per ordered pair (grey: not measured). "
               f"Red frames: findings (a bad node frames its row and column, a bad link its two cells, a misrouted "
               f"pair is hatched). Findings: {'; '.join(found) or 'none'}.{rule_text}")
    return Chart(f"Fabric matrix ({n} hosts, {pattern})", _svg(fig), caption, table)


def _evidence_text(evidence: object) -> str:
    if isinstance(evidence, Mapping):
        return ", ".join(f"{k} {v}" for k, v in evidence.items())
    return "" if evidence is None else str(evidence)
