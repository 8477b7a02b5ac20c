# SPDX-License-Identifier: BSD-3-Clause
"""The .deb in a Soft-RoCE guest: `fabscope testbed softroce run --package` installs it at boot
(dpkg -i; the guest image has its Depends) and the packaged /usr/bin/fabscope with its engine measures
over a real verbs device (rdma_rxe). The other guest tests run the tree from the read-only share:
installing the package costs about 11 s of boot per guest under TCG (packaging/README.md says why
they do not all use it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fabscope import __version__
from fabscope.testbed import softroce

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.two_at_once,
    pytest.mark.xdist_group("guest"),
    pytest.mark.softroce,
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None,
                       reason="the Soft-RoCE testbed needs qemu-system-x86_64 (package qemu-system-x86)"),
]

SCRIPT = (
    "command -v fabscope > /out/which; test ! -e /usr/local/bin/fabscope-engine; echo \"tree-engine=$?\" >> /out/which; "
    "fabscope --version > /out/version; "
    "fabscope run --loopback --backend verbs --device rxe0 --sizes 8,4K --iters 200 --format json > /out/run.jsonl; "
    "echo run=$? > /out/run.rc"
)


def test_packaged_fabscope_measures_verbs_in_a_guest(deb: Path, tmp_path: Path) -> None:
    rc = softroce.run(["sh", "-c", SCRIPT], out_dir=tmp_path, timeout_s=600, package=deb)
    assert rc == 0
    assert (tmp_path / "which").read_text().split() == ["/usr/bin/fabscope", "tree-engine=0"]
    version = (tmp_path / "version").read_text()
    assert version.startswith(f"fabscope {__version__}\n"), version
    assert f"engine: /usr/bin/fabscope-engine (version {__version__})" in version, version
    assert "verbs" in version.split("backends built:")[1].splitlines()[0], version
    assert (tmp_path / "run.rc").read_text().strip() == "run=0"
    records = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [r["size"] for r in records] == [8, 4096]
    for rec in records:
        assert rec["version"] == __version__ and rec["backend"] == "verbs"
        assert rec["transport"]["local"]["device"] == "rxe0"
        assert rec["latency_us"]["p50"] > 0


def test_package_that_is_not_a_deb_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = softroce.main(["run", "--package", str(tmp_path / "fabscope.tar.gz"), "--", "true"])
    assert rc == softroce.EXIT_TESTBED_FAILURE
    assert "no such file; build the package with `make deb`" in capsys.readouterr().err
