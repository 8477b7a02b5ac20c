# SPDX-License-Identifier: BSD-3-Clause
"""Reading JSON whose shape nothing guarantees: a record from a file or the network, an engine's reply,
an inventory from another host. A part that is missing or of the wrong type reads as empty or None,
never as an exception; infinities, NaN and booleans are not numbers here.

The one owner of these checks for every lenient reader: the counters, the explanation, the report's
figures, the exporter, compare and the inventory. The strict reader, which refuses a malformed record
and says which field, is results/model.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["count", "count_at", "mapping", "member", "number", "number_at"]


def mapping(value: object) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def member(obj: object, key: str) -> Mapping[str, Any]:
    """``obj[key]`` if ``obj`` is a mapping and that member is one too, else an empty mapping."""
    return mapping(obj.get(key)) if isinstance(obj, Mapping) else {}


def number(value: object) -> float | None:
    """A finite int or float (not a bool), as a float; else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def count(value: object) -> int | None:
    """A finite int or float (not a bool), as an int (a float truncated); else None. An int stays exact:
    64-bit counters do not fit a float's 53 bits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    return int(value) if isinstance(value, float) and math.isfinite(value) else None


def number_at(obj: object, key: str) -> float | None:
    """:func:`number` of ``obj[key]``; None where ``obj`` is not a mapping."""
    return number(obj.get(key)) if isinstance(obj, Mapping) else None


def count_at(obj: object, key: str) -> int | None:
    """:func:`count` of ``obj[key]``; None where ``obj`` is not a mapping."""
    return count(obj.get(key)) if isinstance(obj, Mapping) else None
