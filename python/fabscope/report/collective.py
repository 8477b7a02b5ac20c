# SPDX-License-Identifier: BSD-3-Clause
"""Collective results (``results.collective``) as text, CSV, Markdown and JSON lines: one table per
operation, one row per size, from the typed results only (nothing re-derived here)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Sequence

from ..results.collective import CollectiveResult
from .text_table import aligned

COLUMNS = ("size_B", "count", "iters", "time_min_us", "time_p50_us", "time_p99_us", "algbw_Gbps", "busbw_Gbps",
           "skew_p50_us", "last_rank", "verified")


def _gbps(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def row(r: CollectiveResult) -> list[str]:
    last = f"{r.last_rank} ({r.last_host}, {r.last_rank_times}/{r.iterations})"
    return [str(r.size), str(r.raw.get("count", "")), str(r.iterations), f"{r.time_ns.min / 1e3:.2f}",
            f"{r.time_ns.p50 / 1e3:.2f}", f"{r.time_ns.p99 / 1e3:.2f}", _gbps(r.algbw_gbps), _gbps(r.busbw_gbps),
            f"{r.skew_ns.p50 / 1e3:.2f}", last, "yes" if r.verified else "NO"]


def title(r: CollectiveResult) -> str:
    what = [r.pattern, f"{r.ranks} ranks on {len(r.hosts)} host(s)"]
    if r.datatype:
        what.append(r.datatype)
    if r.reduce_op:
        what.append(f"op {r.reduce_op}")
    if r.in_place:
        what.append("in place")
    factor = f"; busbw = algbw x {r.bus_factor:.3f}" if r.bus_factor is not None else ""
    return f"# collective {' | '.join(what)} | {r.library}{factor}"


def groups(results: Sequence[CollectiveResult]) -> list[list[CollectiveResult]]:
    out: dict[tuple[str, int, str | None, bool], list[CollectiveResult]] = {}
    for r in results:
        out.setdefault((r.pattern, r.ranks, r.datatype, r.in_place), []).append(r)
    return list(out.values())


def path_lines(r: CollectiveResult) -> list[str]:
    """The expected ceiling, the hosts that held the collective back (when any did) and the path
    verdict of one size, the latter said per host where it is not verified."""
    ceiling, basis = r.ceiling()
    out = []
    if r.pattern != "barrier" and len(r.hosts) > 1:
        out.append(f"# expected {r.size} B: busbw up to {ceiling:.3f} Gb/s ({basis}); reached "
                   f"{(r.fraction or 0) * 100:.1f} %" if ceiling else f"# expected {r.size} B: unknown ({basis})")
    held, why = r.held_back()
    if held:
        out.append(f"# held back {r.size} B by {', '.join(held)}: {why}")
    verdict = r.path_verdict
    if verdict == "unverified":
        return out
    out.append(f"# path {r.size} B: {verdict} ({r.requested_device} on every host)")
    for p in r.host_paths():
        if p.required_bytes and not p.verified:
            where = ", ".join(f"{name} {moved} B" for name, moved in sorted(p.carriers.items(), key=lambda x: -x[1]))
            out.append(f"#   {p.host}: {p.device} counted {p.counted_bytes if p.counted_bytes is not None else 'nothing'}"
                       f" B {p.direction}, the algorithm must move at least {p.required_bytes} B there; "
                       f"{p.direction} by device: {where or 'none'}")
    if verdict == "misrouted":
        reasons = r.route_reasons()
        out += [f"# why: route: {reason}; fix: {fix}" for reason, fix in reasons] or [
            "# why: route: the library's report in the record names no setting that chose it"]
    return out


def placement_lines(r: CollectiveResult) -> list[str]:
    """Where each rank ran (its CPU, per host), and any oversubscription the engine stated."""
    cpus = r.rank_cpus()
    out = [f"# placement (--cpu {r.cpu_asked}): " + ", ".join(
        f"rank {rank} {host} CPU {cpu if cpu is not None else 'not pinned'}" for rank, host, cpu, _ in cpus)] if cpus else []
    return out + [f"# oversubscribed: {said}" for said in r.oversubscribed]


def render_text(results: Sequence[CollectiveResult]) -> str:
    lines: list[str] = []
    for group in groups(results):
        lines.append(title(group[0]))
        lines += aligned(COLUMNS, [row(r) for r in group], right=range(0, len(COLUMNS) - 2))
        lines += placement_lines(group[0])
        for r in group:
            lines += path_lines(r)
    return "\n".join(lines) + "\n" if lines else ""


def render_markdown(results: Sequence[CollectiveResult]) -> str:
    out: list[str] = []
    for group in groups(results):
        out += [f"**{title(group[0]).removeprefix('# ')}**", "", "| " + " | ".join(COLUMNS) + " |",
                "|" + "---|" * len(COLUMNS)]
        out += ["| " + " | ".join(row(r)) + " |" for r in group]
        out.append("")
    return "\n".join(out)


def render_csv(results: Sequence[CollectiveResult]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["pattern", "ranks", "hosts", "datatype", "in_place", *COLUMNS])
    for r in results:
        w.writerow([r.pattern, r.ranks, len(r.hosts), r.datatype or "", r.in_place, *row(r)])
    return buf.getvalue()


def render_json(results: Sequence[CollectiveResult]) -> str:
    return "".join(json.dumps(r.to_json()) + "\n" for r in results)


RENDERERS: dict[str, Callable[[Sequence[CollectiveResult]], str]] = {
    "text": render_text, "csv": render_csv, "md": render_markdown, "json": render_json,
}
