# SPDX-License-Identifier: BSD-3-Clause
"""The engine owns the list of backends and which options are modes: an engine built without its
backends (FS_WITHOUT, engine/CMakeLists.txt) names each one as not built with the package that builds
it, in its option table, in its refusal of --backend and in `fabscope backends`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, fabscope

WITHOUT = ("verbs", "rsocket", "ucx", "ofi")
PACKAGES = {"verbs": "libibverbs-dev", "rsocket": "librdmacm-dev", "ucx": "libucx-dev", "ofi": "libfabric-dev"}


@pytest.fixture(scope="module")
def tcp_only_engine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fabscope-engine built with only its tcp backend, as on a host without the RDMA libraries."""
    build = tmp_path_factory.mktemp("engine-tcp-only")
    configure = subprocess.run(
        ["cmake", "-S", str(REPO / "engine"), "-B", str(build), "-G", "Ninja", "-DFS_BUILD_TESTS=OFF",
         f"-DFS_WITHOUT={';'.join((*WITHOUT, 'mpi'))}"],
        capture_output=True, text=True, timeout=300, check=False)
    assert configure.returncode == 0, configure.stderr
    # The build system's own message names what it left out and the packages.
    for name in WITHOUT:
        assert f"{name} (apt-get install {PACKAGES[name]})" in configure.stdout
    built = subprocess.run(["ninja", "-C", str(build), "fabscope-engine"], capture_output=True, text=True,
                           timeout=600, check=False)
    assert built.returncode == 0, built.stdout[-3000:]
    return build / "fabscope-engine"


def test_the_option_table_names_every_backend_built_or_not(tcp_only_engine: Path) -> None:
    table = json.loads(subprocess.run([str(tcp_only_engine), "--options-json"], capture_output=True, text=True,
                                      timeout=30, check=True).stdout)
    known = {b["name"]: b for b in table["known_backends"]}
    assert set(known) == {"tcp", *WITHOUT, "mpi"}
    assert known["tcp"]["built"] and list(table["backends"]) == ["tcp"]
    for name in (*WITHOUT, "mpi"):
        assert not known[name]["built"]
    for name, package in PACKAGES.items():
        assert known[name]["package"] == package


@pytest.mark.parametrize("name", WITHOUT)
def test_the_engine_refuses_a_backend_it_was_built_without(tcp_only_engine: Path, name: str) -> None:
    out = subprocess.run([str(tcp_only_engine), "--backend", name, "--peer", "127.0.0.1:1"], capture_output=True,
                         text=True, timeout=30, check=False)
    assert out.returncode == 2
    assert f"--backend {name}: this engine was built without it ({PACKAGES[name]} was missing" in out.stderr


def test_fabscope_backends_names_what_is_not_built_and_its_package(tcp_only_engine: Path) -> None:
    out = fabscope("backends", env={"FABSCOPE_ENGINE": str(tcp_only_engine)})
    assert out.returncode == 0, out.stderr
    assert "  tcp " in out.stdout
    not_built = next(line for line in out.stdout.splitlines() if "not built:" in line)
    for name, package in PACKAGES.items():
        assert f"{name} (apt-get install {package})" in not_built


def test_modes_come_from_the_option_table(engine: Path) -> None:
    """The table's `mode` rows are what the CLI never offers and a run plan never carries."""
    table = json.loads(subprocess.run([str(engine), "--options-json"], capture_output=True, text=True, timeout=30,
                                      check=True).stdout)
    modes = {row["name"] for row in table["core"] if row["mode"]}
    assert {"peer", "peer-fd", "listen", "control-fd", "session-open", "format"} <= modes
    assert not modes & {"backend", "device", "sizes", "cpu", "timeout"}
    from fabscope.launch.engine import option_table
    from fabscope.launch.plan import Loopback, RunPlan

    option_table.cache_clear()
    for name in modes:
        with pytest.raises(ValueError, match=name):
            RunPlan.of({name: "1"}, Loopback())
        out = fabscope("run", "--loopback", f"--{name}=1")
        assert out.returncode == 2 and f"--{name}" in out.stderr
    assert RunPlan.of({"sizes": "8"}, Loopback()).options == (("sizes", "8"),)
