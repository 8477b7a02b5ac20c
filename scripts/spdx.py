#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Every source file of fabscope starts with its license's SPDX line (after a shebang line where
there is one): `scripts/spdx.py` checks that and names the files without it (exit 1);
`scripts/spdx.py --fix` adds the line to them. Source files are the C, headers, Python, shell,
CMake and make files and every script with a shebang; the sysfs fixtures are copies of real
layouts and stay as they were taken (tests/fixtures); NOT_OURS says why the guest's baked files wait."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

LICENSE = "BSD-3-Clause"
TAG = f"SPDX-License-Identifier: {LICENSE}"
REPO = Path(__file__).resolve().parents[1]

C_SUFFIXES = {".c", ".h"}
HASH_SUFFIXES = {".py", ".sh", ".cmake"}
HASH_NAMES = {"CMakeLists.txt", "Makefile", "rules"}
# The sysfs fixtures are copies of real layouts. The Soft-RoCE guest's baked files are hashed into the
# guest image's cache key (testbed/softroce_base.py BAKED_FILES): a line added there makes every host
# rebuild the image (many minutes, as root); they get theirs with the next change of the image recipe.
NOT_OURS = ("tests/fixtures/", "python/fabscope/testbed/softroce_guest/fabscope-init",
            "python/fabscope/testbed/softroce_guest/initramfs-hook")


def _tracked(repo: Path) -> list[str]:
    """The tree's files, tracked and new (not ignored): a new file is checked before it is committed."""
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "-co", "--exclude-standard"],
                         capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


def comment_style(path: Path) -> str | None:
    """How the SPDX line is written in this file ("c": /* */, "hash": #), or None: not a source file."""
    if path.suffix in C_SUFFIXES:
        return "c"
    if path.suffix in HASH_SUFFIXES or path.name in HASH_NAMES:
        return "hash"
    try:
        with path.open("rb") as f:
            return "hash" if f.read(2) == b"#!" else None
    except OSError:
        return None


def source_files(repo: Path = REPO) -> list[Path]:
    return [repo / name for name in _tracked(repo)
            if not name.startswith(NOT_OURS) and (repo / name).is_file() and comment_style(repo / name)]


def spdx_line(style: str) -> str:
    return f"/* {TAG} */\n" if style == "c" else f"# {TAG}\n"


def has_line(path: Path) -> bool:
    """The SPDX line is the first line, or the second after a shebang."""
    lines = path.read_text(encoding="utf-8").splitlines()[:2]
    head = lines[1:2] if lines[:1] and lines[0].startswith("#!") else lines[:1]
    return any(TAG in line for line in head)


def fix(path: Path) -> None:
    style = comment_style(path)
    assert style is not None, path
    text = path.read_text(encoding="utf-8")
    at = text.index("\n") + 1 if text.startswith("#!") else 0
    path.write_text(text[:at] + spdx_line(style) + text[at:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="add the line to the files that lack it")
    args = parser.parse_args(argv)
    missing = [p for p in source_files() if not has_line(p)]
    if args.fix:
        for path in missing:
            fix(path)
        print(f"spdx: added `{TAG}` to {len(missing)} file(s)")
        return 0
    if missing:
        names = "\n  ".join(str(p.relative_to(REPO)) for p in missing)
        print(f"spdx: {len(missing)} source file(s) without `{TAG}` on their first line (the second after a "
              f"shebang):\n  {names}\nfix: python3 scripts/spdx.py --fix", file=sys.stderr)
        return 1
    print(f"spdx: every source file carries `{TAG}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
