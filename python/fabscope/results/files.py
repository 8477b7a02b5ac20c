# SPDX-License-Identifier: BSD-3-Clause
"""The one reader of fabscope's result files: what `report`, `compare`, `history` (a command's
output kept in the store) and the exporter read. A file holds one object (a pretty-printed matrix
or suite summary, one record) or JSON lines (`run --format json`, a collective's, a suite's loopback.jsonl,
`history export`); each object is known by its schema and parsed by its own type.

What differs between the readers is said here, as two choices of the caller:
- ``growing``: the file may still be being written (the exporter reads files a run appends to): a
  last line without its newline is not read yet. Otherwise every line counts.
- ``other_schemas``: ``"refuse"`` (report, compare: a file given to be reported must be one of
  ours) or ``"skip"`` (a command's own output kept in the history, the exporter: objects of other
  fabscope schemas, such as a load or a check, sit beside the records and are not results).
A line that is not a JSON object is an error naming the file and line, in every reader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import EXIT_USAGE, FabscopeError
from .collective import COLLECTIVE_SCHEMA, CollectiveResult, parse_collective
from .errors import RecordError
from .matrix import MatrixRun
from .model import Result, parse_record
from .suite import SuiteSummary

RESULT_PREFIX = "fabscope.result/"
MATRIX_PREFIX = "fabscope.matrix/"
SUITE_PREFIX = "fabscope.suite/"
COLLECTIVE_PREFIX = COLLECTIVE_SCHEMA.partition("/")[0] + "/"
ERROR_PREFIX = "fabscope.error/"  # a run's last line when it failed: the results before it still count
HINT = "give the JSON lines that `fabscope run --format json` and `fabscope suite` write"


@dataclass
class ResultFile:
    """What one file holds, by kind, in file order."""

    path: Path
    records: list[Result] = field(default_factory=list)
    matrices: list[MatrixRun] = field(default_factory=list)
    suites: list[SuiteSummary] = field(default_factory=list)
    collectives: list[CollectiveResult] = field(default_factory=list)


def read_objects(path: Path, *, growing: bool = False) -> list[tuple[int, dict[str, Any]]]:
    """The file's JSON objects with their line numbers (1 for a whole-file object)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FabscopeError(f"{path}: not a text file (byte {exc.start} is not UTF-8); {HINT}", EXIT_USAGE) from exc
    except OSError as exc:
        raise FabscopeError(f"{path}: cannot read it: {exc.strerror}", EXIT_USAGE) from exc
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped:
        try:  # one (possibly pretty-printed) object: a matrix, a suite summary, one record
            whole = json.loads(stripped)
            return [(1, whole)] if isinstance(whole, dict) else []
        except ValueError:
            pass
    lines = text.splitlines()
    if growing and text and not text.endswith("\n"):
        lines = lines[:-1]  # still being written: read at the next look
    out: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FabscopeError(f"{path}:{number}: not a JSON line ({exc.msg}); {HINT}", EXIT_USAGE) from exc
        if not isinstance(obj, dict):
            raise FabscopeError(f"{path}:{number}: expected a JSON object, found {type(obj).__name__}", EXIT_USAGE)
        out.append((number, obj))
    return out


def read_result_file(path: Path, *, growing: bool = False,
                     other_schemas: Literal["refuse", "skip"] = "refuse") -> ResultFile:
    """Every object of the file parsed by its schema's type; a record as it was judged when it ran
    (its own path verdict). A record, matrix or summary that does not parse is an error naming the
    file, the line and the field."""
    out = ResultFile(path)
    for number, obj in read_objects(path, growing=growing):
        schema = str(obj.get("schema", ""))
        try:
            if schema.startswith(RESULT_PREFIX):
                out.records.append(parse_record(obj, judge_path=False))
            elif schema.startswith(MATRIX_PREFIX):
                out.matrices.append(MatrixRun.parse(obj))
            elif schema.startswith(SUITE_PREFIX):
                out.suites.append(SuiteSummary.parse(obj))
            elif schema.startswith(COLLECTIVE_PREFIX):
                out.collectives.append(parse_collective(obj))
            elif schema.startswith(ERROR_PREFIX) or other_schemas == "skip":
                continue
            else:
                raise FabscopeError(
                    f"{path}:{number}: schema {schema or '(none)'!r} is not a fabscope result, collective, matrix or "
                    f"suite ({RESULT_PREFIX}1, {COLLECTIVE_SCHEMA}, {MATRIX_PREFIX}1, {SUITE_PREFIX}1)", EXIT_USAGE)
        except RecordError as exc:
            raise FabscopeError(f"{path}:{number}: {exc}", EXIT_USAGE) from exc
    return out


def load_file(path: str | Path) -> list[Result]:
    """The records of a file a command wrote (what `history` keeps of a suite's hosts.jsonl, and
    the tests' fixtures): other fabscope objects beside them are not results."""
    return read_result_file(Path(path), other_schemas="skip").records
