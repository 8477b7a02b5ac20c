# SPDX-License-Identifier: BSD-3-Clause
"""Renderers: text (perftest-like, with notes), CSV, Markdown, JSON lines, all from typed results
(``fabscope.results.Result``); JSON is the record itself (``Result.to_json``), so nothing is lost."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Sequence

from ..results import Result
from ..results.explain import where_engines_ran
from ..results.pathtext import render_path_text
from .table import Table, cell, from_stored_runs, stored_run, table_for
from .text_table import aligned


def groups(results: Iterable[Result]) -> dict[tuple[str, str, str], list[Result]]:
    out: dict[tuple[str, str, str], list[Result]] = {}
    for res in results:
        out.setdefault(res.group, []).append(res)
    return out


def _text_table(t: Table) -> str:
    # The first column (the size) on the left, the figures right-aligned.
    cells = [[cell(c, v) for c, v in zip(t.columns, row, strict=True)] for row in t.rows]
    return "\n".join(aligned([c.title for c in t.columns], cells, right=range(1, len(t.columns))))


def header(res: Result) -> str:
    tr = res.transport
    where = tr.local.get("local_address") or tr.local.get("device") or ""
    peer = tr.local.get("peer_address") or tr.control or ""
    preload = tr.local.get("preload")
    backend = str(preload.get("label") or res.backend) if isinstance(preload, dict) else res.backend
    parts = [f"backend {backend}", f"op {res.op}", f"pattern {res.pattern}", f"poll {tr.poll}"]
    if where or peer:
        parts.append(f"{where} -> {peer}")
    launcher = tr.launcher or {}
    if launcher.get("name"):
        plugin = launcher.get("mpi_plugin")
        parts.append(f"launcher {launcher.get('binary') or launcher['name']}" + (f" --mpi={plugin}" if plugin else ""))
    line = "# " + " | ".join(parts)
    if res.pattern == "lat":
        line += f"\n# latency: {res.latency_definition or ''}"
    else:
        at = res.bandwidth.measured_at if res.bandwidth else ""
        line += f"\n# bandwidth measured at the {at or ''}; Gb/s = 10^9 bit/s, MB/s = 10^6 B/s"
    return line


def _path_lines(results: list[Result]) -> list[str]:
    """Every misrouted size, loudly; otherwise one line for the group (the largest size)."""
    bad = [render_path_text(r.path.raw) for r in results if r.misrouted]
    if bad:
        return list(dict.fromkeys(bad))
    return [f"# {render_path_text(results[-1].path.raw)}"] if results else []


#: A device below this fraction of the fastest one's rate is called a slow rail.
SLOW_RAIL = 0.5


def flow_lines(results: Sequence[Result]) -> list[str]:
    """Per device and per QP, when a size moved over several (verbs --qps N, --device A,B): the
    aggregate in the table, the parts here, so one slow rail or QP shows."""
    out = []
    for r in results:
        flows = [f for f in r.transport.flows if f.gbps is not None]
        if len(flows) < 2:
            continue
        devices: dict[str, float] = {}
        for f in flows:
            devices[f.device or "?"] = devices.get(f.device or "?", 0.0) + (f.gbps or 0.0)
        parts = [f"{f.device or '?'} QPN {f.qpn} {f.gbps:.3f}" for f in flows]
        line = f"# flows ({r.size} B, Gb/s): " + ", ".join(parts)
        if len(devices) > 1:
            line += "; per device: " + ", ".join(f"{d} {g:.3f}" for d, g in devices.items())
        out.append(line)
        fastest = max(devices, key=lambda d: devices[d])
        for dev, gbps in devices.items():
            if gbps < SLOW_RAIL * devices[fastest]:
                out.append(f"# warning ({r.size} B): {dev} ran at {gbps:.3f} Gb/s, {gbps / devices[fastest]:.0%} of "
                           f"{fastest}'s {devices[fastest]:.3f}: a slow rail (each device keeps its share of the "
                           "window in flight, so a slower one completes fewer); check its link rate, errors and "
                           "the peer's port")
    return out


def no_effect_lines(results: Sequence[Result]) -> list[str]:
    """Settings the transport reported it ignored, each once (text, Markdown and CSV show them)."""
    lines = [s for r in results for s in r.settings_without_effect]
    return list(dict.fromkeys(lines))


def why_lines(results: Sequence[Result]) -> list[str]:
    """``# why:`` lines: each seen cause of each size (results/explain/ decides); when no size has
    one, a single line with the count of checks (one line, not one per size)."""
    explained = [r for r in results if r.explanation is not None]
    many = len({r.size for r in explained}) > 1
    out: list[str] = []
    for r in explained:
        assert r.explanation is not None
        if r.explanation.seen or r.explanation.unexplained():
            out += [f"# why{f' ({r.size} B)' if many else ''}: {line}" for line in r.explanation.why_lines()]
    if explained and not out:
        summaries = list(dict.fromkeys(r.explanation.summary() for r in explained if r.explanation is not None))
        out.append(f"# why: nothing seen; {'; '.join(summaries)}")
    return out


def expected_lines(results: Sequence[Result]) -> list[str]:
    """``# expected:`` lines of latency results whose reference was looked up in the history
    (`fabscope run`; results/explain/ words it): one per size, or one for all when they say the
    same (no earlier run of any of them)."""
    lines = [(r.size, r.explanation.expected_line()) for r in results
             if r.explanation is not None and r.explanation.reference_sought]
    if len({line for _, line in lines}) == 1:
        return [f"# expected: {lines[0][1]}"]
    return [f"# expected ({size} B): {line}" for size, line in lines]


def causes_seen(results: Iterable[Result]) -> tuple[str, ...]:
    """The names of the causes seen in any of these results, once each, in explain's order."""
    names = [c.cause for r in results if r.explanation is not None for c in r.explanation.seen]
    return tuple(dict.fromkeys(names))


