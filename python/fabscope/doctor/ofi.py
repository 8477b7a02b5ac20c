# SPDX-License-Identifier: BSD-3-Clause
"""libfabric: the providers fi_getinfo offers here (the engine's inventory, the same list
``--provider`` is checked against), whether FI_PROVIDER names one that exists, and a verbs
provider where RDMA devices exist."""

from __future__ import annotations

from fabscope.doctor.core import Context, Finding, check
from fabscope.inventory import Ofi


def listing(ofi: Ofi) -> str:
    """The evidence sentence: the providers and their domains, and what --provider accepts."""
    provs = "; ".join(f"{p.name} ({', '.join(p.endpoint_types)} on {', '.join(p.domains)})"
                      for p in ofi.providers) or "none"
    return (f"libfabric {ofi.version or '?'} fi_getinfo (fabscope-engine --inventory-json, without "
            f"FI_PROVIDER): {provs}; --provider accepts: {', '.join(ofi.provider_names) or 'nothing'}")


def _exists(ofi: Ofi, name: str) -> bool:
    # FI_PROVIDER takes core names ("tcp") and layered ones ("tcp;ofi_rxm"), as --provider does.
    return name in ofi.provider_names


@check("ofi", "ofi")
def check_ofi(ctx: Context) -> list[Finding]:
    """libfabric providers, FI_PROVIDER, and a verbs provider where RDMA devices exist."""
    ofi = ctx.engine_inventory.ofi
    if not ofi.ok:
        return [Finding("ofi", "info", "libfabric providers unavailable; not checked",
                        ofi.describe("libfabric"), "",
                        "install libfabric1 and libfabric-dev (Debian) / libfabric (RHEL) and rebuild "
                        "the engine: `make setup`")]
    ev = listing(ofi)
    out: list[Finding] = []
    want = ctx.env.get("FI_PROVIDER")
    if want:
        neg = want.startswith("^")
        names = [n.strip() for n in want.lstrip("^").split(",") if n.strip()]
        missing = [n for n in names if not _exists(ofi, n)]
        if missing and not neg:
            out.append(Finding(
                "ofi.provider", "error", f"FI_PROVIDER names providers libfabric does not offer here: "
                f"{', '.join(missing)}", f"FI_PROVIDER={want}; {ev}",
                "fi_getinfo then returns nothing (FI_ENODATA) and MPI/libfabric tools fail or fall back "
                "to another transport",
                f"use one of: {', '.join(ofi.provider_names)}; a provider missing from the list failed "
                "to initialise or has no device (run `FI_LOG_LEVEL=warn fi_info -p <name>` to see why)"))
        else:
            out.append(Finding("ofi.provider", "ok", f"FI_PROVIDER={want}: every name exists", ev))
    rdma = bool(ctx.inventory.rdma_devices)
    if rdma and not _exists(ofi, "verbs"):
        out.append(Finding(
            "ofi.verbs", "warn", "RDMA devices present but libfabric offers no verbs provider", ev,
            "without it libfabric users (MPICH/ch4:ofi, Intel MPI) run over tcp or sockets",
            "`FI_LOG_LEVEL=warn fi_info -p verbs` shows why it failed (missing rdma-core provider "
            "library, no active port, memlock)"))
    else:
        out.append(Finding("ofi.providers", "ok" if rdma or ofi.provider_names else "info",
                           f"libfabric providers (--provider accepts): {', '.join(ofi.provider_names) or 'none'}"
                           + ("" if rdma else " (no verbs provider: none expected without an RDMA device)"),
                           ev))
    return out
