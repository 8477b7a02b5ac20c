# SPDX-License-Identifier: BSD-3-Clause
"""What the user asked to carry the bytes: the device request the path verdict judges against.

A device named anywhere counts: ``config.device``, ``config.bind`` (the device owning that
address), ``UCX_NET_DEVICES`` when the user set it (the UCX backend reports the value and its
source), and for MPI the Open MPI MCA parameters ``btl_tcp_if_include`` / ``pml_ucx_devices``, the
libfabric interface variables (``FI_TCP_IFACE``, ...), MPICH's network-interface CVARs and
``UCX_NET_DEVICES``, given via ``--mca``, ``--env`` or the environment the ranks got
(``transport.launcher.mca`` / ``transport.launcher.env``, else what the engine reports it saw in
``transport.local.mca`` / ``transport.local.environment``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import hostport
from .counters import Counters

__all__ = ["Request", "local_transport", "parse_ip", "resolve_request"]

# Settings naming network devices, in the order they are looked at. Values are comma lists;
# "all"/"any" (or empty) ask for nothing in particular.
_MCA_DEVICE_KEYS = ("btl_tcp_if_include", "pml_ucx_devices")
_ENV_DEVICE_KEYS = (
    "UCX_NET_DEVICES",
    "OMPI_MCA_btl_tcp_if_include",
    "OMPI_MCA_pml_ucx_devices",
    "FI_TCP_IFACE",
    "FI_VERBS_IFACE",
    "FI_SOCKETS_IFACE",
    "MPIR_CVAR_CH3_NETWORK_IFACE",
    "MPIR_CVAR_NEMESIS_TCP_NETWORK_IFACE",
)
_NOTHING_IN_PARTICULAR = {"", "all", "any"}
# UCX pseudo-devices that no counter can see (shared memory, loopback transports).
_UCX_NON_NET = {"memory", "self", "cma", "knem", "xpmem"}

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Request:
    """Devices asked for (several when a setting lists several), and where the request came from."""

    names: tuple[str, ...]
    via: str  # "device", "bind", or the setting, e.g. "UCX_NET_DEVICES", "mca btl_tcp_if_include"
    bind: str | None = None

    @property
    def name(self) -> str:
        return ",".join(self.names)


def parse_ip(text: str | None) -> IPAddress | None:
    if text is None:
        return None
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def local_transport(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """This side's transport facts: the engine nests them under ``transport.local``."""
    transport = record.get("transport")
    if not isinstance(transport, Mapping):
        return {}
    local = transport.get("local")
    return local if isinstance(local, Mapping) else transport


def _device_names(value: str) -> tuple[str, ...]:
    """A UCX/MPI/libfabric device list -> counter keys: ``mlx5_0:1`` is the RDMA port ``mlx5_0/1``."""
    out: list[str] = []
    for item in value.split(","):
        item = item.strip()
        if item.startswith("^"):
            return ()  # an exclusion list asks for nothing in particular
        if ":" in item and item.rsplit(":", 1)[1].isdigit():
            dev, port = item.rsplit(":", 1)
            item = f"{dev}/{port}"
        if item and item.lower() not in _NOTHING_IN_PARTICULAR and item not in _UCX_NON_NET:
            out.append(item)
    return tuple(out)


def _owner_of(record: Mapping[str, Any], ip: IPAddress | None,
              network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None) -> str | None:
    """The netdev whose addresses (as the engine reported them) hold ``ip`` or lie in ``network``."""
    local = Counters.of_record(record).local
    for name, dev in (local.net if local else {}).items():
        for a in dev.addresses:
            got = parse_ip(a.split("/", 1)[0])
            if got is not None and ((ip is not None and got == ip) or (network is not None and got in network)):
                return name
    return None


def _mca_names(record: Mapping[str, Any], value: str) -> tuple[tuple[str, ...], str | None]:
    """btl_tcp_if_include entries may be subnets (10.0.0.0/24): map them to devices by address."""
    names: list[str] = []
    for item in _device_names(value):
        network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None
        if "/" in item:
            try:
                network = ipaddress.ip_network(item, strict=False)
            except ValueError:
                network = None  # an RDMA port such as mlx5_0/1
        if network is None:
            names.append(item)
            continue
        owner = _owner_of(record, None, network)
        if owner is None:
            return (), (f"btl_tcp_if_include={value} names the subnet {item}, but the record does not say "
                        "which device holds an address in it, so the path cannot be judged")
        names.append(owner)
    return tuple(names), None


