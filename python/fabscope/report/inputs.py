# SPDX-License-Identifier: BSD-3-Clause
"""What `fabscope report` reads: result files (JSON lines as `run --format json` and the suite write
them), report directories, and the suite's and matrix's own objects found among them.

A path that does not exist, a line that is not JSON, or a record of a schema this version cannot
read is an error naming the file and line, never skipped in silence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EXIT_USAGE, FabscopeError
from ..results import Result, parse_record
from ..results.collective import CollectiveResult
from ..results.files import read_result_file
from ..results.matrix import MatrixRun
from ..results.suite import SuiteSummary

SUFFIXES = (".jsonl", ".json")


@dataclass
class Inputs:
    records: list[Result] = field(default_factory=list)
    matrices: list[MatrixRun] = field(default_factory=list)
    suites: list[SuiteSummary] = field(default_factory=list)  # fabscope.suite/1 summaries (line rates, notes)
    collectives: list[CollectiveResult] = field(default_factory=list)  # fabscope.collective/1 results
    sources: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)  # every file read (what a report must never write over)
    stored: list[str] = field(default_factory=list)  # the names given that were stored runs


def _add(inputs: Inputs, path: Path) -> None:
    got = read_result_file(path)
    inputs.records += got.records
    inputs.matrices += got.matrices
    inputs.suites += got.suites
    inputs.collectives += got.collectives
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
    if not inputs.records and not inputs.matrices and not inputs.collectives:
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
