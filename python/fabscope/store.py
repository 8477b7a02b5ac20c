"""History: every run's results in an embedded SQLite store (stdlib sqlite3, nothing to install).

Default file ``$XDG_DATA_HOME/fabscope/history.db`` (``~/.local/share/fabscope/history.db`` when
XDG_DATA_HOME is unset); ``--store PATH`` chooses another, ``--no-store`` skips it.

- One row in ``runs`` per command (``run``, ``suite``, ``matrix``): time (UTC), command line, tag,
  hosts, fabscope version. One row in ``results`` per record, appended the moment it arrives, in
  its own transaction: a ``kill -9`` at any moment loses at most the record being written.
- WAL journal with ``synchronous=FULL``; writers wait up to ``BUSY_TIMEOUT_S`` for the lock, so two
  runs on one host both land.
- ``schema_version`` holds the version; ``MIGRATIONS`` brings any older file up to date, each step
  in one transaction. Every statement is parameterised.
- A result row keeps the full record (``record``, JSON: config, transport, counters, path verdict
  and the compact latency histogram of ``fabscope.results.histogram``) plus the columns that
  listing and filtering need.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from . import __version__
from .errors import EXIT_USAGE, FabscopeError
from .results import Result, parse_record

__all__ = ["Filters", "RunInfo", "Store", "default_path", "open_store", "save_matrix"]

BUSY_TIMEOUT_S = 30.0

# Each entry takes the file from version i to i + 1. Never edit a released step; append one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            started_at TEXT NOT NULL,
            command TEXT NOT NULL,
            argv TEXT NOT NULL,
            tag TEXT,
            fabscope_version TEXT NOT NULL
        )""",
        """CREATE TABLE results (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id),
            seq INTEGER NOT NULL,
            backend TEXT NOT NULL,
            op TEXT NOT NULL,
            pattern TEXT NOT NULL,
            size INTEGER NOT NULL,
            transport TEXT NOT NULL,
            host TEXT NOT NULL,
            peer_host TEXT NOT NULL,
            engine_version TEXT NOT NULL,
            verdict TEXT NOT NULL,
            p50_us REAL,
            p99_us REAL,
            bandwidth_gbps REAL,
            record TEXT NOT NULL
        )""",
    ),
    (
        "CREATE INDEX results_case ON results(backend, op, pattern, size)",
        "CREATE INDEX results_run ON results(run_id, seq)",
        "CREATE INDEX runs_tag ON runs(tag, id)",
    ),
    (  # the summaries a run writes beside its records: fabscope.matrix/1 (findings), fabscope.suite/1
        """CREATE TABLE summaries (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id),
            schema TEXT NOT NULL,
            body TEXT NOT NULL
        )""",
        "CREATE INDEX summaries_run ON summaries(run_id)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)


def default_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "fabscope" / "history.db"


@dataclass(frozen=True)
class RunInfo:
    id: int
    started_at: str
    command: str
    argv: list[str]
    tag: str | None
    fabscope_version: str
    results: int
    hosts: tuple[str, ...]
    cases: str  # e.g. "tcp send lat 8..4096"


@dataclass(frozen=True)
class Filters:
    backend: str | None = None
    op: str | None = None
    pattern: str | None = None
    size: int | None = None
    host: str | None = None
    tag: str | None = None
    since: str | None = None  # ISO time, UTC
    until: str | None = None

    def where(self) -> tuple[str, list[object]]:
        """A WHERE clause over results r / runs u, and its parameters."""
        parts: list[str] = []
        args: list[object] = []
        for column, value in (("r.backend", self.backend), ("r.op", self.op), ("r.pattern", self.pattern),
                              ("r.size", self.size), ("u.tag", self.tag)):
            if value is not None:
                parts.append(f"{column} = ?")
                args.append(value)
        if self.host is not None:
            parts.append("(r.host = ? OR r.peer_host = ?)")
            args += [self.host, self.host]
        if self.since is not None:
            parts.append("u.started_at >= ?")
            args.append(self.since)
        if self.until is not None:
            parts.append("u.started_at <= ?")
            args.append(self.until)
        return (" AND ".join(parts) or "1"), args


def parse_time(text: str, flag: str, now: datetime | None = None) -> str:
    """``2026-11-20``, ``2026-11-20T10:00``, or an age (``90m``, ``6h``, ``7d``) -> ISO UTC."""
    now = now or datetime.now(UTC)
    units = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
    if text[:-1].isdigit() and text[-1:] in units:
        return (now - timedelta(**{units[text[-1]]: int(text[:-1])})).isoformat(timespec="seconds")
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise FabscopeError(f"{flag} {text!r}: expected a date/time such as 2026-11-20 or 2026-11-20T10:00 "
                            "(UTC), or an age such as 90m, 6h, 7d", EXIT_USAGE) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC).isoformat(timespec="seconds")


