# SPDX-License-Identifier: BSD-3-Clause
"""Running a matrix for real: agents under the launcher, one engine pair per job, all jobs of a
round at once (their hosts are disjoint).

Each job is what `fabscope run --peer` does, split over two hosts: the destination's agent starts
`fabscope-engine --listen` on its address for the requested device, the source's agent runs
`fabscope-engine --peer` against it with the same options; the client's records (both hosts'
counters, path verdict attached) come back and are parsed by the result model. With --backend mpi
a job is a 2-rank MPI job on the two hosts instead (the runner's MPI launch, hosts given).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_USAGE, FabscopeError
from ..launch.plan import RunPlan
from ..results import RecordError, Result, parse_record
from ..results.matrix import Measurement
from .coordinator import AgentConn
from .rules import Job


def value_of(result: Result) -> float | None:
    if result.pattern == "lat":
        return result.latency.p50 if result.latency else None
    return result.bandwidth.gbps if result.bandwidth else None


def measurement_from(src: str, dst: str, pattern: str, phase: str, round_no: int,
                     raws: Sequence[dict[str, Any]], error: str | None) -> Measurement:
    """The job's Measurement from the client's raw records (the last size is the judged one)."""
    results: list[Result] = []
    for raw in raws:
        try:
            results.append(parse_record(raw, judge_path=False))
        except RecordError as exc:
            error = error or f"invalid record from {src}: {exc}"
    if not results:
        return Measurement(src, dst, pattern, None, phase=phase, round=round_no,
                           error=error or "no result came back")
    last = results[-1]
    # The measured phase: the sender's span, or the receiver's where the figure is taken there (it
    # ends with the last arrival, after what was in flight when the sender ended).
    measured = sum(max(r.duration_s or 0.0, r.rx_duration_s or 0.0) for r in results)
    return Measurement(src, dst, pattern, value_of(last), phase=phase, round=round_no, verdict=last.path.verdict,
                       result=last, error=error, measured_s=measured)


def pick_address(agent: AgentConn, device: str | None) -> str:
    """The address the engine of this host listens on: the requested netdev's first IPv4
    address; for an RDMA device (or no device) the address the agent reached us from."""
    if device and device in agent.addresses:
        addrs = agent.addresses[device]
        if not addrs:
            raise FabscopeError(f"--device {device}: it has no IPv4 address on {agent.host}; give it one, or name "
                                f"a device that has one ({_with_addresses(agent)})", EXIT_USAGE)
        return addrs[0]
    return agent.local_address


def _with_addresses(agent: AgentConn) -> str:
    return ", ".join(f"{d} {','.join(a)}" for d, a in sorted(agent.addresses.items()) if a) or "none"


def measure_concurrently(job: Callable[[Job, int], Measurement], jobs: Sequence[Job],
                         round_no: int) -> list[Measurement]:
    """The jobs of one round (disjoint pairs) at once, one thread each; results in job order."""
    out: list[Measurement | None] = [None] * len(jobs)

    def one(i: int, item: Job) -> None:
        out[i] = job(item, round_no)

    threads = [threading.Thread(target=one, args=(i, item), daemon=True) for i, item in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [m for m in out if m is not None]


@dataclass
class AgentMeasurer:
    pipelined = True  # one job per call, from many threads (driver.Measurer)
    agents: dict[str, AgentConn]
    engine_args: list[str]
    timeout_s: float
    device: str | None
    unreachable: dict[str, str] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def lose(self, agent: AgentConn, why: str) -> None:
        if agent.dead is None:
            agent.dead = why
            self.unreachable[agent.host] = why
            try:
                agent.sock.close()
            except OSError:
                pass

    def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
        return measure_concurrently(self.job, jobs, round_no)

    def job(self, job: Job, round_no: int) -> Measurement:
        src_host, dst_host, pattern, phase = job
        src, dst = self.agents[src_host], self.agents[dst_host]

        def failed(why: str) -> Measurement:
            return Measurement(src_host, dst_host, pattern, None, phase=phase, round=round_no, error=why)

        if src.dead or dst.dead:
            return failed(f"unreachable: {src.dead or dst.dead}")
        args = [*self.engine_args, f"--pattern={pattern}"]
        job_id = next(self._ids)
        guard = self.timeout_s * 6 + 60
        bind = pick_address(dst, self.device)
        began = time.monotonic()
        try:
            dst.send({"type": "listen", "id": job_id, "bind": bind, "args": args, "timeout": self.timeout_s,
                      "guard": guard})
            reply = dst.recv(self.timeout_s + 15)
        except FabscopeError as exc:
            self.lose(dst, exc.message)
            return failed(exc.message)
        if reply.get("type") != "listening":
            return failed(f"the engine on {dst_host} did not start: {reply.get('error') or reply.get('message')}")
        listening = time.monotonic()
        try:
            src.send({"type": "connect", "id": job_id, "peer": f"{bind}:{reply['port']}", "args": args,
                      "timeout": self.timeout_s})
            result = src.recv(guard)
        except FabscopeError as exc:
            self.lose(src, exc.message)
            self._finish(dst)
            return failed(exc.message)
        answered = time.monotonic()
        self._finish(dst)
        error = result.get("error")
        out = measurement_from(src_host, dst_host, pattern, phase, round_no, list(result.get("records") or []),
                               str(error) if error else None)
        out.phases = {"server_start": listening - began, "client": answered - listening,
                      "server_end": time.monotonic() - answered}
        return out

    def _finish(self, dst: AgentConn) -> None:
        """The server engine's end (it stops by itself within --timeout once its client is gone)."""
        if dst.dead:
            return
        try:
            dst.recv(self.timeout_s * 2 + 30)
        except FabscopeError as exc:
            self.lose(dst, exc.message)


@dataclass
class MpiMeasurer:
    """--backend mpi: each job a 2-rank MPI job on (src, dst), the matrix's RunPlan with the pair's hosts
    (plan.py: the same launch as `fabscope run --backend mpi --hosts SRC,DST`)."""

    pipelined = True  # one job per call, from many threads (driver.Measurer)
    plan: RunPlan  # where: an MpiLaunch without hosts; each job places its pair
    unreachable: dict[str, str] = field(default_factory=dict)

    def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
        return measure_concurrently(self.job, jobs, round_no)

    def job(self, job: Job, round_no: int) -> Measurement:
        from ..launch import plan as planmod

        src, dst, pattern, phase = job
        launch = self.plan.where
        assert isinstance(launch, planmod.MpiLaunch)
        pair = dataclasses.replace(self.plan.with_options(pattern=pattern),
                                   where=dataclasses.replace(launch, hosts=(src, dst)))
        try:
            outcome = planmod.execute(pair)
        except FabscopeError as exc:
            if exc.exit_code == EXIT_USAGE:  # nothing can launch: the same for every pair
                raise FabscopeError(f"--backend mpi: {exc.message}", EXIT_USAGE) from exc
            # a host the launcher cannot start on: that pair fails, the rest goes on
            return Measurement(src, dst, pattern, None, phase=phase, round=round_no, error=exc.message)
        return measurement_from(src, dst, pattern, phase, round_no, [r.to_json() for r in outcome.records],
                                outcome.error)
