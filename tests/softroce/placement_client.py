# SPDX-License-Identifier: BSD-3-Clause
"""Guest side of bench/placement.py's GuestAgent: asks the host to probe the placement of the two
host CPUs the guests run on, between two runs of a bench chain. Without an agent (no
/out/placement/agent: a test's boot, or an older host script) every call returns None at once.
Every wait has a deadline: a host that stops answering costs PLACEMENT_WAIT_S once, then the
probes are skipped."""
from __future__ import annotations

import json
import os
import time
from typing import TextIO

PLACEMENT_DIR = "/out/placement"
PLACEMENT_WAIT_S = 10.0  # the probe takes 50 ms; a slow 9p round trip under TCG, a few ms
_state = {"seq": 0, "gave_up": False}


def host_placement(directory: str = PLACEMENT_DIR, wait_s: float = PLACEMENT_WAIT_S) -> dict:
    """{"rtt_ns": x} from the host's probe, {"error": why} when it failed, {} with no agent."""
    if _state["gave_up"] or not os.path.exists(os.path.join(directory, "agent")):
        return {}
    _state["seq"] += 1
    seq = _state["seq"]
    tmp, req = os.path.join(directory, f".req-{seq}"), os.path.join(directory, f"req-{seq}")
    with open(tmp, "w"):
        pass
    os.rename(tmp, req)
    ans = os.path.join(directory, f"ans-{seq}")
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            with open(ans) as f:
                text = f.read()
        except FileNotFoundError:
            time.sleep(0.005)
            continue
        os.unlink(ans)
        try:
            got = json.loads(text)
        except ValueError:
            return {"error": f"unreadable answer {text[:80]!r}"}
        return got if isinstance(got, dict) else {"error": f"unreadable answer {text[:80]!r}"}
    _state["gave_up"] = True
    return {"error": f"no answer from the host within {wait_s:g} s; placement probes skipped from here on"}


def placement_record(bench: str, seq: int, directory: str = PLACEMENT_DIR) -> dict:
    """A bench.jsonl line: the placement before run `seq` of the case's chain (after the last run:
    seq = the number of runs)."""
    return {"section": "placement", "bench": bench, "seq": seq, **host_placement(directory)}


def write_placement(out: TextIO, bench: str, seq: int) -> None:
    """Appends the placement before run `seq` of a case's chain to bench.jsonl when a host agent
    answers; nothing without one."""
    rec = placement_record(bench, seq)
    if len(rec) > 3:
        out.write(json.dumps(rec) + "\n")
        out.flush()
