# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope history` (list, show, export) and the store options of `run` / `suite`
(``--store PATH``, ``--no-store``, ``--tag TEXT``). The store itself is ``fabscope.store``."""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import argtypes
from .errors import EXIT_OK, EXIT_USAGE, FabscopeError
from .report.render import render_csv, render_text
from .results import Result, load_file, parse_record
from .store import Filters, RunInfo, Store, default_path, open_store, parse_time, with_run


def run_tag(value: str) -> str:
    """A --tag: text that `compare`, `report` and `history` can name again. ``latest``, ``latest~N``
    and numbers are run references there (``compare 12`` is run 12), and a "/" or a .json/.jsonl
    ending reads as a file: such a tag would be kept and never be reachable."""
    text = argtypes.text(200)(value)
    if text.isdigit() or text == "latest" or text.startswith("latest~"):
        raise argparse.ArgumentTypeError(
            f"{argtypes.shown(text)} reads as a run reference (a run id, latest, latest~N) in `fabscope compare` "
            "and `report`, so runs with this tag could not be named; choose another, e.g. "
            f"'run-{text}' or 'before-upgrade'")
    if "/" in text or "," in text or text.endswith((".json", ".jsonl")):
        raise argparse.ArgumentTypeError(
            f"{argtypes.shown(text)} reads as a file (or a list of files) in `fabscope compare` and `report`; "
            "choose a tag without '/' or ',' and not ending in .json/.jsonl")
    return text


def add_store_options(p: argparse.ArgumentParser) -> None:
    """The options `run`, `suite` (and `matrix`) share for where their results are kept."""
    g = p.add_argument_group("history (every run is kept; `fabscope history` lists them)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="PATH", default=None,
                       help=f"history file (default {default_path()}, from $XDG_DATA_HOME)")
    where.add_argument("--no-store", action="store_true", help="do not keep this run in the history")
    g.add_argument("--tag", metavar="TEXT", default=None, type=run_tag,
                   help="a label for this run, e.g. 'before-fw-upgrade' (`fabscope compare TAG latest`); not a "
                        "number or 'latest', which name runs")


@dataclass
class Recorder:
    """Appends a command's results to the store as they arrive (one transaction each)."""

    store: Store
    command: str
    argv: list[str]
    tag: str | None
    run_id: int | None = None

    def add(self, result: Result) -> None:
        if self.run_id is None:
            self.run_id = self.store.begin_run(self.command, self.argv, self.tag)
        self.store.append(self.run_id, result)

    def close(self) -> None:
        self.store.close()
        if self.run_id is not None:
            print(f"fabscope: kept as run {self.run_id} in {self.store.path}"
                  + (f" (tag {self.tag})" if self.tag else ""), file=sys.stderr)


def recorder(ns: argparse.Namespace, command: str, argv: Sequence[str] | None = None) -> Recorder | None:
    """The recorder the store options ask for, or None for --no-store. Opens (and migrates) the
    store before anything is measured, so a store that cannot be written fails the run up front."""
    if getattr(ns, "no_store", False):
        if getattr(ns, "tag", None):
            raise FabscopeError("--tag labels the run in the history, but --no-store keeps it out: drop one",
                                EXIT_USAGE)
        return None
    store = open_store(getattr(ns, "store", None))
    try:
        store.check_writable()  # never write more into a damaged file
    except FabscopeError:
        store.close()
        raise
    return Recorder(store, command, list(sys.argv[1:] if argv is None else argv), getattr(ns, "tag", None))


def keep_file(ns: argparse.Namespace, command: str, path: Path) -> None:
    """Store the results a command wrote to a JSON-lines file (commands that report only at the end)."""
    keep = recorder(ns, command)
    if keep is None or not path.is_file():
        return
    try:
        for result in load_file(path):
            keep.add(result)
    finally:
        keep.close()


# --------------------------------------------------------------------------------------------
# fabscope history
# --------------------------------------------------------------------------------------------


ACTIONS = ("list", "show", "export", "check", "salvage")
FORMATS = {"list": ("text", "json", "csv"), "show": ("text", "json", "csv"), "export": ("json", "csv", "text"),
           "check": ("text",), "salvage": ("text",)}


