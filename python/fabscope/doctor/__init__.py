# SPDX-License-Identifier: BSD-3-Clause
"""fabscope doctor: every known pitfall of an RDMA/HPC host, with evidence and the fix.

Use :func:`run_doctor` with a :class:`Context`; the check modules register themselves on
import (one module per area)."""

from __future__ import annotations

import socket
from typing import Any

from fabscope.doctor import (  # noqa: F401  (imported for their @check registrations)
    cpu,
    firewall,
    gid,
    memlock,
    net,
    ofi,
    openmpi,
    ports,
    ucx,
)
from fabscope.doctor.core import (
    CHECKS,
    EXIT_CODES,
    EXIT_USAGE,
    SCHEMA,
    CommandResult,
    CommandRunner,
    Context,
    Finding,
    Report,
    render_text,
    run_checks,
)
from fabscope.doctor.crosshost import HostFacts, collect_host_facts, compare_hosts

__all__ = [
    "CHECKS", "EXIT_CODES", "EXIT_USAGE", "SCHEMA", "CommandResult", "CommandRunner", "Context",
    "Finding", "HostFacts", "Report", "collect_host_facts", "compare_hosts", "render_text",
    "run_doctor",
]


def run_doctor(ctx: Context, checks: list[str] | None = None,
               peer_facts: dict[str, Any] | HostFacts | None = None) -> Report:
    """Run the registered checks (or only ``checks``) and, given the facts of a peer host,
    the cross-host comparison."""
    findings = run_checks(ctx, checks)
    if peer_facts is not None:
        local = collect_host_facts(ctx)
        findings.extend(compare_hosts(local, peer_facts if isinstance(peer_facts, HostFacts)
                                      else HostFacts.from_dict(peer_facts)))
    host = socket.gethostname() if ctx.live else f"sysfs root {ctx.sysfs_root}"
    return Report(findings=findings, host=host)
