# SPDX-License-Identifier: BSD-3-Clause
"""Running the flows of a load at once through the matrix's agents (one per host, under the launcher).

Every host in the run gets one ``load`` message with the servers it hosts; once every server of
every host listens, every host gets ``load-go`` with its clients (the barrier: no client starts
before every server is up, and all start within the coordinator's few sends); then each host's
``load-result``. The agent's side is load/agent.py. A host that fails to listen aborts the run
before anything is sent (no flow runs on a half-built load); a host lost during the run costs its
own flows, named, and the rest are kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from ..errors import EXIT_PEER, FabscopeError
from ..matrix.coordinator import AgentConn
from ..matrix.execute import pick_address
from .model import FlowResult, flow_result
from .patterns import Flow

# The time every client engine gets to start, connect and set up before the flows begin together.
START_MARGIN_S = 2.0
START_PER_FLOW_S = 0.05


def run_flows(agents: dict[str, AgentConn], flows: Sequence[Flow], args_of: dict[str, list[str]], timeout_s: float,
              device: str | None, run_id: int) -> list[FlowResult]:
    """``args_of``: the engine arguments of each role ("load", "victim")."""
    guard = timeout_s * 6 + 60
    binds = {f.index: pick_address(agents[f.dst], device) for f in flows}
    hosts = sorted({h for f in flows for h in (f.src, f.dst)})
    for h in hosts:
        agent = agents[h]
        servers = [{"flow": f.index, "bind": binds[f.index], "args": args_of[f.role]} for f in flows if f.dst == h]
        agent.send({"type": "load", "id": run_id, "servers": servers, "timeout": timeout_s, "guard": guard})
    ports: dict[int, int] = {}
    failed: dict[str, str] = {}
    for h in hosts:
        try:
            ready = agents[h].recv(timeout_s + 30)
        except FabscopeError as exc:
            failed[h] = exc.message
            continue
        if ready.get("type") != "load-ready":
            failed[h] = f"answered {str(ready.get('type'))[:40]!r} ({ready.get('message') or 'no message'}): is the " \
                        "same fabscope installed there?"
            continue
        ports.update({int(k): int(v) for k, v in (ready.get("ports") or {}).items()})
        for k, why in (ready.get("errors") or {}).items():
            failed[h] = f"the server engine of flow {k} did not start: {why}"
    if failed:
        for h in hosts:
            if h not in failed:
                try:
                    agents[h].send({"type": "load-abort", "id": run_id})
                except FabscopeError:
                    pass
        raise FabscopeError("the load did not start: " + "; ".join(f"{h}: {why}" for h, why in failed.items()),
                            EXIT_PEER)
    # The barrier: every server listens. Every client then connects and sets up at once, and begins
    # (warmup, then the measured phase) at the same wall-clock second, the engine's --start-at: process
    # start-up on a busy host varies by a second or more, which would shift the flows' phases apart.
    start_at = time.time() + START_MARGIN_S + START_PER_FLOW_S * len(flows)
    for h in hosts:
        clients = [{"flow": f.index, "peer": f"{binds[f.index]}:{ports[f.index]}",
                    "args": [*args_of[f.role], f"--start-at={start_at:.3f}"]} for f in flows if f.src == h]
        agents[h].send({"type": "load-go", "id": run_id, "clients": clients})
    answers: dict[str, dict[str, Any]] = {}
    lost: dict[str, str] = {}

    def collect(h: str) -> None:
        try:
            answers[h] = agents[h].recv(guard)
        except FabscopeError as exc:
            lost[h] = exc.message

    threads = [threading.Thread(target=collect, args=(h,), daemon=True) for h in hosts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out: list[FlowResult] = []
    for f in flows:
        if f.src in lost:
            out.append(FlowResult(f, None, f"lost the agent on {f.src}: {lost[f.src]}"))
            continue
        got = (answers[f.src].get("flows") or {}).get(str(f.index)) or {}
        error = got.get("error")
        server = (answers.get(f.dst, {}).get("servers") or {}).get(str(f.index)) or {}
        if not error and server.get("error"):
            error = f"the server on {f.dst}: {server['error']}"
        result = flow_result(f, list(got.get("records") or []), str(error) if error else None)
        result.span = (float(got.get("started") or 0.0), float(got.get("ended") or 0.0))
        out.append(result)
    return out
