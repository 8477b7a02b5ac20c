# SPDX-License-Identifier: BSD-3-Clause
"""The matrix as text (N x N tables per pattern, findings under them) and CSV.

A cell is the median of the screen (and retest) figures of that direction: row = sender (the
client engine's host), column = receiver. `*` marks a direction confirmed bad, `?` one that
failed, `!` a misrouted one, `.` the diagonal and pairs not measured.
"""

from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict

from ..results.matrix import MatrixRun, metric_of
from .rules import Rule, directions

_UNIT = {"bandwidth_gbps": "Gb/s", "latency_p50_us": "us"}


def _cells(run: MatrixRun, pattern: str) -> dict[tuple[str, str], tuple[float | None, str]]:
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    marks: dict[tuple[str, str], str] = {}
    for m in run.measurements:
        if m.pattern != pattern:
            continue
        key = (m.src, m.dst)
        if m.verdict == "misrouted":
            marks[key] = "!"
        if m.value is not None and m.error is None:  # misrouted figures are shown (marked), not judged
            values[key].append(m.value)
        elif m.error and key not in values:
            marks.setdefault(key, "?")
    rule = Rule(**{k: v for k, v in run.rule.items() if k in Rule.__dataclass_fields__})
    for (s, d, p), st in directions(rule, run.measurements).items():
        if p == pattern and st == "bad":
            marks.setdefault((s, d), "*")
    keys = set(values) | set(marks)
    return {k: (statistics.median(values[k]) if values.get(k) else None, marks.get(k, "")) for k in keys}


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def table(run: MatrixRun, pattern: str) -> str:
    hosts = run.hosts
    cells = _cells(run, pattern)
    metric = metric_of(pattern)
    width = max(7, *(len(h) for h in hosts)) + 1
    head = f"{pattern} {('p50 latency' if pattern == 'lat' else 'bandwidth')} [{_UNIT[metric]}], row -> column"
    lines = [head, " " * width + "".join(h.rjust(width) for h in hosts)]
    for src in hosts:
        row = src.ljust(width)
        for dst in hosts:
            if src == dst:
                row += ".".rjust(width)
                continue
            value, mark = cells.get((src, dst), (None, ""))
            row += ((_fmt(value) if value is not None or mark else ".") + mark).rjust(width)
        lines.append(row)
    return "\n".join(lines)


def text(run: MatrixRun) -> str:
    out = [f"# fabric matrix: {len(run.hosts)} hosts, backend {run.backend}"
           + (f" under {run.launcher}" if run.launcher else "")
           + f", schedule {run.schedule.get('name')} ({run.schedule.get('rounds')} rounds, "
           f"{run.schedule.get('directions', 'both')} directions), {len(run.measurements)} measurements "
           f"({run.retests} retests)",
           f"# rule: {run.rule.get('text')}"]
    for pattern, c in run.centres.items():
        out.append(f"# {pattern}: fabric median {_fmt(c.get('median'))} {_UNIT[metric_of(pattern)]}, "
                   f"spread {_fmt(c.get('spread'))}")
    for pattern in run.patterns:
        out += ["", table(run, pattern)]
    out.append("")
    out.append("(* confirmed bad, ! misrouted, ? failed)")
    if run.unreachable:
        out += [f"UNREACHABLE {h}: {why}" for h, why in sorted(run.unreachable.items())]
    out += [f"FAILED {m.src} -> {m.dst} {m.pattern}: {m.error}" for m in run.failures]
    if not run.findings:
        out.append("findings: none" + (" among the reachable hosts" if run.unreachable else " - the fabric is clean"))
    for f in run.findings:
        label = {"node": "BAD NODE", "link": "BAD LINK", "misrouted": "MISROUTED"}[f.kind]
        out.append(f"{label}: {f.summary}")
        if f.why:
            out.append(f"  why: {f.why.diagnosis}")
        ev = f.evidence
        errs = ev.get("error_counters") or {h: e.get("error_counters") for h, e in (ev.get("hosts") or {}).items()
                                            if e.get("error_counters")}
        if errs:
            out.append(f"  error counters that moved: {errs}")
        carried = ev.get("bytes_per_device")
        if carried:
            out.append("  bytes per device: " + ", ".join(f"{d} {b}" for d, b in list(carried.items())[:4]))
    out += [f"note: {n}" for n in run.notes]
    t = run.timing
    if t.jobs and t.wall_s > 0:
        j = t.to_json()
        out.append(f"timing: {t.wall_s:.1f} s in all ({t.start_s:.1f} s until the agents were in), {j['jobs']} pair "
                   f"measurements, {t.slots} at once, measuring {t.measuring_s:.1f} s ({t.measuring_s / t.wall_s:.0%} "
                   f"of the time), overhead {j['overhead_per_job_s']:.2f} s a pair")
    return "\n".join(out) + "\n"


def csv_text(run: MatrixRun) -> str:
    """One row per directed pair and pattern: src, dst, pattern, metric, median, unit, mark, count."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["src", "dst", "pattern", "metric", "value", "unit", "mark", "measurements"])
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for m in run.measurements:
        counts[(m.src, m.dst, m.pattern)] += 1
    for pattern in run.patterns:
        cells = _cells(run, pattern)
        metric = metric_of(pattern)
        for src in run.hosts:
            for dst in run.hosts:
                if src != dst and (src, dst) in cells:
                    value, mark = cells[(src, dst)]
                    w.writerow([src, dst, pattern, metric, "" if value is None else f"{value:.6g}", _UNIT[metric],
                                {"*": "bad", "!": "misrouted", "?": "failed"}.get(mark, ""),
                                counts[(src, dst, pattern)]])
    return buf.getvalue()
