# SPDX-License-Identifier: BSD-3-Clause
"""The two-guest testbed starts the client guest's command when the server guest's command listens:
softroce_guest/listening.sh (which init.sh polls in the server guest) run here on real sockets, and the
host's decision (server_listens) on the events the guest reports. No boot."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabscope.testbed.softroce_base import GUEST_DIR, SoftRoceError
from fabscope.testbed.softroce_guests import LISTENING_SCRIPT, _write_control_dir, server_listens

SCRIPT = GUEST_DIR / LISTENING_SCRIPT
# Listens on 127.0.0.1 once told to (a line on stdin), then says its port and stays until stdin closes.
LISTENER = ("import socket, sys\n"
            "sys.stdin.readline()\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True)\n"
            "sys.stdin.read()\n")


def _listening(pid: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(SCRIPT), str(pid)], capture_output=True, text=True, timeout=30, check=False)


@pytest.fixture
def tree() -> Iterator[subprocess.Popen[str]]:
    """A shell (the server command's process) whose child python listens when asked: a listener below
    the root, as with `sh -c 'perftest & exec fabscope serve'` or fabscope's own wrapper script."""
    proc = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "$0"; exit $?', LISTENER],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_listener_below_the_command_is_found_and_one_elsewhere_is_not(tree: subprocess.Popen[str]) -> None:
    assert tree.stdin is not None and tree.stdout is not None
    with socket.socket() as other:  # this test's own listener: not the command's, must not count
        other.bind(("127.0.0.1", 0))
        other.listen()
        before = _listening(tree.pid)
        assert before.returncode == 1, before
        assert before.stdout == ""
        tree.stdin.write("listen\n")
        tree.stdin.flush()
        port = int(tree.stdout.readline())  # the child's own line: it listens now
        after = _listening(tree.pid)
    assert after.returncode == 0, after
    line = after.stdout.strip()
    assert line.startswith(f"tcp 127.0.0.1:{port} by python"), line
    assert line.endswith(")") and f"(pid {tree.pid})" not in line  # the child's pid, not the shell's


def test_a_command_that_is_gone_has_no_listener_and_bad_usage_is_exit_2() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait(timeout=10)
    assert _listening(gone.pid).returncode == 1
    bad = subprocess.run(["sh", str(SCRIPT), "ib_write_bw"], capture_output=True, text=True, timeout=30, check=False)
    assert bad.returncode == 2 and "usage" in bad.stderr


CMD = ["ib_write_bw", "-d", "rxe0", "-R"]


def _console() -> str:
    return "    the server console's tail"


def test_the_client_waits_until_the_server_listens_then_goes() -> None:
    waiting = {"begin_at": 10.0, "listening_at": None, "exit_status": None, "listen_timeout_s": 180.0,
               "console": _console}
    assert server_listens(CMD, now=5.0, **{**waiting, "begin_at": None}) is False  # not started yet
    assert server_listens(CMD, now=11.0, **waiting) is False
    assert server_listens(CMD, now=190.0, **waiting) is False  # 180 s after its start: still in time
    assert server_listens(CMD, now=12.0, **{**waiting, "listening_at": 11.5}) is True
    # Listening wins over a late clock: the guest said it before the host looked.
    assert server_listens(CMD, now=500.0, **{**waiting, "listening_at": 11.5}) is True


def test_a_server_that_exits_before_it_listens_is_an_error_naming_it() -> None:
    with pytest.raises(SoftRoceError) as err:
        server_listens(CMD, begin_at=10.0, listening_at=None, exit_status=1, now=12.0, listen_timeout_s=180.0,
                       console=_console)
    msg = str(err.value)
    assert "ib_write_bw -d rxe0 -R" in msg and "exited with 1 before it listened" in msg
    assert "ss -Hltnp" in msg and "rdma res show cm_id" in msg and "the server console's tail" in msg


def test_a_server_that_never_listens_is_an_error_after_the_deadline() -> None:
    with pytest.raises(SoftRoceError) as err:
        server_listens(CMD, begin_at=10.0, listening_at=None, exit_status=None, now=190.5, listen_timeout_s=180.0,
                       console=_console)
    msg = str(err.value)
    assert "did not listen within 180 s" in msg and "ib_write_bw -d rxe0 -R" in msg
    assert "the server console's tail" in msg


def test_only_the_server_guest_reports_listening_and_gets_the_script(tmp_path: Path) -> None:
    common = {"nonce": "n", "peer": "p", "hosts": "", "cmd": ["true"], "rdma": "rxe", "go_timeout_s": 60.0,
              "siw_ko": None, "extra_files": {}}
    _write_control_dir(tmp_path / "server", role="server", addr="a", wait_go=False, keep_alive=True,
                       report_listen=True, **common)  # type: ignore[arg-type]
    _write_control_dir(tmp_path / "client", role="client", addr="b", wait_go=True, keep_alive=False,
                       **common)  # type: ignore[arg-type]
    assert "FS_REPORT_LISTEN=1\n" in (tmp_path / "server" / "env").read_text()
    assert "FS_REPORT_LISTEN=0\n" in (tmp_path / "client" / "env").read_text()
    assert (tmp_path / "server" / LISTENING_SCRIPT).read_bytes() == SCRIPT.read_bytes()
    init = (tmp_path / "server" / "init.sh").read_text()
    assert 'sh "$CTL/listening.sh" "$cmd_pid"' in init and 'say "listening:$found"' in init
