# SPDX-License-Identifier: BSD-3-Clause
"""The option table: one source for parsing, help, the JSON dump, and usage errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO


def run(engine: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(engine), *args], capture_output=True, text=True, timeout=30)


def test_options_json_lists_core_and_backend_rows(engine: Path) -> None:
    out = run(engine, "--options-json")
    assert out.returncode == 0
    table = json.loads(out.stdout)
    assert table["schema"] == "fabscope.options/1"
    names = {row["name"] for row in table["core"]}
    assert {"backend", "op", "pattern", "sizes", "iters", "duration", "warmup", "warmup-time",
            "tx-depth", "poll", "timeout", "device", "bind", "hold-cpu-latency"} <= names
    tcp = table["backends"]["tcp"]
    assert tcp["ops"] == ["send"] and tcp["patterns"] == ["lat", "bw", "bibw"]
    assert {row["name"] for row in tcp["options"]} >= {"tcp-nodelay", "tcp-sndbuf", "tcp-rcvbuf"}
    txd = next(r for r in table["core"] if r["name"] == "tx-depth")
    assert txd["min"] == 1 and txd["default"] == "64"


def test_help_is_generated_from_the_same_rows(engine: Path) -> None:
    out = run(engine, "--help")
    assert out.returncode == 0
    table = json.loads(run(engine, "--options-json").stdout)
    for row in table["core"]:
        assert f"--{row['name']}" in out.stdout
    assert "--tcp-sndbuf" in out.stdout


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--sizes", "0"], "out of range"),
        (["--iters", "-5"], "out of range"),
        (["--tx-depth", "0"], "allowed 1 to 65536"),
        (["--pattern", "pingpong"], "lat, bw, bibw"),
        (["--backend", "carrier-pigeon"], "available: tcp"),
        (["--op", "read"], "it has: send"),
        (["--sizes", "8:2"], "LO <= HI"),
        (["--sise", "8"], "did you mean --sizes"),
        (["--tcp-sndbuf", "1Q"], "not a size"),
        (["--duration", "abc"], "not a number"),
        (["--pattern", "bw", "--iters", "1"], "at least 2 messages"),
    ],
)
def test_bad_values_are_usage_errors_naming_what_is_allowed(engine: Path, args: list[str], expect: str) -> None:
    out = run(engine, "--peer", "127.0.0.1:1", *args)
    assert out.returncode == 2, out.stderr
    assert expect in out.stderr
    assert "Traceback" not in out.stderr


def test_a_mode_is_required(engine: Path) -> None:
    out = run(engine, "--iters", "5")
    assert out.returncode == 2
    assert "--peer" in out.stderr and "--listen" in out.stderr


def test_a_checkout_finds_its_own_built_engines() -> None:
    """Where nothing is installed (the Soft-RoCE guests run the checkout they mount, without a venv),
    the engines are found in the checkout's build/engine: moving launch/engine.py a directory deeper
    once made the guests look in python/build/engine and lose every MPI row."""
    from fabscope.launch.engine import _candidates

    for name in ("fabscope-engine", "fabscope-engine-mpi-openmpi", "fabscope-engine-mpi-mpich"):
        assert REPO / "build" / "engine" / name in _candidates(name)
