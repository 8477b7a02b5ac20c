# SPDX-License-Identifier: BSD-3-Clause
"""Soak: one `fabscope serve` (with a key) takes back-to-back honest runs while hostile clients hammer
it: garbage, oversize length prefixes, silent connections, half-closed ones, slow-loris, bursts of
many at once, wrong keys and replays of a recorded honest hello. Zero serve deaths, every honest run
completes, every wrong key and replay refused (never welcomed, never answered otherwise), open file
descriptors and memory flat at the end. Loopback only; hostile clients come from other 127/8
addresses (as on a real network they come from other hosts), the honest one from 127.0.0.1.

Its own stage (`pytest -m soak`, scripts/test.sh); FABSCOPE_SOAK_SECONDS sets its length (150 s, as
scripts/test.sh runs it)."""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from serve_helpers import frame, make_key, open_fds, read_frame, rss_kib, serve

from fabscope.launch import runner
from fabscope.serve.server import HANDSHAKE_TIMEOUT_S
from fabscope.session import auth, control

pytestmark = pytest.mark.soak

SECONDS = float(os.environ.get("FABSCOPE_SOAK_SECONDS", "150"))
HONEST_ARGS = ["--iters", "20", "--warmup", "2", "--sizes", "8", "--clock", "monotonic"]


# The only right answers to a hello that fails authentication: refused for it, or (the flood fills
# the handshake slots) dropped from its slot to make room, told which option. Never a welcome.
REFUSED_HELLO = ("auth", "connections")


class WrongAnswer(Exception):
    """serve answered an attack as it never should: a welcome for a wrong key or a replay, or no
    refusal at all."""


class Hostile:
    """One thread per attack kind, each from its own loopback address, until stopped. ``errors``:
    the wrong answers serve gave (the test fails on any)."""

    def __init__(self, port: int, key: auth.Key) -> None:
        self.port = port
        self.key = key
        self.stop = threading.Event()
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.recorded: dict[str, object] | None = None  # an honest client hello, recorded once

    def _conn(self, src: str, timeout: float = 5.0) -> socket.socket:
        s = socket.socket()
        s.settimeout(timeout)
        s.bind((src, 0))
        s.connect(("127.0.0.1", self.port))
        return s

    def _loop(self, name: str, src: str, attack: object) -> None:
        rng = random.Random(name)
        while not self.stop.is_set():
            try:
                attack(src, rng)  # type: ignore[operator]
            except WrongAnswer as exc:
                with self.lock:
                    self.errors.append(f"{name}: {exc}")
            except (OSError, AssertionError):
                pass  # reset, timed out, closed before a frame (serve_helpers.read_frame): an attack's end
            with self.lock:
                self.counts[name] += 1
            self.stop.wait(0.02)

    @staticmethod
    def _refused(s: socket.socket, what: str) -> None:
        """serve's answer to a hello that must not authenticate: a refusal frame in REFUSED_HELLO, and
        nothing else (a welcome, another answer, silence or a bare close are all wrong)."""
        try:
            answer = read_frame(s, timeout=HANDSHAKE_TIMEOUT_S + 5)
        except (OSError, AssertionError) as exc:
            raise WrongAnswer(f"{what}: no refusal ({exc!r})") from exc
        if answer.get("type") != "error" or answer.get("reason") not in REFUSED_HELLO:
            raise WrongAnswer(f"{what}: serve answered {answer}")

    @staticmethod
    def _greeted(s: socket.socket) -> dict[str, object] | None:
        """serve's hello, or None where it refused the connection at once (a flood's slots)."""
        first = read_frame(s)
        if first.get("type") == "hello":
            return first
        if first.get("type") == "error" and first.get("reason") in REFUSED_HELLO:
            return None
        raise WrongAnswer(f"serve greeted with {first}")

    def garbage(self, src: str, rng: random.Random) -> None:
        with self._conn(src) as s:
            s.sendall(rng.randbytes(rng.randint(1, 3000)))

    def oversize(self, src: str, rng: random.Random) -> None:
        with self._conn(src) as s:
            read_frame(s)
            s.sendall(struct.pack(">I", rng.choice([0, 2**32 - 1, 256 * 1024 + 1])) + b"{}")
            s.recv(4096)

    def silent(self, src: str, rng: random.Random) -> None:
        with self._conn(src, HANDSHAKE_TIMEOUT_S + 5) as s:
            while s.recv(4096):
                pass

    def half_closed(self, src: str, rng: random.Random) -> None:
        with self._conn(src) as s:
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass

    def slow_loris(self, src: str, rng: random.Random) -> None:
        with self._conn(src) as s:
            read_frame(s)
            for byte in frame(control.client_hello("engine", auth.new_nonce())):
                if self.stop.is_set():
                    return
                s.send(bytes([byte]))
                time.sleep(0.3)

    def burst(self, src: str, rng: random.Random) -> None:
        socks = []
        try:
            for _ in range(40):
                socks.append(self._conn(src))
        finally:
            for s in socks:
                s.close()
        self.stop.wait(1.0)

    def wrong_key(self, src: str, rng: random.Random) -> None:
        with self._conn(src) as s:
            hello = self._greeted(s)
            if hello is None:
                return
            cn = auth.new_nonce()
            bogus = auth.Key(rng.randbytes(32), "bogus", "bogus")
            s.sendall(frame({**control.client_hello("engine", cn), "key_id": "bogus",
                             "mac": auth.mac(bogus, "client", "engine", str(hello["nonce"]), cn)}))
            self._refused(s, "a wrong key")

    def replay(self, src: str, rng: random.Random) -> None:
        """An eavesdropper's replay: one honest client hello (the real key, so it is welcomed once:
        the recording is good), then the same bytes on every new connection, whose server nonce
        is fresh."""
        if self.recorded is None:
            with self._conn(src) as s:
                hello = self._greeted(s)
                if hello is None:
                    return
                cn = auth.new_nonce()
                recorded = {**control.client_hello("engine", cn), "key_id": self.key.key_id,
                            "mac": auth.mac(self.key, "client", "engine", str(hello["nonce"]), cn)}
                s.sendall(frame(recorded))
                welcome = read_frame(s)
                if welcome.get("type") != "welcome":
                    raise WrongAnswer(f"the honest hello to be recorded was not welcomed: {welcome}")
                self.recorded = recorded
            return
        with self._conn(src) as s:
            if self._greeted(s) is None:
                return
            s.sendall(frame(self.recorded))
            self._refused(s, "a replayed hello")

    def start(self) -> list[threading.Thread]:
        attacks = [self.garbage, self.oversize, self.silent, self.silent, self.half_closed, self.slow_loris,
                   self.slow_loris, self.burst, self.wrong_key, self.replay]
        threads = []
        for i, attack in enumerate(attacks):
            t = threading.Thread(target=self._loop, args=(f"{attack.__name__}-{i}", f"127.0.0.{10 + i}", attack),
                                 daemon=True)
            t.start()
            threads.append(t)
        return threads


