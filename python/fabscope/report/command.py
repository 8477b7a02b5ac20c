"""`fabscope report INPUT... [--html F] [--md F] [--csv F]`: the report files from saved results."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import EXIT_OK, EXIT_USAGE, FabscopeError
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
    if not where.exists():
        notes.append(f"No history trend: no history store at {where} (runs keep their results there unless "
                      "--no-store; --store PATH names another).")
        return []
    with open_store(where) as store:
        found = histories(store, inputs.records)
    if not found:
        notes.append(f"No history trend: {where} holds fewer than two runs of these cases.")
    return found


def report(inputs_named: list[str], html: str | None, md: str | None, csv: str | None,
           title: str = "fabscope report", size: int | None = None, store: str | None = None,
           history: bool = True) -> int:
    inputs = read_inputs(inputs_named, store)
    if html:
        said = notes(inputs)
        trends = _histories(inputs, store, said) if history else []
        _write(html, render_html(ReportInput(inputs.records, title=title, line_rates=line_rates(inputs), notes=said,
                                             history=trends, matrices=inputs.matrices, distribution_size=size)))
    if md:
        _write(md, markdown_report(title, inputs))
    if csv:
        _write(csv, render_csv(inputs.records))
    if not (html or md or csv):
        sys.stdout.write(render_text(inputs.records))
    return EXIT_OK
