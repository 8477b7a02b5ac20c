# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope serve` against silent, slow, unauthenticated, replaying and greedy clients: real serve,
real engines, loopback only."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from serve_helpers import ENV, frame, make_key, read_frame, serve

from conftest import fabscope, rcvlowat_for
from fabscope.errors import FabscopeError
from fabscope.serve.server import HANDSHAKE_TIMEOUT_S
from fabscope.session import auth, control

QUICK = ("--iters", "100", "--warmup", "10", "--sizes", "8")


def run(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    return fabscope("run", "--peer", addr, "--timeout", "5", *QUICK, *args, timeout=60)


def test_silent_and_slow_connections_do_not_delay_an_honest_client(tmp_path: Path) -> None:
    key = auth.load_key(make_key(tmp_path / "key"))
    with serve(tmp_path, "--key-file", key.path) as srv:
        idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(10)]
        loris = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
        for s in loris:
            s.send(b"\x00")  # the first byte of a length prefix, and then nothing for a long time
        try:
            # Greeted: serve has taken all 13 into their handshakes.
            hellos = [read_frame(s) for s in idle + loris]
            assert {h["type"] for h in hellos} == {"hello"} and hellos[0]["auth"] == "hmac-sha256", hellos
            t0 = time.monotonic()
            sock = control.open_session(srv.addr, "engine", key, 5.0)
            handshake_s = time.monotonic() - t0
            sock.close()
            assert handshake_s < 1.0, f"an honest handshake took {handshake_s:.2f} s next to 13 silent connections"
            print(f"\nhonest handshake next to 13 silent/slow connections: {handshake_s * 1000:.1f} ms")
            out = run(srv.addr, "--key-file", key.path)
            assert out.returncode == 0, out.stderr
            # The silent ones are dropped at the handshake deadline, not at --timeout.
            t1 = time.monotonic()
            bye = read_frame(idle[0], timeout=HANDSHAKE_TIMEOUT_S + 5)
            assert bye["type"] == "error" and "no answer" in bye["message"]
            assert idle[0].recv(1) == b""
            assert time.monotonic() - t1 < HANDSHAKE_TIMEOUT_S + 2
        finally:
            for s in idle + loris:
                s.close()
        assert srv.proc.poll() is None


def test_connections_per_source_are_bounded_and_the_oldest_gives_way_told_which_option(tmp_path: Path) -> None:
    """A full per-source budget of unauthenticated connections does not lock the address out: the
    newcomer is greeted and the oldest unauthenticated one is dropped, told which option."""
    with serve(tmp_path, "--max-connections-per-source", "3") as srv:
        held = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]
        try:
            assert [read_frame(s)["type"] for s in held] == ["hello"] * 3  # all three taken in
            with socket.create_connection(("127.0.0.1", srv.port)) as extra:
                extra.settimeout(5)
                assert read_frame(extra)["type"] == "hello"  # served, not refused
            msg = read_frame(held[0])
            assert msg["type"] == "error" and msg["reason"] == "connections"
            assert "--max-connections-per-source" in msg["message"] and "unauthenticated" in msg["message"]
            assert held[0].recv(1) == b""
        finally:
            for s in held:
                s.close()
        # Slots come back: an honest run works afterwards.
        assert run(srv.addr).returncode == 0


def test_key_no_key_wrong_key(tmp_path: Path) -> None:
    key = make_key(tmp_path / "key")
    wrong = make_key(tmp_path / "wrong")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        ok = run(srv.addr, "--key-file", str(key), "--format", "json")
        assert ok.returncode == 0, ok.stderr
        none = run(srv.addr)
        assert none.returncode == 3 and "requires authentication" in none.stderr and "--key-file" in none.stderr
        bad = run(srv.addr, "--key-file", str(wrong))
        assert bad.returncode == 3
        assert "authentication failed" in bad.stderr and srv.addr in bad.stderr
        assert "Traceback" not in bad.stderr + none.stderr
        doc = fabscope("doctor", "--peer", srv.addr, "--key-file", str(wrong))
        assert doc.returncode == 3 and "authentication failed" in doc.stderr
        refusals = [e for e in srv.events("refused") if e["reason"] == "auth"]
        assert len(refusals) == 2, srv.events()  # one line per failed client (run, doctor)
        (done,) = srv.wait_event("run")
        assert done["key_id"] == auth.load_key(key).key_id and done["outcome"] == "ok" and done["exit_code"] == 0
        assert done["options"]["core"]["iters"] == "100" and done["duration_s"] > 0
        assert key.read_bytes().hex() not in srv.log_path.read_text()
        assert srv.proc.poll() is None


