# SPDX-License-Identifier: BSD-3-Clause
"""The screen's rounds without a barrier between them: a pair starts as soon as both its hosts are
free, not when the whole round before it has ended.

The schedule still decides everything else: which pairs, in which order per host, and that no host
is in two measurements at once. A job waits until every earlier job of the schedule on either of its
hosts has ended; the earliest unfinished job is always ready, so this never deadlocks. At most
``slots`` jobs run at once (the round's width, or --parallel). Rounds are pulled from the schedule a
few at a time (``LOOKAHEAD``): a schedule of 1,000 hosts is millions of jobs, never held at once.

Measured on the netns testbed (bench/matrix_timing.py): a round of four pairs waited for its slowest
pair (0.01-0.05 s a round) and the first round for the last agent to check in.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..results.matrix import Measurement
from .rules import Job

LOOKAHEAD = 3  # rounds of the schedule in flight at once


@dataclass
class Step:
    round_no: int
    jobs: list[Job]
    label: str


MeasureOne = Callable[[Job, int], list[Measurement]]


def run(steps: Iterable[Step], measure_one: MeasureOne, slots: int, unreachable: dict[str, str],
        on_job: Callable[[int, list[Measurement], float], None],
        on_step: Callable[[Step], None]) -> None:
    """Runs every step's jobs, each in a thread of its own once it is ready. ``on_job(index,
    measurements, wall_s)`` as each ends (in the order they end; index: the job's place in the
    schedule, from 0), ``on_step(step)`` when the last
    job of a step has ended (in schedule order). A job whose host became unreachable before it
    started is skipped. An exception in a job (a launcher that cannot start anything) ends the run:
    the jobs already running finish first, then it is raised here."""
    source: Iterator[Step] = iter(steps)
    cond = threading.Condition()
    queues: dict[str, deque[int]] = {}
    jobs: dict[int, tuple[Job, Step, set[int]]] = {}  # index -> (job, its step, the step's jobs not ended)
    pending_steps: deque[tuple[Step, set[int]]] = deque()  # pulled, not yet ended, in schedule order
    started: set[int] = set()
    running = 0
    failure: list[BaseException] = []
    next_index = 0
    exhausted = False

    def pull() -> None:
        nonlocal next_index, exhausted
        while not exhausted and len(pending_steps) < LOOKAHEAD:
            step = next(source, None)
            if step is None:
                exhausted = True
                return
            indexes: set[int] = set()
            for job in step.jobs:
                jobs[next_index] = (job, step, indexes)
                for host in job[:2]:
                    queues.setdefault(host, deque()).append(next_index)
                indexes.add(next_index)
                next_index += 1
            pending_steps.append((step, indexes))
            while pending_steps and not pending_steps[0][1]:  # a step with no job left to run
                on_step(pending_steps.popleft()[0])

    def finish(index: int) -> None:
        """Under the lock: the job is over (run or skipped)."""
        job, _, left = jobs.pop(index)
        started.discard(index)
        left.discard(index)
        for host in job[:2]:
            queues[host].popleft()
        while pending_steps and not pending_steps[0][1]:
            on_step(pending_steps.popleft()[0])

    def work(index: int) -> None:
        nonlocal running
        job, step, _ = jobs[index]
        round_no = step.round_no
        began = time.monotonic()
        got: list[Measurement] = []
        try:
            got = measure_one(job, round_no)
        except BaseException as exc:  # handed to the dispatcher, which raises it
            with cond:
                failure.append(exc)
        wall = time.monotonic() - began
        with cond:
            on_job(index, got, wall)
            running -= 1
            finish(index)
            cond.notify_all()

    with cond:
        pull()
        while jobs or not exhausted:
            if failure:
                if running == 0:
                    raise failure[0]
                cond.wait(0.5)
                continue
            for index in sorted(i for i in jobs if i not in started):
                if running >= slots:
                    break
                job = jobs[index][0]
                if any(queues[h][0] != index for h in job[:2]):
                    continue
                started.add(index)
                if job[0] in unreachable or job[1] in unreachable:
                    finish(index)
                    continue
                running += 1
                threading.Thread(target=work, args=(index,), daemon=True).start()
            pull()
            if jobs or not exhausted:
                cond.wait(0.5)  # a job ending notifies; the timeout lets Ctrl-C through
