# SPDX-License-Identifier: BSD-3-Clause
"""Arguments that used to end in a traceback or the wrong exit code, run as a user runs them: the
real `fabscope` process, argv as bytes (so non-UTF-8 arrives exactly as a shell passes it), real
stdio. Each must be exit 2 with one line naming the argument, before anything starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabscope.cli import main

REPO = Path(__file__).resolve().parents[2]


def fabscope(*args: str | bytes, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), LC_ALL="C.UTF-8")
    argv = [os.fsencode(a) if isinstance(a, str) else a for a in args]
    out = subprocess.run([os.fsencode(sys.executable), b"-m", b"fabscope", *argv], capture_output=True,
                         timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    return subprocess.CompletedProcess(out.args, out.returncode, out.stdout.decode("utf-8", "backslashreplace"),
                                       out.stderr.decode("utf-8", "backslashreplace"))


def usage_error(out: subprocess.CompletedProcess[str], *names: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    for name in names:
        assert name in out.stderr, (name, out.stderr)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["serve", "--port", "70000"], ["--port", "70000", "65535"]),  # was: OverflowError traceback
        (["serve", "--port", "-1"], ["--port"]),
        (["serve", "--bind", b"\xff"], ["--bind", "\\udcff"]),  # was: TypeError traceback
        (["serve", "--timeout", "abc"], ["--timeout", "abc"]),  # was: listened, then reset every client
        (["serve", "--device", "nosuch0"], ["--device", "nosuch0"]),  # was: the same
        (["serve", "--max-runs", "0"], ["--max-runs"]),
        (["run", "--loopback", "--timeout", "nan"], ["--timeout", "nan"]),  # was: ValueError traceback
        (["run", "--loopback", "--timeout", "inf"], ["--timeout", "inf"]),  # was: OverflowError traceback
        (["run", "--loopback", "--iters", "1e99"], ["--iters", "1e99"]),
        (["run", "--loopback", "--device", b"\xffeth"], ["--device", "\\xffeth"]),  # was: UnicodeDecodeError
        (["run", "--loopback", "--op", b"\xfe"], ["--op"]),  # was: UnicodeDecodeError
        (["run", "--peer", b"\xff"], ["--peer"]),  # was: UnicodeDecodeError
        (["run", "--peer", "host:99999"], ["--peer", "99999"]),
        (["run", "--loopback", "--sizes", "x" * 5000], ["--sizes"]),
        (["run", "--loopback", b"--\xff"], ["unrecognized", "\\udcff"]),
        (["run", "--loopback", ""], ["unrecognized", "''"]),
        ([b"\xff"], ["invalid choice"]),
        (["doctor", "--peer", b"\xffx"], ["--peer"]),  # was: UnicodeError (idna) traceback
        (["devices", "--sysfs-root", "x" * 300], ["--sysfs-root", "too long"]),  # was: OSError traceback
        (["suite", "--out", "/proc/no/such/dir"], ["--out"]),  # was: FileNotFoundError traceback
        (["suite", "--out", "y" * 300], ["--out", "255"]),
        (["testbed"], ["netns, softroce or slurm"]),
        (["testbed", "netns", "up", "--shape", b"\xff"], ["--shape"]),  # was: exit 1
        (["testbed", "netns", "up", "--hosts", "99"], ["--hosts", "2 to 16"]),  # was: exit 1
        (["run", "--loopback", "--backend", "MPI"], ["--backend MPI", "did you mean mpi?"]),  # mpi was not listed
        (["run", "--loopback", "--backend", "Tcp"], ["did you mean tcp?"]),
        (["run", "--loopback", "--backend", "nope"], ["--backend nope", "tcp, ", "and mpi"]),
    ],
)
def test_bad_arguments_are_usage_errors_naming_them(args: list[str | bytes], names: list[str]) -> None:
    usage_error(fabscope(*args), *names)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--mca", "btl=self"], ["--mca", "--backend mpi", "--backend tcp"]),
        (["--env", "UCX_TLS=tcp"], ["--env", "--backend mpi"]),
        (["--launcher", "srun"], ["--launcher"]),
        (["--mpi", "mpich", "--mca", "a=b"], ["--mpi", "--mca"]),
        (["--backend", "ucx", "--env", "UCX_TLS=tcp"], ["--env", "--backend ucx"]),
        (["--backend", "mpi", "--no-pin"], ["--no-pin"]),
        (["--backend", "mpi", "--mpi", "mpich", "--mca", "btl=self"], ["--mca", "--mpi mpich"]),
        (["--qp-type", "uc"], ["--qp-type", "verbs"]),  # the engine's scope check, now before anything starts
        (["--backend", "mpi", "--mpi", "mpich", "--ucx-tls", "sm"], ["--ucx-tls", "ucx"]),
    ],
)
def test_options_that_do_not_apply_are_refused_naming_them(args: list[str], names: list[str]) -> None:
    usage_error(fabscope("run", "--loopback", *args), *names)


def test_no_pin_applies_to_loopback_only() -> None:
    usage_error(fabscope("run", "--peer", "127.0.0.1:1", "--no-pin"), "--no-pin", "--loopback")


@pytest.mark.parametrize(
    ("sizes", "names"),
    [
        ("3:100", ["powers of two", "4:64"]),  # was: measured 3, 6, 12, 24, 48, 96
        ("5:7", ["none between"]),
        ("8:2", ["LO <= HI"]),
        ("0:8", ["LO <= HI"]),
        ("8,,16", ["empty entry"]),  # was: silently 8,16
        ("8G", ["out of range"]),
        ("1:8G", ["out of range"]),
        ("4X", ["not a size"]),
    ],
)
def test_sizes_that_do_not_fit_are_refused(sizes: str, names: list[str]) -> None:
    usage_error(fabscope("run", "--loopback", "--sizes", sizes), "--sizes", *names)


def test_a_size_range_is_the_powers_of_two_between_its_ends() -> None:
    out = fabscope("run", "--loopback", "--sizes", "2:16", "--iters", "20", "--warmup", "0", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert [rec["size"] for rec in map(json.loads, out.stdout.splitlines())] == [2, 4, 8, 16]


def test_serve_refuses_a_bad_engine_option_before_it_listens() -> None:
    out = fabscope("serve", "--port", "0", "--timeout", "0")
    usage_error(out, "--timeout", "0.1")
    assert "listening" not in out.stderr


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        # Parsed only (execute=False): were these checks to regress, the real command would start
        # a cluster or a guest, which a unit test must not.
        (["testbed", "slurm", "up", "--timeout", "nan"], ["--timeout", "nan"]),  # was: started, waited forever
        (["testbed", "slurm", "up", "--dir", "z" * 300], ["--dir"]),
        (["testbed", "softroce", "run", "--timeout", "nan", "--", "true"], ["--timeout"]),  # was: ValueError
        (["testbed", "softroce", "run", "--server-cmd", "'unclosed", "--", "true"], ["--server-cmd", "quotation"]),
        (["testbed", "netns", "up", "--mtu", "70000"], ["--mtu", "68 to 65535"]),
        (["testbed", "netns", "up", "--shape-host", "fs-z=1gbit"], ["--shape-host", "fs-z"]),  # was: exit 1, after the lock
        (["testbed", "netns", "up", "--mtu-host", "fs-a=abc"], ["--mtu-host", "abc"]),  # was: exit 1
        (["testbed", "netns", "shape-pair", "fs-a", "fs-q", "1gbit"], ["fs-q"]),  # was: exit 1, after the lock
        (["testbed", "netns", "exec", "nosuch", "--", "true"], ["nosuch"]),  # was: exit 1
    ],
)
def test_testbed_arguments_are_checked_before_anything_starts(
    argv: list[str], names: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv, execute=False) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in names), err


def test_valid_arguments_pass_validation_without_starting_anything() -> None:
    for argv in (["serve", "--port", "0", "--timeout", "2"], ["testbed", "slurm", "up", "--timeout", "5"],
                 ["run", "--loopback", "--backend", "mpi", "--mpi", "mpich", "--sizes", "2:8"],
                 ["run", "--loopback", "--sizes", "1:1M", "--timeout", "0.5"], ["testbed", "netns", "up", "--hosts", "3"]):
        assert main(argv, execute=False) == 0, argv


def test_help_and_version_exit_0_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert main(["testbed", "--help"]) == 0
    assert "netns" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--device", "eth0"], ["--device", "loopback suite"]),  # the loopback suite uses this host's defaults
        (["--timeout", "5"], ["--timeout", "loopback suite"]),  # was: accepted and ignored
        (["--peer", "node2", "--launcher", "srun"], ["--launcher", "--hosts"]),  # was: accepted and ignored
        (["--hosts", "a,b", "--key-file", "/etc/hostname"], ["--key-file", "--peer"]),
        (["--peer", "node2", "--timeout", "nan"], ["--timeout", "nan"]),
    ],
)
def test_suite_refuses_options_that_do_not_apply_before_it_creates_anything(
    args: list[str], names: list[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "report"
    usage_error(fabscope("suite", "--out", str(out_dir), *args), *names)
    assert not out_dir.exists()


def test_a_value_longer_than_the_kernel_passes_names_its_option(capsys: pytest.CaptureFixture[str]) -> None:
    # No shell can pass a 200 kB argument, but a program calling main() can; exec would fail E2BIG.
    assert main(["run", "--loopback", "--device", "x" * 200_000], execute=False) == 2
    assert "--device: a value of" in capsys.readouterr().err


def test_an_argument_echoed_to_stdout_is_written_back_as_typed(tmp_path: Path) -> None:
    """A strict UTF-8 stdout (e.g. an en_US.UTF-8 locale) used to raise UnicodeEncodeError when a
    command printed a non-UTF-8 argument (here: history naming its --store file)."""
    store = os.fsencode(tmp_path) + b"/\xff.db"
    from fabscope.store import open_store

    open_store(os.fsdecode(store)).close()  # history reads an existing store (it never creates one)
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), PYTHONIOENCODING="utf-8:strict")
    out = subprocess.run([os.fsencode(sys.executable), b"-m", b"fabscope", b"history", b"--store", store],
                         capture_output=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert store in out.stdout and b"Traceback" not in out.stderr


def test_a_label_that_is_not_utf8_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # Was: UnicodeEncodeError from SQLite when the run was kept with --tag.
    assert main(["run", "--loopback", "--tag", os.fsdecode(b"\xff")], execute=False) == 2
    assert "--tag" in capsys.readouterr().err