def why_cell(results: Iterable[Result]) -> str:
    """A suite table's "why" cell: the causes seen (``placement,cpu``), ``-`` when none is."""
    return ",".join(causes_seen(results)) or "-"


def labelled_why_lines(label: str, res: Result) -> list[str]:
    """``why (LABEL SIZE B): ...`` (without "# ") for each cause seen in one result of a suite
    row (none when nothing is seen: the row's "why" cell says ``-``)."""
    if res.explanation is None or not (res.explanation.seen or res.explanation.unexplained()):
        return []
    return [f"why ({label} {res.size} B): {line}" for line in res.explanation.why_lines()]


def render_text(results: Sequence[Result]) -> str:
    out: list[str] = []
    for recs in groups(results).values():
        out.append(header(recs[0]))
        out.append(_text_table(table_for(recs)))
        seen: set[str] = set()
        for rec in recs:
            for w in rec.warnings:
                msg = f"# warning ({rec.size} B): {w}"
                if msg not in seen:
                    seen.add(msg)
                    out.append(msg)
        out += [f"# setting had no effect: {line}" for line in no_effect_lines(recs)]
        out += flow_lines(recs)
        out += _path_lines(recs)
        ran = where_engines_ran(recs[-1].raw)
        if ran:
            out.append(f"# cpu: {ran}")
        out += expected_lines(recs)
        out += why_lines(recs)
        out.append("")
    return "\n".join(out)


CSV_KEYS = ["backend", "op", "pattern", "size", "iterations", "warmup",
            "lat_min_us", "lat_p50_us", "lat_mean_us", "lat_stdev_us", "lat_p99_us", "lat_p999_us", "lat_max_us",
            "bandwidth_gbps", "bandwidth_MBps", "msg_rate_mpps", "poll", "path_verdict",
            "path_requested", "settings_without_effect", "why"]


def render_csv(results: Sequence[Result]) -> str:
    """One row per result; records of stored runs (`history export`, reports of stored runs) start
    with their run, tag and start time."""
    buf = io.StringIO()
    writer = csv.writer(buf)
    runs = from_stored_runs(results)
    writer.writerow((["run", "tag", "started_at"] if runs else []) + CSV_KEYS)
    for r in results:
        lat, bw = r.latency, r.bandwidth
        row: list[object] = list(stored_run(r)) if runs else []
        row += [r.backend, r.op, r.pattern, r.size, r.iterations, r.warmup]
        row += [getattr(lat, k) if lat else None for k in ("min", "p50", "mean", "stdev", "p99", "p999", "max")]
        row += [bw.gbps, bw.mbps, bw.msg_rate_mpps] if bw else [None, None, None]
        row += [r.transport.poll, r.path.verdict, r.path.requested, "; ".join(r.settings_without_effect),
                r.explanation.summary() if r.explanation else ""]
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def render_md(results: Sequence[Result]) -> str:
    # Imported here: the Markdown writer brings the comparison charts' module, which a text or JSON
    # run never needs (start-up is paid on every host a launcher starts).
    from .markdown import markdown_table

    out: list[str] = []
    for (backend, op, pattern), recs in groups(results).items():
        t = table_for(recs)
        out.append(f"### {backend} {op} {pattern}\n")
        out.append(markdown_table(t))  # report/markdown.py: the one writer of Markdown tables
        out += [f"> setting had no effect: {line}\n" for line in no_effect_lines(recs)]
        out += [f"> **{line}**\n" for r in recs if r.misrouted for line in render_path_text(r.path.raw).splitlines()]
    return "\n".join(out)


def render_json(results: Sequence[Result]) -> str:
    return "".join(json.dumps(r.to_json(), sort_keys=True) + "\n" for r in results)


RENDERERS: dict[str, Callable[[Sequence[Result]], str]] = {
    "text": render_text, "csv": render_csv, "md": render_md, "json": render_json,
}
