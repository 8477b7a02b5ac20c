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
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from . import __version__
from .errors import EXIT_USAGE, FabscopeError
from .results import Result, parse_record

__all__ = ["Filters", "RunInfo", "SalvageReport", "Store", "default_path", "open_store", "salvage", "save_matrix", "with_run"]

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
    """One open history file. Use ``open_store``; close it (or use it as a context manager).

    ``readonly``: what the reading commands (history, compare, report, the exporter) use. The file
    must exist (a mistyped path is an error, never a new empty store), is opened with SQLite's
    ``mode=ro`` (nothing is created or migrated; a store in a read-only directory reads), and an
    older schema is read as it is.

    Every SQLite failure comes out as a ``FabscopeError`` naming the file: a damaged file (pages
    overwritten: "database disk image is malformed") says how to salvage what is left."""

    def __init__(self, path: Path, readonly: bool = False) -> None:
        self.path = path
        self.readonly = readonly
        try:
            if readonly:
                self._db = self._connect_readonly(path)
                version = self._version()
                if version > SCHEMA_VERSION:
                    raise self._newer(version)
                if version == 0:
                    raise FabscopeError(
                        f"{path} is not a fabscope history store (no schema_version table); give the file "
                        f"`fabscope run` keeps results in ({default_path()} by default, or its --store PATH)",
                        EXIT_USAGE)
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._enter_wal()
            self._db.execute("PRAGMA synchronous=FULL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            if _is_damage(exc):
                raise self._damaged(exc) from exc
            raise FabscopeError(
                f"the history store {path} cannot be opened ({exc}); choose another file with --store PATH, "
                "or run with --no-store", EXIT_USAGE) from exc
        except OSError as exc:
            raise FabscopeError(
                f"the history store {path} cannot be opened ({exc}); choose another file with --store PATH, "
                "or run with --no-store", EXIT_USAGE) from exc

    @staticmethod
    def _connect_readonly(path: Path) -> sqlite3.Connection:
        if not path.is_file():
            what = "is a directory, not a history file" if path.is_dir() else "does not exist"
            raise FabscopeError(
                f"no history store at {path}: it {what}. Give the file `fabscope run` keeps results in "
                f"({default_path()} by default, or the --store PATH it was given); reading commands never "
                "create one", EXIT_USAGE)
        uri = "file:" + urllib.parse.quote(os.fsencode(path.absolute())) + "?mode=ro"  # bytes: any file name
        db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            # A WAL store in a directory this user cannot write: SQLite cannot create the -shm file
            # a read-only reader needs. With no write-ahead log beside it nobody is writing this
            # file (no one can create the log), so it reads the same opened as immutable.
            db.close()
            wal = Path(f"{path}-wal")
            unwritable = not os.access(path.absolute().parent, os.W_OK)
            if not unwritable or (wal.exists() and wal.stat().st_size > 0):
                raise
        db = sqlite3.connect(uri + "&immutable=1", uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return db

    def _damaged(self, exc: object) -> FabscopeError:
        return FabscopeError(
            f"the history store {self.path} is damaged ({exc}). `fabscope history salvage NEW.db --store "
            f"{self.path}` copies every run still readable into NEW.db and lists what was lost (then use "
            f"--store NEW.db, or move it into place); `fabscope history check --store {self.path}` shows the "
            "damage", EXIT_USAGE)

    def _failed(self, exc: sqlite3.Error) -> FabscopeError:
        if _is_damage(exc):
            return self._damaged(exc)
        return FabscopeError(f"the history store {self.path}: {exc}; choose another file with --store PATH",
                             EXIT_USAGE)

    def _rows(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Every row of one query, read now; a damaged page is a FabscopeError naming the file."""
        try:
            return list(self._db.execute(sql, tuple(args)).fetchall())
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

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
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc
        try:
            yield self._db
        except sqlite3.Error as exc:
            self._rollback()
            raise self._failed(exc) from exc
        except BaseException:
            self._rollback()
            raise
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._failed(exc) from exc

    def _rollback(self) -> None:
        try:
            self._db.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # no transaction left to roll back (SQLite ended it on the error)

    def _version(self) -> int:
        row = self._db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
        if row is None:
            return 0
        got = self._db.execute("SELECT version FROM schema_version").fetchone()
        return int(got[0]) if got and isinstance(got[0], int) else 0

    def _migrate(self) -> None:
        if self._version() == SCHEMA_VERSION:
            return
        with self._write() as db:
            version = self._version()  # again, under the lock: another process may have migrated
            if version > SCHEMA_VERSION:
                raise self._newer(version)
            if version == 0:
                db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                db.execute("INSERT INTO schema_version (version) VALUES (0)")
            for step in MIGRATIONS[version:]:
                for statement in step:
                    db.execute(statement)
            db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))

    def _newer(self, version: int) -> FabscopeError:
        return FabscopeError(
            f"the history store {self.path} has schema version {version}, newer than this fabscope "
            f"reads ({SCHEMA_VERSION}); upgrade fabscope or use another --store", EXIT_USAGE)

    @property
    def schema_version(self) -> int:
        return self._version()

    # -- writing -----------------------------------------------------------------------------

    def begin_run(self, command: str, argv: Sequence[str], tag: str | None = None, *,
                  started_at: str | None = None, fabscope_version: str | None = None) -> int:
        """A new run row (``started_at`` / ``fabscope_version``: now and this version, unless copied
        from another store by ``salvage``)."""
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO runs (started_at, command, argv, tag, fabscope_version) VALUES (?, ?, ?, ?, ?)",
                (started_at or datetime.now(UTC).isoformat(timespec="seconds"), command, json.dumps(list(argv)), tag,
                 fabscope_version or __version__),
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
        if not self._rows("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'summaries'"):
            return []  # a store of schema 2 or older, opened read-only (not migrated)
        return [json.loads(row[0]) for row in self._rows(
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
        for row in self._rows(sql, args):
            hosts = sorted({h for col in (row[7], row[8]) for h in str(col or "").split(",") if h})
            sizes = f"{row[10]}" if row[10] == row[11] else f"{row[10]}..{row[11]}"
            groups = str(row[9] or "").split(",")
            if len(groups) > 3:  # a suite: name the backends, not every case
                backends = dict.fromkeys(g.split(" ", 1)[0] for g in groups)
                groups = [f"{len(groups)} cases of {'+'.join(backends)}"]
            out.append(RunInfo(int(row[0]), row[1], row[2], self._argv(row[0], row[3]), row[4], row[5], int(row[6]),
                               tuple(hosts), f"{','.join(groups)} {sizes}"))
        return out

    def _argv(self, run_id: int, text: str) -> list[str]:
        try:
            argv = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise self._damaged(f"run {run_id}: its command line is not JSON") from exc
        return [str(a) for a in argv] if isinstance(argv, list) else [str(argv)]

    def run(self, run_id: int) -> RunInfo:
        found = self.runs(run_id=run_id)
        if not found:
            raise FabscopeError(f"no run {run_id} in {self.path} (`fabscope history` lists the runs there)", EXIT_USAGE)
        return found[0]

    def _has_run(self, run_id: int) -> bool:
        return bool(self._rows("SELECT 1 FROM runs WHERE id = ?", (run_id,)))

    def results(self, run_ids: Sequence[int] | None = None, filters: Filters = Filters()) -> list[Result]:
        """Stored results (as they were judged when stored), in run and arrival order."""
        return [r for _, r in self.results_by_run(run_ids, filters)]

    def results_by_run(self, run_ids: Sequence[int] | None = None,
                       filters: Filters = Filters()) -> list[tuple[int, Result]]:
        """(run id, result) of the stored results, in run and arrival order. A record that no longer
        reads (edited by hand, damaged, NaN figures) is an error naming the file, run and result."""
        where, args = filters.where()
        sql = f"SELECT r.run_id, r.seq, r.record FROM results r JOIN runs u ON r.run_id = u.id WHERE {where}"
        if run_ids is not None:
            sql += f" AND r.run_id IN ({', '.join('?' for _ in run_ids)})"
            args += list(run_ids)
        sql += " ORDER BY r.run_id, r.seq"
        return [(int(run_id), self._parse(int(run_id), int(seq), text)) for run_id, seq, text in self._rows(sql, args)]

    def _parse(self, run_id: int, seq: int, text: str) -> Result:
        try:
            return parse_record(json.loads(text), judge_path=False)
        except (TypeError, ValueError) as exc:  # RecordError is a ValueError
            raise FabscopeError(
                f"{self.path}: run {run_id}, result {seq + 1}: the stored record does not read ({exc}); "
                f"`fabscope history salvage NEW.db --store {self.path}` copies every record that does", EXIT_USAGE,
            ) from exc

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
            rows = self._rows("SELECT id FROM runs WHERE id IN (SELECT run_id FROM results) "
                              "ORDER BY id DESC LIMIT 1 OFFSET ?", (int(back or 0),))
            if not rows:
                raise FabscopeError(f"{spec}: {self.path} holds fewer runs than that", EXIT_USAGE)
            return [int(rows[0][0])]
        ids = [int(r[0]) for r in self._rows("SELECT id FROM runs WHERE tag = ? ORDER BY id", (spec,))]
        if not ids:
            tags = [str(r[0]) for r in self._rows(
                "SELECT DISTINCT tag FROM runs WHERE tag IS NOT NULL ORDER BY tag LIMIT 20")]
            raise FabscopeError(
                f"{spec!r} is not a run id, 'latest', or a tag in {self.path} (tags there: "
                f"{', '.join(tags) or 'none'})", EXIT_USAGE)
        return ids

    def integrity(self) -> str:
        return "\n".join(self.check())

    def check(self, quick: bool = False) -> list[str]:
        """SQLite's own check of every page (``quick``: its faster check, without index contents):
        ["ok"], or the problems it found (at most 100 lines). A file too damaged to check says so."""
        try:
            rows = self._db.execute(f"PRAGMA {'quick_check' if quick else 'integrity_check'}(100)").fetchall()
        except sqlite3.DatabaseError as exc:
            return [f"the check itself fails: {exc}"]
        return [str(r[0]) for r in rows]

    def check_writable(self) -> None:
        """Before a run writes: refuse a store that fails SQLite's quick check (writing more into a
        damaged file can spread the damage), saying how to salvage it."""
        problems = self.check(quick=True)
        if problems != ["ok"]:
            raise FabscopeError(
                f"the history store {self.path} is damaged ({problems[0]}{' ...' if len(problems) > 1 else ''}); "
                f"nothing was measured. `fabscope history salvage NEW.db --store {self.path}` copies every run still "
                "readable into NEW.db; then run with --store NEW.db (or move it into place), or --no-store",
                EXIT_USAGE)


def _is_damage(exc: sqlite3.Error) -> bool:
    """SQLITE_CORRUPT (pages overwritten), SQLITE_NOTADB (not a database at all), and a record's text
    that no longer decodes (an overwritten page inside a stored record: Python's sqlite3 says
    "Could not decode to UTF-8 column ...")."""
    name = getattr(exc, "sqlite_errorname", "")
    return (name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc)
            or "Could not decode to UTF-8" in str(exc))


def open_store(path: str | Path | None = None, *, readonly: bool = False) -> Store:
    """The store at ``path`` (default ``default_path()``). ``readonly`` for commands that only read:
    the file must exist, and nothing is created, migrated or written."""
    return Store(Path(path) if path is not None else default_path(), readonly=readonly)


def with_run(info: RunInfo, result: Result) -> dict[str, Any]:
    """A stored record as it leaves the store (`history export`, reports of stored runs): the
    engine's record plus ``run`` (id, tag, time of the run it was kept under), so that whoever
    reads it keeps the runs apart (`compare` of exported files; one series per tag in reports)."""
    return dict(result.to_json(), run={"id": info.id, "tag": info.tag, "started_at": info.started_at})


@dataclass
class SalvageReport:
    """What ``salvage`` copied and what it could not read."""

    runs: int = 0
    results: int = 0
    lost: list[str] = field(default_factory=list)  # one line per loss: which run, what of it


def _try_rows(db: sqlite3.Connection, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]] | None:
    try:
        return list(db.execute(sql, tuple(args)).fetchall())
    except sqlite3.Error:
        return None


def salvage(source: Path, out: Path) -> SalvageReport:
    """Copy every run, result and summary of ``source`` that still reads into a new store ``out``
    (which must not exist), run by run and record by record, so one damaged page loses only what
    was on it. Run ids are renumbered in order; times, commands, tags and versions are kept."""
    if out.exists():
        raise FabscopeError(f"salvage {out}: it exists; give a new file (salvage never writes over a file)",
                            EXIT_USAGE)
    if out.absolute().parent == source.absolute().parent and out.name == source.name:
        raise FabscopeError(f"salvage {out}: that is the damaged store itself; give a new file", EXIT_USAGE)
    report = SalvageReport()
    with Store(source, readonly=True) as old:
        db = old._db
        ids: set[int] = set()
        # Whichever way to the run ids still reads: the runs table, the results' run index, or
        # every id up to the largest (a lookup by id touches only its own pages).
        for sql in ("SELECT id FROM runs", "SELECT DISTINCT run_id FROM results INDEXED BY results_run",
                    "SELECT DISTINCT run_id FROM results"):
            ids |= {int(r[0]) for r in _try_rows(db, sql) or [] if isinstance(r[0], int)}
        top = _try_rows(db, "SELECT MAX(id) FROM runs")
        if top and isinstance(top[0][0], int):
            ids |= set(range(1, top[0][0] + 1))
        if not ids:
            report.lost.append("the list of runs itself does not read: nothing could be copied")
        with Store(out) as new:
            for run_id in sorted(ids):
                _salvage_run(db, new, run_id, report)
    return report


def _salvage_run(db: sqlite3.Connection, new: Store, run_id: int, report: SalvageReport) -> None:
    row = _try_rows(db, "SELECT started_at, command, argv, tag, fabscope_version FROM runs WHERE id = ?", (run_id,))
    results = _try_rows(db, "SELECT id FROM results WHERE run_id = ? ORDER BY seq", (run_id,))
    if row == [] and results == []:
        return  # no such run (ids need not be contiguous)
    if results is None:
        results = _try_rows(db, "SELECT id FROM results INDEXED BY results_run WHERE run_id = ?", (run_id,))
    if not row:
        report.lost.append(f"run {run_id}: its run row does not read (time, command, tag lost); its results are "
                           "kept under command 'salvaged'")
        started, command, argv, tag, version = None, "salvaged", [], None, None
    else:
        started, command, argv_text, tag, version = row[0]
        try:
            argv = json.loads(argv_text)
        except (TypeError, ValueError):
            argv = []
    kept: list[Result] = []
    lost = 0
    for (result_id,) in results or []:
        got = _try_rows(db, "SELECT record FROM results WHERE id = ?", (result_id,))
        try:
            kept.append(parse_record(json.loads(got[0][0]), judge_path=False))  # type: ignore[index]
        except (TypeError, ValueError, IndexError):
            lost += 1
    if results is None:
        report.lost.append(f"run {run_id}: its results do not read: all lost")
    elif lost:
        report.lost.append(f"run {run_id}: {lost} of {len(results)} result(s) do not read: lost")
    if not kept:
        return
    new_id = new.begin_run(str(command), [str(a) for a in argv] if isinstance(argv, list) else [], tag,
                           started_at=started, fabscope_version=version)
    for r in kept:
        new.append(new_id, r)
    report.runs += 1
    report.results += len(kept)
    for body in _try_rows(db, "SELECT body FROM summaries WHERE run_id = ? ORDER BY id", (run_id,)) or []:
        try:
            new.add_summary(new_id, json.loads(body[0]))
        except (TypeError, ValueError):
            report.lost.append(f"run {run_id}: a summary does not read: lost")


def save_matrix(run: Any, path: str | Path | None = None, tag: str | None = None,
                argv: Sequence[str] | None = None) -> int | None:
    """A ``fabscope.results.matrix.MatrixRun``: every pair's record as a result of one run
    (command ``matrix``), and the matrix object (findings, schedule, rule) as its summary.
    Returns the run id, or None when the matrix measured nothing."""
    results = [m.result for m in run.measurements if m.result is not None]
    summary = run.to_json()
    summary.pop("pairs", None)  # the pairs are the stored results; keep the findings and the rest
    with open_store(path) as store:
        run_id = store.add_run("matrix", list(sys.argv[1:] if argv is None else argv), results, tag)
        store.add_summary(run_id, summary)
    return run_id
