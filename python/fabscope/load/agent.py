# SPDX-License-Identifier: BSD-3-Clause
"""The agent's share of a load run: many engines on this host at once, started together.

The matrix agent (matrix/agent.py) hands a ``load`` message here. The exchange with the
coordinator, all on the agent's one connection:

1. ``load`` {id, servers: [{flow, bind, args}], clients: N, timeout}: start every server engine
   this host has in the run (``fabscope-engine --listen ADDR:0``), answer ``load-ready`` with each
   one's port (or its error);
2. ``load-go`` {id, clients: [{flow, peer, args}]}: the barrier. The coordinator sends it to every
   host only once every server of the run listens; each client engine starts at once, in a thread
   of its own, and runs the same --duration as every other;
   ``load-abort``: a host failed to listen: the servers here are stopped, nothing runs;
3. ``load-result`` {id, flows: {flow: {records, error, exit_code}}, servers: {flow: {rc, error}}}
   once every engine here has ended (each within its --timeout; a guard stops one that escaped it).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import FabscopeError
from ..launch.runner import read_line_within, stop_process_group, stream_client

Send = Callable[[dict[str, Any]], None]
Recv = Callable[[float], dict[str, Any]]


def _engine(mode: list[str], args: list[str], timeout_s: float) -> list[str]:
    from ..launch.engine import engine_path

    return [str(engine_path()), *mode, "--timeout", f"{timeout_s:g}", *args, "--format", "json"]


def _error_text(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    return proc.stderr.read().strip().removeprefix("fabscope-engine: ")


def serve_load(msg: dict[str, Any], send: Send, recv: Recv) -> None:
    run_id = msg.get("id")
    timeout_s = float(msg.get("timeout", 10))
    guard_s = float(msg.get("guard", timeout_s * 6 + 60))
    servers: dict[str, subprocess.Popen[str]] = {}
    ports: dict[str, int] = {}
    errors: dict[str, str] = {}
    try:
        for item in msg.get("servers") or []:
            flow = str(item["flow"])
            cmd = _engine(["--listen", f"{item['bind']}:0"], list(item.get("args") or []), timeout_s)
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            servers[flow] = proc
        deadline = time.monotonic() + timeout_s
        for flow, proc in servers.items():
            assert proc.stdout is not None
            try:
                line = read_line_within(proc.stdout, deadline)
                ports[flow] = int(json.loads(line)["port"]) if line else -1
            except (ValueError, KeyError, TypeError):
                ports[flow] = -1
            if ports[flow] < 0:
                del ports[flow]
                stop_process_group(proc)
                errors[flow] = _error_text(proc) or "the server engine did not start"
        send({"type": "load-ready", "id": run_id, "ports": ports, "errors": errors})
        go = recv(timeout_s + 60)
        if go.get("type") != "load-go":
            return  # load-abort (or anything else): the finally stops the servers
        results: dict[str, dict[str, Any]] = {}

        def client(flow: str, cmd: list[str]) -> None:
            began = time.time()
            try:
                outcome = stream_client(cmd, timeout_s, None, guard_s=guard_s)
            except Exception as exc:  # reported as the flow's error, never a flow silently missing
                results[flow] = {"records": [], "error": f"the client engine could not run: {exc}", "exit_code": 1}
                return
            results[flow] = {"records": [r.to_json() for r in outcome.records], "error": outcome.error,
                             "exit_code": outcome.exit_code, "started": began, "ended": time.time()}

        # The commands are built here, before the threads: finding the engine reads sysconfig, which
        # is not thread-safe (two threads at once lost a flow to AttributeError: 'userbase').
        commands = [(str(item["flow"]), _engine(["--peer", str(item["peer"])], list(item.get("args") or []), timeout_s))
                    for item in go.get("clients") or []]
        threads = [threading.Thread(target=client, args=item, daemon=True) for item in commands]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ended: dict[str, dict[str, Any]] = {}
        for flow, proc in servers.items():
            if flow in errors:
                continue
            try:
                rc = proc.wait(timeout=guard_s)
            except subprocess.TimeoutExpired:
                stop_process_group(proc)
                rc = proc.wait()
            ended[flow] = {"rc": rc, "error": (_error_text(proc) or None) if rc else None}
        send({"type": "load-result", "id": run_id, "flows": results, "servers": ended})
    except FabscopeError:
        return  # the coordinator went away: nothing to report to
    finally:
        for proc in servers.values():
            if proc.poll() is None:
                stop_process_group(proc)
