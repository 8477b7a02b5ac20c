# SPDX-License-Identifier: BSD-3-Clause
"""One matrix agent per host of a load run, started as the matrix starts them (matrix/launch.py:
mpirun, srun, or the site's own starter), checked in through the matrix's coordinator."""

from __future__ import annotations

import argparse
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import EXIT_PEER, FabscopeError
from ..matrix.coordinator import AgentConn, Coordinator
from ..matrix.launch import External, Launched, agent_argv, launcher_argv


@contextmanager
def agents_on(ns: argparse.Namespace, hosts: list[str]) -> Iterator[dict[str, AgentConn]]:
    """Every host's agent, or an error naming the missing ones: a load with a host missing is not the
    load that was asked for (no silent fallback to fewer senders)."""
    if ns.coordinator:
        from ..session import control

        bind, port = control.split_hostport(ns.coordinator, 0)
        advertise = bind
    else:
        bind, port, advertise = "0.0.0.0", 0, socket.gethostname()
    token, made_token = None, False
    if ns.launcher == "external":
        from ..matrix.agent import create_token_file, read_token_file

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
            print(f"fabscope load: waiting {ns.connect_timeout:g} s for one agent on each of {', '.join(hosts)}; "
                  f"start it there with: {' '.join(agent)}", file=sys.stderr, flush=True)
        else:
            argv, env = launcher_argv(ns.launcher, hosts, agent, ns.connect_timeout)
            launched = Launched(argv, env, coord.token)
        agents = coord.gather(ns.connect_timeout, launched.alive)
        missing = [h for h in hosts if h not in agents]
        if missing:
            said = launched.output().strip()[-1500:] or "nothing"
            refused = f"; refused: {'; '.join(coord.refused)}" if coord.refused else ""
            raise FabscopeError(
                f"{len(agents)} of {len(hosts)} load agents checked in within {ns.connect_timeout:g} s (missing: "
                f"{', '.join(missing)}){refused}. The launcher (`{' '.join(argv[:6])} ...`) said: {said}. Check that "
                f"`{ns.launcher}` can start processes on these hosts and that they can reach this host at "
                f"{advertise}:{coord.port} (--coordinator ADDR)", EXIT_PEER)
        yield agents
    finally:
        coord.close()
        if launched is not None:
            launched.stop()
        if made_token:
            ns.token_file.unlink(missing_ok=True)
