# SPDX-License-Identifier: BSD-3-Clause
"""The last status of every (node, check): what `fabscope check` and `fabscope health` judged last,
its fault codes, when it was made and until when it holds. Kept in one small JSON file the exporter
reads at each scrape (`fabscope_check_*` series), so a dashboard shows each node's last status and
its age, and an alert fires on a failure or on a result that expired.

File: ``$XDG_STATE_HOME/fabscope/known-good.json`` (``~/.local/state/...``), or
``$FABSCOPE_KNOWN_GOOD`` when set."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from .check import STATUS_ORDER, Judgement

# The number each status is exported as (fabscope_check_status): higher is worse.
STATUS_VALUE = {s: i for i, s in enumerate(STATUS_ORDER)}


def default_path() -> Path:
    explicit = os.environ.get("FABSCOPE_KNOWN_GOOD")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fabscope" / "known-good.json"


def read(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """{"node|check": entry}; an absent or unreadable file is empty (the exporter says nothing)."""
    try:
        got = json.loads((path or default_path()).read_text())
    except (OSError, ValueError):
        return {}
    return got if isinstance(got, dict) else {}


def record(judgements: Iterable[Judgement], scenario: str, this_node: str, path: Path | None = None) -> None:
    """Merge these judgements in: per (node, check) the worst status, its fault codes, made_at and
    valid_until. Written whole and renamed into place, so a reader never sees half a file."""
    path = path or default_path()
    entries = read(path)
    mine: dict[str, dict[str, Any]] = {}
    for j in judgements:
        for node in j.nodes or (this_node,):
            key = f"{node}|{j.check}"
            e = mine.setdefault(key, {"node": node, "check": j.check, "scenario": scenario, "status": "pass",
                                      "codes": [], "made_at": j.made_at, "valid_until": j.valid_until})
            if STATUS_VALUE[j.status] > STATUS_VALUE[e["status"]]:
                e["status"] = j.status
            if j.code and j.status != "pass" and j.code not in e["codes"]:
                e["codes"].append(j.code)
    entries.update(mine)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".known-good-")
        with os.fdopen(fd, "w") as f:
            json.dump(entries, f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # the status file is for the exporter; a check's own output and exit status still tell


def ages(entries: dict[str, dict[str, Any]], now: datetime) -> list[tuple[dict[str, Any], float, bool]]:
    """(entry, age in seconds, expired) of each entry with readable times."""
    out = []
    for e in entries.values():
        try:
            made = datetime.fromisoformat(str(e["made_at"]))
            until = datetime.fromisoformat(str(e["valid_until"]))
        except (KeyError, ValueError):
            continue
        out.append((e, (now - made).total_seconds(), now > until))
    return out
