"""`fabscope history` (list, show, export) and the store options of `run` / `suite`
(``--store PATH``, ``--no-store``, ``--tag TEXT``). The store itself is ``fabscope.store``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import argtypes
from .errors import EXIT_OK, EXIT_USAGE, FabscopeError
from .report.render import render_csv, render_json, render_text
from .results import Result, load_file
from .store import Filters, Store, default_path, open_store, parse_time


def add_store_options(p: argparse.ArgumentParser) -> None:
    """The options `run`, `suite` (and `matrix`) share for where their results are kept."""
    g = p.add_argument_group("history (every run is kept; `fabscope history` lists them)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--store", metavar="PATH", default=None,
                       help=f"history file (default {default_path()}, from $XDG_DATA_HOME)")
    where.add_argument("--no-store", action="store_true", help="do not keep this run in the history")
    g.add_argument("--tag", metavar="TEXT", default=None, type=argtypes.text(200),
                   help="a label for this run, e.g. 'before-fw-upgrade' (`fabscope compare TAG latest`)")


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


def add_history_parser(sub: Any) -> None:  # argparse._SubParsersAction of the CLI's parser class
    h = sub.add_parser("history", help="the runs kept in the history store: list, show one, export")
    h.add_argument("action", nargs="?", choices=["list", "show", "export"], default="list",
                   help="list runs (default), show RUN, export results as JSON lines or CSV")
    h.add_argument("run", nargs="?", type=argtypes.int_range(1), metavar="RUN", help="run id (show; export: only that run)")
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
                   help="list: text; show: text; export: json (default) or csv")
    h.set_defaults(func=history_main)


def _filters(ns: argparse.Namespace) -> Filters:
    return Filters(backend=ns.backend, op=ns.op, pattern=ns.pattern, size=ns.size, host=ns.host, tag=ns.tag,
                   since=parse_time(ns.since, "--since") if ns.since else None,
                   until=parse_time(ns.until, "--until") if ns.until else None)


def history_main(ns: argparse.Namespace) -> int:
    if ns.action == "show" and ns.run is None:
        raise FabscopeError("history show needs a run id, e.g. `fabscope history show 12` "
                            "(`fabscope history` lists them)", EXIT_USAGE)
    with open_store(ns.store) as store:
        filters = _filters(ns)
        if ns.action == "list":
            runs = store.runs(filters, limit=ns.limit)
            if ns.format == "json":
                sys.stdout.write("".join(json.dumps(r.__dict__, default=list) + "\n" for r in runs))
                return EXIT_OK
            if not runs:
                print(f"no runs in {store.path} match" if filters != Filters() else f"no runs in {store.path} yet")
                return EXIT_OK
            print(f"# {store.path}")
            print(f"{'run':>5}  {'time (UTC)':25}  {'command':7}  {'tag':16}  {'results':>7}  {'hosts':20}  cases")
            for r in runs:
                print(f"{r.id:>5}  {r.started_at:25}  {r.command:7}  {(r.tag or '-'):16}  {r.results:>7}  "
                      f"{','.join(r.hosts):20}  {r.cases}")
            return EXIT_OK
        run_ids = [ns.run] if ns.run is not None else None
        if ns.run is not None:
            info = store.run(ns.run)
        results = store.results(run_ids, filters)
        if ns.action == "show":
            print(f"# run {info.id} | {info.started_at} UTC | {info.command} | tag {info.tag or '-'} | "
                  f"fabscope {info.fabscope_version} | hosts {', '.join(info.hosts)}")
            print(f"# fabscope {' '.join(info.argv)}")
            sys.stdout.write(render_text(results) if ns.format != "json" else render_json(results))
            return EXIT_OK
        sys.stdout.write(render_csv(results) if ns.format == "csv" else render_json(results))
        return EXIT_OK
