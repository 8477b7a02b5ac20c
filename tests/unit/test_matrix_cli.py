"""`fabscope matrix` refuses what it cannot run before starting anything (exit 2, one clear line)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from fabscope import cli
from fabscope.matrix.cli import read_hostfile


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = cli.main(["matrix", *argv], execute=False)
    err = capsys.readouterr().err
    assert rc == 2, err
    return err


def test_accepted(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# nodes\nn01 slots=8\nn02\n\nn03   # spare\n")
    assert read_hostfile(hostfile) == ["n01", "n02", "n03"]
    assert cli.main(["matrix", "--hostfile", str(hostfile), "--pattern", "lat,bw", "--sizes", "64K"],
                    execute=False) == 0
    pairs = tmp_path / "pairs"
    pairs.write_text("n01 n03\n")
    assert cli.main(["matrix", "--hostfile", str(hostfile), "--pairs", str(pairs)], execute=False) == 0


@pytest.mark.parametrize("argv, says", [
    (["--hosts", "a"], "a matrix needs at least 2 hosts"),
    (["--hosts", "a,b", "--sizes", "8:1M"], "a matrix judges one message size per pattern"),
    (["--hosts", "a,b", "--pattern", "lat,nope"], "patterns are lat, bw, bibw"),
    (["--hosts", "a,b", "--mca", "btl=tcp"], "--mca/--env apply only to --backend mpi"),
    (["--hosts", "a,b", "--schedule", "ring"], "invalid choice: 'ring'"),
    (["--hosts", "a,b", "--bw-fraction", "2"], "out of range"),
    (["--hosts", "a,b", "--backend", "nope"], "--backend nope: unknown backend"),
    (["--hosts", "a,b,a"], "listed twice"),
    (["--hosts", "a,b", "--launcher", "ssh"], "invalid choice: 'ssh'"),
])
def test_refused(capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    assert says in refused(capsys, *argv)


def test_pairs_file_naming_an_unknown_host(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pairs = tmp_path / "pairs"
    pairs.write_text("a b\nb z\n")
    err = refused(capsys, "--hosts", "a,b,c", "--pairs", str(pairs))
    assert "line 2: z is not among the matrix hosts (a, b, c)" in err


def test_agent_without_token(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FABSCOPE_MATRIX_TOKEN", raising=False)
    rc = cli.main(["matrix-agent", "--coordinator", "127.0.0.1:1"])
    assert rc == 2
    assert "FABSCOPE_MATRIX_TOKEN is not set" in capsys.readouterr().err
