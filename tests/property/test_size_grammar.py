# SPDX-License-Identifier: BSD-3-Clause
"""Sizes have one grammar and two readers: the engine's (fs_parse_size, for the options it takes)
and argtypes.byte_size (for front-end-only options such as serve's --max-size). Random strings in
and around the grammar must get the same answer from both: refused by both, or read as the same
number of bytes (the engine says its number when the value is beyond the option's range)."""

from __future__ import annotations

import argparse
import re
import subprocess

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fabscope import argtypes
from fabscope.launch.engine import engine_path

LIMIT = 2 << 30  # --tcp-sndbuf's range in the engine's option table: 0 to 2G


def python_reads(text: str) -> int | None:
    try:
        return argtypes.byte_size(0)(text)
    except argparse.ArgumentTypeError:
        return None


SIZES = st.one_of(
    st.from_regex(r"\A[0-9]{1,11}(?:[KMGkmgTBi]?(?:iB|B|i|b|I)?)?\Z"),
    st.text(alphabet="0123456789KMGkmgiB+-. x", max_size=8),
)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(SIZES)
@example("4Ki")
@example("4B")
@example("4iB")
@example("99999999999G")
@example("18446744073709551615")
@example("18446744073709551616")
@example("17179869184G")
def test_engine_and_front_end_read_sizes_alike(text: str) -> None:
    ours = python_reads(text)
    out = subprocess.run([str(engine_path()), "--validate-only", f"--tcp-sndbuf={text}"], capture_output=True,
                         text=True, timeout=30, check=False)
    if ours is None:  # both refuse it; the engine names an empty value as such
        said = "an empty value" if text == "" else "not a size"
        assert out.returncode == 2 and said in out.stderr, (text, out.stderr)
    elif ours <= LIMIT:
        assert out.returncode == 0, (text, ours, out.stderr)
    else:
        said = re.search(r"--tcp-sndbuf: (\d+) bytes is out of range", out.stderr)
        assert out.returncode == 2 and said and int(said.group(1)) == ours, (text, ours, out.stderr)
