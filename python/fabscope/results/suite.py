# SPDX-License-Identifier: BSD-3-Clause
"""The suite's shape: ``fabscope.suite/1``, the one summary object a suite run writes (suite.json)
beside its result records (``*.jsonl``, ``fabscope.result/1``).

Owns the schema name and the typed summary: the title, where it ran (peer / hosts / device), the
line rates the report draws, the notes (failed or skipped rows, said plainly) and the comparison
rows (one per transport and pattern, as ``report.figures.comparison_rows`` builds them). The
records themselves are ``Result`` objects (``model.py``); the summary only refers to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import RecordError

__all__ = ["SUITE_SCHEMA", "SuiteSummary"]

SUITE_SCHEMA = "fabscope.suite/1"


@dataclass
class SuiteSummary:
    title: str
    peer: str | None = None
    hosts: list[str] = field(default_factory=list)
    device: str | None = None
    line_rates_gbps: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    # The rows (a backend's pattern) that did not finish, one object each: {"row": its label,
    # "exit_code": the run's, "error": its message}. A row its backend cannot run (exit 6) is a note.
    failed: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SUITE_SCHEMA, "title": self.title, "peer": self.peer, "hosts": self.hosts,
                "device": self.device, "line_rates_gbps": self.line_rates_gbps, "notes": self.notes,
                "rows": self.rows, "failed": self.failed}

    @staticmethod
    def parse(obj: Mapping[str, Any]) -> SuiteSummary:
        """A suite.json object; a wrong schema or a missing title is an error naming the field."""
        schema = obj.get("schema")
        if schema != SUITE_SCHEMA:
            raise RecordError("schema", f"is {schema!r}, not {SUITE_SCHEMA!r}")
        title = obj.get("title")
        if not isinstance(title, str):
            raise RecordError("title", f"must be a string, got {title!r}")
        rates = obj.get("line_rates_gbps") or {}
        if not isinstance(rates, Mapping) or not all(isinstance(v, (int, float)) for v in rates.values()):
            raise RecordError("line_rates_gbps", "must map device names to Gb/s")
        rows = obj.get("rows") or []
        if not isinstance(rows, list) or not all(isinstance(r, Mapping) for r in rows):
            raise RecordError("rows", "must be a list of objects")
        failed = obj.get("failed") or []  # absent in summaries written before it existed
        if not isinstance(failed, list) or not all(isinstance(f, Mapping) and isinstance(f.get("row"), str)
                                                   and isinstance(f.get("exit_code"), int) for f in failed):
            raise RecordError("failed", "must be a list of {row, exit_code, error} objects")
        return SuiteSummary(
            title=title, peer=obj.get("peer"), hosts=[str(h) for h in obj.get("hosts") or []],
            device=obj.get("device"), line_rates_gbps={str(k): float(v) for k, v in rates.items()},
            notes=[str(n) for n in obj.get("notes") or []], rows=[dict(r) for r in rows],
            failed=[dict(f) for f in failed],
        )
