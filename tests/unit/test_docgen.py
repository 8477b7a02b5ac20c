# SPDX-License-Identifier: BSD-3-Clause
"""Man pages and shell completions (bash, zsh, fish) come from the argparse tree: every subcommand has its page, every
option of every command is in a page and in the completion, and man(1) renders them without warnings."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fabscope import cli, docgen


@pytest.fixture(scope="module")
def tree() -> docgen.Command:
    return docgen.command_tree(with_engine=True)


def test_one_page_per_subcommand_with_every_option(tree: docgen.Command, tmp_path: Path) -> None:
    from fabscope.launch.engine import option_table

    pages = {p.name: p.read_text() for p in docgen.write_man_pages(tree, tmp_path, engine_table=option_table())}
    parser = cli.build_parser(with_engine=False)
    names = {name for name, _h, _p in docgen._subparsers(parser) if _h != "==SUPPRESS=="}
    assert {f"fabscope-{n}.1" for n in names} | {"fabscope.1", "fabscope-engine.1"} <= set(pages)
    for cmd in tree.walk():
        if cmd.parser is None:
            continue
        page = pages["-".join(cmd.words[:2]) + ".1"]
        for action in docgen._options(cmd.parser):
            for opt in action.option_strings:
                assert docgen._roff(opt) in page, (cmd.name, opt)
    assert "\\fB\\-\\-backend\\fR" in pages["fabscope-run.1"]  # the engine's options, from its table
    for sub in ("netns", "softroce", "slurm"):
        assert f"FABSCOPE TESTBED {sub.upper()}" in pages["fabscope-testbed.1"]


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db is not installed (deps/apt-packages.txt)")
def test_man_renders_the_pages_without_warnings(tree: docgen.Command, tmp_path: Path) -> None:
    for page in docgen.write_man_pages(tree, tmp_path):
        out = subprocess.run(["man", "--warnings", "-l", str(page)], capture_output=True, text=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "MANWIDTH": "100", "LC_ALL": "C.UTF-8"}, check=False)
        assert out.returncode == 0 and out.stderr == "", (page.name, out.stderr)
        assert page.stem.upper() in out.stdout


def _complete(script: Path, line: str) -> list[str]:
    empty_last = 'COMP_WORDS+=("");' if line.endswith(" ") else ""
    bash = (f"source {script}; read -ra COMP_WORDS <<< {line!r}; {empty_last} "
            "COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _fabscope; printf '%s\\n' \"${COMPREPLY[@]}\"")
    out = subprocess.run(["bash", "-c", bash], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.split()


def test_bash_completion_follows_the_tree(tree: docgen.Command, tmp_path: Path) -> None:
    script = tmp_path / "fabscope"
    script.write_text(docgen.bash_completion(tree))
    assert _complete(script, "fabscope te") == ["testbed"]
    assert _complete(script, "fabscope testbed ") == ["netns", "softroce", "slurm"]
    assert _complete(script, "fabscope testbed netns sh") == ["shape-pair"]
    assert _complete(script, "fabscope run --format ") == ["text", "json", "csv", "md"]
    assert "--expect-link-layer" in _complete(script, "fabscope doctor --ex")
    assert "--backend" in _complete(script, "fabscope run --back")  # from the engine's option table


# The zsh and fish completions are loaded by the real shells. zsh: an interactive zsh (on a pty, through
# zsh/zpty) with compinit and the generated _fabscope on $fpath types each line, presses TAB, then Enter;
# `fabscope` there is a function that prints the words it got, i.e. what completion put on the line.
ZSH_DRIVER = r"""
zmodload zsh/zpty
dir=$1; shift
zpty z 'TERM=dumb PS1="%% " zsh -f -i'
zpty -w z "fpath=($dir \$fpath); autoload -Uz compinit; compinit -u -D; unsetopt beep"
zpty -w z 'fabscope() { print -r -- "@@A""RGS:$*@@" }'
for line in "$@"; do
  zpty -w -n z "$line"$'\t'
  zpty -w -n z $'\r'
  zpty -r z out '*@@ARGS:*@@*'
  print -r -- "${${out##*@@ARGS:}%%@@*}"
done
zpty -d z
"""


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (deps/apt-packages.txt)")
def test_zsh_completion_in_zsh(tree: docgen.Command, tmp_path: Path) -> None:
    fpath = tmp_path / "functions"
    fpath.mkdir()
    (fpath / "_fabscope").write_text(docgen.zsh_completion(tree))
    lines = {"fabscope te": "testbed", "fabscope testbed ne": "testbed netns",
             "fabscope testbed netns sh": "testbed netns shape-pair", "fabscope run --form": "run --format",
             "fabscope run --format j": "run --format json", "fabscope doctor --expect-li": "doctor --expect-link-layer",
             "fabscope run --back": "run --backend",  # from the engine's option table
             f"fabscope report {fpath}/_fab": f"report {fpath}/_fabscope"}  # anything else: file names
    out = subprocess.run(["zsh", "-f", "-c", ZSH_DRIVER, "zsh", str(fpath), *lines], capture_output=True, text=True,
                         timeout=60, check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert [line.strip() for line in out.stdout.splitlines()] == list(lines.values()), out.stdout


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed (deps/apt-packages.txt)")
def test_fish_completion_in_fish(tree: docgen.Command, tmp_path: Path) -> None:
    script = tmp_path / "fabscope.fish"
    script.write_text(docgen.fish_completion(tree))

    def complete(line: str) -> list[str]:
        out = subprocess.run(["fish", "--no-config", "-c", f"source {script}; complete -C {line!r}"],
                             capture_output=True, text=True, timeout=60, check=True,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        return [row.split("\t")[0] for row in out.stdout.splitlines()]

    assert complete("fabscope te") == ["testbed"]
    assert complete("fabscope testbed ") == ["netns", "slurm", "softroce"]
    assert complete("fabscope testbed netns sh") == ["shape-pair"]
    assert complete("fabscope run --format ") == ["csv", "json", "md", "text"]
    assert "--expect-link-layer" in complete("fabscope doctor --ex")
    assert complete("fabscope run --back") == ["--backend"]
    assert complete(f"fabscope report {script.parent}/fabscope.f") == [str(script)]
