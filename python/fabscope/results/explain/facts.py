# SPDX-License-Identifier: BSD-3-Clause
"""Facts of a record read defensively (a record may be from an older engine, or from another backend),
and the number formats every cause uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...untyped import member, number_at


def _sides(rec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    tr = member(rec, "transport")
    return [(name, member(tr, name)) for name in ("local", "peer") if member(tr, name)]


def _senders(rec: Mapping[str, Any]) -> list[str]:
    """The sides that send the payload: the client (local) in bw; both in bibw and lat."""
    return ["local"] if rec.get("pattern") == "bw" else ["local", "peer"]


def _tcp_kernel(local: Mapping[str, Any]) -> bool:
    """Kernel TCP carried the payload (not a preload library: its sockets are not the kernel's)."""
    return local.get("kind") == "tcp" and not isinstance(local.get("preload"), Mapping)


def _fmt(n: int) -> str:
    return f"{n:,}"


def _f(obj: Mapping[str, Any], key: str) -> float | None:
    """A positive finite number (a float: IB rates are not whole, 2.5 and 14 Gb/s a lane)."""
    v = number_at(obj, key)
    return v if v is not None and v > 0 else None


def _gbps(x: float) -> str:
    return f"{x:.3g}" if x < 10 else f"{x:.1f}".removesuffix(".0")


def _four_digits(fraction: float) -> float:
    """Four significant digits, not four decimals: a TCG guest's 1.4 % of its ceiling keeps its
    precision as well as a NIC's 92 %."""
    return float(f"{fraction:.4g}")


def _us(x: float) -> str:
    return f"{x:.3f}" if x < 1 else f"{x:.2f}"


def _day(when: str) -> str:
    """The date of an ISO time (a range of them: FIRST..LAST), for the basis text."""
    first, _, last = when.partition("..")
    a, b = first[:10], last[:10]
    return a if not b or a == b else f"{a} to {b}"
