# SPDX-License-Identifier: BSD-3-Clause
"""Running iproute2 commands for the netns testbed: one place for the deadline, the error text
and the host naming rules (netns.py, netns_shape.py and netns_launch.py all use it)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from typing import Any

from . import preflight

# Testbed hosts are named fs-a ... fs-p: at most 16, in this order.
HOST_LETTERS = "abcdefghijklmnop"
MAX_HOSTS = len(HOST_LETTERS)
ALL_HOSTS = tuple(f"fs-{c}" for c in HOST_LETTERS)
# Every iproute2/tc call is bounded: a wedged netlink call fails the step instead of hanging it.
COMMAND_TIMEOUT_S = 30.0


class TestbedError(RuntimeError):
    """A testbed step failed; the message says what, why, and how to fix it."""

    __test__ = False  # not a pytest test class, despite the name


def host_index(host: str) -> int:
    """0 for fs-a, 1 for fs-b, ...; TestbedError for a name that is not a testbed host."""
    if host in ALL_HOSTS:
        return ALL_HOSTS.index(host)
    raise TestbedError(
        f"{host!r} is not a testbed host name; the testbed's hosts are fs-a ... fs-{HOST_LETTERS[-1]} "
        f"(`fabscope testbed netns up --hosts N` makes the first N)"
    )


def require_tools(*tools: str) -> None:
    missing = preflight.not_on_path(tools)
    if missing:
        raise TestbedError(
            f"the netns testbed needs {', '.join(missing)} (iproute2) but it is not on PATH; "
            "install it with `make setup` (or `apt-get install iproute2`)"
        )


def require_root() -> None:
    preflight.require_root(
        TestbedError, "creating network namespaces, veth links, bridges and qdiscs needs root (CAP_NET_ADMIN)",
        "sudo fabscope testbed netns up")


def run(args: Sequence[str], *, what: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise TestbedError(
            f"{what} failed: `{' '.join(args)}` did not finish within {COMMAND_TIMEOUT_S:g} s"
        ) from None
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip() or f"exit code {proc.returncode}"
        raise TestbedError(f"{what} failed: `{' '.join(args)}` said: {err}")
    return proc


def ns_exists(ns: str) -> bool:
    return os.path.exists(f"/run/netns/{ns}")


def link_exists(ns: str | None, dev: str) -> bool:
    """Whether ``dev`` exists in namespace ``ns`` (None: this process's own namespace)."""
    if ns is not None and not ns_exists(ns):
        return False
    where = ["-n", ns] if ns is not None else []
    return run(["ip", *where, "link", "show", "dev", dev], what="look up a link", check=False).returncode == 0


def json_out(args: Sequence[str], what: str) -> list[dict[str, Any]]:
    out = run(args, what=what).stdout.strip()
    data = json.loads(out) if out else []
    return data if isinstance(data, list) else []


def sysctl(ns: str, key: str, value: str, *, check: bool = True) -> None:
    """Set a sysctl inside ``ns`` (``ip netns exec`` gives the namespace's own /proc/sys/net)."""
    path = "/proc/sys/" + key.replace(".", "/")
    run(["ip", "netns", "exec", ns, "sh", "-c", f"echo {value} > {path}"],
        what=f"set {key}={value} in {ns}", check=check)
