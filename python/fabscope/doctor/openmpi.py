# SPDX-License-Identifier: BSD-3-Clause
"""Open MPI settings that silently change or disable the RDMA path: pml/btl/mtl
exclusions (Debian's openmpi-mca-params.conf excludes pml ucx), the openib BTL (removed
in 5.x, ignoring InfiniBand ports in 4.x without btl_openib_allow_ib), and UCX_NET_DEVICES
set while the UCX PML filters devices itself, or an RDMA device that pml_ucx_devices does not match
(the UCX PML then declines, and ob1 carries the bytes over tcp)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabscope.doctor.core import Context, Finding, check
from fabscope.results.misroute import device_matches, pml_exclusion_fix

FRAMEWORKS = ("pml", "btl", "mtl")


@dataclass
class McaValue:
    value: str
    source: str  # "file:line" or "environment OMPI_MCA_x"


def params_file(ctx: Context) -> str:
    return str(ctx.etc("openmpi/openmpi-mca-params.conf"))


def read_mca_settings(ctx: Context) -> dict[str, McaValue]:
    """MCA parameters from the system params file, overridden by OMPI_MCA_* variables
    (Open MPI's own precedence: environment beats the file)."""
    out: dict[str, McaValue] = {}
    path = params_file(ctx)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        lines = []
    for n, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if "=" not in line:
            continue
        key, _, val = line.partition("=")
        out[key.strip()] = McaValue(val.strip(), f"{path}:{n}")
    for k, v in ctx.env.items():
        if k.startswith("OMPI_MCA_"):
            out[k[len("OMPI_MCA_"):]] = McaValue(v.strip(), f"environment {k}")
    return out


@dataclass
class OmpiInfo:
    version: str | None
    components: dict[str, set[str]]
    params: dict[str, str]


def parse_ompi_info(text: str) -> OmpiInfo:
    version = None
    comps: dict[str, set[str]] = {}
    params: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ompi:version:full:"):
            version = line.split(":", 3)[3]
            continue
        m = re.match(r"mca:([a-z0-9_]+):([a-z0-9_]+):version:", line)
        if m:
            comps.setdefault(m.group(1), set()).add(m.group(2))
            continue
        m = re.match(r"mca:[a-z0-9_]+:[a-z0-9_]+:param:([A-Za-z0-9_]+):value:(.*)$", line)
        if m:
            params.setdefault(m.group(1), m.group(2))
    return OmpiInfo(version, comps, params)


def _major(version: str | None) -> int | None:
    if not version:
        return None
    m = re.match(r"(\d+)", version)
    return int(m.group(1)) if m else None


def _selection(value: str) -> tuple[bool, list[str]]:
    v = value.strip()
    neg = v.startswith("^")
    return neg, [c.strip() for c in v.lstrip("^").split(",") if c.strip()]


@check("openmpi", "openmpi")
def check_openmpi(ctx: Context) -> list[Finding]:
    """pml/btl/mtl selection, openib, and UCX_NET_DEVICES vs pml_ucx_devices."""
    settings = read_mca_settings(ctx)
    res = ctx.runner.run(["ompi_info", "--parsable", "--all"], env=ctx.env)
    info = parse_ompi_info(res.stdout) if res.ok else None
    inv = ctx.inventory
    rdma = bool(inv.rdma_devices)
    ib_ports = [f"{d.name}/{p.num}" for d, p in inv.ports() if p.is_infiniband]
    out: list[Finding] = []
    if info is None and not settings:
        return [Finding("openmpi", "info", "Open MPI not found (no ompi_info, no system MCA file)",
                        f"{res.describe()}; {params_file(ctx)} unreadable")]
    ver = info.version if info else None
    major = _major(ver)
    ver_ev = f"ompi_info: Open MPI {ver}" if ver else res.describe()

    # 1. framework selections
    for fw in FRAMEWORKS:
        mv = settings.get(fw)
        if mv is None:
            continue
        neg, comps = _selection(mv.value)
        ev = f"{mv.source}: {fw} = {mv.value}; {ver_ev}"
        if fw == "pml" and neg and "ucx" in comps:
            out.append(Finding(
                "openmpi.pml", "warn" if rdma else "info",
                "Open MPI's UCX PML is excluded (pml = ^ucx): MPI traffic uses ob1 + BTLs, not UCX",
                ev,
                "on RDMA hardware the UCX PML is the fast path in Open MPI 4.x/5.x; with it excluded "
                "MPI results measure a different stack (Debian ships this exclusion)"
                + ("" if rdma else "; no RDMA device here, so ob1 over tcp/vader is what runs anyway"),
                pml_exclusion_fix(mv.source)))
        elif fw == "pml" and not neg and comps:
            out.append(Finding("openmpi.pml", "info", f"Open MPI PML forced to {','.join(comps)}", ev))
        elif neg:
            out.append(Finding(f"openmpi.{fw}", "info", f"Open MPI {fw} excludes {', '.join(comps)}", ev,
                               "excluded components are never tried; a benchmark asking for them gets "
                               "something else", f"override per run with `--mca {fw} <list>` or "
                               f"OMPI_MCA_{fw}"))
        else:
            out.append(Finding(f"openmpi.{fw}", "info", f"Open MPI {fw} restricted to {', '.join(comps)}", ev))

    # 2. openib
    btl = settings.get("btl")
    wants_openib = btl is not None and not _selection(btl.value)[0] and "openib" in _selection(btl.value)[1]
    allow_ib_setting = settings.get("btl_openib_allow_ib")
    allow_ib = (allow_ib_setting.value.lower() in ("1", "true", "yes") if allow_ib_setting
                else (info.params.get("btl_openib_allow_ib", "false").lower() in ("1", "true") if info else False))
    has_openib = info is not None and "openib" in info.components.get("btl", set())
    if wants_openib and major is not None and major >= 5:
        out.append(Finding("openmpi.openib", "error",
                           f"btl openib requested but Open MPI {ver} has no openib (removed in 5.0)",
                           f"{btl.source if btl else ''}: btl = {btl.value if btl else ''}; {ver_ev}",
                           "the selection names a component that does not exist, so the run aborts or "
                           "falls back", "use the UCX PML: `--mca pml ucx` (drop openib from btl)"))
    elif has_openib and ib_ports and not allow_ib and (wants_openib or btl is None or "openib" not in _selection(btl.value)[1]):
        out.append(Finding(
            "openmpi.openib", "warn" if wants_openib else "info",
            f"Open MPI {ver}'s openib BTL ignores InfiniBand ports ({', '.join(ib_ports)}) unless "
            "btl_openib_allow_ib is set", f"btl_openib_allow_ib = {'true' if allow_ib else 'false'}; {ver_ev}",
            "since 4.0 openib refuses IB ports by default ('By default, for Open MPI 4.0 and later, "
            "infiniband ports on a device are not used'); MPI then runs over TCP",
            "use UCX (`--mca pml ucx`); only if you must use openib: `--mca btl_openib_allow_ib 1`"))
    elif info is not None:
        out.append(Finding("openmpi.openib", "ok",
                           "openib not in play" + (" (removed in this version)" if major and major >= 5 else
                                                   " (no InfiniBand port, or excluded, or allowed)"),
                           f"{ver_ev}; openib component {'present' if has_openib else 'absent'}"))

    # 3. pml_ucx_devices against the RDMA devices asked for (--device) or, without one, this host's:
    # the UCX PML declines to run where none matches (4.1's default is mlx*, which rxe never is),
    # and ob1 carries the bytes; UCX_NET_DEVICES is then ignored too (UCX #10049). A misrouted
    # result names the same parameter (results/misroute.py).
    dev_env = ctx.env.get("UCX_NET_DEVICES")
    pud = settings.get("pml_ucx_devices")
    pud_val = pud.value if pud else (info.params.get("pml_ucx_devices") if info else None)
    rdma_names = [d.name for d in inv.rdma_devices]
    asked = [ctx.device] if ctx.device else rdma_names
    rdma_asked = [d for d in asked if d.partition(":")[0] in rdma_names]
    unmatched = [d for d in rdma_asked if pud_val is not None and not device_matches(pud_val, d)]
    if dev_env is not None or rdma_asked:
        put = settings.get("pml_ucx_tls")
        put_val = put.value if put else (info.params.get("pml_ucx_tls") if info else None)
        pud_text = pud_val if pud_val is not None else "not a parameter in this version"
        ev = (f"pml_ucx_devices = {pud_text} ({pud.source if pud else 'default'})"
              + (f"; UCX_NET_DEVICES={dev_env}" if dev_env is not None else "")
              + (f"; RDMA device{'s' if len(rdma_asked) > 1 else ''} {'asked' if ctx.device else 'here'}: "
                 f"{', '.join(rdma_asked)}" if rdma_asked else "")
              + f"; pml_ucx_tls = {put_val if put_val is not None else 'n/a'}; {ver_ev}")
        fix = ("`mpirun --mca pml_ucx_tls any --mca pml_ucx_devices any ...` (fabscope: `--mca pml_ucx_devices=any "
               "--mca pml_ucx_tls=any`; or export OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any)")
        if unmatched:
            out.append(Finding(
                "openmpi.ucx_devices", "warn",
                f"Open MPI's UCX PML declines {', '.join(unmatched)}: pml_ucx_devices = {pud_val} does not match it",
                ev, "the UCX PML runs only where a device matches pml_ucx_devices; elsewhere Open MPI falls back to "
                "ob1 and its btls (tcp), so an MPI result asked for the RDMA device is carried by a netdev (misrouted)",
                fix))
        elif dev_env is not None and pud_val is not None and pud_val != "any":
            out.append(Finding(
                "openmpi.ucx_devices", "warn",
                "UCX_NET_DEVICES is set but Open MPI's UCX PML filters devices itself "
                f"(pml_ucx_devices = {pud_val})", ev,
                "the PML decides from its own device list whether to use UCX at all, so UCX_NET_DEVICES "
                "can be ignored: UCX #10049 measured ~2.1 us 'TCP' that was RoCE", fix))
        else:
            out.append(Finding("openmpi.ucx_devices", "ok",
                               "the UCX PML's device filter (pml_ucx_devices) admits the devices asked for", ev))
    if not out:
        out.append(Finding("openmpi", "ok", "no Open MPI selection restrictions", ver_ev))
    return out
