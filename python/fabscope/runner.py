"""Starting engines: both ends on this host (loopback), or the client against `fabscope serve`.

The runner never times anything: it starts processes, streams their JSON lines, and enforces an
outer deadline in case an engine itself misbehaves."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .engine import engine_path
from .errors import EXIT_MEASURE, EXIT_PEER, FabscopeError
from .mpirun import build_mpi_command, describe_launch, explain_launch_failure, strip_launcher_boxes

Record = dict[str, Any]

# Engine options that describe one host only; in loopback both ends are this host, so the server
# gets them too (device, GID index, ...) except the ones that must differ per process.
_PER_PROCESS = {"cpu", "format", "bind", "peer", "listen", "control-fd", "session-open"}


@dataclass
class RunOutcome:
    records: list[Record] = field(default_factory=list)
    error: str | None = None
    exit_code: int = 0
    server_stderr: str = ""


def _pin_cpus() -> tuple[int | None, int | None]:
    """Two different CPUs for server and client when this process may use two."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2:
        return cpus[0], cpus[1]
    return None, None


def _read_line(stream: IO[str], deadline: float) -> str | None:
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            return stream.readline()


def _server_args(args: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip_next = False
    for i, arg in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        if name in _PER_PROCESS:
            skip_next = "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(arg)
    return out


def stream_client(
    cmd: Sequence[str],
    timeout_s: float,
    on_record: Callable[[Record], None] | None,
    env: dict[str, str] | None = None,
) -> RunOutcome:
    """Runs a client engine, collecting records as they arrive and the final error if any."""
    outcome = RunOutcome()
    with subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        # The engine enforces --timeout on every wait; this outer guard only catches an engine
        # that stops printing for far longer than that (a bug), so it is generous.
        guard = max(60.0, timeout_s * 6)
        last = time.monotonic()
        while True:
            line = _read_line(proc.stdout, last + guard)
            if line is None:
                proc.kill()
                outcome.error = f"the engine printed nothing for {guard:.0f} s and was stopped"
                outcome.exit_code = EXIT_MEASURE
                break
            if not line:
                break
            last = time.monotonic()
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("schema", "").startswith("fabscope.error/"):
                outcome.error = str(obj.get("message"))
                outcome.exit_code = int(obj.get("exit_code", EXIT_MEASURE))
            elif obj.get("schema", "").startswith("fabscope.result/"):
                outcome.records.append(obj)
                if on_record:
                    on_record(obj)
        stderr = proc.stderr.read()
        rc = proc.wait()
        if rc != 0 and not outcome.error:
            outcome.error = stderr.strip().removeprefix("fabscope-engine: ") or f"engine exited with {rc}"
        if rc != 0:
            outcome.exit_code = rc if rc > 0 else EXIT_MEASURE
    return outcome


def run_loopback(
    engine_args: Sequence[str],
    timeout_s: float = 10.0,
    on_record: Callable[[Record], None] | None = None,
    pin: bool = True,
    env: dict[str, str] | None = None,
) -> RunOutcome:
    """Both engines on this host over 127.0.0.1, pinned to different CPUs where possible."""
    engine = str(engine_path())
    server_cpu, client_cpu = _pin_cpus() if pin else (None, None)
    server_cmd = [engine, "--listen", "127.0.0.1:0", "--timeout", str(timeout_s), *_server_args(engine_args)]
    if server_cpu is not None:
        server_cmd += ["--cpu", str(server_cpu)]
    with subprocess.Popen(
        server_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as server:
        assert server.stdout is not None and server.stderr is not None
        try:
            line = _read_line(server.stdout, time.monotonic() + timeout_s)
            if not line:
                server.kill()
                err = server.stderr.read().strip().removeprefix("fabscope-engine: ")
                code = server.wait()
                raise FabscopeError(err or "the server engine did not start", code if code > 0 else EXIT_MEASURE)
            port = int(json.loads(line)["port"])
            client_cmd = [engine, "--peer", f"127.0.0.1:{port}", "--timeout", str(timeout_s), *engine_args]
            if client_cpu is not None and not any(a.startswith("--cpu") for a in engine_args):
                client_cmd += ["--cpu", str(client_cpu)]
            outcome = stream_client(client_cmd, timeout_s, on_record, env)
            try:
                server.wait(timeout=timeout_s + 5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            outcome.server_stderr = server.stderr.read()
            return outcome
        finally:
            if server.poll() is None:
                server.kill()


def run_peer(
    engine_args: Sequence[str],
    peer: str,
    timeout_s: float = 10.0,
    on_record: Callable[[Record], None] | None = None,
    env: dict[str, str] | None = None,
) -> RunOutcome:
    """The client engine against `fabscope serve` (or a listening engine) on another host."""
    cmd = [str(engine_path()), "--peer", peer, "--timeout", str(timeout_s), *engine_args]
    outcome = stream_client(cmd, timeout_s, on_record, env)
    if outcome.exit_code == 0 and not outcome.records:
        outcome.exit_code = EXIT_PEER
        outcome.error = outcome.error or f"no results came back from {peer}"
    return outcome


def run_mpi(
    engine_args: list[str],
    timeout_s: float = 10.0,
    on_record: Callable[[Record], None] | None = None,
    mpi: str = "openmpi",
    launcher: str = "mpirun",
    mca: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> RunOutcome:
    """Both ranks of the MPI engine under `launcher`; rank 0 prints records like a client engine.
    Each record gets transport.launcher (only the front end knows who started the ranks), and a
    launcher-level failure is said plainly. ValueError / FileNotFoundError: nothing launched."""
    cmd, full_env = build_mpi_command(engine_args, mpi=mpi, launcher=launcher, mca=mca, env=env)
    launch = describe_launch(cmd, full_env)

    def with_launcher(rec: Record) -> None:
        rec.setdefault("transport", {})["launcher"] = launch
        if on_record:
            on_record(rec)

    outcome = stream_client(cmd, timeout_s, with_launcher, env=full_env)
    if outcome.error and outcome.exit_code:
        explained = explain_launch_failure(launch, outcome.exit_code, outcome.error)
        if explained:
            outcome.error, outcome.exit_code = explained
        else:
            outcome.error = strip_launcher_boxes(outcome.error)
    return outcome