def _settings(record: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(kind "mca"|"env", key, value) of device settings, launcher-given first, then engine-seen."""
    transport = record.get("transport")
    transport = transport if isinstance(transport, Mapping) else {}
    launcher = transport.get("launcher")
    launcher = launcher if isinstance(launcher, Mapping) else {}
    local = local_transport(record)
    found: list[tuple[str, str, str]] = []
    for mca in (launcher.get("mca"), local.get("mca")):
        if isinstance(mca, Mapping):
            found += [("mca", k, str(mca[k])) for k in _MCA_DEVICE_KEYS if isinstance(mca.get(k), str)]
    for env in (launcher.get("env"), local.get("environment")):
        if isinstance(env, Mapping):
            found += [("env", k, str(env[k])) for k in _ENV_DEVICE_KEYS if isinstance(env.get(k), str)]
    return found


def _from_settings(record: Mapping[str, Any]) -> tuple[Request | None, str | None]:
    local = local_transport(record)
    requested = local.get("requested")
    if isinstance(requested, Mapping):  # the UCX backend: the value and where it came from
        value = requested.get("UCX_NET_DEVICES")
        source = requested.get("UCX_NET_DEVICES_source")
        if isinstance(value, str) and source != "default":
            names = _device_names(value)
            if names:
                return Request(names, "UCX_NET_DEVICES"), None
    for kind, key, value in _settings(record):
        if kind == "mca":
            names, why = _mca_names(record, value)
            if why:
                return None, why
            via = f"mca {key}"
        else:
            names = _device_names(value)
            via = key
        if names:
            return Request(names, via), None
    return None, None


def resolve_request(record: Mapping[str, Any]) -> tuple[Request | None, str | None]:
    """The device(s) the user asked for, or (None, None) when nothing was asked, or (None, why).

    Under librspreload the RDMA device recorded in ``transport.local.preload`` is the request (a
    fallback to kernel TCP must not pass as verified on the netdev).  Otherwise ``config.device`` is
    the request.  Without it, ``config.bind`` is one:
    binding to an address asks for the device that owns that address, which
    the engine reports as ``transport.local.address_owner`` (the owner of the bind address,
    NOT the device the kernel routed over) or as ``addresses`` of a net entry.
    Without either, a device named in the transport's settings (module docstring).
    """
    preload = local_transport(record).get("preload")
    if isinstance(preload, Mapping):
        # Under librspreload (fabscope.launch.rspreload) only the RDMA device counts: the netdev also
        # carries the kernel TCP the preload silently falls back to.
        dev = preload.get("device")
        if isinstance(dev, str) and dev:
            return Request((dev,), "preload"), None
        owner = local_transport(record).get("address_owner") or "?"
        return None, (f"the run was under librspreload, but the connection left through {owner}, which has no "
                      "RDMA device: the preload fell back to kernel TCP")
    config = record.get("config")
    config = config if isinstance(config, Mapping) else {}
    device = config.get("device")
    if isinstance(device, str) and device:
        # A list (verbs --device rxe0,rxe1 spreads its queue pairs; ucx takes UCX_NET_DEVICES).
        return Request(_device_names(device) or (device,), "device"), None
    bind = config.get("bind")
    if not isinstance(bind, str) or not bind:
        return _from_settings(record)
    transport = local_transport(record)
    tdev = transport.get("address_owner") or transport.get("device")
    if isinstance(tdev, str) and tdev:
        return Request((tdev,), "bind", bind), None
    owner = _owner_of(record, parse_ip(hostport.host_of(bind)))
    if owner is not None:
        return Request((owner,), "bind", bind), None
    return None, (
        f"the run was bound to {bind}, but the record does not say which device owns that address "
        "(neither transport.device nor net addresses), so the path cannot be judged"
    )
