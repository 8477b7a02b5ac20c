# SPDX-License-Identifier: BSD-3-Clause
"""The Python control path's fuzz target, in the ordinary test run: its seed corpus, a few hundred
property-based inputs (hypothesis, fixed seed), and a short atheris run of the CI target itself.
The long coverage-guided run is its own stage in scripts/test.sh."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fuzz_control  # noqa: E402  (a script next to this test, not a package)

CORPUS = sorted((HERE / "corpus").iterdir())


@pytest.mark.parametrize("seed", CORPUS, ids=[p.name for p in CORPUS])
def test_seed_corpus_is_handled(seed: Path) -> None:
    fuzz_control.one_input(seed.read_bytes())


def test_a_good_hello_reaches_the_config_limits() -> None:
    """The corpus really exercises the deep path: a client hello without a key passes and the
    config behind it is parsed (a refusal would be a FabscopeError, swallowed by the target)."""
    data = (HERE / "corpus" / "server_nokey_hello_config").read_bytes()
    import socket

    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(data[1:])
        fuzz_control._server(ours, None)  # no exception: handshake, peek, parse and limits all passed


frames = st.builds(
    lambda n, body: n.to_bytes(4, "big") + body,
    st.one_of(st.integers(0, 64), st.integers(0, 2**32 - 1)),
    st.binary(max_size=256),
)


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(0, 4), st.lists(st.one_of(frames, st.binary(max_size=64)), max_size=4))
def test_random_wire_input_is_refused_not_crashed(mode: int, chunks: list[bytes]) -> None:
    fuzz_control.one_input(bytes([mode]) + b"".join(chunks))


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_the_atheris_target_runs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(HERE / "fuzz_control.py"), "-runs=2000", "-max_len=4096", str(tmp_path), str(HERE / "corpus")],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Done 2000 runs" in out.stderr