def test_a_client_key_does_not_talk_to_a_serve_without_authentication(tmp_path: Path) -> None:
    key = make_key(tmp_path / "key")
    with serve(tmp_path) as srv:
        out = run(srv.addr, "--key-file", str(key))
    assert out.returncode == 3 and "does not authenticate" in out.stderr


def test_a_recorded_authentication_cannot_be_replayed(tmp_path: Path) -> None:
    key = auth.load_key(make_key(tmp_path / "key"))
    with serve(tmp_path, "--key-file", key.path) as srv:
        # An eavesdropper records a whole honest hello (it passes: this proves the recording is good).
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            first = read_frame(s)
            cn = auth.new_nonce()
            recorded = {**control.client_hello("engine", cn), "key_id": key.key_id,
                        "mac": auth.mac(key, "client", "engine", first["nonce"], cn)}
            s.sendall(frame(recorded))
            welcome = read_frame(s)
            assert welcome["type"] == "welcome"
            assert auth.verify(key, "server", "engine", first["nonce"], cn, welcome["mac"])
        # ...and replays it on a new connection: the server's nonce is fresh, so it is refused.
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            second = read_frame(s)
            assert second["nonce"] != first["nonce"]
            s.sendall(frame(recorded))
            refused = read_frame(s)
        assert refused["type"] == "error" and refused["reason"] == "auth"
        # The server's own proof cannot be reflected as a client's (the role is in the transcript).
        with socket.create_connection(("127.0.0.1", srv.port)) as s:
            read_frame(s)
            reflected = {**control.client_hello("engine", cn), "mac": welcome["mac"]}
            s.sendall(frame(reflected))
            assert read_frame(s)["reason"] == "auth"


def test_allow_refuses_other_sources_with_a_reason(tmp_path: Path) -> None:
    with serve(tmp_path, "--allow", "10.0.0.0/8") as srv:
        out = run(srv.addr)
        assert out.returncode == 3 and "--allow" in out.stderr
        (ev,) = srv.events("refused")
        assert ev["reason"] == "allow" and ev["client"].startswith("127.0.0.1:")
    with serve(tmp_path, "--allow", "192.168.0.0/16,127.0.0.0/8") as srv:
        assert run(srv.addr).returncode == 0


@pytest.mark.parametrize(
    ("serve_args", "client_args", "code", "fix"),
    [
        (("--max-size", "1M"), ("--sizes", "8,2M"), 2, "--max-size 2M"),
        (("--max-iters", "1000"), ("--iters", "5000"), 2, "--max-iters 5000"),
        (("--max-duration", "5"), ("--duration", "3", "--sizes", "8,16"), 2, "--max-duration 8"),
        (("--max-memory", "16M"), ("--sizes", "16M", "--pattern", "bw"), 2, "--max-memory 32M"),
    ],
)
def test_each_limit_refuses_naming_the_serve_option(
    tmp_path: Path, serve_args: tuple[str, ...], client_args: tuple[str, ...], code: int, fix: str
) -> None:
    with serve(tmp_path, *serve_args) as srv:
        out = fabscope("run", "--peer", srv.addr, "--timeout", "5", "--iters", "100", "--warmup", "10", *client_args)
        assert out.returncode == code, out.stderr
        assert fix in out.stderr, out.stderr
        (ev,) = srv.events("refused")
        assert ev["reason"] == serve_args[0][2:] and fix in ev["message"]
        assert run(srv.addr).returncode == 0  # still serving


def test_runs_per_minute_per_client(tmp_path: Path) -> None:
    with serve(tmp_path, "--max-runs-per-minute", "2") as srv:
        assert run(srv.addr).returncode == 0
        assert run(srv.addr).returncode == 0
        third = run(srv.addr)
        assert third.returncode == 3 and "--max-runs-per-minute" in third.stderr


