# SPDX-License-Identifier: BSD-3-Clause
"""The table model: a column list and rows of values, built from typed results (``fabscope.results``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..results import Result


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


# key -> title of the latency statistics, all in microseconds with three decimals.
_LAT_STATS = {"min": "min", "p50": "p50", "mean": "mean", "stdev": "stdev", "p99": "p99", "p999": "p99.9",
              "max": "max"}
_SIZE_ITERATIONS = [Column("size", "#bytes"), Column("iterations", "#iters")]
LAT_COLUMNS = [
    *_SIZE_ITERATIONS,
    *(Column(key, f"{title}[us]", "{:.3f}") for key, title in _LAT_STATS.items()),
    Column("outliers", "outliers"),
]
BW_COLUMNS = [
    *_SIZE_ITERATIONS,
    Column("bandwidth_gbps", "BW[Gb/s]", "{:.3f}"),
    Column("bandwidth_MBps", "BW[MB/s]", "{:.2f}"),
    Column("msg_rate_mpps", "MsgRate[Mpps]", "{:.4f}"),
]
PATH_COLUMN = Column("path", "path")
LAT_KEYS = (*_LAT_STATS, "outliers")


def group_key(res: Result) -> tuple[str, str, str]:
    return res.group


def value(res: Result, key: str) -> Any:
    """The value of one column of a result."""
    if key in LAT_KEYS:
        return getattr(res.latency, key) if res.latency else None
    bw = res.bandwidth
    if key == "bandwidth_gbps":
        return bw.gbps if bw else None
    if key == "bandwidth_MBps":
        return bw.mbps if bw else None
    if key == "msg_rate_mpps":
        return bw.msg_rate_mpps if bw else None
    if key == "path":
        return res.path.verdict
    if key == "size":
        return res.size
    if key == "iterations":
        return res.iterations
    if key in ("run", "tag"):
        return stored_run(res)[0 if key == "run" else 1]
    raise KeyError(key)


RUN_COLUMNS = [Column("run", "run"), Column("tag", "tag")]


def stored_run(res: Result) -> tuple[int | None, str | None, str | None]:
    """(id, tag, start time) of the stored run a record came from (``run``, as `history export` and
    reports of stored runs carry it), or Nones for a record straight from a run or a file."""
    run = res.raw.get("run")
    if not isinstance(run, dict):
        return None, None, None
    rid, tag, when = run.get("id"), run.get("tag"), run.get("started_at")
    return (rid if isinstance(rid, int) else None, tag if isinstance(tag, str) else None,
            when if isinstance(when, str) else None)


def from_stored_runs(results: Sequence[Result]) -> bool:
    return any(stored_run(r)[0] is not None for r in results)


def table_for(results: Sequence[Result]) -> Table:
    """One table for results of one (backend, op, pattern); records of stored runs name their run and tag."""
    lat = bool(results) and results[0].pattern == "lat"
    columns = list(LAT_COLUMNS if lat else BW_COLUMNS) + [PATH_COLUMN]
    if from_stored_runs(results):
        columns = RUN_COLUMNS + columns
    return Table(columns, [[value(r, c.key) for c in columns] for r in results])


def cell(col: Column, v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) or (isinstance(v, int) and "f" in col.fmt):
        return col.fmt.format(float(v))
    return str(v)
