# SPDX-License-Identifier: BSD-3-Clause
"""Starting engines: both ends on this host (loopback), or the client against `fabscope serve`.

The runner never times anything: it starts processes, streams their JSON lines, and enforces an
outer deadline in case an engine itself misbehaves."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import EXIT_MEASURE, EXIT_PEER, FabscopeError
from ..results import RecordError, Result, parse_record
from ..results.collective import COLLECTIVE_SCHEMA, parse_collective
from ..session.auth import Key
from ..session.control import engine_session_args, open_session_keyed
from .engine import engine_option, engine_path, process_option_names
from .mpirun import (
    KILL_AFTER_S,
    build_mpi_command,
    describe_launch,
    device_mapping,
    explain_launch_failure,
    placement_warnings,
    strip_launcher_boxes,
)

Record = dict[str, Any]  # a raw engine record, before parse_record
OnResult = Callable[[Result], None]



@dataclass
class RunOutcome:
    records: list[Result] = field(default_factory=list)
    error: str | None = None
    exit_code: int = 0
    server_stderr: str = ""
    # What an engine that succeeded still had to say on stderr ("fabscope-engine...: note: ..."),
    # e.g. an MPI rank that exited past its MPI_Finalize deadline: shown, never swallowed.
    notes: list[str] = field(default_factory=list)


def _placement_args(engine_args: Sequence[str]) -> tuple[list[str], list[str]]:
    """(server, client) arguments that place two engines of this host on different CPUs: each its own
    --cpu-slot of the CPUs --cpu chooses (auto: its device's NUMA node where the host has several,
    else the CPUs this process may use). A --cpu auto/near/far the user gave applies to both ends; a
    CPU number to the client alone (the server then takes the first candidate of auto)."""
    if len(os.sched_getaffinity(0)) < 2:
        return [], []
    asked = engine_option(engine_args, "cpu")
    server = ["--cpu-slot", "0"]
    if asked in ("auto", "near", "far"):
        server += ["--cpu", asked]
    client = [] if engine_option(engine_args, "cpu-slot") is not None else ["--cpu-slot", "1"]
    return server, client


_ENGINE_LINE = re.compile(r'"schema"\s*:\s*"fabscope\.')  # in every engine output line (records, errors)


def _shown_line(line: str, keep: int = 60) -> str:
    line = line.strip()
    return line if len(line) <= 2 * keep else f"{line[:keep]} ... {line[-keep:]}"


_ENGINE_NOTE = re.compile(r"^fabscope-engine[\w-]*: note: (.*)$", re.MULTILINE)
# The MPI engine's own note when a rank exits past its MPI_Finalize deadline (engine/src/mpi/main_mpi.c).
_FINALIZE_DEADLINE = re.compile(r"^rank \d+: MPI_Finalize did not return within \d+ s")


def read_line_within(stream: IO[str], deadline: float) -> str | None:
    """One line of a child's output, or None once `deadline` (time.monotonic()) has passed."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            return stream.readline()


def _server_args(args: Sequence[str]) -> list[str]:
    """The loopback server's share of the client's options: both ends are this host, so it gets the
    local ones too (device, GID index, ...) except those of one process (the table's `process` rows)."""
    per_process = process_option_names()
    out: list[str] = []
    skip_next = False
    for i, arg in enumerate(args):
        if skip_next:
            skip_next = False
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else ""
        if name in per_process:
            skip_next = "=" not in arg and i + 1 < len(args) and not args[i + 1].startswith("--")
            continue
        out.append(arg)
    return out


