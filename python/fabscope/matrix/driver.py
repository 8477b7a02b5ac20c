# SPDX-License-Identifier: BSD-3-Clause
"""The matrix run, independent of how a pair is measured: screen, judge, retest, attribute.

The same driver runs real measurements (``fabscope.matrix.execute``) and the simulation in
``bench/matrix_sim.py``: both hand it a ``Measurer`` that measures one round of directed jobs
(no host twice) and keeps the hosts it lost in ``unreachable``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from ..results.matrix import JobTiming, MatrixRun, Measurement
from . import findings as findings_mod
from . import pipeline, rules
from .rules import Job, Rule
from .schedule import Schedule


class Measurer(Protocol):
    """A measurer whose ``pipelined`` attribute is true measures one job per call from many threads
    at once (the real ones: agents, MPI jobs); the screen then runs without a barrier between
    rounds (pipeline.py). Without it (the simulation), round by round."""

    unreachable: dict[str, str]

    def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
        """Run the jobs at once (no host in two of them); one Measurement per job."""


Progress = Callable[[int, int, str], None]  # steps done, steps planned, what


DIRECTIONS = ("both", "one")


def screen_steps(schedule: Schedule, patterns: Sequence[str], directions: str = "both") -> int:
    return schedule.rounds * len(patterns) * (2 if directions == "both" else 1)


def run(hosts: Sequence[str], patterns: Sequence[str], schedule: Schedule, rule: Rule, measurer: Measurer,
        *, backend: str = "", progress: Progress | None = None, max_passes: int | None = None,
        directions: str = "both", parallel: int | None = None, started: float | None = None) -> MatrixRun:
    """directions "both": each scheduled pair in both directions (one direction per step, so no
    host is in two measurements); "one": a screen of one direction per pair, alternating which
    end sends from round to round, suspects then retested (half the measurements; a fault in
    one direction only is seen when that direction is the one screened, or with --pattern bibw).
    parallel: at most this many jobs at once (None: a whole round), for hosts that share CPUs.
    started: time.monotonic() at the command's start (the launcher's and agents' time counts as
    start-up in the run's timing); None: the first round's start."""

    def timed(got: list[Measurement], wall: float) -> None:
        result.timing.jobs += [JobTiming(wall, m.measured_s or 0.0, m.phases) for m in got]

    def measure(jobs: list[Job], round_no: int) -> list[Measurement]:
        step = parallel or len(jobs)
        out: list[Measurement] = []
        for i in range(0, len(jobs), step):
            batch = [j for j in jobs[i:i + step] if j[0] not in measurer.unreachable and j[1] not in measurer.unreachable]
            if batch:
                result.timing.slots = max(result.timing.slots, len(batch))
                began = time.monotonic()
                got = measurer.measure(batch, round_no)
                timed(got, time.monotonic() - began)
                out += got
        return out

    result = MatrixRun(hosts=list(hosts), patterns=list(patterns), backend=backend,
                       schedule={**schedule.describe(), "directions": directions}, rule=rule.to_json())
    first = time.monotonic()
    started = first if started is None else started
    result.timing.start_s = first - started

    def measure_all() -> dict[str, rules.Centre]:
        """Screen, then retest passes; returns the centres (from the screen)."""
        total = screen_steps(schedule, patterns, directions)
        done = 0

        def steps() -> Iterator[pipeline.Step]:
            for r, pairs in enumerate(schedule):
                for pattern in patterns:
                    for forward in (True, False) if directions == "both" else (r % 2 == 0,):
                        jobs: list[Job] = []
                        for a, b in pairs:
                            src, dst = (hosts[a], hosts[b]) if forward else (hosts[b], hosts[a])
                            if src not in measurer.unreachable and dst not in measurer.unreachable:
                                jobs.append((src, dst, pattern, "screen"))
                        yield pipeline.Step(r, jobs, f"round {r + 1}/{schedule.rounds} {pattern}")

        def step_done(step: pipeline.Step) -> None:
            nonlocal done
            done += 1
            if progress:
                progress(done, total, step.label)

        if getattr(measurer, "pipelined", False):
            widest = len(schedule.round(0)) if schedule.rounds else 1  # a round's width: hosts / 2
            slots = max(1, min(parallel or widest, widest))
            result.timing.slots = slots
            got: dict[int, list[Measurement]] = {}

            def job_done(index: int, measured: list[Measurement], wall: float) -> None:
                got[index] = measured
                timed(measured, wall)

            try:
                pipeline.run(steps(), lambda job, r: measurer.measure([job], r), slots, measurer.unreachable,
                             job_done, step_done)
            finally:  # in schedule order, whatever order they ended in (and on Ctrl-C, what came)
                result.measurements += [m for i in sorted(got) for m in got[i]]
        else:
            for step in steps():
                if step.jobs:
                    result.measurements += measure(step.jobs, step.round_no)
                step_done(step)
        centres = rules.centres(result.measurements)
        rules.mark(rule, result.measurements, centres)
        passes = max_passes if max_passes is not None else rule.retests + 2
        round_no = schedule.rounds
        for _ in range(passes):
            jobs = rules.next_jobs(rule, hosts, result.measurements, measurer.unreachable)
            if not jobs:
                break
            rounds = rules.pack(jobs)
            total += len(rounds)
            for batch in rounds:
                result.measurements += measure(batch, round_no)
                round_no += 1
                done += 1
                if progress:
                    progress(done, total, "retests")
            rules.mark(rule, result.measurements, centres)
        else:
            if rules.next_jobs(rule, hosts, result.measurements, measurer.unreachable):
                result.notes.append(f"retests stopped after {passes} passes with suspects still undecided")
        return centres

    try:
        by_pattern = measure_all()
    except KeyboardInterrupt:  # keep what was measured: judged and printed, exit 130
        result.interrupted = True
        by_pattern = rules.centres(result.measurements)
        rules.mark(rule, result.measurements, by_pattern)
        pending = sorted(f"{s} -> {d} {p}" for (s, d, p), st in rules.directions(rule, result.measurements).items()
                         if st == "pending")
        result.notes.append(f"interrupted after {len(result.measurements)} measurements; judged on those"
                            + (f"; suspects not retested (so not called): {', '.join(pending)}" if pending else ""))
    result.timing.wall_s = time.monotonic() - started
    result.centres = {p: c.to_json() for p, c in by_pattern.items()}
    if len(hosts) < 5 and not rule.line_rate_gbps:
        result.notes.append(
            f"with {len(hosts)} hosts one bad node is in {2 / len(hosts):.0%} of the measurements, and the median "
            "(the reference) holds only while fewer than half are bad: use 5 or more hosts, or --line-rate")
    for pattern in patterns:
        c = by_pattern.get(pattern)
        if c is not None and c.median and pattern != "lat":
            margin = 1 - rule.bw_fraction
            if c.spread / c.median > margin / 3:
                limit = rules.threshold(rule, pattern, c)
                result.notes.append(
                    f"{pattern}: the fabric's spread ({c.spread / c.median:.0%} of the median) is large against the "
                    f"rule's margin ({margin:.0%}): suspects are figures below {limit:.4g} ({limit / c.median:.0%} of the "
                    "median); a fault milder than that is not told from the noise")
    result.findings = findings_mod.attribute(rule, hosts, result.measurements, by_pattern)
    result.unreachable = dict(measurer.unreachable)
    return result
