# SPDX-License-Identifier: BSD-3-Clause
"""What `fabscope report` reads: result files (JSON lines as `run --format json` and the suite write
them), report directories, and the suite's and matrix's own objects found among them.

A path that does not exist, a line that is not JSON, or a record of a schema this version cannot
read is an error naming the file and line, never skipped in silence.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EXIT_USAGE, FabscopeError
from ..results import RecordError, Result, parse_record
from ..results.matrix import MatrixRun
from ..results.suite import SuiteSummary

RESULT_PREFIX = "fabscope.result/"
MATRIX_PREFIX = "fabscope.matrix/"
SUITE_PREFIX = "fabscope.suite/"
SUFFIXES = (".jsonl", ".json")


@dataclass
class Inputs:
    records: list[Result] = field(default_factory=list)
    matrices: list[MatrixRun] = field(default_factory=list)
    suites: list[SuiteSummary] = field(default_factory=list)  # fabscope.suite/1 summaries (line rates, notes)
    sources: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # every file read (what a report must never write over)
    stored: list[str] = field(default_factory=list)  # the names given that were stored runs


def _objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FabscopeError(f"{path}: not a text file (byte {exc.start} is not UTF-8); give the JSON lines that "
                            "`fabscope run --format json` and `fabscope suite` write", EXIT_USAGE) from exc
    except OSError as exc:
        raise FabscopeError(f"{path}: cannot read it: {exc.strerror}", EXIT_USAGE) from exc
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped:
        try:  # one (possibly pretty-printed) object: a matrix, a suite summary, one record
            whole = json.loads(stripped)
            return [(1, whole)] if isinstance(whole, dict) else []
        except ValueError:
            pass
    out: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FabscopeError(f"{path}:{number}: not a JSON line ({exc.msg}); report reads the JSON lines that "
                                "`fabscope run --format json` and `fabscope suite` write", EXIT_USAGE) from exc
        if not isinstance(obj, dict):
            raise FabscopeError(f"{path}:{number}: expected a JSON object, found {type(obj).__name__}", EXIT_USAGE)
        out.append((number, obj))
    return out


def _add(inputs: Inputs, path: Path) -> None:
    for number, obj in _objects(path):
        schema = str(obj.get("schema", ""))
        if schema.startswith(RESULT_PREFIX):
            try:  # shown as it was judged when it ran (its own path verdict)
                inputs.records.append(parse_record(obj, judge_path=False))
            except RecordError as exc:
                raise FabscopeError(f"{path}:{number}: {exc}", EXIT_USAGE) from exc
        elif schema.startswith(MATRIX_PREFIX):
            try:
                inputs.matrices.append(MatrixRun.parse(obj))
            except RecordError as exc:
                raise FabscopeError(f"{path}:{number}: {exc}", EXIT_USAGE) from exc
        elif schema.startswith(SUITE_PREFIX):
            try:
                inputs.suites.append(SuiteSummary.parse(obj))
            except RecordError as exc:
                raise FabscopeError(f"{path}:{number}: {exc}", EXIT_USAGE) from exc
        elif schema.startswith("fabscope.error/"):
            continue  # a run's final error line: the results before it still count
        else:
            raise FabscopeError(
                f"{path}:{number}: schema {schema or '(none)'!r} is not a fabscope result, matrix or suite "
                f"({RESULT_PREFIX}1, {MATRIX_PREFIX}1, {SUITE_PREFIX}1)", EXIT_USAGE)
    inputs.sources.append(str(path))
    inputs.files.append(path)


def _add_stored(inputs: Inputs, name: str, store_path: str | None) -> None:
    """A run id, ``latest``, ``latest~N`` or a tag of the history store (``fabscope.store``)."""
    from ..store import default_path, open_store, with_run

    where = Path(store_path) if store_path else default_path()
    if not where.exists():
        raise FabscopeError(f"{name}: no such file or directory, and no history store at {where} to look it up as a "
                            "run (give result files, a `fabscope suite --out` directory, or --store PATH)", EXIT_USAGE)
    with open_store(where, readonly=True) as store:
        try:
            ids = store.run_ids_for(name)
        except FabscopeError as exc:
            raise FabscopeError(f"{name}: no such file or directory; as a run: {exc.message}", EXIT_USAGE) from exc
        wanted = set(ids)
        infos = {r.id: r for r in store.runs(limit=None) if r.id in wanted}
        # Each record with its run (id, tag, time): a report of several runs draws one series per tag.
        inputs.records += [parse_record(with_run(infos[run_id], r), judge_path=False)
                           for run_id, r in store.results_by_run(ids)]
        inputs.stored.append(name)
    inputs.sources.append(f"{where} run{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}")


def read_inputs(names: Sequence[str], store_path: str | None = None) -> Inputs:
    """Files, directories (every *.jsonl / *.json directly inside) and stored runs, in the order given."""
    inputs = Inputs()
    for name in names:
        path = Path(name)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
            if not files:
                raise FabscopeError(f"{name}: no result files (*.jsonl, *.json) in this directory; "
                                    "`fabscope suite --out DIR` or `fabscope run --format json > FILE` make them",
                                    EXIT_USAGE)
            for f in files:
                _add(inputs, f)
        elif path.is_file():
            _add(inputs, path)
        else:
            _add_stored(inputs, name, store_path)
    if not inputs.records and not inputs.matrices:
        raise FabscopeError(f"no results in {', '.join(names)}", EXIT_USAGE)
    return inputs


def line_rates(inputs: Inputs) -> dict[str, float]:
    """Device -> line rate in Gb/s, as the suites that made these records found them."""
    out: dict[str, float] = {}
    for suite in inputs.suites:
        out.update(suite.line_rates_gbps)
    return out


def notes(inputs: Inputs) -> list[str]:
    """What the suites said about rows they left out or that failed."""
    return [n for suite in inputs.suites for n in suite.notes]