class Store:
    """One open history file. Use ``open_store``; close it (or use it as a context manager)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._enter_wal()
            self._db.execute("PRAGMA synchronous=FULL")
            self._migrate()
        except (OSError, sqlite3.Error) as exc:
            raise FabscopeError(
                f"the history store {path} cannot be opened ({exc}); choose another file with --store PATH, "
                "or run with --no-store", EXIT_USAGE) from exc

    def _enter_wal(self) -> None:
        """WAL mode (persistent in the file). Switching to it needs the file to itself, and SQLite
        answers "database is locked" at once, without its busy timeout, while another process is
        creating the same new store (two `fabscope run` started together): try again, within
        the same timeout as any other write."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock up front (waits busy_timeout)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _version(self) -> int:
        row = self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
        if row is None:
            return 0
        got = self._db.execute("SELECT version FROM schema_version").fetchone()
        return int(got[0]) if got else 0

    def _migrate(self) -> None:
        if self._version() == SCHEMA_VERSION:
            return
        with self._write() as db:
            version = self._version()  # again, under the lock: another process may have migrated
            if version > SCHEMA_VERSION:
                raise FabscopeError(
                    f"the history store {self.path} has schema version {version}, newer than this fabscope "
                    f"reads ({SCHEMA_VERSION}); upgrade fabscope or use another --store", EXIT_USAGE)
            if version == 0:
                db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                db.execute("INSERT INTO schema_version (version) VALUES (0)")
            for step in MIGRATIONS[version:]:
                for statement in step:
                    db.execute(statement)
            db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))

    @property
    def schema_version(self) -> int:
        return self._version()

    # -- writing -----------------------------------------------------------------------------

    def begin_run(self, command: str, argv: Sequence[str], tag: str | None = None) -> int:
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO runs (started_at, command, argv, tag, fabscope_version) VALUES (?, ?, ?, ?, ?)",
                (datetime.now(UTC).isoformat(timespec="seconds"), command, json.dumps(list(argv)), tag,
                 __version__),
            )
            return int(cur.lastrowid or 0)

    def append(self, run_id: int, result: Result) -> int:
        """One result, committed on return (each in its own transaction: see the module docstring)."""
        lat, bw = result.latency, result.bandwidth
        host, peer = result.hosts
        with self._write() as db:
            seq = db.execute("SELECT COUNT(*) FROM results WHERE run_id = ?", (run_id,)).fetchone()[0]
            cur = db.execute(
                "INSERT INTO results (run_id, seq, backend, op, pattern, size, transport, host, peer_host, "
                "engine_version, verdict, p50_us, p99_us, bandwidth_gbps, record) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, seq, result.backend, result.op, result.pattern, result.size, result.transport.label,
                 host, peer, result.version, result.path.verdict, lat.p50 if lat else None,
                 lat.p99 if lat else None, bw.gbps if bw else None,
                 json.dumps(result.to_json(), sort_keys=True)),
            )
            return int(cur.lastrowid or 0)

    def add_run(self, command: str, argv: Sequence[str], results: Iterable[Result], tag: str | None = None) -> int:
        """A whole run at once (the matrix, imports): the run row, then each result."""
        run_id = self.begin_run(command, argv, tag)
        for r in results:
            self.append(run_id, r)
        return run_id

    def add_summary(self, run_id: int, summary: Mapping[str, Any]) -> None:
        """A run's summary object (``schema`` names it: fabscope.matrix/1, fabscope.suite/1)."""
        with self._write() as db:
            db.execute("INSERT INTO summaries (run_id, schema, body) VALUES (?, ?, ?)",
                       (run_id, str(summary.get("schema") or ""), json.dumps(summary, sort_keys=True)))

    # -- reading -----------------------------------------------------------------------------

    def summaries(self, run_id: int) -> list[dict[str, Any]]:
        return [json.loads(row[0]) for row in self._db.execute(
            "SELECT body FROM summaries WHERE run_id = ? ORDER BY id", (run_id,))]

    def runs(self, filters: Filters = Filters(), limit: int | None = None, run_id: int | None = None) -> list[RunInfo]:
        """Runs with at least one result matching ``filters``, newest first."""
        where, args = filters.where()
        if run_id is not None:
            where += " AND u.id = ?"
            args.append(run_id)
        sql = (
            "SELECT u.id, u.started_at, u.command, u.argv, u.tag, u.fabscope_version, COUNT(r.id), "
            "GROUP_CONCAT(DISTINCT r.host), GROUP_CONCAT(DISTINCT r.peer_host), "
            "GROUP_CONCAT(DISTINCT r.backend || ' ' || r.op || ' ' || r.pattern), MIN(r.size), MAX(r.size) "
            f"FROM runs u JOIN results r ON r.run_id = u.id WHERE {where} GROUP BY u.id ORDER BY u.id DESC"
        )
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        out: list[RunInfo] = []
        for row in self._db.execute(sql, args):
            hosts = sorted({h for col in (row[7], row[8]) for h in str(col or "").split(",") if h})
            sizes = f"{row[10]}" if row[10] == row[11] else f"{row[10]}..{row[11]}"
            groups = str(row[9] or "").split(",")
            if len(groups) > 3:  # a suite: name the backends, not every case
                backends = dict.fromkeys(g.split(" ", 1)[0] for g in groups)
                groups = [f"{len(groups)} cases of {'+'.join(backends)}"]
            out.append(RunInfo(int(row[0]), row[1], row[2], json.loads(row[3]), row[4], row[5], int(row[6]),
                               tuple(hosts), f"{','.join(groups)} {sizes}"))
        return out

    def run(self, run_id: int) -> RunInfo:
        found = self.runs(run_id=run_id)
        if not found:
            raise FabscopeError(f"no run {run_id} in {self.path} (`fabscope history` lists the runs there)", EXIT_USAGE)
        return found[0]

    def _has_run(self, run_id: int) -> bool:
        return self._db.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None

    def results(self, run_ids: Sequence[int] | None = None, filters: Filters = Filters()) -> list[Result]:
        """Stored results (as they were judged when stored), in run and arrival order."""
        where, args = filters.where()
        sql = f"SELECT r.record FROM results r JOIN runs u ON r.run_id = u.id WHERE {where}"
        if run_ids is not None:
            sql += f" AND r.run_id IN ({', '.join('?' for _ in run_ids)})"
            args += list(run_ids)
        sql += " ORDER BY r.run_id, r.seq"
        return [parse_record(json.loads(row[0]), judge_path=False) for row in self._db.execute(sql, args)]

    def run_ids_for(self, spec: str) -> list[int]:
        """``42`` (a run id), ``latest``, ``latest~N`` (N runs before the newest), or a tag (every run
        with that tag: repeated runs)."""
        if spec.isdigit():
            if not self._has_run(int(spec)):
                raise FabscopeError(f"no run {spec} in {self.path} (`fabscope history` lists the runs)", EXIT_USAGE)
            return [int(spec)]
        if spec == "latest" or spec.startswith("latest~"):
            back = spec.partition("~")[2]
            if back and not back.isdigit():
                raise FabscopeError(f"{spec!r}: write latest~N with N a number, e.g. latest~1", EXIT_USAGE)
            row = self._db.execute("SELECT id FROM runs WHERE id IN (SELECT run_id FROM results) "
                                   "ORDER BY id DESC LIMIT 1 OFFSET ?", (int(back or 0),)).fetchone()
            if row is None:
                raise FabscopeError(f"{spec}: {self.path} holds fewer runs than that", EXIT_USAGE)
            return [int(row[0])]
        ids = [int(r[0]) for r in self._db.execute("SELECT id FROM runs WHERE tag = ? ORDER BY id", (spec,))]
        if not ids:
            tags = [str(r[0]) for r in self._db.execute(
                "SELECT DISTINCT tag FROM runs WHERE tag IS NOT NULL ORDER BY tag LIMIT 20")]
            raise FabscopeError(
                f"{spec!r} is not a run id, 'latest', or a tag in {self.path} (tags there: "
                f"{', '.join(tags) or 'none'})", EXIT_USAGE)
        return ids

    def integrity(self) -> str:
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])


def open_store(path: str | Path | None = None) -> Store:
    return Store(Path(path) if path is not None else default_path())


def save_matrix(run: Any, path: str | Path | None = None, tag: str | None = None,
                argv: Sequence[str] | None = None) -> int | None:
    """A ``fabscope.results.matrix.MatrixRun``: every pair's record as a result of one run
    (command ``matrix``), and the matrix object (findings, schedule, rule) as its summary.
    Returns the run id, or None when the matrix measured nothing."""
    results = [parse_record(m.record, judge_path=False) for m in run.measurements if m.record]
    summary = run.to_json()
    summary.pop("pairs", None)  # the pairs are the stored results; keep the findings and the rest
    with open_store(path) as store:
        run_id = store.add_run("matrix", list(sys.argv[1:] if argv is None else argv), results, tag)
        store.add_summary(run_id, summary)
    return run_id
