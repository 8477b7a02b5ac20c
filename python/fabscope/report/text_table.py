# SPDX-License-Identifier: BSD-3-Clause
"""The one writer of aligned plain-text tables (report, compare, suite, two-host suite, devices):
columns two spaces apart, each as wide as its widest cell, left-aligned unless named in
``right``; no trailing blanks. What goes in the cells is the caller's (the table model's
``cell`` for results)."""

from __future__ import annotations

from collections.abc import Container, Sequence

__all__ = ["aligned"]


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]], right: Container[int] = (),
            rule: bool = False) -> list[str]:
    """The header line, a line of dashes under each column when ``rule``, then one line per row."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(header), *(["  ".join("-" * w for w in widths)] if rule else []), *(line(r) for r in rows)]
