# SPDX-License-Identifier: BSD-3-Clause
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
    (["--hosts", "a,b", "--launcher", "external"], "give --coordinator ADDR:PORT"),
    (["--hosts", "a,b", "--launcher", "external", "--coordinator", "10.0.0.1", "--token-file", "t"],
     "give --coordinator ADDR:PORT"),
    (["--hosts", "a,b", "--launcher", "external", "--coordinator", "10.0.0.1:7000", "--backend", "mpi",
      "--token-file", "t"], "each MPI pair is a job of its own launcher"),
    (["--hosts", "a,b", "--token-file", "t"], "--token-file applies only to --launcher external"),
    (["--hosts", "a,b", "--launcher", "external", "--token-file", "/no/such/dir/t"], "does not exist"),
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


def test_a_token_file_that_cannot_be_created_says_why_and_the_fix(tmp_path: Path) -> None:
    from fabscope.errors import FabscopeError
    from fabscope.matrix.agent import create_token_file

    missing = tmp_path / "no-such-dir" / "token"
    with pytest.raises(FabscopeError) as exc:
        create_token_file(missing)
    assert exc.value.exit_code == 2
    assert str(missing) in str(exc.value) and f"create the directory {missing.parent}" in str(exc.value)
    made = tmp_path / "token"
    token = create_token_file(made)
    assert made.read_text().strip() == token and made.stat().st_mode & 0o777 == 0o600


def test_agent_refuses_a_token_file_others_can_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("x" * 32 + "\n")
    token.chmod(0o644)
    assert cli.main(["matrix-agent", "--coordinator", "127.0.0.1:1", "--token-file", str(token)]) == 2
    assert f"chmod 600 {token}" in capsys.readouterr().err
    token.chmod(0o600)
    token.write_text("short\n")
    assert cli.main(["matrix-agent", "--coordinator", "127.0.0.1:1", "--token-file", str(token)]) == 2
    assert "at least 16" in capsys.readouterr().err
