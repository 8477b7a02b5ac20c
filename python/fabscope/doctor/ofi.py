"""libfabric: which providers are available (`fi_info -l`), and whether FI_PROVIDER names
one that exists."""

from __future__ import annotations

import re

from fabscope.doctor.core import Context, Finding, check


def parse_fi_info_l(text: str) -> list[str]:
    """`fi_info -l` prints 'name:' lines followed by indented 'version: x' lines."""
    return [m.group(1) for m in re.finditer(r"^([A-Za-z0-9_;]+):\s*$", text, re.MULTILINE)]


@check("ofi", "ofi")
def check_ofi(ctx: Context) -> list[Finding]:
    """libfabric providers, FI_PROVIDER, and a verbs provider where RDMA devices exist."""
    res = ctx.runner.run(["fi_info", "-l"], env=ctx.env)
    if not res.ok:
        return [Finding("ofi", "info", "libfabric's fi_info is not available; providers not checked",
                        res.describe(), "", "install libfabric-bin (Debian) / libfabric (RHEL)")]
    provs = parse_fi_info_l(res.stdout)
    core = [p for p in provs if not p.startswith("ofi_hook")]
    ev = f"`fi_info -l`: {', '.join(provs) or 'no providers'}"
    out: list[Finding] = []
    want = ctx.env.get("FI_PROVIDER")
    if want:
        neg = want.startswith("^")
        names = [n.strip() for n in want.lstrip("^").split(",") if n.strip()]
        # 'verbs;ofi_rxm' layers are written with ';' and listed the same way.
        missing = [n for n in names if n not in provs and not all(part in provs for part in n.split(";"))]
        if missing and not neg:
            out.append(Finding(
                "ofi.provider", "error", f"FI_PROVIDER names providers libfabric does not have: "
                f"{', '.join(missing)}", f"FI_PROVIDER={want}; {ev}",
                "fi_getinfo then returns nothing (FI_ENODATA) and MPI/libfabric tools fail or fall back "
                "to another transport",
                f"use one of: {', '.join(core)}; a provider missing from the list failed to initialise "
                "(run `FI_LOG_LEVEL=warn fi_info -p <name>` to see why)"))
        else:
            out.append(Finding("ofi.provider", "ok", f"FI_PROVIDER={want}: every name exists", ev))
    rdma = bool(ctx.inventory.rdma_devices)
    if rdma and "verbs" not in provs:
        out.append(Finding(
            "ofi.verbs", "warn", "RDMA devices present but libfabric lists no verbs provider", ev,
            "without it libfabric users (MPICH/ch4:ofi, Intel MPI) run over tcp or sockets",
            "`FI_LOG_LEVEL=warn fi_info -p verbs` shows why it failed (missing rdma-core provider "
            "library, no active port, memlock)"))
    else:
        out.append(Finding("ofi.providers", "ok" if rdma or core else "info",
                           f"libfabric providers: {', '.join(core) or 'none'}"
                           + ("" if rdma else " (no verbs provider: none expected without an RDMA device)"),
                           ev))
    return out
