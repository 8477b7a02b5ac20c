# SPDX-License-Identifier: BSD-3-Clause
"""Where the exporter finds what fabscope measured: the history store and report files."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import FabscopeError
from ..results import Result
from ..results.files import read_result_file
from ..results.matrix import Finding, MatrixRun

__all__ = ["STORE_RUNS", "ResultsSource", "case_labels"]

#: How many of the store's newest runs a scrape reads the latest results from.
STORE_RUNS = 20
#: A store written less than this long before a reading began is read again at the next scrape: file
#: times move in clock ticks (1-10 ms), so a second write in the same tick as the first, leaving the
#: same size, would otherwise look like no write at all.
_SETTLED_S = 1.0


@dataclass
class ResultsSource:
    """The latest result of each case and the latest matrix findings: from the history store (its
    newest ``STORE_RUNS`` runs) and from report files.

    Files hold JSON lines of ``fabscope.result/1`` records (``fabscope run --format json``, a
    suite's ``loopback.jsonl``) or ``fabscope.matrix/1`` objects; within a file later lines win,
    across files and the store the newer (file modification time, the run's start time). A file
    that cannot be read this time keeps its last good reading.
    """

    files: Sequence[Path] = ()
    store: Path | None = None
    _cache: dict[Path, tuple[float, list[Result], list[MatrixRun]]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # --results file -> why it did not read
    store_error: str | None = None  # why the store did not read at the last scrape
    # the last good reading of the store and what its files looked like then (see _store_stamp)
    _stored_cache: tuple[tuple[object, ...], list[tuple[float, Result]]] | None = None

    def latest(self) -> dict[tuple[str, ...], Result]:
        cases: dict[tuple[str, ...], tuple[float, Result]] = {}

        def offer(stamp: float, rec: Result) -> None:
            key = case_labels(rec)
            if key not in cases or stamp >= cases[key][0]:
                cases[key] = (stamp, rec)

        for stamp, rec in self._stored():
            offer(stamp, rec)
        for f in self.files:
            mtime, recs, _ = self._read(f)
            for order, rec in enumerate(recs):
                offer(mtime + order * 1e-9, rec)
        return {k: v[1] for k, v in cases.items()}

    def _stored(self) -> list[tuple[float, Result]]:
        """(run start + arrival order, result) of the newest runs in the store. Read again only when
        its files changed since the last good reading (reading and parsing 20 runs was a fifth of a
        64-port scrape); opened for that reading only: scrapes come on the HTTP server's threads,
        and a sqlite3 connection belongs to one."""
        if self.store is None:
            return []
        stamp = _store_stamp(self.store)
        if stamp is not None and self._stored_cache is not None and self._stored_cache[0] == stamp:
            return self._stored_cache[1]  # not written since: the same runs (a store only changes by writes)
        began = time.time()
        from datetime import datetime

        from ..store import open_store

        out: list[tuple[float, Result]] = []
        try:  # read-only: the exporter never creates, migrates or locks the store for writing
            with open_store(self.store, readonly=True) as st:
                for run in reversed(st.runs(limit=STORE_RUNS)):  # oldest first: on a tie (same second) the newer wins
                    start = datetime.fromisoformat(run.started_at).timestamp()
                    out += [(start + order * 1e-9, rec) for order, rec in enumerate(st.results(run_ids=[run.id]))]
        except (FabscopeError, ValueError, OSError, sqlite3.Error) as exc:
            # A damaged or vanished history never takes the port counters down with it: the scrape
            # goes on without the stored results, and fabscope_exporter_store_unreadable says why.
            self.store_error = exc.message if isinstance(exc, FabscopeError) else str(exc)
            self._stored_cache = None
            return []
        self.store_error = None
        settled = stamp is not None and began - max(s[2] for s in stamp if s is not None) / 1e9 >= _SETTLED_S
        self._stored_cache = (stamp, out) if stamp is not None and settled else None
        return out

    def findings(self) -> list[Finding]:
        """The findings of the newest matrix run in the files."""
        newest: tuple[float, list[Finding]] = (-1.0, [])
        for f in self.files:
            mtime, _, runs = self._read(f)
            if runs and mtime >= newest[0]:
                newest = (mtime, runs[-1].findings)
        return newest[1]

    def _read(self, f: Path) -> tuple[float, list[Result], list[MatrixRun]]:
        try:
            mtime = f.stat().st_mtime
        except OSError as exc:
            self.errors[str(f)] = exc.strerror or str(exc)
            return self._cache.get(f, (0.0, [], []))
        hit = self._cache.get(f)
        if hit and hit[0] == mtime:
            return hit
        try:  # read while a run may still append to it; objects of other schemas are not results
            got = read_result_file(f, growing=True, other_schemas="skip")
        except FabscopeError as exc:
            self.errors[str(f)] = exc.message
            return hit or (0.0, [], [])
        recs, runs = got.records, got.matrices
        self.errors.pop(str(f), None)
        self._cache[f] = (mtime, recs, runs)
        return self._cache[f]


def _store_stamp(store: Path) -> tuple[tuple[int, int, int] | None, ...] | None:
    """(inode, size, mtime in ns) of the store and of its write-ahead log (None while it has none):
    every write changes one of them (a commit appends to the log; a checkpoint writes the file).
    None when the store cannot be looked at: it is read, and its error reported, every scrape."""
    out: list[tuple[int, int, int] | None] = []
    for f in (store, store.with_name(store.name + "-wal")):
        try:
            st = f.stat()
        except FileNotFoundError:
            if f == store:
                return None
            out.append(None)
            continue
        except OSError:
            return None
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def case_labels(rec: Result) -> tuple[str, ...]:
    """host, peer, backend, op, pattern, size, device of one result (the case it measured)."""
    host, peer = rec.hosts
    return (host, peer, rec.backend, rec.op, rec.pattern, str(rec.size), str(rec.config.get("device") or ""))
