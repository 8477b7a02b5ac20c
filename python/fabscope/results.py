"""The result schema (fabscope.result/1): what every record must carry, checked on arrival."""

from __future__ import annotations

from typing import Any

RESULT_SCHEMA = "fabscope.result/1"
LATENCY_KEYS = ("min", "p50", "mean", "stdev", "p99", "p999", "max")
BANDWIDTH_KEYS = ("bandwidth_gbps", "bandwidth_MBps", "msg_rate_mpps")
REQUIRED = ("schema", "version", "backend", "op", "pattern", "size", "iterations", "warmup", "config", "transport")


def problems(record: dict[str, Any]) -> list[str]:
    """Everything wrong with a record; empty when it is valid."""
    found = [f"missing '{key}'" for key in REQUIRED if key not in record]
    if record.get("schema") != RESULT_SCHEMA:
        found.append(f"schema is {record.get('schema')!r}, expected {RESULT_SCHEMA!r}")
    if record.get("pattern") == "lat":
        lat = record.get("latency_us")
        if not isinstance(lat, dict):
            found.append("lat record without latency_us")
        else:
            found += [f"latency_us lacks '{k}'" for k in LATENCY_KEYS if k not in lat]
            values = [lat.get(k) for k in ("min", "p50", "p99", "max")]
            if all(isinstance(v, (int, float)) for v in values) and values != sorted(values):  # type: ignore[type-var]
                found.append(f"latency order broken: min/p50/p99/max = {values}")
    elif record.get("pattern") in ("bw", "bibw"):
        found += [f"missing '{k}'" for k in BANDWIDTH_KEYS if k not in record]
    return found
