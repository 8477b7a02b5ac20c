# SPDX-License-Identifier: BSD-3-Clause
"""From result records to the series the charts draw and the rows of the suite's comparison.

One transport = one line on a chart = one row of the comparison: the backend, the operation and
what was asked of it (an MPI library, ``--ucx-tls``, ``--provider``, ``--device``), so a suite that
ran UCX over two transports or two MPIs shows each on its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..results import Result
from ..results.histogram import merge
from ..suite.measure import BW_LARGE, BW_MID, LAT_MID, LAT_SMALL  # the suite owns its sizes
from ..untyped import mapping, member
from .charts import BandwidthSeries, ComparisonRow, Distribution, LatencySeries, compact_runs
from .render import causes_seen, labelled_why_lines


def selection(rec: Result) -> str:
    """What was asked of the backend beyond its name and operation, in the CLI's words."""
    config = rec.config
    options = mapping(config.get("backend_options"))
    local = rec.transport.local
    parts: list[str] = []
    if rec.backend == "mpi":
        library = str(local.get("library") or "")
        parts.append("mpich" if "MPICH" in library.upper() else "openmpi" if "Open MPI" in library else library[:20])
        pml = member(rec.transport.launcher, "mca").get("pml")
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
    preload = mapping(rec.transport.local.get("preload"))  # "tcp (rspreload)": not the plain tcp row
    return make_label(str(preload.get("label") or rec.backend), rec.op, selection(rec))


def carrier_device(rec: Result) -> str | None:
    """The device that carried most of this host's bytes, from the path verdict."""
    local = rec.path.sides.get("local")
    return local.carrier() if local else None


def run_group(rec: Result) -> str | None:
    """The stored run a record came from, as a report groups it: "tag T" (repeated runs of one
    tag), "run N" (an untagged run), None (a plain result file: no run recorded in it)."""
    run = rec.raw.get("run")
    if not isinstance(run, Mapping):
        return None
    if run.get("tag"):
        return f"tag {run['tag']}"
    return f"run {run.get('id')}" if run.get("id") is not None else None


def run_id(rec: Result) -> str:
    run = rec.raw.get("run")
    return str(run.get("id")) if isinstance(run, Mapping) and run.get("id") is not None else ""


def grouped(records: Iterable[Result]) -> bool:
    """Whether these records come from several stored runs: then one series per tag (or untagged run)."""
    return len({run_group(r) for r in records} - {None}) > 1 or any(
        len(ids) > 1 for ids in _runs_per_group(records).values())


def _runs_per_group(records: Iterable[Result]) -> dict[str | None, set[str]]:
    out: dict[str | None, set[str]] = {}
    for r in records:
        out.setdefault(run_group(r), set()).add(run_id(r))
    return out


def _by_label(records: Iterable[Result], pattern: str) -> dict[str, list[Result]]:
    records = list(records)
    per_group = grouped(records)
    out: dict[str, list[Result]] = {}
    for rec in records:
        if rec.pattern == pattern:
            group = run_group(rec) if per_group else None
            label = transport_label(rec) + (f" [{group}]" if group else "")
            out.setdefault(label, []).append(rec)
    return {k: sorted(v, key=lambda r: r.size) for k, v in out.items()}


def _per_size(recs: list[Result], figure: Any) -> list[tuple[int, list[float], list[str]]]:
    """(size, the figure of every run that measured it, those runs' ids), sizes ascending."""
    out: dict[int, tuple[list[float], list[str]]] = {}
    for r in recs:
        v = figure(r)
        if v is not None:
            values, ids = out.setdefault(r.size, ([], []))
            values.append(float(v))
            ids.append(run_id(r))
    return [(size, vals, ids) for size, (vals, ids) in sorted(out.items())]


