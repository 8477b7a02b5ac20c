"""The one error type of the result model: a record that is not valid, naming the field."""

from __future__ import annotations


class RecordError(ValueError):
    """A record that is not a valid result: ``field`` names what is wrong (dotted path)."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"result record: field '{field_name}' {problem}")
        self.field = field_name
        self.problem = problem
