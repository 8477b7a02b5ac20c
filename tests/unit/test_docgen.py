"""Man pages and bash completion come from the argparse tree: every subcommand has its page, every
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
    from fabscope.engine import option_table

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
