# SPDX-License-Identifier: BSD-3-Clause
"""pip: the sdist (`python -m build --sdist`) installed by `pip install` into a clean venv outside the
checkout compiles the engine with CMake (scikit-build-core) against this host's libraries, and that
venv's `fabscope` reports one version and the backends built and runs a loopback measurement. A
missing build dependency stops the build with the Debian package to install."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fabscope import __version__

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.packaging, pytest.mark.two_at_once, pytest.mark.xdist_group("build")]


def _tree_copy(dest: Path) -> Path:
    """This tree's files (tracked and new, not ignored), as `make deb` takes them."""
    files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           check=True, timeout=60).stdout.decode().split("\0")
    present = [f for f in files if f and (REPO / f).exists()]
    tar = subprocess.run(["tar", "-c", "--null", "-T", "-", "-f", "-"], cwd=REPO, input="\0".join(present).encode(),
                         capture_output=True, check=True, timeout=120).stdout
    dest.mkdir()
    subprocess.run(["tar", "-x", "-f", "-", "-C", str(dest)], input=tar, check=True, timeout=120)
    return dest


def test_sdist_pip_install_in_a_clean_venv_builds_and_runs_the_engine(tmp_path: Path) -> None:
    src = _tree_copy(tmp_path / "src")
    proc = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                           str(src)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sdist = tmp_path / "dist" / f"fabscope-{__version__}.tar.gz"
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    assert {"engine/CMakeLists.txt", "python/fabscope/__init__.py", "pyproject.toml"} <= names
    assert not any(n.startswith(("tests/", "build/", "packaging/")) for n in names), sorted(names)[:20]

    venv = tmp_path / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FABSCOPE_", "PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run([str(venv / "bin/pip"), "install", "-q", str(sdist)], capture_output=True, text=True,
                          timeout=900, cwd=tmp_path, env=env, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert (venv / "bin/fabscope-engine").is_file()

    version = subprocess.run([str(venv / "bin/fabscope"), "--version"], capture_output=True, text=True, timeout=60,
                             cwd=tmp_path, env=env, check=False)
    assert version.returncode == 0, version.stdout + version.stderr
    assert version.stdout.startswith(f"fabscope {__version__}\n")
    assert f"engine: {venv}/bin/fabscope-engine (version {__version__})" in version.stdout, version.stdout
    assert "backends built: tcp" in version.stdout
    # The MPI engines land beside it too (this machine has both MPIs' development packages).
    assert f"openmpi ({venv}/bin/fabscope-engine-mpi-openmpi)" in version.stdout, version.stdout
    wheel = subprocess.run([str(venv / "bin/python"), "-c", "import importlib.metadata as m; print(m.version('fabscope'))"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=True)
    assert wheel.stdout.strip() == __version__  # the wheel's metadata: the one version

    run = subprocess.run([str(venv / "bin/fabscope"), "run", "--loopback", "--sizes", "8", "--iters", "200",
                          "--warmup", "10", "--format", "json", "--no-store"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=dict(env, XDG_DATA_HOME=str(tmp_path / "xdg")), check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    records = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert records and all(r["version"] == __version__ for r in records)


def test_a_missing_library_names_the_debian_package(tmp_path: Path) -> None:
    """pkg-config that finds nothing (PKG_CONFIG_LIBDIR pointed at an empty directory): the engine's
    one required library is reported with the package that provides it."""
    empty = tmp_path / "pc"
    empty.mkdir()
    proc = subprocess.run(["cmake", "-S", str(REPO / "engine"), "-B", str(tmp_path / "b"), "-G", "Ninja"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env=dict(os.environ, PKG_CONFIG_LIBDIR=str(empty), PKG_CONFIG_PATH=""))
    assert proc.returncode != 0
    assert "apt-get install libcjson-dev" in proc.stderr, proc.stderr[-2000:]


def test_a_missing_backend_library_is_named_with_its_debian_package(tmp_path: Path) -> None:
    """pkg-config that finds only the required libraries (cJSON, libcrypto): the build goes on with tcp
    alone and names each backend left out with the package that adds it (what a pip user reads in
    `pip install -v`). With cJSON alone, the missing libcrypto stops it, naming libssl-dev."""
    pc = tmp_path / "pc"
    pc.mkdir()

    def configure(build: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["cmake", "-S", str(REPO / "engine"), "-B", str(tmp_path / build), "-G", "Ninja",
                               "-DFS_BUILD_TESTS=OFF"], capture_output=True, text=True, timeout=120, check=False,
                              env=dict(os.environ, PKG_CONFIG_LIBDIR=str(pc), PKG_CONFIG_PATH=""))

    for module in ("libcjson", "libcrypto"):
        found = subprocess.run(["pkg-config", "--variable=pcfiledir", module], capture_output=True, text=True,
                               timeout=30, check=True).stdout.strip()
        (pc / f"{module}.pc").write_text((Path(found) / f"{module}.pc").read_text())
        if module == "libcjson":
            proc = configure("without-crypto")
            assert proc.returncode != 0 and "apt-get install libssl-dev" in proc.stderr, proc.stderr[-2000:]
    proc = configure("b")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "fabscope: backends built: tcp\n" in proc.stdout, proc.stdout
    missing = proc.stdout.split("backends NOT built", 1)[-1].splitlines()[0]
    for backend, package in (("verbs", "libibverbs-dev"), ("rsocket", "librdmacm-dev"), ("ucx", "libucx-dev"),
                             ("ofi", "libfabric-dev")):
        assert re.search(rf"\b{backend} \(apt-get install [^)]*\b{package}\b", missing), (backend, missing)