def stream_client(
    cmd: Sequence[str],
    timeout_s: float,
    on_record: OnResult | None,
    env: dict[str, str] | None = None,
    amend: Callable[[Record], None] | None = None,
    pass_fds: Sequence[int] = (),
    guard_s: float | None = None,
    schema: str = "fabscope.result/",
    parse: Callable[[Record], Any] = parse_record,
) -> RunOutcome:
    """Runs a client engine, collecting typed results as they arrive and the final error if any.
    ``amend`` adds what only the front end knows (the MPI launcher) to the raw record before it is
    parsed; a record that fails validation ends the run with the field named (never a partial row).

    The engine enforces --timeout on every wait, and a launcher runs under `timeout`; ``guard_s``
    (silence for that long) only catches what escaped both, so it is generous and must exceed the
    launcher's own deadline. The command runs in a process group of its own, and stopping it stops
    the group: killing `timeout` alone would leave its mpirun or srun, and the ranks they wait
    for, holding the pipes open for ever (a suite under srun hung so for 10 minutes)."""
    outcome = RunOutcome()
    guard = guard_s if guard_s is not None else max(60.0, timeout_s * 6)
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            pass_fds=list(pass_fds), start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        last = time.monotonic()
        while True:
            line = read_line_within(proc.stdout, last + guard)
            if line is None:
                stop_process_group(proc)
                outcome.error = f"the engine printed nothing for {guard:.0f} s and was stopped"
                outcome.exit_code = EXIT_MEASURE
                break
            if not line:
                break
            last = time.monotonic()
            try:
                obj = json.loads(line)
            except ValueError:
                # A line that is not JSON is a library's chatter, unless it holds an engine line: then
                # it came damaged (a launcher mixed another process's output into it) and a size's
                # result would be lost without a word.
                if _ENGINE_LINE.search(line) and not outcome.error:
                    outcome.error = (f"an engine line came damaged and was lost ({_shown_line(line)}): something "
                                     "else wrote into the engine's output")
                    outcome.exit_code = EXIT_MEASURE
                continue
            if obj.get("schema", "").startswith("fabscope.error/"):
                outcome.error = str(obj.get("message"))
                outcome.exit_code = int(obj.get("exit_code", EXIT_MEASURE))
            elif obj.get("schema", "").startswith(schema):
                if amend:
                    amend(obj)
                try:
                    result = parse(obj)
                except RecordError as exc:
                    if not outcome.error:
                        outcome.error = f"the engine printed a result that is not valid: {exc}"
                        outcome.exit_code = EXIT_MEASURE
                    continue
                outcome.records.append(result)
                if on_record:
                    on_record(result)
        # stdout is closed; whatever still holds stderr gets a few seconds, then the group goes.
        stderr = _read_rest(proc, _STDERR_GRACE_S)
        try:
            rc = proc.wait(timeout=_STDERR_GRACE_S)
        except subprocess.TimeoutExpired:
            stop_process_group(proc)
            rc = proc.wait()
    except BaseException:
        stop_process_group(proc)  # Ctrl-C or a bug here: never leave a launcher or its ranks behind
        raise
    finally:
        proc.stdout.close()
        proc.stderr.close()
    outcome.notes = [m.group(1) for m in _ENGINE_NOTE.finditer(stderr)]
    if rc != 0 and not outcome.error and outcome.records and any(map(_FINALIZE_DEADLINE.search, outcome.notes)):
        # A rank left MPI_Finalize at its deadline (an MPI library's shutdown bug, after the measurement),
        # and the launcher failed the job for it: MPICH's hydra kills the other rank when one exits
        # without finalizing. Every result came and no engine reported an error (a failed engine prints
        # its error line before it finalizes), so the run stands; the user is told why the launcher said
        # otherwise. Sizes that never came are still caught by the caller.
        outcome.notes.append(f"the launcher exited with {rc} because a rank left MPI_Finalize at its deadline; "
                             "every result had been printed and no engine reported an error, so the run stands")
        rc = 0
    if rc != 0 and not outcome.error:
        outcome.error = stderr.strip().removeprefix("fabscope-engine: ") or f"engine exited with {rc}"
    if rc != 0:
        outcome.exit_code = rc if rc > 0 else EXIT_MEASURE
    elif outcome.error and not outcome.exit_code:
        outcome.exit_code = EXIT_MEASURE
    return outcome


_STDERR_GRACE_S = 10.0
_TERM_GRACE_S = 3.0


