# SPDX-License-Identifier: BSD-3-Clause
"""Random argv through every subcommand: no traceback, a documented exit code, and a usage error
(exit 2) that names what was wrong.

The subcommands and their options are discovered from the CLI's own --help (recursively: `fabscope
--help` lists the subcommands, each `--help` its options, choices and sub-subcommands), so a
subcommand added later is covered without touching this file. Each case runs `fabscope.cli.main(argv,
execute=False)` in-process: every parser, argparse `type=` helper, cross-option check and the
engine's own `--validate-only` runs for real, and nothing is started (no measurement, no listening
server, no testbed). `backends` is also executed for real (it only reads the option table).

stdout and stderr are real text streams over bytes, as a process has in a UTF-8 locale: stdout
strict (printing a non-UTF-8 argument there would raise UnicodeEncodeError), stderr with
backslashreplace (what Python gives a process's stderr).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabscope.cli import main

# Every exit code the README documents (0 ok, 1 doctor warnings, 2 usage, 3 peer, 4 measurement,
# 5 misrouted, 6 unsupported, 7 doctor errors, 8 matrix finding, 9 compare regression, 10 compare
# inconclusive, 130 interrupted).
DOCUMENTED = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 130}
EXECUTED_FOR_REAL = {("backends",)}
EXAMPLES_PER_COMMAND = 40


@dataclass
class Command:
    path: tuple[str, ...]
    flags: dict[str, list[str]] = field(default_factory=dict)  # flag -> its choices (may be empty)
    positionals: list[str] = field(default_factory=list)


# Relative paths in random argv (e.g. `serve --log +7`, whose check opens the log) land here, not
# in the checkout.
WORKDIR = tempfile.mkdtemp(prefix="fabscope-argv-")
atexit.register(shutil.rmtree, WORKDIR, ignore_errors=True)


def _call(argv: list[str], execute: bool = False) -> tuple[int, str, str]:
    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_b, encoding="utf-8", errors="backslashreplace", write_through=True)
    with contextlib.chdir(WORKDIR), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv, execute=execute)
    return rc, out_b.getvalue().decode("utf-8"), err_b.getvalue().decode("utf-8")


@pytest.fixture(scope="module", autouse=True)
def _remove_workdir() -> Iterator[None]:
    yield
    shutil.rmtree(WORKDIR, ignore_errors=True)


def _usage(help_text: str) -> str:
    return help_text.split("\n\n", 1)[0]


def _discover(path: tuple[str, ...] = (), found: list[Command] | None = None) -> list[Command]:
    found = [] if found is None else found
    rc, out, err = _call([*path, "--help"])
    assert rc == 0, f"`fabscope {' '.join(path)} --help` exited {rc}: {err}"
    raw = _usage(out).split()
    cmd = Command(path)
    subcommands: list[str] = []
    for i, token in enumerate(raw):
        # "[--format" "{text,json}]": the value belongs to the flag while no bracket closed between.
        prev_raw = raw[i - 1] if i else ""
        prev = prev_raw.strip("[]()|")
        tok = token.strip("[]()|")
        prev_open = prev.startswith("--") and not prev_raw.endswith(("]", ")"))
        if tok.startswith("--"):
            cmd.flags.setdefault(tok, [])
        elif tok.startswith("{") and tok.endswith("}"):
            choices = tok[1:-1].split(",")
            next_raw = raw[i + 1] if i + 1 < len(raw) else ""
            if prev_open:
                cmd.flags[prev] = choices
            elif token == tok and next_raw == "...":  # argparse's subparsers: "{a,b} ..."
                subcommands = choices
            else:  # a positional with choices, e.g. "[{list,show}]"
                cmd.positionals += choices
        elif i >= 1 + len(path) + 1 and tok and tok != "..." and not tok.startswith("-") and not prev_open:
            cmd.positionals.append(tok)  # past "usage: fabscope PATH": a positional's metavar
    for name in ("--help",):
        cmd.flags.pop(name, None)
    if subcommands:
        for sub in subcommands:
            _discover((*path, sub), found)
    elif path:
        found.append(cmd)
    return found


COMMANDS = _discover()
NAMES_IN_ORDER = [" ".join(c.path) for c in COMMANDS]
NAMES = sorted(NAMES_IN_ORDER)


def test_discovery_finds_every_subcommand() -> None:
    # A floor, not the list: subcommands added later only add to it.
    for expected in ("run", "serve", "backends", "suite", "devices", "doctor", "testbed netns up",
                     "testbed slurm up", "testbed softroce run"):
        assert expected in NAMES, NAMES
    run = next(c for c in COMMANDS if c.path == ("run",))
    assert {"--loopback", "--peer", "--iters", "--sizes", "--timeout", "--mca", "--qp-type"} <= set(run.flags)


def _non_utf8() -> st.SearchStrategy[str]:
    # argv arrives decoded with surrogateescape; NUL cannot be in an argument.
    return st.binary(min_size=1, max_size=12).map(lambda b: os.fsdecode(b.replace(b"\0", b"\xff")))


NUMBERS = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e99", "-1", "0", "70000", "65536", "4294967297",
                     "99999999999999999999999", "0x10", "1.5", "1e-9", "-0", "+7", "8G", "3:100", "8:2",
                     "0:8", "2:16", "8,,16", "16K", "1Q", ""]),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
WORDS = st.sampled_from(["tcp", "mpi", "verbs", "ucx", "ofi", "lat", "bw", "bibw", "send", "write", "tag",
                         "openmpi", "mpich", "srun", "mpirun", "yes", "no", "lo", "127.0.0.1", "::1",
                         "10.0.0.0/8", "a=b", "UCX_TLS=tcp", "fs-a", "fs-z", "1gbit", "-", "--", "/", "/proc",
                         "/nonexistent/dir"])
LONG = st.integers(min_value=200, max_value=20000).map(lambda n: "x" * n)
VALUES = st.one_of(NUMBERS, WORDS, _non_utf8(), LONG, st.text(max_size=20).filter(lambda s: "\0" not in s))


@st.composite
def argvs(draw: st.DrawFn, cmd: Command) -> list[str]:
    argv = list(cmd.path)
    flags = sorted(cmd.flags)
    for _ in range(draw(st.integers(min_value=0, max_value=4))):
        # Mostly well-formed "--flag value" pairs, so that cases get past argparse to the checks.
        kind = draw(st.sampled_from(["flag", "flag value", "flag value", "flag value", "flag=value", "choice",
                                     "choice", "stray"]))
        if kind == "stray" or not flags:
            words = [p for p in cmd.positionals if not p.isupper() and "|" not in p]  # positional choices
            use_word = bool(words) and draw(st.booleans())
            argv.append(draw(st.sampled_from(words)) if use_word else draw(VALUES))
            continue
        flag = draw(st.sampled_from(flags))
        if kind == "flag":
            argv.append(flag)
        elif kind == "choice" and cmd.flags[flag]:
            argv += [flag, draw(st.sampled_from(cmd.flags[flag]))]
        elif kind == "flag=value":
            argv.append(f"{flag}={draw(VALUES)}")
        else:
            argv += [flag, draw(VALUES)]
    if cmd.path == ("run",) and draw(st.booleans()):
        argv.insert(1, "--loopback")  # get past the mode group more often, to the engine's checks
    return argv


def _mentions_an_argument(message: str, cmd: Command, argv: list[str]) -> bool:
    """The message names the offending argument: a flag or positional of this command, or a
    value that was given (quoted as repr or escaped as the engine does)."""
    names = set(cmd.flags) | {p.lower() for p in cmd.positionals} | set(cmd.positionals)
    names |= {a.split("=", 1)[0] for a in argv[len(cmd.path):] if a.startswith("-") and len(a) > 1}
    for value in argv[len(cmd.path):]:
        snippet = value.split("=", 1)[-1][:20]
        if not snippet:
            names.add("''")  # an empty value, as shown() quotes it
        else:
            names |= {
                snippet,
                repr(snippet)[1:-1],  # as argtypes.shown() and argparse's choices quote it
                snippet.encode("utf-8", "backslashreplace").decode(),  # raw, through stderr's error handler
                snippet.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"),  # as the engine echoes bytes
            }
    return any(name and name in message for name in names)


@pytest.mark.parametrize("cmd", COMMANDS, ids=NAMES_IN_ORDER)
@settings(max_examples=EXAMPLES_PER_COMMAND, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_argv_never_crashes_and_usage_errors_name_the_argument(cmd: Command, data: st.DataObject) -> None:
    argv = data.draw(argvs(cmd), label="argv")
    execute = cmd.path in EXECUTED_FOR_REAL
    rc, out, err = _call(argv, execute=execute)  # an exception here (a traceback) fails the test
    assert rc in DOCUMENTED, (argv, rc, err)
    assert "Traceback" not in err and "Traceback" not in out, (argv, err)
    if rc == 2:
        assert err.strip(), (argv, "exit 2 without a message")
        assert _mentions_an_argument(err, cmd, argv), (argv, err)
    if not execute:
        assert rc in (0, 2), (argv, rc, err)  # validation only: valid, or a usage error


def _engine_options() -> list[str]:
    from fabscope.launch.engine import option_table

    table = option_table()
    rows = table["core"] + [row for be in table["backends"].values() for row in be["options"]]
    run = next(c for c in COMMANDS if c.path == ("run",))
    return sorted({f"--{row['name']}" for row in rows} & set(run.flags))


# MPI through MPICH's engine: its singleton start takes 0.1 s, Open MPI's about 1 s.
BACKENDS = {"default": [], "tcp": ["--backend", "tcp"], "ucx": ["--backend", "ucx"],
            "mpi": ["--backend", "mpi", "--mpi", "mpich"]}


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(option=st.sampled_from(_engine_options()), value=VALUES, backend=st.sampled_from(sorted(BACKENDS)))
def test_engine_option_values_are_validated_before_anything_starts(option: str, value: str, backend: str) -> None:
    """Every engine option `run` forwards, with a random value: the engine's option table decides
    (`--validate-only`), and a refusal is exit 2 naming the option, never exit 4 or a traceback."""
    argv = ["run", "--loopback", f"{option}={value}", *BACKENDS[backend]]
    rc, _out, err = _call(argv)
    assert rc in (0, 2), (argv, rc, err)
    if rc == 2:
        assert option in err or "--backend" in err, (argv, err)
