# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope report INPUT... [--html F] [--md F] [--csv F]`: the report files from saved results."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import EXIT_OK, EXIT_USAGE, FabscopeError
from . import collective
from .figures import comparison_rows
from .html import History, ReportInput, render_html
from .inputs import Inputs, line_rates, notes, read_inputs
from .markdown import comparison_markdown
from .render import render_csv, render_md, render_text


def markdown_report(title: str, inputs: Inputs) -> str:
    rows = comparison_rows(inputs.records, line_rates(inputs))
    parts = [f"# {title}\n"]
    parts += [f"{n}\n" for n in notes(inputs)]
    if len(rows) > 1:
        parts.append("## Comparison\n\nLatency = half round trip; bandwidth at the receiver; Gb/s = 10^9 bit/s.\n")
        parts.append(comparison_markdown(rows))
    parts.append("## Every size\n")
    parts.append(render_md(inputs.records))
    if inputs.collectives:
        parts += ["## Collectives\n", collective.render_markdown(inputs.collectives)]
    return "\n".join(parts)


def _write(path: str, text: str) -> None:
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise FabscopeError(f"cannot write {path}: {exc.strerror}", EXIT_USAGE) from exc
    print(f"report: {path}", file=sys.stderr)


def _histories(inputs: Inputs, store_path: str | None, notes: list[str]) -> list[History]:
    """Trends of the report's cases from the history store, when there is one."""
    from ..store import default_path, open_store
    from .trends import histories

    where = Path(store_path) if store_path else default_path()
    if not where.exists() and not store_path:  # --store PATH that does not exist: an error (a typo)
        notes.append(f"No history trend: no history store at {where} (runs keep their results there unless "
                      "--no-store; --store PATH names another).")
        return []
    try:
        with open_store(where, readonly=True) as store:
            found = histories(store, inputs.records)
    except FabscopeError as exc:
        if store_path:
            raise
        # The default store only adds the trend to a report of files: say why it is missing.
        print(f"fabscope: warning: {exc.message}", file=sys.stderr)
        notes.append(f"No history trend: {exc.message}")
        return []
    if not found:
        notes.append(f"No history trend: {where} holds fewer than two runs of these cases.")
    return found


def _check_outputs(inputs: Inputs, outputs: dict[str, str | None], store: str | None) -> None:
    """Never write a report over what it reads (an input file, the history store), nor two outputs
    into one file."""
    from ..store import default_path

    read = {p.resolve(): str(p) for p in inputs.files}
    if inputs.stored or store:
        where = Path(store) if store else default_path()
        read[where.resolve()] = f"{where} (the history store)"
    seen: dict[Path, str] = {}
    for flag, path in outputs.items():
        if not path:
            continue
        target = Path(path).resolve()
        if target in read:
            raise FabscopeError(f"{flag} {path}: that is an input of this report ({read[target]}); writing the "
                                "report there would destroy it. Give another file name", EXIT_USAGE)
        if target in seen:
            raise FabscopeError(f"{flag} {path}: {seen[target]} writes to the same file; give each its own",
                                EXIT_USAGE)
        seen[target] = flag


def _check_size(inputs: Inputs, size: int | None) -> None:
    """--size names the latency size whose distribution is drawn: it must be one that was measured."""
    if size is None:
        return
    measured = sorted({r.size for r in inputs.records if r.pattern == "lat"})
    if size not in measured:
        have = ", ".join(f"{s} B" for s in measured) or "none (no latency results in these inputs)"
        raise FabscopeError(f"--size {size}: no latency result of {size} B in these inputs, so there is no "
                            f"distribution to draw; latency sizes measured: {have}", EXIT_USAGE)


def report(inputs_named: list[str], html: str | None, md: str | None, csv: str | None,
           title: str = "fabscope report", size: int | None = None, store: str | None = None,
           history: bool = True) -> int:
    inputs = read_inputs(inputs_named, store)
    _check_outputs(inputs, {"--html": html, "--md": md, "--csv": csv}, store)
    _check_size(inputs, size)
    if html:
        said = notes(inputs)
        trends = _histories(inputs, store, said) if history else []
        _write(html, render_html(ReportInput(inputs.records, title=title, line_rates=line_rates(inputs), notes=said,
                                             history=trends, matrices=inputs.matrices, collectives=inputs.collectives,
                                             distribution_size=size)))
    if md:
        _write(md, markdown_report(title, inputs))
    if csv:
        # Two tables in one file when both kinds were given: the results', a blank line, the collectives'.
        tables = ([render_csv(inputs.records)] if inputs.records else []) + (
            [collective.render_csv(inputs.collectives)] if inputs.collectives else [])
        _write(csv, "\n".join(tables))
    if not (html or md or csv):
        sys.stdout.write((render_text(inputs.records) if inputs.records else "")
                         + collective.render_text(inputs.collectives))
    return EXIT_OK
