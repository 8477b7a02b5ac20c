# SPDX-License-Identifier: BSD-3-Clause
"""The coordinator: where the agents started by the launcher check in, and how they are driven.

It listens on one TCP port for exactly the hosts of the matrix. An agent is accepted only when it
proves the run's one-time token with auth.py's HMAC challenge-response (the token itself never
crosses the wire; a recorded proof is useless on another connection) and only once per host; a connection that
says nothing is dropped after a few seconds without holding up the others. Every exchange with
an agent has a deadline: an agent that stops answering, or whose connection closes, makes its
host unreachable (with what happened) and the matrix goes on without it.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_PEER, FabscopeError
from ..session import auth, control
from .agent import AGENT_PROTO, AGENT_SERVICE

HELLO_DEADLINE_S = 5.0


@dataclass
class AgentConn:
    host: str
    sock: socket.socket
    hello: dict[str, Any]
    dead: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def addresses(self) -> dict[str, list[str]]:
        addrs = self.hello.get("addresses")
        return addrs if isinstance(addrs, dict) else {}

    @property
    def local_address(self) -> str:
        """The address this agent reached the coordinator from (its management address)."""
        return str(self.hello.get("local_address") or "")

    def send(self, msg: dict[str, Any]) -> None:
        try:
            control.send(self.sock, msg, 10.0)
        except OSError as exc:
            raise FabscopeError(f"lost the agent on {self.host}: {exc.strerror or exc}", EXIT_PEER) from exc

    def recv(self, timeout_s: float) -> dict[str, Any]:
        return control.recv(self.sock, timeout_s, f"the agent on {self.host}")

    def close(self, say_bye: bool = True) -> None:
        if say_bye and self.dead is None:
            try:
                control.send(self.sock, {"type": "bye"}, 2.0)
            except OSError:
                pass
        self.sock.close()


def _matches(hello_name: str, host: str) -> bool:
    return hello_name == host or hello_name.split(".")[0] == host.split(".")[0]


class Coordinator:
    def __init__(self, hosts: list[str], bind: str = "0.0.0.0", port: int = 0, token: str | None = None) -> None:
        self.hosts = hosts
        self.token = token or secrets.token_urlsafe(24)
        self.key = auth.key_from_secret(self.token.encode(), "the matrix token")
        family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind((bind, port))
        except OSError as exc:
            self.listener.close()
            raise FabscopeError(
                f"--coordinator: cannot listen on {bind}:{port}: {exc.strerror}; give an address of this host "
                f"that the matrix hosts can reach (and a free port, or 0)", 2) from exc
        self.listener.listen(len(hosts) + 16)
        self.port = int(self.listener.getsockname()[1])
        self.agents: dict[str, AgentConn] = {}
        self.refused: list[str] = []
        self._lock = threading.Lock()

    def gather(self, deadline_s: float, launcher_alive: Any = None) -> dict[str, AgentConn]:
        """Accept agents until every host has checked in or the deadline passes (or the launcher
        ended: then nobody else is coming)."""
        end = time.monotonic() + deadline_s
        workers: list[threading.Thread] = []
        self.listener.settimeout(0.2)
        while len(self.agents) < len(self.hosts) and time.monotonic() < end:
            if launcher_alive is not None and not launcher_alive():
                time.sleep(0.3)  # let hellos already on the way arrive
                for t in workers:
                    t.join(HELLO_DEADLINE_S)
                break
            try:
                conn, addr = self.listener.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._handshake, args=(conn, f"{addr[0]}:{addr[1]}"), daemon=True)
            t.start()
            workers.append(t)
        for t in workers:
            t.join(HELLO_DEADLINE_S)
        return self.agents

    def _handshake(self, conn: socket.socket, where: str) -> None:
        server_nonce = auth.new_nonce()
        try:
            control.send(conn, {"type": "challenge", "proto": AGENT_PROTO, "auth": auth.SCHEME, "nonce": server_nonce},
                         HELLO_DEADLINE_S)
            hello = control.recv(conn, HELLO_DEADLINE_S, f"a connection from {where}")
        except (FabscopeError, OSError):
            conn.close()
            return
        if hello.get("type") == "hello" and hello.get("proto") != AGENT_PROTO:
            self._refuse(conn, where, f"agent protocol {str(hello.get('proto'))[:20]} (this coordinator speaks "
                                      f"{AGENT_PROTO}); install the same fabscope version on every host")
            return
        client_nonce = hello.get("nonce")
        if hello.get("type") != "hello" or not auth.is_nonce(client_nonce) or \
                not auth.verify(self.key, "client", AGENT_SERVICE, server_nonce, str(client_nonce), hello.get("mac")):
            self._refuse(conn, where, "wrong or missing token (its proof did not verify)")
            return
        assert isinstance(client_nonce, str)
        name = str(hello.get("hostname") or "")
        rank = hello.get("rank")
        with self._lock:
            host = next((h for h in self.hosts if _matches(name, h) and h not in self.agents), None)
            if host is None and isinstance(rank, int) and 0 <= rank < len(self.hosts) \
                    and self.hosts[rank] not in self.agents and not any(_matches(name, h) for h in self.hosts):
                host = self.hosts[rank]  # names differ from --hosts (aliases): the launcher's placement decides
            if host is None:
                self._refuse(conn, where, f"host name {name!r} (rank {rank}) is not a matrix host still expected "
                                          f"({', '.join(h for h in self.hosts if h not in self.agents) or 'none'})")
                return
            agent = AgentConn(host, conn, hello)
            try:
                control.send(conn, {"type": "welcome", "host": host,
                                    "mac": auth.mac(self.key, "server", AGENT_SERVICE, server_nonce, client_nonce)}, 5.0)
            except OSError:
                conn.close()
                return
            self.agents[host] = agent

    def _refuse(self, conn: socket.socket, where: str, why: str) -> None:
        self.refused.append(f"{where}: {why}")
        try:
            control.send(conn, {"type": "reject", "message": why}, 2.0)
        except OSError:
            pass
        conn.close()

    def close(self) -> None:
        for agent in self.agents.values():
            agent.close()
        self.listener.close()
