"""The table model: a column list and rows of values, built from result records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class Column:
    key: str
    title: str  # with unit, e.g. "p50[us]"
    fmt: str = "{}"


@dataclass
class Table:
    columns: list[Column]
    rows: list[list[Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


LAT_COLUMNS = [
    Column("size", "#bytes"),
    Column("iterations", "#iters"),
    Column("min", "min[us]", "{:.3f}"),
    Column("p50", "p50[us]", "{:.3f}"),
    Column("mean", "mean[us]", "{:.3f}"),
    Column("stdev", "stdev[us]", "{:.3f}"),
    Column("p99", "p99[us]", "{:.3f}"),
    Column("p999", "p99.9[us]", "{:.3f}"),
    Column("max", "max[us]", "{:.3f}"),
    Column("outliers", "outliers"),
]
BW_COLUMNS = [
    Column("size", "#bytes"),
    Column("iterations", "#iters"),
    Column("bandwidth_gbps", "BW[Gb/s]", "{:.3f}"),
    Column("bandwidth_MBps", "BW[MB/s]", "{:.2f}"),
    Column("msg_rate_mpps", "MsgRate[Mpps]", "{:.4f}"),
]
PATH_COLUMN = Column("path", "path")


def group_key(rec: Record) -> tuple[str, str, str]:
    return (str(rec.get("backend")), str(rec.get("op")), str(rec.get("pattern")))


def value(rec: Record, key: str) -> Any:
    if key in ("min", "p50", "mean", "stdev", "p99", "p999", "max", "outliers"):
        lat = rec.get("latency_us") or {}
        return lat.get(key)
    if key == "path":
        path = rec.get("path") or {}
        return path.get("verdict")
    return rec.get(key)


def table_for(records: list[Record]) -> Table:
    """One table for records of one (backend, op, pattern)."""
    lat = bool(records) and records[0].get("pattern") == "lat"
    columns = list(LAT_COLUMNS if lat else BW_COLUMNS)
    if any("path" in r for r in records):
        columns.append(PATH_COLUMN)
    return Table(columns, [[value(r, c.key) for c in columns] for r in records])


def cell(col: Column, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) or (isinstance(v, int) and "f" in col.fmt):
        return col.fmt.format(float(v))
    return str(v)


def carried_by(rec: Record) -> str:
    """One phrase for what actually carried a run, from the backend's own transport report."""
    local = (rec.get("transport") or {}).get("local") or {}
    kind = local.get("kind")
    if kind == "tcp":
        return f"tcp via {local.get('bound_device') or local.get('address_owner') or '?'}"
    if kind == "ucx":
        return f"ucx {'+'.join(local.get('transports') or [])} on {'+'.join(local.get('devices') or [])}"
    if kind == "ofi":
        return f"ofi {local.get('provider')} on {local.get('domain')}"
    if kind == "mpi":
        sel = local.get("selected") or {}
        if sel.get("pml"):
            btl = sel.get("btl") or {}
            btls = "+".join(sorted({b for v in btl.values() if isinstance(v, list) for b in v}))
            return f"mpi pml {sel.get('pml')}" + (f" btl {btls}" if btls else "") + (
                f" mtl {sel['mtl']}" if sel.get("mtl") else "")
        return f"mpi {sel.get('device') or local.get('library', '')[:40]}"
    if kind == "verbs":
        return f"verbs {local.get('device', '?')}/{local.get('port', '?')} {local.get('qp_type', '')}".strip()
    return str(kind or "?")
