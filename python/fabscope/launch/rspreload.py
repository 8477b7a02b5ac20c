# SPDX-License-Identifier: BSD-3-Clause
"""`run --backend tcp --preload rsocket|PATH`: the tcp backend's engine under librdmacm's
``librspreload.so``, i.e. what an unmodified sockets application gets over RDMA.

The preload replaces ``socket()`` and friends with rsockets, and falls back to the kernel's TCP,
silently, for any socket it cannot handle (no RDMA device, a peer that is not preloaded, an address
with no RDMA route). This module never trusts it: it finds the library, refuses a host without an
RDMA device, starts the engine with ``LD_PRELOAD``, and marks the record so that the path verdict
(``results.requests``) judges the run against the RDMA device, whose counters only RDMA traffic
moves. A fallback to kernel TCP then shows as ``misrouted``, never as a fast TCP row.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import EXIT_USAGE, FabscopeError
from ..results.counters import Counters

__all__ = ["LABEL", "Preload", "amend_record", "check_host", "engine_env", "explain_failure", "find_library",
           "rdma_devices"]

#: How tables name a run under the preload.
LABEL = "tcp (rspreload)"

# Where librdmacm installs the preload library: Debian/Ubuntu (librdmacm1) in the multiarch
# directory, Fedora/RHEL/SUSE (librdmacm) in lib64, source builds under /usr/local.
_SEARCH = (
    "/usr/lib/*-linux-gnu*/rsocket/librspreload.so",
    "/usr/lib64/rsocket/librspreload.so",
    "/usr/lib/rsocket/librspreload.so",
    "/usr/local/lib*/rsocket/librspreload.so",
)
_SYSFS_RDMA = "/sys/class/infiniband"


def find_library(spec: str, search: tuple[str, ...] = _SEARCH) -> Path:
    """``rsocket`` -> the system's librspreload.so; anything else is a path that must exist."""
    if spec != "rsocket":
        path = Path(spec)
        if not path.is_file():
            raise FabscopeError(f"--preload {spec}: no such file (give `rsocket` for the system's librspreload.so, "
                                "or the path of a preload library)", EXIT_USAGE)
        return path.resolve()
    for pattern in search:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[0])
    raise FabscopeError("--preload rsocket: librspreload.so is not installed here (looked in "
                        f"{', '.join(search)}); install it (Debian/Ubuntu: librdmacm1, Fedora/RHEL: "
                        "librdmacm) or name it with --preload PATH", EXIT_USAGE)


def rdma_devices(sysfs_dir: str = _SYSFS_RDMA) -> list[str]:
    try:
        return sorted(os.listdir(sysfs_dir))
    except OSError:
        return []


def check_host(device: str | None, sysfs_dir: str = _SYSFS_RDMA) -> None:
    """The preload needs an RDMA device here; without one it would run plain TCP and say nothing."""
    have = rdma_devices(sysfs_dir)
    if not have:
        try:
            nets = ", ".join(sorted(os.listdir("/sys/class/net")))
        except OSError:
            nets = "unknown"
        raise FabscopeError(
            "--preload rsocket needs an RDMA device and this host has none (/sys/class/infiniband is "
            f"missing or empty; network devices: {nets}). Under the preload every socket would fall back "
            "to kernel TCP without a word: use plain --backend tcp for that, or run on a host with RDMA "
            "(`fabscope testbed softroce run -- ...` boots one)", EXIT_USAGE)
    if device and device not in have:
        raise FabscopeError(f"--device {device} with --preload: no such RDMA device on this host (the preload "
                            f"takes the RDMA device, not its netdev); it has: {', '.join(have)}", EXIT_USAGE)


def engine_env(library: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The engine's environment: ours, with the library first in LD_PRELOAD."""
    env = dict(os.environ if base is None else base)
    before = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{library}:{before}" if before else str(library)
    return env


def amend_record(rec: MutableMapping[str, Any], library: Path, device: str | None) -> None:
    """Mark a raw engine record as run under the preload (before parse_record attaches the verdict).

    ``transport.local.preload.device`` is the RDMA device the bytes had to take: the one asked for
    with --device, else the RDMA device behind the netdev the connection left from (from the
    record's own counter snapshot, which lists each port's netdevs)."""
    transport = rec.setdefault("transport", {})
    local = transport.setdefault("local", {})
    if not isinstance(local, dict):
        return
    want = device or _rdma_behind(rec, str(local.get("address_owner") or ""))
    local["preload"] = {"library": str(library), "label": LABEL, "device": want,
                        "device_selection": "--device" if device else
                        f"the RDMA device of {local.get('address_owner') or '?'}, the netdev the connection used"}


def _rdma_behind(rec: Mapping[str, Any], netdev: str) -> str | None:
    local = Counters.of_record(rec).local
    return local.rdma_behind(netdev) if local else None


def explain_failure(error: str) -> str:
    """An engine's error under the preload, with the usual cause when the data connection was refused:
    the peer's engine is not under the preload, and an rsocket cannot connect to a kernel TCP socket
    (rdma_cm finds no rsocket listening on that port and rejects the connection)."""
    low = error.lower()
    if "data connection" not in low or not ("refused" in low or "not established" in low):
        return error
    return (f"{error}. Under --preload both engines must run under librspreload: an rsocket cannot connect to "
            "a kernel TCP socket. Point --peer at a `fabscope serve --preload rsocket` (it can run beside a "
            "plain serve, on its own --port)")


@dataclass(frozen=True)
class Preload:
    """A run plan's preload: the library, and the RDMA device named with --device (or None)."""

    library: Path
    device: str | None = None

    @staticmethod
    def of(spec: str, device: str | None = None) -> Preload:
        return Preload(find_library(spec), device)

    def engine_env(self) -> dict[str, str]:
        return engine_env(self.library)

    def amend_record(self, rec: MutableMapping[str, Any]) -> None:
        amend_record(rec, self.library, self.device)
