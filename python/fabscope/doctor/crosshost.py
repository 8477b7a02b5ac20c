# SPDX-License-Identifier: BSD-3-Clause
"""Cross-host comparison: software versions and MTUs that differ between two hosts.

:func:`collect_host_facts` returns a JSON-serialisable dict so it can travel over
`fabscope serve`; :func:`compare_hosts` compares two of them."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from typing import Any

from fabscope import __version__
from fabscope.devices import read_text
from fabscope.doctor.core import Context, Finding, Severity

FACTS_SCHEMA = "fabscope.hostfacts/1"


# The software both hosts should run alike: (fact, label, why a difference matters). A fact
# is a key of HostFacts.versions and of the facts JSON.
_VERSION_FIELDS = [
    ("kernel", "kernel", "the RDMA core and drivers are in the kernel; differences change behaviour"),
    ("rdma_core", "rdma-core", "user-space verbs providers must match across hosts for reproducible results"),
    ("ucx", "UCX", "UCX wire protocol and defaults change between releases; mixed versions may not connect"),
    ("openmpi", "Open MPI", "Open MPI requires the same version on every rank"),
    ("libfabric", "libfabric", "providers differ between releases"),
    ("fabscope", "fabscope", "the control protocol is versioned; both ends must agree"),
]


@dataclass
class HostFacts:
    hostname: str
    # fact of _VERSION_FIELDS -> the version found, None when not found
    versions: dict[str, str | None] = field(default_factory=dict)
    netdev_mtus: dict[str, int] = field(default_factory=dict)
    port_active_mtus: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostFacts:
        if "hostname" not in data:
            raise ValueError("host facts without a 'hostname' field")
        return cls(hostname=data["hostname"], versions={fact: data.get(fact) for fact, _, _ in _VERSION_FIELDS},
                   netdev_mtus=data.get("netdev_mtus", {}), port_active_mtus=data.get("port_active_mtus", {}))

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (flat: each version under its fact's name)."""
        return {"hostname": self.hostname, **{fact: self.versions.get(fact) for fact, _, _ in _VERSION_FIELDS},
                "netdev_mtus": dict(self.netdev_mtus), "port_active_mtus": dict(self.port_active_mtus)}


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1) if m else None


def collect_host_facts(ctx: Context) -> dict[str, Any]:
    """Versions and MTUs of this host, as a JSON-serialisable dict."""
    run = ctx.runner.run
    kernel = read_text(ctx.proc("sys/kernel/osrelease")) or os.uname().release
    rdma_core = None
    r = run(["dpkg-query", "-W", "-f=${Version}", "rdma-core"])
    if r.ok and r.stdout.strip():
        rdma_core = r.stdout.strip()
    else:
        r = run(["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", "rdma-core"])
        if r.ok and r.stdout.strip():
            rdma_core = r.stdout.strip()
    r = run(["ompi_info", "--version"])
    ompi = _first(r"Open MPI v(\S+)", r.stdout) if r.ok else None
    # The versions of the UCX and libfabric the engine runs with, as the libraries report them.
    libs = ctx.engine_inventory
    ucx, ofi = libs.ucx.version, libs.ofi.version
    inv = ctx.inventory
    facts = HostFacts(
        hostname=socket.gethostname() if ctx.live else f"sysfs:{ctx.sysfs_root}",
        versions={"kernel": kernel, "rdma_core": rdma_core, "ucx": ucx, "openmpi": ompi, "libfabric": ofi,
                  "fabscope": __version__},
        netdev_mtus={nd.name: nd.mtu for nd in inv.netdevs if nd.mtu is not None and nd.kind != "loopback"},
        port_active_mtus={f"{d.name}/{p.num}": p.active_mtu for d, p in inv.ports() if p.active_mtu is not None},
    )
    return {"schema": FACTS_SCHEMA, **facts.to_dict()}


def compare_hosts(local: HostFacts | dict[str, Any], peer: HostFacts | dict[str, Any]) -> list[Finding]:
    """Findings for every version and MTU that differs between ``local`` and ``peer``."""
    a = local if isinstance(local, HostFacts) else HostFacts.from_dict(local)
    b = peer if isinstance(peer, HostFacts) else HostFacts.from_dict(peer)
    out: list[Finding] = []
    for attr, label, why in _VERSION_FIELDS:
        va, vb = a.versions.get(attr), b.versions.get(attr)
        ev = f"{a.hostname}: {label} {va or 'not found'}; {b.hostname}: {label} {vb or 'not found'}"
        if va == vb:
            out.append(Finding(f"crosshost.{attr}", "ok", f"same {label} on both hosts ({va or 'absent'})", ev))
            continue
        sev: Severity = "error" if attr in ("openmpi", "fabscope") and va and vb else "warn"
        missing = a.hostname if not va else (b.hostname if not vb else None)
        fix = (f"install {label} on {missing}" if missing else
               f"install the same {label} version on both hosts")
        out.append(Finding(f"crosshost.{attr}", sev, f"{label} differs: {va or 'absent'} vs {vb or 'absent'}",
                           ev, why, fix))
    for nd in sorted(set(a.netdev_mtus) & set(b.netdev_mtus)):
        ma, mb = a.netdev_mtus[nd], b.netdev_mtus[nd]
        if ma != mb:
            out.append(Finding(
                f"crosshost.mtu.{nd}", "warn", f"{nd} MTU differs: {ma} on {a.hostname}, {mb} on {b.hostname}",
                f"{a.hostname}: {nd} mtu {ma}; {b.hostname}: {nd} mtu {mb}",
                "packets larger than the smaller MTU are dropped or fragmented; RoCE negotiates the "
                "smaller path MTU and runs slower than either host expects",
                f"`ip link set {nd} mtu {max(ma, mb)}` on the host with the smaller MTU (and on the switch)"))
    pa = min(a.port_active_mtus.values(), default=None)
    pb = min(b.port_active_mtus.values(), default=None)
    if pa is not None and pb is not None and pa != pb:
        small, big = (a, b) if pa < pb else (b, a)
        out.append(Finding(
            "crosshost.rdma_mtu", "warn", f"RDMA active MTU differs: {pa} on {a.hostname}, {pb} on "
            f"{b.hostname}",
            f"{a.hostname}: {a.port_active_mtus}; {b.hostname}: {b.port_active_mtus}",
            "a connection uses the smaller MTU of the two ends; results differ from what each host "
            "reports alone",
            f"on {small.hostname}, the host with the smaller MTU: for RoCE give the port's netdev the "
            f"MTU it has on {big.hostname} (e.g. `ip link set dev <netdev> mtu 9000`; that host's "
            "`fabscope doctor` "
            "ports.mtu finding names the netdev and whether the netdev or the RDMA side limits it); "
            "for InfiniBand raise the SM partition MTU"))
    return out
