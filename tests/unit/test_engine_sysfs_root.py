# SPDX-License-Identifier: BSD-3-Clause
"""Every sysfs read of the engine goes through sysfs.c (fs_sysfs_root, fs_sysfs_path), so a fixture
root (FABSCOPE_SYSFS_ROOT: copies of real layouts) reaches the backends' device checks too."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

RXE = REPO / "tests" / "fixtures" / "sysfs" / "rxe-qemu" / "sys"


def _engine_error(engine: Path, root: Path, *args: str) -> dict[str, object]:
    out = subprocess.run([str(engine), *args, "--peer", "127.0.0.1:1"], capture_output=True, text=True, timeout=30,
                         check=False, env=dict(os.environ, FABSCOPE_SYSFS_ROOT=str(root)))
    assert out.returncode == 2, out
    record: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return record


def test_no_engine_source_spells_a_sysfs_path() -> None:
    spelled = [f"{p.relative_to(REPO)}:{n}" for p in (REPO / "engine" / "src").rglob("*.c")
               for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r'"/sys/', line)]
    assert not spelled, f"sysfs paths written literally (use fs_sysfs_path): {spelled}"


def test_a_fixture_root_reaches_the_rsocket_device_check(engine: Path, tmp_path: Path) -> None:
    listing = subprocess.run([str(engine), "--list-backends"], capture_output=True, text=True, timeout=30, check=True)
    if not any(line.split()[:1] == ["rsocket"] for line in listing.stdout.splitlines()):
        pytest.skip("this engine was built without librdmacm (no rsocket backend)")
    # The rxe-qemu layout has rxe0 on eth0: the refusal lists it, whatever this host has.
    err = _engine_error(engine, RXE, "--backend", "rsocket", "--device", "nosuch")
    assert "it has: rxe0 (netdev eth0)" in str(err["message"])
    # A root without RDMA devices: the message names that root, not /sys.
    err = _engine_error(engine, tmp_path, "--backend", "rsocket")
    assert f"({tmp_path}/class/infiniband does not exist)" in str(err["message"])
