# SPDX-License-Identifier: BSD-3-Clause
"""Every source file carries the license's SPDX line (scripts/spdx.py), and --fix puts it where the
check looks for it: first, or second after a shebang."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from conftest import REPO


def _spdx() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spdx", REPO / "scripts" / "spdx.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_source_file_carries_the_spdx_line() -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "spdx.py")], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr


def test_the_check_covers_every_kind_of_source_file() -> None:
    names = {str(p.relative_to(REPO)) for p in _spdx().source_files()}
    for expected in ("engine/src/core/engine.c", "engine/src/core/engine.h", "python/fabscope/cli.py",
                     "scripts/setup.sh", "engine/CMakeLists.txt", "engine/mpi.cmake", "Makefile",
                     "packaging/debian/rules", "testbed/netns/netns", "scripts/spdx.py"):
        assert expected in names
    assert not any(name.startswith("tests/fixtures/") for name in names)


def test_fix_adds_the_line_the_check_looks_for(tmp_path: Path) -> None:
    spdx = _spdx()
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.c").write_text("int a;\n")
    (repo / "src" / "b.py").write_text('"""doc"""\n')
    (repo / "run").write_text("#!/bin/sh\necho hi\n")
    (repo / "notes.md").write_text("# not source\n")
    shutil.copytree(REPO / "scripts", repo / "scripts", ignore=shutil.ignore_patterns("*.sh", "__pycache__"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    script = [sys.executable, str(repo / "scripts" / "spdx.py")]
    before = subprocess.run(script, capture_output=True, text=True, timeout=60, check=False)
    assert before.returncode == 1
    for name in ("src/a.c", "src/b.py", "run"):
        assert name in before.stderr
    assert "notes.md" not in before.stderr
    subprocess.run([*script, "--fix"], capture_output=True, timeout=60, check=True)
    assert subprocess.run(script, capture_output=True, timeout=60, check=False).returncode == 0
    assert (repo / "src" / "a.c").read_text() == f"/* {spdx.TAG} */\nint a;\n"
    assert (repo / "src" / "b.py").read_text() == f'# {spdx.TAG}\n"""doc"""\n'
    assert (repo / "run").read_text() == f"#!/bin/sh\n# {spdx.TAG}\necho hi\n"
