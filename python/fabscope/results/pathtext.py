# SPDX-License-Identifier: BSD-3-Clause
"""Rendering of the path verdict: byte amounts, the one-line summary, the text lines under a table.

A share is a percentage only up to 100 %: above that (loopback, tiny payloads, where headers and
other traffic outweigh the payload) the bytes are shown instead, never "1530 %".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .pathsides import path_sides

__all__ = ["format_bytes", "pct", "render_path_text", "summary"]


def format_bytes(n: float) -> str:
    """Decimal units, as link speeds are: 12.6 MB is 12 600 000 bytes."""
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - loop always returns


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def summary(path: Mapping[str, Any]) -> str:
    """One line: the verdict and the figures behind it."""
    v = path.get("verdict")
    req = path.get("requested")
    sides = list(path_sides(path).values())
    if v == "misrouted" and path.get("shared_memory"):
        return f"misrouted: asked for {req}, the bytes went through {path['shared_memory']}"
    if v == "not-requested" or v == "misrouted":
        parts, shares, totals = [], [], []
        for s in sides:
            listed = s.carriers if v == "misrouted" else s.top
            if listed:
                parts.append(f"{listed[0].device} ({s.host})")
                shares.append(listed[0].share or 0.0)
                totals.append(s.observed_bytes or 0)
        if not parts:
            return f"{v}: no device counted any bytes"
        where = " / ".join(parts)
        worst = min(range(len(shares)), key=lambda i: shares[i])
        head = f"{pct(shares[worst])} of {format_bytes(totals[worst])} went over {where}"
        if v == "misrouted":
            return f"misrouted: asked for {req}, {head}"
        return f"not-requested: {head}"
    if v == "verified":
        counted = [(s.requested_of_expected or 0.0, s.requested_bytes, s.host) for s in sides]
        over = any(share > 1.0 for share, _, _ in counted)
        # One unit for all sides: bytes as soon as any side counted more than the payload.
        parts = [f"{format_bytes(b or 0) if over else pct(share)} ({host})" for share, b, host in counted]
        exp = path.get("expected_bytes") or 0
        tail = " (more than the payload: headers and other traffic)" if over else ""
        return f"verified: {req} counted " + " / ".join(parts) + f" of the {format_bytes(exp)} payload{tail}"
    reason = path.get("reason") or "unknown reason"
    return f"unverifiable: {reason}"


def render_path_text(path: Mapping[str, Any]) -> str:
    """One or two lines for text output; a misroute is impossible to miss."""
    v = path.get("verdict")
    line = str(path.get("summary") or summary(path))
    body = line.split(": ", 1)[1] if ": " in line else line
    if v == "misrouted":
        lines = [f"!! MISROUTED: {body}"]
        details = [f"{s.host}: {s.reason}" for s in path_sides(path).values() if s.verdict == "misrouted" and s.reason]
        if not details and path.get("reason"):
            details = [str(path["reason"])]
        if details:
            lines.append("!! " + "; ".join(details))
        return "\n".join(lines)
    via = path.get("requested_via")
    asked = f" (asked via {via})" if via and via not in ("device", "bind") else ""
    if v == "verified":
        return f"path: VERIFIED{asked} - {body}"
    if v == "not-requested":
        return f"path: not requested (no --device) - {body}"
    return f"path: UNVERIFIABLE{asked} - {body}"