def fill_history_parser(h: argparse.ArgumentParser) -> None:
    """The options of `fabscope history` (cli.py names the subcommand and its help line)."""
    h.add_argument("action", nargs="?", choices=ACTIONS, default="list",
                   help="list runs (default), show RUN, export results (JSON lines with their run, or CSV), "
                        "check the file (SQLite's integrity check), salvage OUT (copy every readable run into a "
                        "new store OUT)")
    h.add_argument("run", nargs="?", metavar="RUN|OUT", help="run id (show; export: only that run); salvage: the new file")
    h.add_argument("--store", metavar="PATH", default=None, help=f"history file (default {default_path()})")
    h.add_argument("--backend")
    h.add_argument("--op")
    h.add_argument("--pattern", choices=["lat", "bw", "bibw"])
    h.add_argument("--size", type=argtypes.byte_size(1), metavar="BYTES", help="message size, e.g. 8 or 64K")
    h.add_argument("--host", help="runs that had this host at either end")
    h.add_argument("--tag", type=argtypes.text(200))
    h.add_argument("--since", metavar="TIME", help="from this time (UTC: 2026-11-20, 2026-11-20T10:00) or age (6h, 7d)")
    h.add_argument("--until", metavar="TIME", help="up to this time (same forms)")
    h.add_argument("--limit", type=argtypes.int_range(1, 10**6), default=50, help="list: at most this many runs (default 50)")
    h.add_argument("--format", choices=["text", "json", "csv"], default=None,
                   help="list, show: text (default), json (JSON lines only) or csv; export: json (default), csv or text")
    h.set_defaults(func=history_main, check=_check_history)


def _check_history(ns: argparse.Namespace) -> None:
    """RUN is a run id for show/export and a new file for salvage; --format as the action allows."""
    allowed = FORMATS[ns.action]
    if ns.format is not None and ns.format not in allowed:
        raise FabscopeError(f"history {ns.action} --format {ns.format}: {ns.action} writes "
                            f"{' or '.join(allowed)}", EXIT_USAGE)
    if ns.action == "salvage":
        if not ns.run:
            raise FabscopeError("history salvage needs the new file to write, e.g. `fabscope history salvage "
                                "saved.db --store damaged.db`", EXIT_USAGE)
        ns.out = Path(ns.run)
        ns.run = None
        return
    if ns.run is None:
        if ns.action == "show":
            raise FabscopeError("history show needs a run id, e.g. `fabscope history show 12` "
                                "(`fabscope history` lists them)", EXIT_USAGE)
        return
    if ns.action in ("list", "check"):
        raise FabscopeError(f"history {ns.action} takes no run id (got {argtypes.shown(ns.run)}); "
                            f"`fabscope history show {argtypes.shown(ns.run)}` shows one run", EXIT_USAGE)
    try:
        ns.run = argtypes.int_range(1)(ns.run)
    except argparse.ArgumentTypeError as exc:
        raise FabscopeError(f"history {ns.action} RUN: {exc} (a run id, as `fabscope history` lists them)",
                            EXIT_USAGE) from exc


def _filters(ns: argparse.Namespace) -> Filters:
    return Filters(backend=ns.backend, op=ns.op, pattern=ns.pattern, size=ns.size, host=ns.host, tag=ns.tag,
                   since=parse_time(ns.since, "--since") if ns.since else None,
                   until=parse_time(ns.until, "--until") if ns.until else None)


def _csv(rows: Sequence[Sequence[object]]) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerows([["" if v is None else v for v in row] for row in rows])
    return buf.getvalue()


def exported(store: Store, run_ids: list[int] | None, filters: Filters) -> list[tuple[RunInfo, Result]]:
    """The stored results with the run each belongs to."""
    runs = {r.id: r for r in store.runs(filters, limit=None)}
    return [(runs[run_id], r) for run_id, r in store.results_by_run(run_ids, filters) if run_id in runs]


def _export(rows: list[tuple[RunInfo, Result]], fmt: str) -> str:
    """The records with their run (id, tag, time): JSON lines, CSV or text tables (report's renderers)."""
    if fmt == "json":
        return "".join(json.dumps(with_run(info, r), sort_keys=True) + "\n" for info, r in rows)
    marked = [parse_record(with_run(info, r), judge_path=False) for info, r in rows]
    return render_csv(marked) if fmt == "csv" else render_text(marked)


