# SPDX-License-Identifier: BSD-3-Clause
"""The coordinator and real agents on loopback (no launcher, no namespaces): the one-time token,
a silent connection that must not block others, a pair measured by two agents' engines, and an
agent that stops answering becoming unreachable within its deadline."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO
from fabscope.matrix.agent import TOKEN_ENV
from fabscope.matrix.coordinator import Coordinator
from fabscope.matrix.execute import AgentMeasurer


def start_agent(coord: Coordinator, token: str, rank: int) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMPI_COMM_WORLD_RANK=str(rank))
    env[TOKEN_ENV] = token
    return subprocess.Popen([sys.executable, "-m", "fabscope", "matrix-agent", "--coordinator",
                             f"127.0.0.1:{coord.port}", "--connect-timeout", "10"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def agents() -> Iterator[tuple[Coordinator, list[subprocess.Popen[str]]]]:
    # Names the agents do not have (they all run on this host): the launcher's rank places them.
    coord = Coordinator(["h0", "h1"], "127.0.0.1", 0)
    procs: list[subprocess.Popen[str]] = []
    try:
        yield coord, procs
    finally:
        coord.close()
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_wrong_token_is_refused_and_a_silent_connection_blocks_nobody(
        agents: tuple[Coordinator, list[subprocess.Popen[str]]]) -> None:
    _, procs = agents
    coord = Coordinator(["h0"], "127.0.0.1", 0)
    silent = None
    try:
        # The wrong token first, on its own: accepted and refused before anyone else comes (had
        # the right agent been first, the coordinator would have stopped accepting, and the
        # wrong one would only have been told that nobody listens).
        procs.append(start_agent(coord, "not-the-token", 0))
        assert coord.gather(30, lambda: procs[0].poll() is None) == {}
        assert procs[0].wait(timeout=10) == 3
        assert "refused this agent: wrong or missing token" in procs[0].stderr.read()  # type: ignore[union-attr]
        assert any("wrong or missing token" in r for r in coord.refused)
        silent = socket.create_connection(("127.0.0.1", coord.port))  # says nothing, ever
        procs.append(start_agent(coord, coord.token, 0))
        t0 = time.monotonic()
        found = coord.gather(30)
        took = time.monotonic() - t0
        assert list(found) == ["h0"]
        assert took < 20, f"the silent connection held the others up: {took:.1f} s"
    finally:
        if silent is not None:
            silent.close()
        coord.close()


def test_two_agents_measure_a_pair_then_one_stops_answering(
        agents: tuple[Coordinator, list[subprocess.Popen[str]]]) -> None:
    coord, procs = agents
    procs += [start_agent(coord, coord.token, 0), start_agent(coord, coord.token, 1)]
    found = coord.gather(20)
    assert sorted(found) == ["h0", "h1"]
    assert found["h0"].local_address == "127.0.0.1"
    measurer = AgentMeasurer(found, ["--sizes=64K", "--iters=200", "--warmup=10"], 2.0, None)
    [m] = measurer.measure([("h0", "h1", "bw", "screen")], 0)
    assert m.error is None and m.value is not None and m.value > 0.05, m
    assert m.result is not None and m.result.raw["schema"] == "fabscope.result/1"
    assert m.verdict == "not-requested"  # no --device: the path says where the bytes went, no verdict asked
    [lat] = measurer.measure([("h1", "h0", "lat", "screen")], 1)
    assert lat.value is not None and 0 < lat.value < 50_000

    os.kill(procs[1].pid, signal.SIGSTOP)  # h1's agent hangs (not dead: its socket stays open)
    try:
        t0 = time.monotonic()
        [hung] = measurer.measure([("h0", "h1", "bw", "screen")], 2)
        took = time.monotonic() - t0
    finally:
        os.kill(procs[1].pid, signal.SIGCONT)
    assert hung.value is None and "no answer from the agent on h1" in str(hung.error)
    assert list(measurer.unreachable) == ["h1"]
    assert took < 2.0 + 15 + 5  # the listen deadline: --timeout + 15 s
    [skipped] = measurer.measure([("h1", "h0", "bw", "screen")], 3)
    assert skipped.error is not None and skipped.error.startswith("unreachable")


def test_an_agent_started_before_its_coordinator_keeps_trying(tmp_path: Path) -> None:
    """--launcher external: a site's starter may run the agents before `fabscope matrix` listens.
    The agent, with its token from --token-file, tries again until its --connect-timeout: the
    coordinator starts only after the agent said two refused tries (one line each, ~5 s apart)."""
    from fabscope.matrix.agent import create_token_file

    token_file = tmp_path / "token"
    token = create_token_file(token_file)
    with socket.socket() as probe:  # a port nobody listens on yet
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMPI_COMM_WORLD_RANK="0")
    env.pop(TOKEN_ENV, None)
    agent = subprocess.Popen([sys.executable, "-m", "fabscope", "matrix-agent", "--coordinator", f"127.0.0.1:{port}",
                              "--token-file", str(token_file), "--connect-timeout", "40"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stderr = agent.stderr
    assert stderr is not None
    said: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [said.put(line) for line in stderr], daemon=True)
    reader.start()
    try:
        retry = f"fabscope matrix-agent: coordinator 127.0.0.1:{port} not listening yet (Connection refused); trying again"
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while sum(line.startswith(retry) for line in seen) < 2:  # refused twice, and still trying
            try:
                seen.append(said.get(timeout=max(0.1, deadline - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"the agent did not say two refused tries within 30 s (exit {agent.poll()}): {seen}")
        assert agent.poll() is None, seen
        assert "(--connect-timeout 40 s)" in seen[-1], seen
        coord = Coordinator(["h0"], "127.0.0.1", port, token)
        try:
            assert list(coord.gather(15)) == ["h0"], coord.refused
        finally:
            coord.close()
        assert agent.wait(timeout=15) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
        agent.wait()


def test_the_token_never_crosses_the_wire_and_a_recorded_proof_is_refused(tmp_path: Path) -> None:
    """The agent proves the token with auth.py's challenge-response (as serve's clients prove
    their key): a fake coordinator that records what a real agent sends sees no token, only a MAC
    over its own nonce; that recorded hello, replayed to the real coordinator (another nonce), is
    refused."""
    import json
    import struct

    from fabscope.matrix.agent import AGENT_PROTO, AGENT_SERVICE
    from fabscope.session import auth, control

    token = "t" * 32
    with socket.create_server(("127.0.0.1", 0)) as fake:
        fake.settimeout(20)
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"), OMPI_COMM_WORLD_RANK="0", **{TOKEN_ENV: token})
        proc = subprocess.Popen([sys.executable, "-m", "fabscope", "matrix-agent", "--coordinator",
                                 f"127.0.0.1:{fake.getsockname()[1]}", "--connect-timeout", "10"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            conn, _ = fake.accept()
            with conn:
                nonce = auth.new_nonce()
                control.send(conn, {"type": "challenge", "proto": AGENT_PROTO, "auth": auth.SCHEME, "nonce": nonce},
                             5)
                conn.settimeout(10)
                head = conn.recv(4, socket.MSG_WAITALL)
                raw = conn.recv(struct.unpack(">I", head)[0], socket.MSG_WAITALL)
                # a welcome without the coordinator's proof: the agent must not take orders from it
                control.send(conn, {"type": "welcome", "host": "h0", "mac": "0" * 64}, 5)
                assert proc.wait(timeout=20) != 0
                assert "could not prove it holds the run's token" in (proc.stderr.read() if proc.stderr else "")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert token.encode() not in raw
    hello = json.loads(raw)
    key = auth.key_from_secret(token.encode(), "test")
    assert auth.verify(key, "client", AGENT_SERVICE, nonce, hello["nonce"], hello["mac"])
    # The recorded hello, replayed to a real coordinator of the same token: refused.
    coord = Coordinator(["h0"], "127.0.0.1", 0, token)
    try:
        with socket.create_connection(("127.0.0.1", coord.port), timeout=10) as s:
            import threading

            t = threading.Thread(target=coord.gather, args=(3.0,), daemon=True)
            t.start()
            assert control.recv(s, 5)["type"] == "challenge"
            s.sendall(head + raw)
            reply = control.recv(s, 5)
            t.join(10)
        assert reply["type"] == "reject" and "wrong or missing token" in reply["message"]
        assert not coord.agents
    finally:
        coord.close()