def test_back_to_back_runs_are_not_told_busy(tmp_path: Path) -> None:
    """A run that starts while the previous run's engine is still exiting waits for it."""
    from fabscope.launch import runner

    with serve(tmp_path) as srv:
        for _ in range(5):
            outcome = runner.run_peer(list(QUICK), srv.addr, 5.0)
            assert outcome.exit_code == 0, outcome.error


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--timeout", "abc"), "--timeout"),
        (("--device", "nosuch0"), "lo"),
        (("--port", "70000"), "--port"),
        (("--key-file", "/nonexistent/key"), "head -c 32 /dev/urandom"),
        (("--bind", "0.0.0.0"), "--insecure-no-auth"),
        (("--max-size", "lots"), "--max-size"),
        (("--allow", "10.0.0.0/33"), "--allow"),
    ],
)
def test_bad_options_are_exit_2_before_listening(args: tuple[str, ...], says: str) -> None:
    t0 = time.monotonic()
    out = fabscope("serve", "--port", "0", *args, timeout=30)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and "Traceback" not in out.stderr
    assert "listening" not in out.stderr
    assert time.monotonic() - t0 < 15


def test_key_file_readable_by_others_is_refused_with_the_fix(tmp_path: Path) -> None:
    key = make_key(tmp_path / "key")
    key.chmod(0o644)
    out = fabscope("serve", "--port", "0", "--key-file", str(key))
    assert out.returncode == 2 and f"chmod 600 {key}" in out.stderr
    with pytest.raises(FabscopeError, match="chmod 600"):
        auth.load_key(key)
    key.write_bytes(b"short\n")
    key.chmod(0o600)
    with pytest.raises(FabscopeError, match="16 to 4096 bytes"):
        auth.load_key(key)


def test_garbage_and_oversize_frames_leave_serve_running(tmp_path: Path) -> None:
    with serve(tmp_path) as srv:
        for payload in (b"\xff\xff\xff\xffjunk", b"GET / HTTP/1.0\r\n\r\n", b"\x00\x00\x00\x05{]}x" * 3,
                        frame({"type": "hello", "proto": control.PROTO_VERSION, "service": "engine", "nonce": "zz"}),
                        b"\x00\x00\x00\x10" + b"[" * 16):
            with socket.create_connection(("127.0.0.1", srv.port)) as s:
                read_frame(s)  # the server hello
                s.sendall(payload)
                s.settimeout(HANDSHAKE_TIMEOUT_S + 3)
                try:
                    while s.recv(4096):
                        pass
                except ConnectionResetError:
                    pass
        assert srv.proc.poll() is None
        assert run(srv.addr).returncode == 0
        assert not srv.events("error"), srv.events("error")


def test_an_engine_cannot_connect_to_serve_without_the_front_end(tmp_path: Path, engine: Path) -> None:
    """A bare `fabscope-engine --peer` skips authentication: serve tells it what to use instead."""
    with serve(tmp_path) as srv:
        out = subprocess.run([str(engine), "--peer", srv.addr, "--timeout", "3"], capture_output=True, text=True,
                             timeout=30, env=ENV)
    assert out.returncode == 3 and "fabscope run --peer" in out.stderr


def test_doctor_peer_with_the_key_runs_on_both_hosts(tmp_path: Path) -> None:
    key = make_key(tmp_path / "key")
    with serve(tmp_path, "--key-file", str(key)) as srv:
        out = fabscope("doctor", "--json", "--peer", srv.addr, "--key-file", str(key), timeout=180)
        assert out.returncode in (0, 1, 7), out.stderr
        assert '"fabscope.doctor-pair/1"' in out.stdout
        (done,) = srv.wait_event("run", timeout=60)
        assert done["service"] == "doctor" and done["key_id"] == auth.load_key(key).key_id