def stop_process_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to the command's process group (srun cancels its job step on it), SIGKILL to what is
    left of the group after a grace period. The group is the command's own (start_new_session),
    never ours; the command itself is reaped so that it does not count as left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        until = time.monotonic() + _TERM_GRACE_S
        while time.monotonic() < until:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _read_rest(proc: subprocess.Popen[str], grace_s: float) -> str:
    """The rest of stderr, read until EOF or grace_s; past it the group is stopped and what came is kept."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    chunks: list[bytes] = []
    deadline = time.monotonic() + grace_s
    stopped = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            if stopped:
                break
            stop_process_group(proc)
            stopped, deadline = True, time.monotonic() + grace_s
            continue
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def run_loopback(
    engine_args: Sequence[str],
    timeout_s: float = 10.0,
    on_record: OnResult | None = None,
    pin: bool = True,
    env: dict[str, str] | None = None,
    amend: Callable[[Record], None] | None = None,
) -> RunOutcome:
    """Both engines on this host over 127.0.0.1, on different CPUs where possible (_placement_args)."""
    engine = str(engine_path())
    server_place, client_place = _placement_args(engine_args) if pin else ([], [])
    server_cmd = [engine, "--listen", "127.0.0.1:0", "--timeout", str(timeout_s), *_server_args(engine_args),
                  *server_place]
    with subprocess.Popen(
        server_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as server:
        assert server.stdout is not None and server.stderr is not None
        try:
            line = read_line_within(server.stdout, time.monotonic() + timeout_s)
            if not line:
                server.kill()
                err = server.stderr.read().strip().removeprefix("fabscope-engine: ")
                code = server.wait()
                raise FabscopeError(err or "the server engine did not start", code if code > 0 else EXIT_MEASURE)
            port = int(json.loads(line)["port"])
            client_cmd = [engine, "--peer", f"127.0.0.1:{port}", "--timeout", str(timeout_s), *engine_args,
                          *client_place]
            outcome = stream_client(client_cmd, timeout_s, on_record, env, amend=amend)
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
    on_record: OnResult | None = None,
    env: dict[str, str] | None = None,
    key: Key | None = None,
    amend: Callable[[Record], None] | None = None,
) -> RunOutcome:
    """The client engine against `fabscope serve` (or a listening engine) on another host. The
    hello and authentication happen here (control.open_session, the one client-side owner of
    them); the engine gets the authenticated socket (`--peer-fd N --session-open 1`).
    FabscopeError: the session could not be opened (exit 3). The caller checks the options first
    (engine.validate_args, as `fabscope run` does), so that a usage error never touches the network."""
    args = ["--timeout", str(timeout_s), *engine_args]
    sock, session = open_session_keyed(peer, "engine", key, timeout_s)
    key_args, key_fds = engine_session_args(session)  # every frame after the welcome is MACed
    with sock:
        fd = sock.fileno()
        cmd = [str(engine_path()), "--peer-fd", str(fd), "--session-open", "1", *key_args, *args]
        try:
            outcome = stream_client(cmd, timeout_s, on_record, env, amend=amend, pass_fds=[fd, *key_fds])
        finally:
            for kfd in key_fds:
                os.close(kfd)
    if outcome.exit_code == 0 and not outcome.records:
        outcome.exit_code = EXIT_PEER
        outcome.error = outcome.error or f"no results came back from {peer}"
    return outcome


def run_mpi(
    engine_args: list[str],
    timeout_s: float = 10.0,
    on_record: OnResult | None = None,
    mpi: str = "openmpi",
    launcher: str = "mpirun",
    mca: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    hosts: Sequence[str] | None = None,
    ppn: int | None = None,
) -> RunOutcome:
    """Both ranks of the MPI engine under `launcher`; rank 0 prints records like a client engine.
    With `ppn` a collective instead: ppn ranks on each of `hosts` (or on this host), whose records
    are results.collective's.
    `hosts` [H1, H2] puts rank 0 on H1 and rank 1 on H2 (mpirun.build_mpi_command); without it
    both run on this host (one node under srun). Each record gets transport.launcher (only the
    front end knows who started the ranks: mpirun.describe_launch, with the MCA parameters, the
    request-relevant environment and the --device mapping), a warning when a rank ran on another
    host than asked, and a launcher-level failure is said plainly. ValueError / FileNotFoundError
    (exit 2) or mpirun.NodesUnavailable (exit 3): nothing launched."""
    cmd, full_env = build_mpi_command(engine_args, mpi=mpi, launcher=launcher, mca=mca, env=env, hosts=hosts,
                                      ppn=ppn)
    launch = describe_launch(cmd, full_env, device_mapping(mpi, engine_args, mca, env))

    def with_launcher(rec: Record) -> None:
        rec.setdefault("transport", {})["launcher"] = launch
        rec.setdefault("warnings", []).extend(placement_warnings(rec, launch.get("hosts")))

    started = time.monotonic()
    # The launcher's `timeout` ends it first; the guard is only for what outlives that.
    deadline = launch.get("deadline_s")
    guard = max(60.0, timeout_s * 6, float(deadline) + KILL_AFTER_S + 10 if deadline else 0.0)
    collective = ppn is not None
    outcome = stream_client(cmd, timeout_s, on_record, env=full_env, amend=with_launcher, guard_s=guard,
                            schema=COLLECTIVE_SCHEMA if collective else "fabscope.result/",
                            parse=parse_collective if collective else parse_record)
    if outcome.error and outcome.exit_code:
        explained = explain_launch_failure(launch, outcome.exit_code, outcome.error, time.monotonic() - started)
        if explained:
            outcome.error, outcome.exit_code = explained
        else:
            outcome.error = strip_launcher_boxes(outcome.error)
    return outcome
