# SPDX-License-Identifier: BSD-3-Clause
"""Shared helpers: run the real engine and the real CLI, never mocks."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

# Every `fabscope run`/`suite`/`matrix` keeps its results in a history store under $XDG_DATA_HOME:
# point that at a temporary directory for the whole session (set before any test module builds
# its environment), never at the real home. Tests that pass a minimal env= add it themselves.
HISTORY_HOME = tempfile.mkdtemp(prefix="fabscope-tests-xdg-")
os.environ["XDG_DATA_HOME"] = HISTORY_HOME
atexit.register(shutil.rmtree, HISTORY_HOME, True)
# `fabscope check` / `health` keep their last status and the error counters they saw under
# $XDG_STATE_HOME (fabscope/known_good): a temporary directory too, never the real home.
STATE_HOME = tempfile.mkdtemp(prefix="fabscope-tests-state-")
os.environ["XDG_STATE_HOME"] = STATE_HOME
atexit.register(shutil.rmtree, STATE_HOME, True)

# Hypothesis (tests/property, tests/fuzz) keeps its example cache (.hypothesis/) under the current
# directory by default: keep it, like everything else tests write, out of the source tree. (Here and
# not in a conftest.py of their own: two conftest modules would shadow each other's `from conftest
# import ...` when pytest collects the whole tree.)
try:
    from hypothesis import configuration as _hypothesis_configuration
except ImportError:  # pragma: no cover - hypothesis is in deps/python-requirements.txt
    pass
else:
    HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="fabscope-hypothesis-")
    _hypothesis_configuration.set_hypothesis_home_dir(HYPOTHESIS_HOME)
    atexit.register(shutil.rmtree, HYPOTHESIS_HOME, True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Unit and property tests are marked `parallel`: scripts/test.sh runs them four at once (those
    marked `measures` excepted: another worker's load would be in their timings)."""
    for item in items:
        if Path(str(item.fspath)).resolve().parent.name in ("unit", "property"):
            item.add_marker(pytest.mark.parallel)


# pytest-timeout's kill (pyproject.toml: 1,200 s a test) must come after a guest test's own deadline:
# the testbed's expiry stops the guests and says which one did not finish, running what, with its
# console kept; pytest's kill keeps only a stack. A Soft-RoCE module whose guests may run longer
# marks itself with guest_timeout(its deadline): the deadline plus what follows it (the guests'
# shutdown and the diagnostics, the image check before the boot).
GUEST_AFTER_DEADLINE_S = 300


def guest_timeout(deadline_s: float) -> pytest.MarkDecorator:
    return pytest.mark.timeout(deadline_s + GUEST_AFTER_DEADLINE_S)


def guest_awaits_listeners(listeners: list[str], name: str = "serves-ready", deadline_s: int = 600) -> str:
    """A line of a client guest's script that waits for each listener of the server guest (tcp:PORT,
    cm:PORT; tests/softroce/await_listener.sh) before the clients after it start: the testbed waits
    only until the server guest's command has some listener, the first of several servers it may
    start. Its exit status goes to
    /out/NAME.rc (0: all listen), what it said to /out/NAME.err: see guest_awaited."""
    return (f"ready=0; for l in {' '.join(listeners)}; do "
            f"sh /fabscope/tests/softroce/await_listener.sh peer $l {deadline_s} || {{ ready=$?; break; }}; "
            f"done 2> /out/{name}.err; echo $ready > /out/{name}.rc")


def guest_awaited(client_out: Path, name: str = "serves-ready") -> None:
    """Fails, with what await_listener.sh said, where guest_awaits_listeners' wait did not end well."""
    rc = client_out / f"{name}.rc"
    assert rc.exists() and rc.read_text().strip() == "0", (client_out / f"{name}.err").read_text() \
        if (client_out / f"{name}.err").exists() else f"{rc} missing"


def engine_bin() -> Path:
    env = os.environ.get("FABSCOPE_ENGINE")
    if env:
        return Path(env)
    for cand in (Path(sys.prefix) / "bin" / "fabscope-engine", REPO / "build" / "engine" / "fabscope-engine"):
        if cand.exists():
            return cand
    pytest.fail("fabscope-engine is not built: run `make setup`")


def fabscope(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it (a subprocess), so exit codes and stderr are the real ones."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "fabscope", *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="session")
def engine() -> Path:
    return engine_bin()


@pytest.fixture(scope="session")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fabscope .deb, built ONCE per session and shared by the tests that install it (the clean
    Debian root in tests/packaging, the Soft-RoCE guest's `run --package`): $FABSCOPE_DEB when set
    (scripts/test.sh builds it with `make deb`, lintian included, before pytest starts), otherwise
    scripts/build-deb.sh builds it here into a temporary directory (about a minute on 2 CPUs)."""
    given = os.environ.get("FABSCOPE_DEB")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("deb")
    proc = subprocess.run(["bash", str(REPO / "scripts/build-deb.sh")], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, FABSCOPE_DEB_DIR=str(out)), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def rcvlowat_for(asked: int, size: int, rcvbuf: int | None = None) -> int:
    """What a TCP bw receiver under --poll block waits for, for a whole message (the record's
    ``transport.peer.rcvlowat_bytes``), by the engine's rule (set_rcvlowat in
    engine/src/backends/stream_io.c): --tcp-rcvlowat, at most the message and a quarter of the
    receive buffer. ``rcvbuf``: a buffer fixed by --tcp-rcvbuf (the record's rcvbuf_bytes); None:
    autotuned, which on loopback grows within a few messages toward net.ipv4.tcp_rmem's maximum."""
    buffer = rcvbuf if rcvbuf is not None else int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])
    return min(asked, size, buffer // 4)