def test_engine_peer_fd_needs_a_connected_socket_and_session_open(engine: Path) -> None:
    out = subprocess.run([str(engine), "--peer-fd", "0", "--session-open", "1"], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=30)
    assert out.returncode == 2 and "not a connected socket" in out.stderr
    out = subprocess.run([str(engine), "--peer-fd", "0"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--session-open 1" in out.stderr


def test_another_protocol_version_is_told_both_versions(tmp_path: Path) -> None:
    with serve(tmp_path) as srv, socket.create_connection(("127.0.0.1", srv.port)) as s:
        read_frame(s)
        s.sendall(frame({"type": "hello", "proto": 99, "version": "9.9.9" + "x" * 100_000, "service": "engine"}))
        msg = read_frame(s)
        assert msg["type"] == "error" and "protocol 99" in msg["message"] and "9.9.9" in msg["message"]
        assert len(msg["message"]) < 2000  # the client's 100 kB version string is not echoed back


def test_serve_adopts_the_clients_timeout_within_its_limits(tmp_path: Path) -> None:
    """The client's --timeout reaches the peer engine: never below serve's own --timeout, never
    above its --max-duration (a slow fabric's client must not be left by a peer that gave up)."""
    with serve(tmp_path, "--timeout", "2", "--max-duration", "30") as srv:
        for n, (asked, adopted) in enumerate([(7.0, 7.0), (1.0, 2.0), (100.0, 30.0)], start=1):
            done = fabscope("run", "--peer", srv.addr, "--timeout", f"{asked:g}", *QUICK, timeout=60)
            assert done.returncode == 0, done.stderr
            start = srv.wait_event("start", count=n)[-1]
            assert start["timeout_s"] == adopted, start


def test_the_receiver_behind_serve_waits_as_the_client_asks(tmp_path: Path) -> None:
    """--tcp-rcvlowat is shared, not local: in a bw run the receiver is the serving end, and how it
    waits is part of the method, so it takes the client's value (the record's transport.peer: 1 is
    the kernel's default, woken by every arrival; left to itself the server would wait for its
    default, 1 MiB: the whole message)."""
    with serve(tmp_path) as srv:
        for asked, waited in (("1", 1), ("256K", rcvlowat_for(256 << 10, 1 << 20))):
            out = fabscope("run", "--peer", srv.addr, "--format", "json", "--pattern", "bw", "--sizes", "1M",
                           "--iters", "50", "--warmup", "5", "--poll", "block", "--tcp-rcvlowat", asked, timeout=60)
            assert out.returncode == 0, out.stderr
            (rec,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
            assert rec["transport"]["peer"]["rcvlowat_bytes"] == waited, rec["transport"]


def _context_switches(pid: int) -> int:
    """Every thread's voluntary context switches: how often the process has gone to sleep."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def _asleep_in_its_wait(pid: int, timeout: float = 10.0) -> None:
    """Returns once serve (one thread) sleeps in its wait for connections, signals and the run's
    end (select/poll: its kernel wait channel), within ``timeout``."""
    deadline = time.monotonic() + timeout
    where = ""
    while time.monotonic() < deadline:
        tasks = os.listdir(f"/proc/{pid}/task")
        where = Path(f"/proc/{pid}/wchan").read_text()
        if len(tasks) == 1 and where.startswith(("poll_schedule_timeout", "do_select", "do_sys_poll", "ep_poll")):
            return
        time.sleep(0.02)
    raise AssertionError(f"serve not asleep in its wait within {timeout:g} s: {len(tasks)} thread(s), in {where!r}")


def test_serve_sleeps_through_a_run_and_wakes_for_its_end_and_for_signals(tmp_path: Path) -> None:
    """While a run runs, serve has nothing to do until the run ends, its budget runs out or a
    client knocks: it must not wake on a timer (at 10 wakes a second it took 1.9 % of a Soft-RoCE
    guest's one emulated CPU, the one its engine measures on). It still logs the run as soon as
    the engine ends, and a SIGTERM still stops it at once."""
    with serve(tmp_path) as srv:
        client = subprocess.Popen(
            [sys.executable, "-m", "fabscope", "run", "--peer", srv.addr, "--timeout", "5", "--sizes", "8", "--duration", "3",
             "--poll", "block", "--no-store"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
        try:
            srv.wait_event("start")
            _asleep_in_its_wait(srv.proc.pid)  # the handshake is over
            before = _context_switches(srv.proc.pid)
            time.sleep(1.5)
            woke = _context_switches(srv.proc.pid) - before
            assert client.poll() is None, "the run ended before serve was watched"
            assert woke <= 2, f"serve woke {woke} times in 1.5 s of a run"
            _, err = client.communicate(timeout=30)
            ended = time.monotonic()
        finally:
            if client.poll() is None:
                client.kill()
                client.wait()
        assert client.returncode == 0, err
        (logged,) = srv.wait_event("run")
        assert logged["outcome"] == "ok", logged
        assert time.monotonic() - ended < 2.0, "the run's end was logged late"
        _asleep_in_its_wait(srv.proc.pid)  # idle now: nothing to wait for but connections and signals
        srv.proc.terminate()
        t0 = time.monotonic()
        srv.proc.wait(timeout=10)
        assert time.monotonic() - t0 < 2.0, "SIGTERM did not end an idle serve's wait"
        assert srv.proc.returncode == 0
