"""Renderers: text (perftest-like, with notes), CSV, Markdown, JSON lines."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable

from ..path import render_path_text
from .table import Record, Table, cell, group_key, table_for

# cpuidle drivers whose idle states cost tens of microseconds to leave (measured here: haltpoll
# pays ~40 us per blocking message on a quiet machine).
DEEP_IDLE_DRIVERS = {"haltpoll", "intel_idle", "acpi_idle"}


def groups(records: Iterable[Record]) -> dict[tuple[str, str, str], list[Record]]:
    out: dict[tuple[str, str, str], list[Record]] = {}
    for rec in records:
        out.setdefault(group_key(rec), []).append(rec)
    return out


def idle_note(rec: Record) -> str | None:
    """Why a blocking latency run may show wake-up cost, and what to try."""
    host = rec.get("host") or {}
    transport = rec.get("transport") or {}
    driver = host.get("cpuidle_driver") or ""
    if rec.get("pattern") != "lat" or transport.get("poll") != "block":
        return None
    if driver not in DEEP_IDLE_DRIVERS or host.get("cpu_dma_latency_held"):
        return None
    return (
        f"note: this run waited in the kernel (--poll block) while the CPUs idle with cpuidle driver "
        f"'{driver}' (governor '{host.get('cpuidle_governor')}'). Each wake-up from idle adds its exit "
        "latency to every message (about 40 us per message on a quiet haltpoll VM). "
        "Try --poll busy, or --hold-cpu-latency (holds /dev/cpu_dma_latency at 0 during the run)."
    )


def _text_table(t: Table) -> str:
    widths = [max([len(c.title)] + [len(cell(c, r[i])) for r in t.rows]) for i, c in enumerate(t.columns)]
    titles = zip(t.columns, widths, strict=True)
    lines = ["  ".join(c.title.rjust(w) if i else c.title.ljust(w) for i, (c, w) in enumerate(titles))]
    for row in t.rows:
        lines.append(
            "  ".join(
                cell(c, v).rjust(w) if i else cell(c, v).ljust(w)
                for i, (c, v, w) in enumerate(zip(t.columns, row, widths, strict=True))
            )
        )
    return "\n".join(lines)


def header(rec: Record) -> str:
    tr = rec.get("transport") or {}
    local = tr.get("local") or {}
    where = local.get("local_address") or local.get("device") or ""
    peer = local.get("peer_address") or tr.get("control") or ""
    parts = [
        f"backend {rec.get('backend')}",
        f"op {rec.get('op')}",
        f"pattern {rec.get('pattern')}",
        f"poll {tr.get('poll')}",
    ]
    if where or peer:
        parts.append(f"{where} -> {peer}")
    launcher = tr.get("launcher") or {}
    if launcher.get("name"):
        plugin = launcher.get("mpi_plugin")
        parts.append(f"launcher {launcher.get('binary') or launcher['name']}" + (f" --mpi={plugin}" if plugin else ""))
    line = "# " + " | ".join(parts)
    if rec.get("pattern") == "lat":
        line += f"\n# latency: {rec.get('latency_definition', '')}"
    else:
        line += f"\n# bandwidth measured at the {rec.get('bandwidth_measured_at', '')}; Gb/s = 10^9 bit/s, MB/s = 10^6 B/s"
    return line


def _path_lines(recs: list[Record]) -> list[str]:
    """Every misrouted size, loudly; otherwise one line for the group (the largest size)."""
    paths = [r["path"] for r in recs if r.get("path")]
    bad = [render_path_text(p) for p in paths if p.get("verdict") == "misrouted"]
    if bad:
        return bad
    return [f"# {render_path_text(paths[-1])}"] if paths else []


def render_text(records: list[Record]) -> str:
    out: list[str] = []
    for recs in groups(records).values():
        out.append(header(recs[0]))
        out.append(_text_table(table_for(recs)))
        seen: set[str] = set()
        for rec in recs:
            for w in rec.get("warnings") or []:
                msg = f"# warning ({rec.get('size')} B): {w}"
                if msg not in seen:
                    seen.add(msg)
                    out.append(msg)
        out += _path_lines(recs)
        note = idle_note(recs[0])
        if note:
            out.append("# " + note)
        out.append("")
    return "\n".join(out)


def render_csv(records: list[Record]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    keys = ["backend", "op", "pattern", "size", "iterations", "warmup",
            "lat_min_us", "lat_p50_us", "lat_mean_us", "lat_stdev_us", "lat_p99_us", "lat_p999_us", "lat_max_us",
            "bandwidth_gbps", "bandwidth_MBps", "msg_rate_mpps", "poll", "path_verdict"]
    writer.writerow(keys)
    for rec in records:
        lat = rec.get("latency_us") or {}
        row = [rec.get(k) for k in keys[:6]]
        row += [lat.get(k) for k in ("min", "p50", "mean", "stdev", "p99", "p999", "max")]
        row += [rec.get(k) for k in ("bandwidth_gbps", "bandwidth_MBps", "msg_rate_mpps")]
        row += [(rec.get("transport") or {}).get("poll"), (rec.get("path") or {}).get("verdict")]
        writer.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


def render_md(records: list[Record]) -> str:
    out: list[str] = []
    for (backend, op, pattern), recs in groups(records).items():
        t = table_for(recs)
        out.append(f"### {backend} {op} {pattern}\n")
        out.append("| " + " | ".join(c.title for c in t.columns) + " |")
        out.append("|" + "|".join("---:" for _ in t.columns) + "|")
        for row in t.rows:
            out.append("| " + " | ".join(cell(c, v) for c, v in zip(t.columns, row, strict=True)) + " |")
        out.append("")
    return "\n".join(out)


def render_json(records: list[Record]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)


RENDERERS = {"text": render_text, "csv": render_csv, "md": render_md, "json": render_json}
