# SPDX-License-Identifier: BSD-3-Clause
"""scripts/check_skips.py, the last stage of scripts/test.sh, on reports written by the real pytest and
ctest: a skip that tests/expected-skips.txt does not expect fails the run, naming the test and its reason;
an expected one passes; the committed list itself is well formed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "scripts" / "check_skips.py"

SAMPLE = '''
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="needs the frobnicator (package frob)")
def test_needs_frob():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_skips_inside(n):
    if n == 2:
        pytest.skip("two is not here")
'''


def _check(cwd: Path, expected: str, *reports: Path) -> subprocess.CompletedProcess[str]:
    (cwd / "expected.txt").write_text(expected)
    return subprocess.run([sys.executable, str(CHECK), "expected.txt", *map(str, reports)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def pytest_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("skips")
    (d / "test_sample.py").write_text(SAMPLE)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                    "--junitxml=report.xml", "test_sample.py"], cwd=d, capture_output=True, text=True, timeout=120)
    return d / "report.xml"


def test_an_unexpected_pytest_skip_fails_naming_the_test_and_its_reason(pytest_report: Path) -> None:
    got = _check(pytest_report.parent, "# nothing expected\n", pytest_report)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "skips: 2 (0 expected here, 2 not)" in got.stdout
    assert "unexpected skip: pytest: test_sample.py::test_needs_frob: needs the frobnicator (package frob)" in got.stdout
    assert "unexpected skip: pytest: test_sample.py::test_skips_inside[2]: two is not here" in got.stdout


def test_expected_skips_pass_and_only_with_their_reason(pytest_report: Path) -> None:
    both = ("pytest: test_sample.py::test_needs_frob | the frobnicator | not installed on CI\n"
            "pytest: test_sample.py::test_skips_inside[[]*] | is not here | two never is\n")
    got = _check(pytest_report.parent, both, pytest_report)
    assert got.returncode == 0 and "skips: 2 (2 expected here, 0 not)" in got.stdout, got.stdout + got.stderr
    # the same test skipped for another reason than the one expected
    other = both.replace("the frobnicator", "the gizmo")
    got = _check(pytest_report.parent, other, pytest_report)
    assert got.returncode == 1 and "test_needs_frob" in got.stdout and "test_skips_inside" not in got.stdout


def test_a_ctest_skip_is_read_with_the_reason_the_test_printed(tmp_path: Path) -> None:
    """test_placement returns ctest's skip code when it may not run on CPUs 0 and 1 (taskset -c 0)."""
    build = REPO / "build" / "engine"
    if not (build / "CTestTestfile.cmake").exists() or shutil.which("taskset") is None:
        pytest.fail("the engine is not built (`make setup`) or taskset (util-linux) is missing")
    report = tmp_path / "ctest.xml"
    subprocess.run(["taskset", "-c", "0", "ctest", "--test-dir", str(build), "-R", "^test_placement$",
                    "--output-junit", str(report)], capture_output=True, text=True, timeout=120)
    got = _check(tmp_path, "", report)
    assert got.returncode == 1
    assert "unexpected skip: ctest: test_placement: skipped: needs CPUs 0 and 1" in got.stdout, got.stdout
    assert _check(tmp_path, "ctest: test_placement | needs CPUs 0 and 1 | one CPU here\n", report).returncode == 0


def test_the_committed_list_is_well_formed() -> None:
    sys.path.insert(0, str(CHECK.parent))
    import check_skips

    for e in check_skips.read_expected(REPO / "tests" / "expected-skips.txt"):
        assert e.test.startswith(("pytest: ", "ctest: ")), e
