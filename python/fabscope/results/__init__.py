# SPDX-License-Identifier: BSD-3-Clause
"""The result model: one owner for the records fabscope produces.

- ``model``: ``fabscope.result/N`` -> typed ``Result`` (validation, the path verdict attached once)
- ``histogram``: the compact latency histogram records carry, and Mann-Whitney U over two of them
- ``counters``: both engines' counter snapshots, typed (one parser for every reader); ``pathsides``:
  the path verdict's judged sides and the devices that carried the bytes, typed
- ``deltas`` / ``requests`` / ``verdict`` / ``pathtext``: the path verdict, split by job
  (counter arithmetic, what was asked, the judgement, its text)
- ``explain``: why the number is what it is (expected ceiling, causes seen/clear/unchecked), attached once
- ``suite``: the suite's summary, ``fabscope.suite/1``; ``matrix``: ``fabscope.matrix/1`` (the matrix fills it)

Everything else (CLI, suite, serve, matrix, report, store, exporter) reads these objects; nobody
re-derives a field from the raw dict.
"""

from .counters import Counters, CounterSide, DeviceCounters, TcpSockets
from .errors import RecordError
from .explain import Cause, Explanation, explain
from .files import load_file
from .histogram import Histogram
from .model import (
    RESULT_SCHEMA,
    RESULT_VERSION,
    Bandwidth,
    Flow,
    HostInfo,
    Latency,
    PathVerdict,
    Result,
    TransportSummary,
    parse_record,
)
from .pathsides import DeviceBytes, PathSide, path_sides

__all__ = [
    "RESULT_SCHEMA",
    "RESULT_VERSION",
    "Bandwidth",
    "Cause",
    "CounterSide",
    "Counters",
    "DeviceBytes",
    "DeviceCounters",
    "Explanation",
    "Flow",
    "Histogram",
    "HostInfo",
    "Latency",
    "PathSide",
    "PathVerdict",
    "RecordError",
    "Result",
    "TcpSockets",
    "TransportSummary",
    "explain",
    "load_file",
    "parse_record",
    "path_sides",
]
