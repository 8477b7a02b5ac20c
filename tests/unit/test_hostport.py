# SPDX-License-Identifier: BSD-3-Clause
"""One reader of HOST[:PORT] and [IPv6]:PORT (fabscope/hostport.py): what a user types (strict, the
forms the engine's fs_split_hostport takes) and what a record or a peer reports (lenient)."""
from __future__ import annotations

import argparse

import pytest

from fabscope import argtypes, hostport
from fabscope.errors import FabscopeError
from fabscope.session import control

GOOD = [
    ("node1", ("node1", 18515)),
    ("node1:4000", ("node1", 4000)),
    ("10.0.0.1:0", ("10.0.0.1", 0)),
    ("[fe80::1]:4000", ("fe80::1", 4000)),
    ("[fe80::1]", ("fe80::1", 18515)),
    ("fe80::1", ("fe80::1", 18515)),  # bare IPv6: no port
    ("node1:65535", ("node1", 65535)),
]
# As the engine: an empty port after a colon, text after ']' that is not ':PORT', an unclosed
# bracket, no host, a port beyond 65535 or not of ASCII digits (and, stricter than its strtol, a sign).
BAD = ["node1:", "[fe80::1]x", "[fe80::1]:", "[fe80::1", ":4000", "[]:4000", "node1:65536", "node1:+80",
       "node1:２８２５０", "node1:²", ""]


@pytest.mark.parametrize(("text", "want"), GOOD)
def test_the_forms_a_user_types(text: str, want: tuple[str, int]) -> None:
    assert hostport.split(text, 18515) == want
    assert control.split_hostport(text, 18515) == want


@pytest.mark.parametrize("text", BAD)
def test_what_is_refused_and_said(text: str) -> None:
    with pytest.raises(ValueError):
        hostport.split(text, 18515)
    with pytest.raises(FabscopeError, match=r"is not HOST, HOST:PORT or \[IPv6\]:PORT"):
        control.split_hostport(text, 18515)
    with pytest.raises(argparse.ArgumentTypeError):
        argtypes.host_port(18515)(text)


@pytest.mark.parametrize(("address", "host"), [
    ("10.0.0.1:4000", "10.0.0.1"), ("[fe80::1]:4000", "fe80::1"), ("fe80::1", "fe80::1"), ("10.0.0.1", "10.0.0.1"),
    (" 10.0.0.1:4000 ", "10.0.0.1"), ("[fe80::1", None), ("", None), (None, None), (4000, None), ("[]:1", None),
])
def test_the_host_of_a_reported_address(address: object, host: str | None) -> None:
    """Records (local_address, peer_address) and --peer texts: one answer for the path verdict and
    the capture's peer."""
    assert hostport.host_of(address) == host