def test_soak_honest_runs_complete_while_hostile_clients_hammer_serve(tmp_path: Path) -> None:
    key = auth.load_key(make_key(tmp_path / "key"))
    with serve(tmp_path, "--key-file", key.path, "--max-runs-per-minute", "1000000",
               "--max-connections", "256") as srv:
        hostile = Hostile(srv.port, key)
        threads = hostile.start()
        honest, failures = 0, []
        t0 = time.monotonic()
        baseline: tuple[int, int] | None = None
        try:
            while time.monotonic() - t0 < SECONDS:
                outcome = runner.run_peer(HONEST_ARGS, srv.addr, 10.0, key=key)
                honest += 1
                if outcome.exit_code != 0 or len(outcome.records) != 1:
                    failures.append(f"run {honest}: {outcome.exit_code} {outcome.error}")
                assert srv.proc.poll() is None, "serve died"
                if baseline is None and time.monotonic() - t0 > 20:
                    baseline = (open_fds(srv.proc.pid), rss_kib(srv.proc.pid))
        finally:
            hostile.stop.set()
            for t in threads:
                t.join(timeout=HANDSHAKE_TIMEOUT_S + 10)
        assert not [t.name for t in threads if t.is_alive()], "an attack thread did not stop"
        assert not failures, failures[:5]
        assert not hostile.errors, hostile.errors[:5]
        assert hostile.recorded is not None and hostile.counts["replay-9"] > 1, hostile.counts
        assert srv.proc.poll() is None
        assert baseline is not None
        # Every hostile connection is gone once its handshake deadline has passed: wait for serve's
        # descriptors to come back to the warm-up's, at most that deadline and a margin.
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S + 5
        while open_fds(srv.proc.pid) > baseline[0] and time.monotonic() < deadline:
            time.sleep(0.1)
        fds, rss = open_fds(srv.proc.pid), rss_kib(srv.proc.pid)
        print(f"\nsoak: {honest} honest runs in {time.monotonic() - t0:.0f} s, hostile connections: "
              f"{dict(hostile.counts)}; serve fds {baseline[0]} -> {fds}, RSS {baseline[1]} -> {rss} KiB")
        assert fds <= baseline[0], f"serve holds {fds} fds, {baseline[0]} after warm-up"
        assert rss - baseline[1] < 8 * 1024, f"serve RSS grew from {baseline[1]} to {rss} KiB"
        assert sum(hostile.counts.values()) > honest
        assert not srv.events("error"), srv.events("error")[:3]
        runs = srv.events("run")
        assert len(runs) >= honest - 1 and all(r["outcome"] == "ok" for r in runs)
        # The refusal log is rate limited: the flood did not write a line per connection.
        assert len(srv.events("refused")) < sum(hostile.counts.values())
