# SPDX-License-Identifier: BSD-3-Clause
"""Locked-memory limit (RLIMIT_MEMLOCK): for this shell, and for the non-interactive
sessions that ssh and mpirun start (they get their limits from pam_limits, which reads
/etc/security/limits.conf and limits.d/*.conf)."""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass

from fabscope.doctor.core import Context, Finding, Severity, check

KIB = 1024
MIB = 1024 * KIB
# Below this, registering even modest buffers fails (CentOS 7 shipped 64 KiB).
TINY = 64 * KIB
# Below this, large-message benchmarks and MPI rendezvous caches fail to register.
SMALL = 64 * MIB

FIX_LIMITS = ("add to /etc/security/limits.d/90-rdma.conf:  '* soft memlock unlimited' and "
              "'* hard memlock unlimited', then log in again (for services: "
              "LimitMEMLOCK=infinity in the systemd unit)")
WHY = ("RDMA pins every registered buffer; ibv_reg_mr fails with ENOMEM past this limit, "
       "and Open MPI then reports a misleading queue-creation error (nccl-tests #206 saw "
       "8192 KiB inside mpirun)")


def fmt_limit(value: int) -> str:
    if value == resource.RLIM_INFINITY:
        return "unlimited"
    if value >= MIB and value % MIB == 0:
        return f"{value // MIB} MiB"
    return f"{value // KIB} KiB"


def _severity(soft: int, rdma_present: bool) -> Severity:
    if soft == resource.RLIM_INFINITY:
        return "ok"
    if not rdma_present:
        return "info"
    if soft <= TINY:
        return "error"
    if soft < SMALL:
        return "warn"
    return "info"


def memlock_shell_findings(soft: int, hard: int, rdma_present: bool) -> list[Finding]:
    sev = _severity(soft, rdma_present)
    evidence = f"getrlimit(RLIMIT_MEMLOCK) in this process: soft {fmt_limit(soft)}, hard {fmt_limit(hard)}"
    if sev == "ok":
        return [Finding("memlock.shell", "ok", "locked-memory limit is unlimited", evidence)]
    why = WHY
    if not rdma_present:
        why += "; no RDMA device here, so it only matters once one exists (or in the Soft-RoCE guest)"
    fix = ("raise it for this shell: `ulimit -l unlimited` (needs the hard limit raised first: "
           + FIX_LIMITS + ")") if hard != resource.RLIM_INFINITY else "`ulimit -l unlimited` in this shell, and " + FIX_LIMITS
    return [Finding("memlock.shell", sev, f"locked-memory limit is {fmt_limit(soft)}", evidence, why, fix)]


