# SPDX-License-Identifier: BSD-3-Clause
"""Why a misrouted result went where it went: the ``route`` cause of the explanation.

The path verdict (verdict.py) proves from the counters that the bytes left by another device than
the one asked for; this module names what chose that device, from what the library reported of its
own choice in the record (the engine gathers, this decides):

- Open MPI: the pml/btl/mtl it selected and the MCA parameters that decided it, each with where its
  value came from as Open MPI recorded it (``mca_sources``: Debian's openmpi-mca-params.conf line
  ``pml = ^ucx``, an OMPI_MCA_* variable, ``--mca``): an excluded UCX PML, ``pml_ucx_devices``
  not matching the device (its default ``mlx*`` never matches rxe), ``btl_tcp_if_include`` /
  ``btl_tcp_if_exclude``, a ``btl`` list;
- UCX (its own backend, or under pml ucx): UCX_NET_DEVICES and UCX_TLS against the lanes it chose;
- libfabric: the provider and domain it opened against the ones asked for;
- MPICH: the netmod it runs;
- the kernel: its route to the peer's address (``route_to_peer``, RTM_GETROUTE as ``ip route get``
  shows it), when that leaves by another netdev than the one asked for (a host route over a
  management interface).

Each reason comes with its fix as a command line. A collective (``results/collective.py``) asks the
same library reasons of its job's transport (``collective_route_reasons``): the ranks share the MCA
parameters and the launcher's environment; its record has no route to one peer, so the kernel's is
not read there. The doctor reads the same Open MPI settings from
the parameter file (doctor/openmpi.py); both word the pml exclusion with ``pml_exclusion_fix``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from ..untyped import member

__all__ = ["PML_UCX_ANY", "collective_route_reasons", "device_matches", "pml_exclusion_fix", "route_reasons"]

# Open MPI's UCX PML told to take any UCX transport and device (the fix the field notes give for
# UCX #10049), as `fabscope run` / `suite` pass it.
PML_UCX_ANY = "--mca pml=ucx --mca pml_ucx_tls=any --mca pml_ucx_devices=any"
_SOCKET_TLS = ("tcp", "sockets", "udp")


def pml_exclusion_fix(source: str | None) -> str:
    """The fix for Open MPI's UCX PML excluded (`pml = ^ucx`): per run, and where the exclusion is a
    line of a parameter file, system-wide (the doctor's openmpi.pml finding says the same)."""
    fix = (f"per run: `fabscope ... {PML_UCX_ANY}` (mpirun: `--mca pml ucx`, or `export OMPI_MCA_pml=ucx "
           "OMPI_MCA_pml_ucx_devices=any OMPI_MCA_pml_ucx_tls=any`)")
    if source and ":" in source and source.startswith("/"):
        fix += f"; system-wide: remove the line at {source}"
    return fix


def _selection(value: str) -> tuple[bool, list[str]]:
    """An MCA component list: (is it an exclusion "^a,b", its names)."""
    v = value.strip()
    return v.startswith("^"), [c.strip() for c in v.lstrip("^").split(",") if c.strip()]


def _excludes(value: str | None, component: str) -> bool:
    if not value:
        return False
    neg, names = _selection(value)
    return component in names if neg else component not in names


def _device_name(asked: str) -> str:
    """"rxe0:1" (UCX's spelling of a port) -> "rxe0"."""
    return asked.partition(":")[0]


def device_matches(patterns: str, asked: str) -> bool:
    """pml_ucx_devices / UCX_NET_DEVICES style: comma-separated names or globs ("mlx*"); "any"/"all"."""
    names = [p.strip() for p in patterns.split(",") if p.strip()]
    if any(p in ("any", "all") for p in names):
        return True
    return any(fnmatch.fnmatchcase(asked, p) or fnmatch.fnmatchcase(_device_name(asked), p.partition(":")[0])
               for p in names)


def _src(sources: Mapping[str, Any], name: str) -> str:
    where = sources.get(name)
    return str(where) if isinstance(where, str) and where else "Open MPI's value"


def _openmpi(local: Mapping[str, Any], asked: str, asked_rdma: bool, carrier: str) -> list[tuple[str, str]]:
    selected, mca, sources = member(local, "selected"), member(local, "mca"), member(local, "mca_sources")
    env = member(local, "environment")
    pml = str(selected.get("pml") or "")
    out: list[tuple[str, str]] = []
    pml_value = mca.get("pml") if isinstance(mca.get("pml"), str) else None
    if pml and pml != "ucx" and asked_rdma:
        # ob1's btls reach an RDMA device only through UCX (btl uct) or not at all: the UCX PML was
        # what could carry it, and something kept it out.
        send = member(selected, "btl").get("send")
        btls = "+".join(str(b) for b in send) if isinstance(send, list) and send else "?"
        chose = f"Open MPI ran pml {pml} (btl {btls}), not pml ucx, so {asked} was never used"
        if _excludes(pml_value, "ucx"):
            src = _src(sources, "pml")
            out.append((f"{chose}: pml = {pml_value} ({src}) excludes the UCX PML", pml_exclusion_fix(src)))
        else:
            devices = mca.get("pml_ucx_devices")
            if isinstance(devices, str) and devices and not device_matches(devices, asked):
                out.append((f"{chose}: pml_ucx_devices = {devices} ({_src(sources, 'pml_ucx_devices')}) does not "
                            f"match {_device_name(asked)}, so the UCX PML declined to run (Open MPI 4.1's default "
                            "takes only mlx* devices)",
                            f"`fabscope ... {PML_UCX_ANY}` (mpirun: `--mca pml_ucx_devices any --mca pml_ucx_tls "
                            "any`)"))
            env_tls = env.get("UCX_TLS")
            if isinstance(env_tls, str) and env_tls and all(t.strip() in _SOCKET_TLS for t in env_tls.lstrip("^").split(",")):
                out.append((f"{chose}: UCX_TLS={env_tls} (environment) left the UCX PML only sockets, no transport on "
                            f"{asked}, so it declined to run", "unset UCX_TLS (`env -u UCX_TLS fabscope ...`), or allow "
                            "an RDMA transport: `UCX_TLS=rc_verbs,ud_verbs,self`"))
            tls = mca.get("pml_ucx_tls")
            if not out and isinstance(tls, str) and tls and tls != "any":
                out.append((f"{chose}: pml_ucx_tls = {tls} ({_src(sources, 'pml_ucx_tls')}) may leave the UCX PML no "
                            f"transport on {_device_name(asked)}", f"`fabscope ... {PML_UCX_ANY}`"))
            if not out:
                out.append((f"{chose} (pml = {pml_value or 'not set'})", f"`fabscope ... {PML_UCX_ANY}`"))
    if pml and pml != "ucx":
        send = member(selected, "btl").get("send")
        btls = "+".join(str(b) for b in send) if isinstance(send, list) and send else "?"
        include, exclude = mca.get("btl_tcp_if_include"), mca.get("btl_tcp_if_exclude")
        if "tcp" in btls.split("+") and isinstance(include, str) and include and carrier in include.split(","):
            out.append((f"btl tcp sends over btl_tcp_if_include = {include} ({_src(sources, 'btl_tcp_if_include')})",
                        f"`fabscope ... --mca btl_tcp_if_include={_device_name(asked)}` for a netdev, or the UCX "
                        "PML for an RDMA device"))
        elif "tcp" in btls.split("+") and isinstance(exclude, str) and _device_name(asked) in exclude.split(","):
            out.append((f"btl_tcp_if_exclude = {exclude} ({_src(sources, 'btl_tcp_if_exclude')}) keeps btl tcp off "
                        f"{asked}", "`fabscope ... --mca btl_tcp_if_exclude=lo` (or drop the setting)"))
        elif ("tcp" in btls.split("+") and not asked_rdma and not include and carrier
              and carrier != _device_name(asked)):
            # Nothing kept ob1's tcp btl to the netdev asked for: it uses every interface that reaches
            # the peer (btl_tcp_if_exclude's, by default lo and docker*), and the bytes took `carrier`.
            chose = f"pml = {pml_value} ({_src(sources, 'pml')})" if pml_value else "Open MPI's default"
            ucx = env.get("UCX_NET_DEVICES")
            no_effect = (f"; UCX_NET_DEVICES={ucx} (environment) had no effect: pml {pml} does not use UCX"
                         if isinstance(ucx, str) and ucx else "")
            excluded = f", btl_tcp_if_exclude = {exclude}" if isinstance(exclude, str) and exclude else ""
            out.append((f"Open MPI ran pml {pml} ({chose}) with btl {btls}, and btl_tcp_if_include is not set"
                        f"{excluded}: btl tcp sends over every interface that reaches the peer, here {carrier}, not "
                        f"{asked}{no_effect}",
                        f"`fabscope ... --device {_device_name(asked)}` (it sets btl_tcp_if_include={_device_name(asked)}; "
                        f"mpirun: `--mca btl_tcp_if_include {_device_name(asked)}`)"))
    elif pml == "ucx":
        out += _ucx(member(local, "ucx"), env, asked, "pml ucx")
        devices = mca.get("pml_ucx_devices")
        if not out and isinstance(devices, str) and devices and not device_matches(devices, asked):
            out.append((f"pml_ucx_devices = {devices} ({_src(sources, 'pml_ucx_devices')}) does not match "
                        f"{_device_name(asked)}", f"`fabscope ... {PML_UCX_ANY}`"))
    return out


def _ucx(ucx: Mapping[str, Any], env: Mapping[str, Any], asked: str, who: str) -> list[tuple[str, str]]:
    """UCX_NET_DEVICES / UCX_TLS (the backend's own `requested`, else the environment) against the
    lanes UCX chose."""
    requested = member(ucx, "requested")
    lanes = [lane for lane in ucx.get("lanes") or [] if isinstance(lane, Mapping)]
    chose = ", ".join(f"{lane.get('transport')}/{lane.get('device')}" for lane in lanes) or "?"
    devices = {str(lane.get("device")) for lane in lanes}
    out: list[tuple[str, str]] = []
    for var in ("UCX_NET_DEVICES", "UCX_TLS"):
        value = requested.get(var) or env.get(var)
        source = requested.get(f"{var}_source") or ("environment" if env.get(var) else None)
        if not isinstance(value, str) or not value:
            continue
        src = f"{source}: `--ucx-tls`/`--device`" if source == "option" else str(source or "set")
        if var == "UCX_NET_DEVICES" and not device_matches(value, asked):
            out.append((f"{who}: {var}={value} ({src}) does not name {asked}; UCX's lanes: {chose}",
                        f"unset {var} (`env -u {var} fabscope ...`) or set it to {asked}"))
        elif var == "UCX_TLS" and devices and asked not in devices and _device_name(asked) not in {
                _device_name(d) for d in devices}:
            names = [t.strip() for t in value.lstrip("^").split(",")]
            if all(t in _SOCKET_TLS for t in names):
                out.append((f"{who}: {var}={value} ({src}) leaves UCX only sockets, which run over a netdev, never "
                            f"{asked}; UCX's lanes: {chose}",
                            f"unset {var} (`env -u {var} fabscope ...`), or allow an RDMA transport: "
                            "`--ucx-tls rc_verbs,ud_verbs:aux`"))
            else:
                out.append((f"{who}: {var}={value} ({src}) gave UCX no transport on {asked}; its lanes: {chose}",
                            f"unset {var} (`env -u {var} fabscope ...`)"))
    return out


def _ofi(local: Mapping[str, Any], config: Mapping[str, Any], asked: str) -> list[tuple[str, str]]:
    options = member(config, "backend_options")
    want, got = str(options.get("provider") or ""), str(local.get("provider") or "")
    env = member(local, "environment")
    out: list[tuple[str, str]] = []
    if want and got and got.split(";")[0] != want.split(";")[0]:
        fi = env.get("FI_PROVIDER")
        out.append((f"libfabric opened provider {got}, not {want} as asked"
                    + (f" (FI_PROVIDER={fi} in the environment filters the providers)" if fi else ""),
                    "unset FI_PROVIDER (`env -u FI_PROVIDER fabscope ...`)" if fi else f"`--provider {want}`"))
    domain = str(local.get("domain") or "")
    if domain and _device_name(domain) != _device_name(asked) and not out:
        core = got.split(";")[0] or want
        out.append((f"libfabric's {got or 'provider'} opened domain {domain}, not {asked}",
                    f"`fi_info -p {core}` lists its domains; the domain follows the addresses: give the peer's address "
                    f"on {asked}'s network (`fabscope run --peer ADDR --device {asked}`)"))
    return out


def _mpich(local: Mapping[str, Any], asked: str) -> list[tuple[str, str]]:
    selected, cvars = member(local, "selected"), member(local, "cvars")
    netmod = str(selected.get("netmod") or "?")
    env = member(local, "environment")
    told = env.get("UCX_NET_DEVICES")
    if netmod == "ucx" and isinstance(told, str) and _device_name(asked) in [_device_name(d) for d in told.split(",")]:
        return []  # UCX was told the device: MPICH's choice is not why the bytes went elsewhere (the route may be)
    set_to = cvars.get("MPIR_CVAR_CH4_NETMOD")
    why = f"MPICH runs its {netmod} netmod ({selected.get('device') or 'device ?'})"
    why += f", MPIR_CVAR_CH4_NETMOD={set_to}" if set_to else ", chosen when MPICH was built"
    fix = ("unset FI_PROVIDER, " if env.get("FI_PROVIDER") else "") + (
        f"for {netmod}: UCX_NET_DEVICES={asked} (ch4:ucx) or FI_PROVIDER=verbs (ch4:ofi) in the environment")
    return [(why + (f", FI_PROVIDER={env.get('FI_PROVIDER')}" if env.get("FI_PROVIDER") else ""), fix)]


def _kernel_route(local: Mapping[str, Any], asked: str, carrier: str) -> list[tuple[str, str]]:
    route = member(local, "route_to_peer")
    dev, peer = route.get("dev"), route.get("peer")
    if not isinstance(dev, str) or not isinstance(peer, str) or dev == _device_name(asked) or dev != carrier:
        return []
    gw = route.get("gateway")
    return [(f"the kernel's route to the peer {peer} leaves by {dev}, not {asked} (`ip route get {peer}`: dev {dev}"
             + (f" via {gw}" if gw else "") + "): a route that sends the peer's address over another netdev",
             f"`ip route get {peer}` shows it; remove that route (`ip route del {peer} dev {dev}`), or give the peer's "
             f"address on {asked}'s network")]


def _library_reasons(local: Mapping[str, Any], config: Mapping[str, Any], asked: str, asked_rdma: bool,
                     carrier: str) -> list[tuple[str, str]]:
    """(reason, fix) from what the library reported of its own choice (``local``: a transport side)."""
    kind = local.get("kind")
    if kind == "mpi" and "MPICH" in str(local.get("library") or "").upper():
        return _mpich(local, asked)
    if kind == "mpi":
        return _openmpi(local, asked, asked_rdma, carrier)
    if kind == "ucx":
        return _ucx(local, {}, asked, "UCX")
    if kind == "ofi":
        return _ofi(local, config, asked)
    return []


def collective_route_reasons(transport: Mapping[str, Any], asked: str, asked_rdma: bool,
                             carrier: str) -> list[tuple[str, str]]:
    """(reason, fix) for a misrouted collective: the same library reasons as a pair run's, read from
    the job's ``transport`` (what rank 0 described, the MCA parameters every rank shares) with the
    environment the launcher gave the ranks (``transport.launcher.env``) under the rank's own;
    ``asked_rdma``: the device asked for is an RDMA port; ``carrier``: the device that carried a
    misrouted host's bytes."""
    launcher_env = member(member(transport, "launcher"), "env")
    local = {**transport, "environment": {**launcher_env, **member(transport, "environment")}}
    return _library_reasons(local, {}, asked, asked_rdma, carrier)


def route_reasons(rec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(reason, fix) for each setting the record shows chose the device that carried a misrouted
    result's bytes; empty when the path is not misrouted or the library's report names none."""
    path = member(rec, "path")
    if path.get("verdict") != "misrouted":
        return []
    asked = str(path.get("requested") or "")
    local = member(member(rec, "transport"), "local")
    carriers = member(member(path, "sides"), "local").get("carriers")
    top = carriers[0] if isinstance(carriers, list) and carriers and isinstance(carriers[0], Mapping) else {}
    carrier = str(top.get("device") or "")
    asked_rdma = member(member(member(path, "sides"), "local"), "requested").get("kind") == "rdma" or ":" in asked
    return _library_reasons(local, member(rec, "config"), asked, asked_rdma, carrier) + _kernel_route(local, asked,
                                                                                                      carrier)
