# SPDX-License-Identifier: BSD-3-Clause
"""Starting one matrix agent per host with the cluster's own launcher (the only way fabscope
starts a process on another host: no ssh fan-out, no daemon of ours).

- mpirun (Open MPI): `mpirun -H h1:1,...,hN:1 -np N --map-by node` with the token exported by
  name (-x), and told not to tear the other agents down when one host dies
  (orte_abort_on_non_zero_status 0), so a lost host costs its own pairs only;
- srun: `srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=...` with --no-kill and
  --kill-on-bad-exit=0 for the same reason, and --immediate so a busy cluster is an answer, not a wait.

- external: the site's own starter (pdsh, clush, flux, a batch script, a test harness) runs the
  agent on each host; fabscope starts nothing, says what to run, and waits --connect-timeout for it.
  The token is then in a file (--token-file) the starter gives to the agents.

The agent command is this Python running `fabscope matrix-agent`: the same installation path on
every host, as the MPI engines themselves need.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..errors import EXIT_PEER, EXIT_USAGE, FabscopeError
from ..launch.mpirun import REQUEST_ENV_PREFIXES
from .agent import TOKEN_ENV

if TYPE_CHECKING:
    from .coordinator import AgentConn

LAUNCHERS = ("mpirun", "srun", "external")


def agent_argv(coordinator: str, connect_timeout_s: float) -> list[str]:
    return [sys.executable, "-m", "fabscope", "matrix-agent", "--coordinator", coordinator,
            "--connect-timeout", f"{connect_timeout_s:g}"]


def launcher_argv(launcher: str, hosts: Sequence[str], agent: Sequence[str], wait_s: float) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    n = len(hosts)
    if launcher == "mpirun":
        binary = "mpirun.openmpi" if shutil.which("mpirun.openmpi") else "mpirun"
        if shutil.which(binary) is None:
            raise FabscopeError("--launcher mpirun: mpirun is not on PATH; install Open MPI (openmpi-bin) or use "
                                "--launcher srun", EXIT_USAGE)
        if os.geteuid() == 0:
            env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        argv = [binary, "-H", ",".join(f"{h}:1" for h in hosts), "-np", str(n), "--map-by", "node",
                "--mca", "orte_abort_on_non_zero_status", "0", "-x", TOKEN_ENV, "-x", "PATH"]
        if "PYTHONPATH" in env:
            argv += ["-x", "PYTHONPATH"]
        # What picks the device or transport (UCX_NET_DEVICES, FI_PROVIDER, ...) must reach the agents on
        # the other hosts too, as for `run --backend mpi` (Open MPI forwards OMPI_MCA_* itself).
        argv += [a for k in env if k.startswith(REQUEST_ENV_PREFIXES) and not k.startswith("OMPI_MCA_")
                 for a in ("-x", k)]
        return argv + list(agent), env
    if launcher == "srun":
        if shutil.which("srun") is None:
            raise FabscopeError("--launcher srun: srun is not on PATH; run on a Slurm cluster node (slurm-client) or "
                                "use --launcher mpirun", EXIT_USAGE)
        argv = ["srun", f"--job-name=fabscope-matrix-{os.getpid()}", f"--nodes={n}", f"--ntasks={n}",
                "--ntasks-per-node=1", f"--nodelist={','.join(hosts)}", "--no-kill", "--kill-on-bad-exit=0",
                f"--immediate={max(1, math.ceil(wait_s))}", "--export=ALL"]
        return argv + list(agent), env
    raise FabscopeError(f"--launcher {launcher}: choose one of {', '.join(LAUNCHERS)}", EXIT_USAGE)


class Launched:
    """The launcher process, its output drained in the background (kept: the last lines)."""

    def __init__(self, argv: list[str], env: dict[str, str], token: str) -> None:
        env = dict(env)
        env[TOKEN_ENV] = token
        self.argv = argv
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
        self.tail: deque[str] = deque(maxlen=40)
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.tail.append(line.rstrip())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return "\n".join(self.tail)

    def stop(self, grace_s: float = 10.0) -> int:
        """Wait for the launcher (the agents were told bye); stop its process group if it lingers."""
        from ..launch.runner import stop_process_group

        try:
            return self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            stop_process_group(self.proc)
        return self.proc.wait()


class External:
    """--launcher external: nothing started here; the agents come from the site's own starter."""

    def __init__(self, agent: Sequence[str]) -> None:
        self.argv = list(agent)

    def alive(self) -> bool:
        return True  # only the deadline ends the wait: nobody here can tell that no agent is coming

    def output(self) -> str:
        return f"nothing: --launcher external, so the agents were yours to start (`{' '.join(self.argv)}`)"

    def stop(self, grace_s: float = 10.0) -> int:
        return 0


@contextmanager
def agents_on(ns: argparse.Namespace, hosts: list[str], command: str, need: int) -> Iterator[dict[str, AgentConn]]:
    """One agent per host started by ``ns.launcher`` (mpirun, srun, external: ``ns.coordinator``,
    ``ns.token_file``, ``ns.connect_timeout``) and checked in through a Coordinator; yields the ones
    that came, or fails naming the missing ones when fewer than ``need`` did (the matrix runs on the
    hosts that came, at least two; a load needs every host: no silent fallback to fewer senders).
    The coordinator, the launcher and a token file made here are gone when the block ends."""
    from .coordinator import Coordinator

    if ns.coordinator:
        from ..session import control

        bind, port = control.split_hostport(ns.coordinator, 0)
        advertise = bind
    else:
        bind, port, advertise = "0.0.0.0", 0, socket.gethostname()
    token, made_token = None, False
    if ns.launcher == "external":
        from .agent import create_token_file, read_token_file

        made_token = not ns.token_file.exists()
        token = create_token_file(ns.token_file) if made_token else read_token_file(ns.token_file)
    launched: Launched | External | None = None
    try:
        coord = Coordinator(hosts, bind, port, token)
    except BaseException:
        if made_token:
            ns.token_file.unlink(missing_ok=True)
        raise
    try:
        agent = agent_argv(f"{advertise}:{coord.port}", ns.connect_timeout)
        if ns.launcher == "external":
            agent += ["--token-file", str(ns.token_file)]
            launched = External(agent)
            argv = launched.argv
            print(f"fabscope {command}: waiting {ns.connect_timeout:g} s for one agent on each of {', '.join(hosts)}; "
                  f"start it there with: {' '.join(agent)}", file=sys.stderr, flush=True)
        else:
            argv, env = launcher_argv(ns.launcher, hosts, agent, ns.connect_timeout)
            launched = Launched(argv, env, coord.token)
        agents = coord.gather(ns.connect_timeout, launched.alive)
        missing = [h for h in hosts if h not in agents]
        if len(agents) < need:
            said = launched.output().strip()[-1500:] or "nothing"
            refused = f"; refused: {'; '.join(coord.refused)}" if coord.refused else ""
            raise FabscopeError(
                f"only {len(agents)} of {len(hosts)} {command} agents checked in "
                f"within {ns.connect_timeout:g} s (missing: {', '.join(missing)}){refused}. The launcher "
                f"(`{' '.join(argv[:6])} ...`) said: {said}. Check that `{ns.launcher}` can start processes on these "
                f"hosts and that they can reach this host at {advertise}:{coord.port} (--coordinator ADDR)", EXIT_PEER)
        yield agents
    finally:
        coord.close()
        if launched is not None:
            launched.stop()
        if made_token:
            ns.token_file.unlink(missing_ok=True)