@check("memlock.shell", "memlock")
def check_shell(ctx: Context) -> list[Finding]:
    """RLIMIT_MEMLOCK of this process (what `ulimit -l` shows in this shell)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return memlock_shell_findings(soft, hard, bool(ctx.inventory.rdma_devices))


@dataclass
class LimitLine:
    source: str
    lineno: int
    domain: str
    kind: str  # soft, hard, -
    value: int  # bytes, or RLIM_INFINITY


def _parse_value(text: str) -> int | None:
    t = text.strip().lower()
    if t in ("unlimited", "infinity", "-1"):
        return resource.RLIM_INFINITY
    if re.fullmatch(r"[0-9]+", t):
        return int(t) * KIB  # limits.conf memlock is in KiB
    return None


def parse_limits(ctx: Context) -> tuple[list[LimitLine], list[str]]:
    """memlock lines of limits.conf and limits.d/*.conf, in pam_limits' reading order
    (limits.conf first, then limits.d in lexical order; later lines win)."""
    files = [ctx.etc("security/limits.conf")]
    d = ctx.etc("security/limits.d")
    try:
        files += sorted(d / n for n in os.listdir(d) if n.endswith(".conf"))
    except OSError:
        pass
    out: list[LimitLine] = []
    read: list[str] = []
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        read.append(str(f))
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            parts = line.split()
            if len(parts) != 4 or parts[2] != "memlock":
                continue
            val = _parse_value(parts[3])
            if val is None:
                continue
            out.append(LimitLine(str(f), n, parts[0], parts[1], val))
    return out, read


def _pam_limits_in(ctx: Context) -> dict[str, bool | None]:
    """For the PAM stacks that non-interactive sessions use: does pam_limits run?
    None = the file does not exist.  Follows @include/include/substack one level, as
    Debian's sshd includes common-session."""
    res: dict[str, bool | None] = {}
    for name in ("sshd", "common-session-noninteractive"):
        path = ctx.etc(f"pam.d/{name}")
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            res[str(path)] = None
            continue
        found = False
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if "pam_limits.so" in line:
                found = True
            m = re.match(r"(?:@include|session\s+(?:include|substack))\s+(\S+)", line)
            if m and not found:
                try:
                    inc = ctx.etc(f"pam.d/{m.group(1)}").read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                found = any("pam_limits.so" in ln.split("#", 1)[0] for ln in inc.splitlines())
        res[str(path)] = found
    return res


@check("memlock.noninteractive", "memlock")
def check_noninteractive(ctx: Context) -> list[Finding]:
    """memlock for ssh/mpirun sessions: limits.conf + limits.d, and whether pam_limits runs."""
    lines, read = parse_limits(ctx)
    pam = _pam_limits_in(ctx)
    rdma = bool(ctx.inventory.rdma_devices)
    pam_desc = ", ".join(f"{k}: {'pam_limits' if v else ('absent' if v is None else 'no pam_limits')}"
                         for k, v in pam.items())
    # The line that applies to every user ('*'); a later file overrides an earlier one.
    soft: LimitLine | None = None
    for ln in lines:
        if ln.domain == "*" and ln.kind in ("soft", "-"):
            soft = ln
    files = ", ".join(read) if read else f"{ctx.etc('security/limits.conf')} (unreadable)"
    findings: list[Finding] = []
    if soft is None:
        sev: Severity = "warn" if rdma else "info"
        findings.append(Finding(
            "memlock.noninteractive", sev,
            "no memlock line for '*' in limits.conf/limits.d: ssh and mpirun sessions get the "
            "system default (8 MiB on kernels >= 5.16, 64 KiB before)",
            f"read {files}; memlock lines: "
            + ("; ".join(f"{ln.source}:{ln.lineno} {ln.domain} {ln.kind} {ln.value}" for ln in lines) or "none"),
            WHY, FIX_LIMITS))
    else:
        sev2 = _severity(soft.value, rdma)
        title = (f"non-interactive sessions get memlock {fmt_limit(soft.value)} "
                 f"from {soft.source}:{soft.lineno}")
        findings.append(Finding("memlock.noninteractive", sev2, title,
                                f"{soft.source}:{soft.lineno}: * {soft.kind} memlock {fmt_limit(soft.value)}",
                                WHY if sev2 != "ok" else "", FIX_LIMITS if sev2 != "ok" else ""))
    sshd = pam.get(str(ctx.etc("pam.d/sshd")))
    if sshd is False:
        findings.append(Finding(
            "memlock.pam", "warn" if rdma else "info",
            "sshd's PAM stack does not run pam_limits: limits.d is ignored for ssh logins "
            "(and for mpirun's remote daemons)",
            pam_desc, WHY,
            "add 'session required pam_limits.so' to /etc/pam.d/sshd (and keep UsePAM yes in sshd_config)"))
    elif sshd is None:
        findings.append(Finding(
            "memlock.pam", "info",
            "no /etc/pam.d/sshd: no ssh server on this host, so remote launches do not reach it via ssh",
            pam_desc, "mpirun/ssh-launched ranks get their limits through sshd's PAM stack",
            "if this host should accept ssh launches, install openssh-server; its Debian PAM file includes pam_limits"))
    else:
        findings.append(Finding("memlock.pam", "ok", "sshd's PAM stack runs pam_limits", pam_desc))
    return findings