def latency_series(records: Iterable[Result]) -> list[LatencySeries]:
    """One line per transport, or per transport and tag when the records are several stored runs:
    then the median over the runs, with their spread (lowest to highest p50) as the band."""
    out: list[LatencySeries] = []
    for label, recs in _by_label(records, "lat").items():
        p50 = _per_size(recs, lambda r: r.latency.p50 if r.latency else None)
        p99 = dict((size, vals) for size, vals, _ in _per_size(recs, lambda r: r.latency.p99 if r.latency else None))
        if not p50:
            continue
        repeated = any(len(vals) > 1 for _, vals, _ in p50)
        out.append(LatencySeries(
            label, [k[0] for k in p50], [statistics.median(k[1]) for k in p50],
            [statistics.median(p99[k[0]]) for k in p50],
            p50_lo=[min(k[1]) for k in p50] if repeated else (), p50_hi=[max(k[1]) for k in p50] if repeated else (),
            runs=[compact_runs(k[2]) for k in p50] if repeated or any(any(k[2]) for k in p50) else ()))
    return out


def line_rate_for(rec: Result, line_rates: Mapping[str, float]) -> float | None:
    device = carrier_device(rec)
    return line_rates.get(device) if device else None


def _gbps(rec: Result) -> float | None:
    return rec.bandwidth.gbps if rec.bandwidth else None


ATOMICS = ("fadd", "cswap")


def bandwidth_series(records: Iterable[Result], line_rates: Mapping[str, float],
                     pattern: str = "bw") -> list[BandwidthSeries]:
    """Bandwidth lines; atomics (8 B operations, judged by their rate) stay in the tables only.
    Several stored runs: one line per transport and tag, the median over runs with their spread."""
    out: list[BandwidthSeries] = []
    for label, recs in _by_label((r for r in records if r.op not in ATOMICS), pattern).items():
        kept = _per_size(recs, _gbps)
        if kept:
            repeated = any(len(vals) > 1 for _, vals, _ in kept)
            out.append(BandwidthSeries(
                label, [k[0] for k in kept], [statistics.median(k[1]) for k in kept],
                line_rate_for(recs[-1], line_rates),
                lo=[min(k[1]) for k in kept] if repeated else (), hi=[max(k[1]) for k in kept] if repeated else (),
                runs=[compact_runs(k[2]) for k in kept] if repeated or any(any(k[2]) for k in kept)
                else ()))
    return out


def distributions(records: Sequence[Result], size: int | None = None, limit: int = 6) -> list[Distribution]:
    """The latency distribution of one size: one, or one per tag (its runs' histograms merged) when
    the records are several stored runs of different tags."""
    if not grouped(records):
        one = distribution(records, size)
        return [one] if one else []
    lat = [r for r in records if r.latency is not None and (size is None or r.size == size)]
    if not lat:
        return []
    chosen = size if size is not None else max(r.size for r in lat)
    by_group: dict[tuple[str, str | None], list[Result]] = {}
    for r in lat:
        if r.size == chosen:
            by_group.setdefault((transport_label(r), run_group(r)), []).append(r)
    out: list[Distribution] = []
    for (label, group), recs in list(by_group.items())[:limit]:
        stats = [r.latency for r in recs if r.latency is not None]
        hists = [s.histogram for s in stats if s.histogram is not None]
        buckets: list[tuple[float, float, int]] = []
        if len(hists) == len(stats):
            merged = merge(hists)
            buckets = [(merged.bounds_ns(i)[0] / 1e3, merged.bounds_ns(i)[1] / 1e3, c) for i, c in merged.buckets]
        percentiles = {k: statistics.median(getattr(s, k) for s in stats) for k in ("min", "p50", "p99", "p999", "max")}
        runs = f", {len(recs)} runs merged" if len(recs) > 1 else ""
        out.append(Distribution(f"{label} [{group}{runs}]" if group else label, chosen, buckets, percentiles))
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
    the carrying port's line rate at 1 MiB and % of the 1 MiB result's expected ceiling (its
    explanation's achieved fraction), what carried the largest size, the worst path verdict, and the
    causes seen in any of its results with their ``why`` lines."""
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
        fraction = bw_rec.explanation.achieved_fraction if bw_rec and bw_rec.explanation else None
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
            expected_pct=100.0 * fraction if fraction is not None else None,
            causes_seen=causes_seen(recs),
            why=tuple(line for r in recs for line in labelled_why_lines(f"{label} {r.pattern}", r)),
        ))
    return rows
