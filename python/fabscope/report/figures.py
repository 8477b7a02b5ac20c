"""From result records to the series the charts draw and the rows of the suite's comparison.

One transport = one line on a chart = one row of the comparison: the backend, the operation and
what was asked of it (an MPI library, ``--ucx-tls``, ``--provider``, ``--device``), so a suite that
ran UCX over two transports or two MPIs shows each on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..results import Result
from .charts import BandwidthSeries, ComparisonRow, Distribution, LatencySeries

LAT_SMALL, LAT_MID, BW_MID, BW_LARGE = 8, 4096, 65536, 1 << 20


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def selection(rec: Result) -> str:
    """What was asked of the backend beyond its name and operation, in the CLI's words."""
    config = rec.config
    options = _mapping(config.get("backend_options"))
    local = rec.transport.local
    parts: list[str] = []
    if rec.backend == "mpi":
        library = str(local.get("library") or "")
        parts.append("mpich" if "MPICH" in library.upper() else "openmpi" if "Open MPI" in library else library[:20])
        pml = _mapping((rec.transport.launcher or {}).get("mca")).get("pml")
        if isinstance(pml, str) and pml and not pml.startswith("^"):  # a selection asked for, not an exclusion
            parts.append(f"pml {pml}")
    for key in ("ucx-tls", "provider", "domain"):
        if options.get(key):
            parts.append(f"{key} {options[key]}")
    if config.get("device"):
        parts.append(f"device {config['device']}")
    return ", ".join(p for p in parts if p)


def make_label(backend: str, op: str, selected: str) -> str:
    """"ucx tag (ucx-tls tcp, device fabric0)": the one spelling of a transport's name in tables."""
    return f"{backend} {op}" + (f" ({selected})" if selected else "")


def transport_label(rec: Result) -> str:
    return make_label(rec.backend, rec.op, selection(rec))


def carrier_device(rec: Result) -> str | None:
    """The device that carried most of this host's bytes, from the path verdict."""
    local = _mapping(_mapping(rec.path.raw.get("sides")).get("local"))
    for key in ("carriers", "top"):
        items = local.get(key)
        if isinstance(items, list) and items and isinstance(items[0], Mapping) and items[0].get("device"):
            return str(items[0]["device"])
    return None


def _by_label(records: Iterable[Result], pattern: str) -> dict[str, list[Result]]:
    out: dict[str, list[Result]] = {}
    for rec in records:
        if rec.pattern == pattern:
            out.setdefault(transport_label(rec), []).append(rec)
    return {k: sorted(v, key=lambda r: r.size) for k, v in out.items()}


def latency_series(records: Iterable[Result]) -> list[LatencySeries]:
    out: list[LatencySeries] = []
    for label, recs in _by_label(records, "lat").items():
        kept = [(r.size, r.latency.p50, r.latency.p99) for r in recs if r.latency]
        if kept:
            out.append(LatencySeries(label, [p[0] for p in kept], [p[1] for p in kept], [p[2] for p in kept]))
    return out


def line_rate_for(rec: Result, line_rates: Mapping[str, float]) -> float | None:
    device = carrier_device(rec)
    return line_rates.get(device) if device else None


def _gbps(rec: Result) -> float | None:
    return rec.bandwidth.gbps if rec.bandwidth else None


ATOMICS = ("fadd", "cswap")


def bandwidth_series(records: Iterable[Result], line_rates: Mapping[str, float],
                     pattern: str = "bw") -> list[BandwidthSeries]:
    """Bandwidth lines; atomics (8 B operations, judged by their rate) stay in the tables only."""
    out: list[BandwidthSeries] = []
    for label, recs in _by_label((r for r in records if r.op not in ATOMICS), pattern).items():
        kept = [(r.size, g) for r in recs if (g := _gbps(r)) is not None]
        if kept:
            out.append(BandwidthSeries(label, [k[0] for k in kept], [k[1] for k in kept],
                                       line_rate_for(recs[-1], line_rates)))
    return out


def distribution(records: Sequence[Result], size: int | None = None) -> Distribution | None:
    """The latency distribution of one size (the largest latency size measured unless asked):
    histogram buckets when the record carries them, else its percentiles."""
    lat = [r for r in records if r.latency is not None and (size is None or r.size == size)]
    if not lat:
        return None
    rec = max(lat, key=lambda r: r.size)
    stats = rec.latency
    assert stats is not None
    percentiles = {"min": stats.min, "p50": stats.p50, "p99": stats.p99, "p999": stats.p999, "max": stats.max}
    return Distribution(transport_label(rec), rec.size, histogram_buckets(rec), percentiles)


def histogram_buckets(rec: Result) -> list[tuple[float, float, int]]:
    """(lower, upper, count) in microseconds from the record's compact histogram, if it has one."""
    hist = rec.latency.histogram if rec.latency else None
    if hist is None:
        return []
    out: list[tuple[float, float, int]] = []
    for index, count in hist.buckets:
        lo_ns, hi_ns = hist.bounds_ns(index)
        out.append((lo_ns / 1e3, hi_ns / 1e3, count))
    return out


def _figure_at(recs: list[Result], pattern: str, size: int, pick: str) -> float | None:
    for r in recs:
        if r.pattern == pattern and r.size == size:
            if r.latency is not None:
                return float(getattr(r.latency, pick))
            return _gbps(r)
    return None


WORST_FIRST = ("misrouted", "unverifiable", "not-requested", "verified")


def comparison_rows(records: Iterable[Result], line_rates: Mapping[str, float] | None = None) -> list[ComparisonRow]:
    """One row per transport: 8 B p50/p99, 4 KiB p50, 64 KiB and 1 MiB bandwidth (bw pattern), % of
    the carrying port's line rate at 1 MiB, what carried the largest size, the worst path verdict."""
    rates = line_rates or {}
    by_label: dict[str, list[Result]] = {}
    for rec in records:
        by_label.setdefault(transport_label(rec), []).append(rec)
    rows: list[ComparisonRow] = []
    for label, recs in by_label.items():
        bw1m = _figure_at(recs, "bw", BW_LARGE, "")
        bw_rec = next((r for r in recs if r.pattern == "bw" and r.size == BW_LARGE), None)
        rate = line_rate_for(bw_rec, rates) if bw_rec else None
        verdicts = {r.path.verdict for r in recs}
        worst = next((v for v in WORST_FIRST if v in verdicts), "-")
        largest = max(recs, key=lambda r: r.size)
        rows.append(ComparisonRow(
            label=label,
            lat8_p50_us=_figure_at(recs, "lat", LAT_SMALL, "p50"),
            lat8_p99_us=_figure_at(recs, "lat", LAT_SMALL, "p99"),
            lat4k_p50_us=_figure_at(recs, "lat", LAT_MID, "p50"),
            bw64k_gbps=_figure_at(recs, "bw", BW_MID, ""),
            bw1m_gbps=bw1m,
            line_rate_pct=100.0 * bw1m / rate if bw1m is not None and rate else None,
            carried_by=largest.transport.carried_by,
            path=worst,
        ))
    return rows
