# SPDX-License-Identifier: BSD-3-Clause
"""The one error type of the result model: a record that is not valid, naming the field."""

from __future__ import annotations


class RecordError(ValueError):
    """A record that is not valid: ``field`` names what is wrong (dotted path); ``document`` what was
    being read (a result record, a matrix document)."""

    def __init__(self, field_name: str, problem: str, document: str = "result record") -> None:
        super().__init__(f"{document}: field '{field_name}' {problem}")
        self.field = field_name
        self.problem = problem
