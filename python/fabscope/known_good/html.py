# SPDX-License-Identifier: BSD-3-Clause
"""The check's section of the HTML report (`fabscope check FILE --html PATH`): the judgements with
their fault codes, evidence and fixes, the defective nodes and links, above the report's usual
charts and tables of the runs the checks measured (report/html.py draws those)."""

from __future__ import annotations

from ..report.html import ReportInput, render_html, table_html
from ..report.table import Column, Table
from .check import Outcome

_COLUMNS = [Column("status", "status"), Column("code", "fault code"), Column("check", "check"),
            Column("case", "case"), Column("expectation", "expectation"), Column("value", "value", "{:.4g}"),
            Column("bound", "bound", "{:.4g}"), Column("evidence", "evidence"), Column("fix", "fix")]


def section(outcome: Outcome) -> str:
    import html

    rows = [[j.status.upper() if j.status == "fail" else j.status, j.code or "-", j.check, j.case, j.expectation,
             j.value, j.bound, j.evidence, j.fix or "-"] for j in outcome.judgements]
    nodes, links = outcome.defective()
    c = outcome.counts
    said = (f"{outcome.status}: {c['pass']} pass, {c['warn']} warn, {c['fail']} fail, {c['inconclusive']} "
            f"inconclusive; made {outcome.made_at}, valid until {outcome.valid_until}")
    parts = [f"<h2>Known-good check: {html.escape(outcome.scenario.name)}</h2>",
             f'<p class="{"bad" if outcome.status == "fail" else "note"}">{html.escape(said)}</p>',
             table_html(Table(_COLUMNS, rows)),
             f'<p class="{"bad" if nodes else "note"}">defective nodes: {html.escape(", ".join(nodes) or "none")}</p>',
             f'<p class="{"bad" if links else "note"}">defective links: {html.escape(", ".join(links) or "none")}</p>']
    return "\n".join(parts)


def render(outcome: Outcome) -> str:
    """The whole report: the check's section first, then the runs' charts and tables."""
    page = render_html(ReportInput(records=outcome.results, title=f"fabscope check {outcome.scenario.name}"))
    head, sep, rest = page.partition("</p>\n")  # after the report's header line (title and facts)
    return head + sep + section(outcome) + "\n" + rest
