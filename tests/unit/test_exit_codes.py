# SPDX-License-Identifier: BSD-3-Clause
"""One place for the exit codes: python/fabscope/errors.py defines every EXIT_* constant, each code
once, and docs/exit-codes.md lists the codes a fabscope command exits with."""

from __future__ import annotations

import ast
import re

from conftest import REPO

PACKAGE = REPO / "python" / "fabscope"


def _defined(path: str) -> dict[str, int]:
    tree = ast.parse((PACKAGE / path).read_text())
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)
            for t in node.targets if isinstance(t, ast.Name) and t.id.startswith("EXIT_")}


def test_only_errors_py_defines_exit_codes() -> None:
    elsewhere = {str(p.relative_to(PACKAGE)): names for p in PACKAGE.rglob("*.py")
                 if p.name != "errors.py" or p.parent != PACKAGE
                 if (names := _defined(str(p.relative_to(PACKAGE))))}
    assert not elsewhere, f"exit codes defined outside errors.py: {elsewhere}"


def test_each_code_means_one_thing_and_is_documented() -> None:
    codes = _defined("errors.py")
    assert len(set(codes.values())) == len(codes), codes
    table = (REPO / "docs" / "exit-codes.md").read_text()
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert set(codes.values()) <= documented, set(codes.values()) - documented
