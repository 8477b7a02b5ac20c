#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Fails when a test was skipped on this machine and tests/expected-skips.txt does not expect it.

    python scripts/check_skips.py EXPECTED REPORT.xml...

REPORT.xml: the JUnit XML reports of a `make test` (pytest --junitxml, ctest --output-junit).
A skip says why a test could not run here; one whose reason does not hold on the machine that runs
`make test` (every package of deps/ installed, root, two CPUs, no RDMA device) hides a test that should
have run, and the stage that ran it still passed. EXPECTED lists the skips that are right here, one a
line: `TEST | REASON | why it holds`, TEST an fnmatch pattern over the test's name as this script prints
it (`pytest: FILE::TEST[PARAM]` or `ctest: NAME`), REASON a piece of the skip's reason. Exit 0 when
every skip is expected, 1 (naming each unexpected skip and its reason) otherwise, 2 for bad usage.
"""

from __future__ import annotations

import fnmatch
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Expected:
    test: str
    reason: str
    why: str
    line: int


@dataclass(frozen=True)
class Skip:
    test: str
    reason: str


def read_expected(path: Path) -> list[Expected]:
    out = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"{path}:{n}: expected `TEST | REASON | why it holds`, got {raw!r}")
        out.append(Expected(parts[0], parts[1], parts[2], n))
    return out


def _pytest_name(case: ET.Element) -> str:
    """FILE::TEST[PARAM] from pytest's classname (dotted module path, then any class) and name."""
    parts = (case.get("classname") or "").split(".")
    # the module is the last dotted part that names a file; what follows is a class
    for i in range(len(parts), 0, -1):
        path = "/".join(parts[:i]) + ".py"
        if Path(path).exists():
            return "::".join([path, *parts[i:], case.get("name") or ""])
    return f"{case.get('classname')}::{case.get('name')}"


def read_skips(report: Path) -> list[Skip]:
    """The skipped test cases of one JUnit report, with their reasons."""
    root = ET.parse(report).getroot()
    ctest = root.tag == "testsuite" and any(c.get("status") for c in root.iter("testcase"))
    out = []
    for case in root.iter("testcase"):
        skipped = case.find("skipped")
        if skipped is None:
            continue
        if ctest:
            # ctest's own message is only "SKIP_RETURN_CODE=77": the reason is the line the test printed
            said = [ln for ln in (case.findtext("system-out") or "").splitlines() if ln.startswith("skipped")]
            out.append(Skip(f"ctest: {case.get('name')}", said[0] if said else skipped.get("message", "")))
        else:
            out.append(Skip(f"pytest: {_pytest_name(case)}", skipped.get("message", "")))
    return out


def unexpected(skips: list[Skip], expected: list[Expected]) -> list[Skip]:
    return [s for s in skips
            if not any(fnmatch.fnmatchcase(s.test, e.test) and e.reason in s.reason for e in expected)]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        expected = read_expected(Path(argv[0]))
    except (OSError, ValueError) as e:
        print(f"check_skips: {e}", file=sys.stderr)
        return 2
    skips: list[Skip] = []
    for report in argv[1:]:
        try:
            skips += read_skips(Path(report))
        except (OSError, ET.ParseError) as e:
            print(f"check_skips: cannot read the test report {report}: {e}", file=sys.stderr)
            return 2
    bad = unexpected(skips, expected)
    print(f"skips: {len(skips)} ({len(skips) - len(bad)} expected here, {len(bad)} not)")
    for s in bad:
        print(f"  unexpected skip: {s.test}: {s.reason}")
    if bad:
        print(f"A skip above says a test could not run on this machine. If its reason holds here, add a line to "
              f"{argv[0]} saying why; if not, fix what made it skip (a missing package goes in deps/).")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
