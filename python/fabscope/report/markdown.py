# SPDX-License-Identifier: BSD-3-Clause
"""Markdown: real tables (GitHub-flavoured pipes), not fenced text blocks."""

from __future__ import annotations

from collections.abc import Sequence

from .charts import ComparisonRow, comparison_table
from .table import Table, cell


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _numeric(table: Table, i: int) -> bool:
    values = [row[i] for row in table.rows if row[i] is not None]
    return bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def markdown_table(table: Table) -> str:
    """Numbers right-aligned, names and verdicts left-aligned."""
    out = ["| " + " | ".join(_md_cell(c.title) for c in table.columns) + " |",
           "|" + "|".join("---:" if _numeric(table, i) else ":---" for i, _ in enumerate(table.columns)) + "|"]
    out += ["| " + " | ".join(_md_cell(cell(c, v)) for c, v in zip(table.columns, row, strict=True)) + " |"
            for row in table.rows]
    return "\n".join(out) + "\n"


def comparison_markdown(rows: Sequence[ComparisonRow]) -> str:
    return markdown_table(comparison_table(rows))
