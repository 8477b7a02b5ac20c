"""The one rule every bench uses to judge fabscope against a peer tool run just before and just after
it (a sandwich: peer, fabscope, peer). The machine's speed moves while a bench runs (the VM's CPU
placement on the host, a TCG guest's levels); two peer runs that disagree say it moved under the
sandwich, and that sandwich is left out instead of being read as a gap between the tools."""
from __future__ import annotations

STABLE = 0.15  # the peer's two runs may differ by this much (relative to the smaller) to count


def peer_runs_agree(before: float, after: float, stable: float = STABLE) -> bool:
    """Whether the peer's runs before and after fabscope's agree within `stable`."""
    return min(before, after) > 0 and abs(before - after) / min(before, after) <= stable
