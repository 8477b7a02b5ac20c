# SPDX-License-Identifier: BSD-3-Clause
"""The one rule for two ends of a measurement that share a CPU.

Two busy-polling ends bound to the same CPU of the same machine take turns on it: each half round
trip waits for the other end's time slice (a scheduler tick, 1-4 ms), so the latency measures CPU
sharing, not the network. It happens on real clusters too (two ranks of one node, containers) and
by default in network-namespace testbeds, where every "host" is the same machine: Open MPI binds
rank 0 of each node to core 0 (``--map-by node``, bind-to core for np <= 2), and MPICH's
``-bind-to core`` does the same.

"The same machine" is the same kernel boot (``host.boot_id``, /proc/sys/kernel/random/boot_id),
not the same host name: namespaces and containers have names of their own. "The same CPU" is an
affinity of exactly one CPU on both ends, and the same one (``host.cpus_allowed``); ends that may
run on several CPUs are left to the scheduler, which spreads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SHARED_CPU_MARK = "share one CPU"


def _cpu_list(text: str) -> set[int] | None:
    """A Linux CPU list ("0", "0,2", "0-3") as a set; None when it is not one."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus or None


def _end(info: Any) -> tuple[str, str, int] | None:
    """(boot id, host name, the one CPU) of an end bound to exactly one CPU; None otherwise."""
    if not isinstance(info, Mapping):
        return None
    boot, allowed = info.get("boot_id"), info.get("cpus_allowed")
    if not isinstance(boot, str) or not boot or not isinstance(allowed, str):
        return None
    cpus = _cpu_list(allowed)
    if cpus is None or len(cpus) != 1:
        return None
    return boot, str(info.get("hostname") or "?"), next(iter(cpus))


def shared_cpu_warning(rec: Mapping[str, Any]) -> str | None:
    """The warning for a record whose two ends ran on one machine bound to the same CPU, or None."""
    mine, theirs = _end(rec.get("host")), _end(rec.get("peer_host"))
    if mine is None or theirs is None or mine[0] != theirs[0] or mine[2] != theirs[2]:
        return None
    hosts = mine[1] if mine[1] == theirs[1] else f"{mine[1]} and {theirs[1]}"
    backend = rec.get("backend")
    if backend == "mpi":
        fix = ("run the ranks unbound or on different CPUs: Open MPI --mca hwloc_base_binding_policy none, MPICH "
               "HYDRA_BINDING=none (on the netns testbed `fabscope testbed netns env` sets both)")
    else:
        fix = "pin the two ends to different CPUs (--cpu N on each), or leave them unpinned"
    return (f"both ends {SHARED_CPU_MARK} (CPU {mine[2]}) of the same machine ({hosts}, kernel boot id "
            f"{mine[0][:8]}): each message waits for the other end's scheduler time slice, so latency and "
            f"bandwidth measure CPU sharing (milliseconds: a scheduler tick), not the network. Fix: {fix}")


def with_shared_cpu_warning(rec: dict[str, Any]) -> None:
    """Add the warning to ``rec["warnings"]`` (a new list) when it applies and is not there yet."""
    warning = shared_cpu_warning(rec)
    if warning is None:
        return
    warnings = [w for w in rec.get("warnings") or [] if isinstance(w, str)]
    if not any(SHARED_CPU_MARK in w for w in warnings):
        rec["warnings"] = [*warnings, warning]
