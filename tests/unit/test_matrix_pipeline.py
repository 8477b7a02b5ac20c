# SPDX-License-Identifier: BSD-3-Clause
"""The screen without a barrier between rounds (matrix/pipeline.py): a pair starts as soon as both
its hosts are free; no host is ever in two measurements at once; each host's measurements keep the
schedule's order; a failure that stops everything still ends the run with it."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from fabscope.errors import FabscopeError  # noqa: E402
from fabscope.matrix import driver  # noqa: E402
from fabscope.matrix.rules import Job, Rule  # noqa: E402
from fabscope.matrix.schedule import AllPairs  # noqa: E402
from fabscope.results.matrix import Measurement  # noqa: E402

HOSTS = ["a", "b", "c", "d"]


class Threaded:
    """A measurer of the real kind (one job a call, many threads), recording who ran when."""

    pipelined = True

    def __init__(self) -> None:
        self.unreachable: dict[str, str] = {}
        self.lock = threading.Lock()
        self.busy: set[str] = set()
        self.overlaps: list[Job] = []
        self.order: dict[str, list[tuple[str, str]]] = {h: [] for h in HOSTS}
        self.started: dict[tuple[str, str], threading.Event] = {}

    def event(self, src: str, dst: str) -> threading.Event:
        with self.lock:
            return self.started.setdefault((src, dst), threading.Event())

    def work(self, job: Job) -> None:
        """The job's own time: none here."""

    def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
        (job,) = jobs
        src, dst = job[0], job[1]
        with self.lock:
            if {src, dst} & self.busy:
                self.overlaps.append(job)
            self.busy |= {src, dst}
            self.order[src].append((src, dst))
            self.order[dst].append((src, dst))
        self.event(src, dst).set()
        self.work(job)
        with self.lock:
            self.busy -= {src, dst}
        return [Measurement(src, dst, job[2], 10.0, phase=job[3], round=round_no, verdict="verified", measured_s=1.0)]


def _schedule_order() -> dict[str, list[tuple[str, str]]]:
    """Each host's pairs in the order the round-by-round screen measures them."""
    order: dict[str, list[tuple[str, str]]] = {h: [] for h in HOSTS}

    class Plain:
        def __init__(self) -> None:
            self.unreachable: dict[str, str] = {}

        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            for src, dst, *_ in jobs:
                order[src].append((src, dst))
                order[dst].append((src, dst))
            return [Measurement(j[0], j[1], j[2], 10.0, phase=j[3], round=round_no) for j in jobs]

    driver.run(HOSTS, ["bw"], AllPairs(4), Rule(), Plain())
    return order


def test_a_slow_pair_does_not_hold_a_pair_of_the_next_round_whose_hosts_are_free() -> None:
    class SlowFirst(Threaded):
        def work(self, job: Job) -> None:
            if (job[0], job[1]) == first:
                # With a barrier between rounds, the next step's pair of the two other hosts could
                # not start before this one ended: it would wait here until the deadline.
                self.waited = self.event(other[1], other[0]).wait(20)

    plain = _schedule_order()
    first = plain["a"][0]
    other = next(p for p in plain["b"] + plain["c"] + plain["d"] if "a" not in p and first[1] not in p)
    m = SlowFirst()
    result = driver.run(HOSTS, ["bw"], AllPairs(4), Rule(), m)
    assert m.waited, "the next round's pair of free hosts did not start while the first pair ran"
    assert m.overlaps == []
    assert m.order == plain  # each host's measurements in the schedule's order
    assert len(result.measurements) == 12 and result.timing.slots == 2
    # In schedule order, whatever order they ended in: the round-by-round screen's order.
    assert [(x.src, x.dst) for x in result.measurements] == [
        p for step in _steps_in_order() for p in step]


def _steps_in_order() -> list[list[tuple[str, str]]]:
    steps: list[list[tuple[str, str]]] = []

    class Plain:
        def __init__(self) -> None:
            self.unreachable: dict[str, str] = {}

        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            steps.append([(j[0], j[1]) for j in jobs])
            return [Measurement(j[0], j[1], j[2], 10.0, phase=j[3], round=round_no) for j in jobs]

    driver.run(HOSTS, ["bw"], AllPairs(4), Rule(), Plain())
    return steps


def test_parallel_one_runs_one_pair_at_a_time() -> None:
    class Counting(Threaded):
        def __init__(self) -> None:
            super().__init__()
            self.now = self.peak = 0

        def work(self, job: Job) -> None:
            with self.lock:
                self.now += 1
                self.peak = max(self.peak, self.now)
            threading.Event().wait(0.01)
            with self.lock:
                self.now -= 1

    m = Counting()
    result = driver.run(HOSTS, ["bw"], AllPairs(4), Rule(), m, parallel=1)
    assert m.peak == 1 and len(result.measurements) == 12 and result.timing.slots == 1


def test_a_failure_that_stops_everything_ends_the_run_with_it() -> None:
    class Refusing(Threaded):
        def work(self, job: Job) -> None:
            raise FabscopeError("--backend mpi: mpirun is not on PATH", 2)

    with pytest.raises(FabscopeError, match="mpirun is not on PATH"):
        driver.run(HOSTS, ["bw"], AllPairs(4), Rule(), Refusing())


def test_an_unreachable_host_s_later_pairs_are_skipped() -> None:
    class Losing(Threaded):
        def work(self, job: Job) -> None:
            if "d" in job[:2]:
                self.unreachable["d"] = "its agent stopped answering"

    m = Losing()
    result = driver.run(HOSTS, ["bw"], AllPairs(4), Rule(), m)
    with_d = [x for x in result.measurements if "d" in (x.src, x.dst)]
    assert len(with_d) == 1  # the first pair with d ran; none after it
    assert len(result.measurements) == 1 + 6  # and every pair of a, b, c