def _list(store: Store, filters: Filters, ns: argparse.Namespace) -> None:
    runs = store.runs(filters, limit=ns.limit)
    if ns.format == "json":
        sys.stdout.write("".join(json.dumps(r.__dict__, default=list) + "\n" for r in runs))
        return
    if ns.format == "csv":
        sys.stdout.write(_csv([["run", "started_at", "command", "tag", "results", "hosts", "cases"]]
                              + [[r.id, r.started_at, r.command, r.tag, r.results, " ".join(r.hosts), r.cases]
                                 for r in runs]))
        return
    if not runs:
        print(f"no runs in {store.path} match" if filters != Filters() else f"no runs in {store.path} yet")
        return
    print(f"# {store.path}")
    print(f"{'run':>5}  {'time (UTC)':25}  {'command':7}  {'tag':16}  {'results':>7}  {'hosts':20}  cases")
    for r in runs:
        print(f"{r.id:>5}  {r.started_at:25}  {r.command:7}  {(r.tag or '-'):16}  {r.results:>7}  "
              f"{','.join(r.hosts):20}  {r.cases}")


def _check(store: Store) -> int:
    problems = store.check()
    if problems == ["ok"]:
        runs = store.runs(limit=None)
        print(f"{store.path}: ok (SQLite integrity check; schema version {store.schema_version}, {len(runs)} run(s), "
              f"{sum(r.results for r in runs)} result(s))")
        return EXIT_OK
    print(f"{store.path}: damaged, SQLite's integrity check says:", file=sys.stderr)
    for line in problems[:20]:
        print(f"  {line}", file=sys.stderr)
    if len(problems) > 20:
        print(f"  ... and {len(problems) - 20} more", file=sys.stderr)
    raise FabscopeError(f"{store.path} is damaged; `fabscope history salvage NEW.db --store {store.path}` copies "
                        "every run still readable into NEW.db and lists what was lost", EXIT_USAGE)


def _salvage(source: Path, out: Path) -> int:
    from .store import salvage

    got = salvage(source, out)
    print(f"salvaged {got.runs} run(s), {got.results} result(s) from {source} into {out}")
    for line in got.lost:
        print(f"  lost: {line}")
    if not got.lost:
        print("  nothing was lost")
    print(f"use it with --store {out}, or move it to {source} (keep the damaged file aside until you have checked)")
    return EXIT_OK


def history_main(ns: argparse.Namespace) -> int:
    if getattr(ns, "check", None) is None:  # called without the CLI's checks (tests)
        _check_history(ns)
    where = Path(ns.store) if ns.store else default_path()
    if ns.action == "salvage":
        return _salvage(where, ns.out)
    if ns.store is None and not where.exists() and ns.action == "list":
        print(f"no runs yet: no history store at {where} (`fabscope run` keeps its results there)")
        return EXIT_OK
    with open_store(where, readonly=True) as store:
        if ns.action == "check":
            return _check(store)
        filters = _filters(ns)
        if ns.action == "list":
            _list(store, filters, ns)
            return EXIT_OK
        run_ids = [ns.run] if ns.run is not None else None
        if ns.action == "show":
            info = store.run(ns.run)
            results = store.results(run_ids, filters)
            if ns.format in ("json", "csv"):  # the data only: `jq` and CSV readers take it as it is
                sys.stdout.write(_export([(info, r) for r in results], ns.format))
                return EXIT_OK
            print(f"# run {info.id} | {info.started_at} UTC | {info.command} | tag {info.tag or '-'} | "
                  f"fabscope {info.fabscope_version} | hosts {', '.join(info.hosts)}")
            print(f"# fabscope {' '.join(info.argv)}")
            sys.stdout.write(render_text(results))
            return EXIT_OK
        if ns.run is not None:
            store.run(ns.run)  # "no run N" names the store
        sys.stdout.write(_export(exported(store, run_ids, filters), ns.format or "json"))
        return EXIT_OK
