# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope run --backend mpi --pattern allreduce|reduce_scatter|allgather|alltoall|bcast|barrier`:
what a collective run refuses before anything starts, and the run itself (the MPI engine's ranks
under the launcher, plan.MpiLaunch with ppn), rendered by report.collective."""

from __future__ import annotations

import argparse
import sys

from .errors import EXIT_MEASURE, EXIT_MISROUTED, EXIT_OK, EXIT_USAGE, FabscopeError
from .results.collective import COLLECTIVE_PATTERNS, is_collective

# Ranks per host when --ppn is not given: one per host across hosts, two on this host alone.
DEFAULT_PPN_HOSTS = 1
DEFAULT_PPN_LOOPBACK = 2


def check_collective(ns: argparse.Namespace, backend: str, pattern: str) -> None:
    """Before anything starts (exit 2): --ppn without a collective; a collective on another backend
    than mpi, or with fewer than 2 ranks. Fills in the default --ppn."""
    if not is_collective(pattern):
        if ns.ppn is not None:
            raise FabscopeError(f"--ppn applies only to the collectives ({', '.join(COLLECTIVE_PATTERNS)}), but this "
                                f"run is --pattern {pattern}: drop it", EXIT_USAGE)
        return
    # What a pair run does with these that a collective does not do yet: refused, never ignored.
    not_yet = [flag for flag, given in (("--store", ns.store), ("--tag", ns.tag), ("--capture", ns.capture),
                                        ("--preload", ns.preload)) if given]
    if not_yet:
        raise FabscopeError(f"{', '.join(not_yet)}: not for the collectives yet (their results are not kept in the "
                            f"history, and nothing is captured or preloaded); drop {'it' if len(not_yet) == 1 else 'them'}",
                            EXIT_USAGE)
    if backend != "mpi":
        raise FabscopeError(f"--pattern {pattern} is a collective: it runs across the ranks of an MPI job, which "
                            f"only --backend mpi starts (this run is --backend {backend}); add --backend mpi",
                            EXIT_USAGE)
    if ns.ppn is None:
        ns.ppn = DEFAULT_PPN_HOSTS if ns.hosts else DEFAULT_PPN_LOOPBACK
    ranks = ns.ppn * (len(ns.hosts) if ns.hosts else 1)
    if ranks < 2:
        where = f"--hosts {','.join(ns.hosts)}" if ns.hosts else "--loopback"
        raise FabscopeError(f"--pattern {pattern} needs at least 2 ranks, and {where} with --ppn {ns.ppn} makes "
                            f"{ranks}; name more hosts or raise --ppn", EXIT_USAGE)


def run_collective(ns: argparse.Namespace, run_plan: object) -> int:
    """Runs the plan, prints each size as it comes (JSON lines) or the tables at the end, and
    returns the exit code: the engine's (12 = a wrong element, named), 5 when a host's requested
    device did not carry its share (the hosts named), else 0."""
    from .launch import plan
    from .report.collective import RENDERERS, render_json
    from .results.collective import CollectiveResult

    assert isinstance(run_plan, plan.RunPlan)
    streaming = ns.format == "json"

    def on_record(rec: object) -> None:
        if streaming and isinstance(rec, CollectiveResult):
            sys.stdout.write(render_json([rec]))
            sys.stdout.flush()

    outcome = plan.execute(run_plan, on_record)
    records: list[object] = list(outcome.records)  # the runner's list holds this run's CollectiveResults
    results = [r for r in records if isinstance(r, CollectiveResult)]
    if not streaming:
        sys.stdout.write(RENDERERS[ns.format](results))
        sys.stdout.flush()
    for note in dict.fromkeys(outcome.notes):
        print(f"fabscope: note: {note}", file=sys.stderr)
    if outcome.error:
        kept = f" ({len(results)} size(s) measured before that are shown above)" if results else ""
        print(f"fabscope: {outcome.error}{kept}", file=sys.stderr)
        return outcome.exit_code or EXIT_MEASURE
    misrouted = sorted({h for r in results for h in r.misrouted_hosts})
    if misrouted:
        print(f"fabscope: misrouted: the requested device did not carry the bytes the collective must move on "
              f"{', '.join(misrouted)} (see the path lines / the record's path.hosts)", file=sys.stderr)
        return EXIT_MISROUTED
    return EXIT_OK
