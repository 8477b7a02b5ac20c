# SPDX-License-Identifier: BSD-3-Clause
"""What the RDMA, UCX and libfabric libraries offer on a host: the engine's ``--inventory-json``.

The engine asks the libraries themselves (``ibv_query_port``/``ibv_query_gid_table``, UCT's
component and memory-domain walk, ``fi_getinfo``) and prints one ``fabscope.inventory/1``
object.  This module is its only reader: ``fabscope devices`` and ``fabscope doctor`` take
ports, MTUs, GIDs, UCX transports and libfabric providers from here instead of parsing
``ibv_devinfo``, ``ucx_info -d`` or ``fi_info`` text.  The lists of names are the ones the
engine's own option checks use, so what the doctor shows is what ``--device``,
``--ucx-tls`` and ``--provider`` accept.

A library part has ``status`` ``ok``, ``absent`` (the engine was built without it) or
``error`` (it could not be asked; ``error`` says why).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .untyped import count_at, number_at

SCHEMA = "fabscope.inventory/1"
QUERY_TIMEOUT_S = 60.0  # libfabric's provider probing takes ~0.5 s here; UCX's walk less


class InventoryError(ValueError):
    """The JSON is not a fabscope.inventory/1 object (names the field that is wrong)."""


def _obj(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InventoryError(f"{where}: expected an object, got {type(data).__name__}")
    return data


def _list(data: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = data.get(key)
    if value is None:  # absent or null: nothing known (a fixture from a listing that lacks it)
        return []
    if not isinstance(value, list):
        raise InventoryError(f"{where}.{key}: expected a list")
    return value


def _str(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) else None


def _names(data: Mapping[str, Any], key: str, where: str) -> list[str]:
    return [str(x) for x in _list(data, key, where)]


@dataclass(frozen=True)
class VerbsGid:
    index: int
    gid: str
    type: str | None  # "IB", "RoCE v1", "RoCE v2"
    netdev: str | None
    ipv4: str | None


@dataclass(frozen=True)
class VerbsPort:
    port: int
    state: str | None
    phys_state: str | None
    link_layer: str | None
    active_mtu: int | None
    max_mtu: int | None
    rate: str | None  # the kernel's sysfs spelling, "100 Gb/sec (4X EDR)"
    rate_gbps: float | None
    lid: int | None
    sm_lid: int | None
    lmc: int | None
    cap_mask: str | None
    netdev: str | None
    gids: tuple[VerbsGid, ...]
    error: str | None = None


@dataclass(frozen=True)
class VerbsDevice:
    name: str
    node_type: str | None
    transport: str | None
    node_guid: str | None
    sys_image_guid: str | None
    fw_ver: str | None
    hw_ver: str | None
    ports: tuple[VerbsPort, ...]
    error: str | None = None

    def port(self, num: int) -> VerbsPort | None:
        return next((p for p in self.ports if p.port == num), None)


@dataclass(frozen=True)
class Part:
    """Common to the three library parts."""

    status: str  # "ok" | "absent" | "error"
    problem: str | None  # the reason (absent) or error text; None when ok

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self, library: str) -> str:
        return f"{library}: {self.status}" + (f" ({self.problem})" if self.problem else "")


@dataclass(frozen=True)
class Verbs(Part):
    devices: tuple[VerbsDevice, ...] = ()
    note: str | None = None

    def device(self, name: str) -> VerbsDevice | None:
        return next((d for d in self.devices if d.name == name), None)


@dataclass(frozen=True)
class UcxResource:
    transport: str
    device: str
    device_type: str  # "net", "shm", "acc", "self"
    memory_domain: str


@dataclass(frozen=True)
class Ucx(Part):
    version: str | None = None
    resources: tuple[UcxResource, ...] = ()
    transports: tuple[str, ...] = ()
    net_devices: tuple[str, ...] = ()  # what --device (UCX_NET_DEVICES) accepts, with "all"
    memory_domains: tuple[str, ...] = ()
    # UCX's alias table as the engine carries it (its one copy): alias -> member transports.
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    available_aliases: tuple[str, ...] = ()
    tls_names: tuple[str, ...] = ()  # exactly what --ucx-tls accepts (before ^, \ and :aux)
    aliases_source: str | None = None

    def known_transport_names(self) -> set[str]:
        """Transports UCX can have somewhere: present here, or named by an alias."""
        known = set(self.transports)
        for members in self.aliases.values():
            known.update(members)
        return known


@dataclass(frozen=True)
class OfiProvider:
    name: str
    domains: tuple[str, ...]
    fabrics: tuple[str, ...]
    endpoint_types: tuple[str, ...]


@dataclass(frozen=True)
class Ofi(Part):
    version: str | None = None
    providers: tuple[OfiProvider, ...] = ()
    provider_names: tuple[str, ...] = ()  # exactly what --provider accepts
    fi_provider_env: str | None = None  # FI_PROVIDER when the engine listed them

    def domains_of(self, provider: str) -> set[str]:
        """Domains --domain accepts with --provider ``provider`` (core names match layered ones)."""
        out: set[str] = set()
        for p in self.providers:
            if p.name == provider or (";" not in provider and p.name.startswith(provider + ";")):
                out.update(p.domains)
        return out


@dataclass(frozen=True)
class EngineInventory:
    version: str | None
    host: str | None
    verbs: Verbs
    ucx: Ucx
    ofi: Ofi
    source: str  # "fabscope-engine --inventory-json" or the fixture file it was read from

    @classmethod
    def unavailable(cls, reason: str) -> EngineInventory:
        """Every part in error, saying why (the engine is missing or failed)."""
        return cls(None, None, Verbs("error", reason), Ucx("error", reason), Ofi("error", reason),
                   source="unavailable")

    @classmethod
    def from_dict(cls, data: Any, source: str) -> EngineInventory:
        root = _obj(data, "inventory")
        if root.get("schema") != SCHEMA:
            raise InventoryError(f"schema is {root.get('schema')!r}, expected {SCHEMA!r}")
        return cls(
            version=_str(root, "version"), host=_str(root, "host"),
            verbs=_verbs(_obj(root.get("verbs"), "verbs")),
            ucx=_ucx(_obj(root.get("ucx"), "ucx")),
            ofi=_ofi(_obj(root.get("libfabric"), "libfabric")),
            source=source,
        )


def _status(part: Mapping[str, Any], where: str) -> tuple[str, str | None]:
    status = part.get("status")
    if status not in ("ok", "absent", "error"):
        raise InventoryError(f"{where}.status: {status!r} is not ok/absent/error")
    return str(status), _str(part, "reason") or _str(part, "error")


def _verbs(part: dict[str, Any]) -> Verbs:
    status, problem = _status(part, "verbs")
    devices = []
    for raw_dev in _list(part, "devices", "verbs"):
        dev = _obj(raw_dev, "verbs.devices[]")
        ports = []
        for raw_port in _list(dev, "ports", "verbs.devices[].ports"):
            p = _obj(raw_port, "verbs port")
            gids = tuple(
                VerbsGid(index=count_at(g, "index") or 0, gid=_str(g, "gid") or "", type=_str(g, "type"),
                         netdev=_str(g, "netdev"), ipv4=_str(g, "ipv4"))
                for g in (_obj(x, "gid") for x in _list(p, "gids", "verbs port")))
            ports.append(VerbsPort(
                port=count_at(p, "port") or 0, state=_str(p, "state"), phys_state=_str(p, "phys_state"),
                link_layer=_str(p, "link_layer"), active_mtu=count_at(p, "active_mtu") or None,
                max_mtu=count_at(p, "max_mtu") or None, rate=_str(p, "rate"),
                rate_gbps=number_at(p, "rate_gbps"), lid=count_at(p, "lid"), sm_lid=count_at(p, "sm_lid"),
                lmc=count_at(p, "lmc"), cap_mask=_str(p, "cap_mask"), netdev=_str(p, "netdev"),
                gids=gids, error=_str(p, "error")))
        name = _str(dev, "name")
        if not name:
            raise InventoryError("verbs.devices[]: a device without a name")
        devices.append(VerbsDevice(
            name=name, node_type=_str(dev, "node_type"), transport=_str(dev, "transport"),
            node_guid=_str(dev, "node_guid"), sys_image_guid=_str(dev, "sys_image_guid"),
            fw_ver=_str(dev, "fw_ver"), hw_ver=_str(dev, "hw_ver"), ports=tuple(ports),
            error=_str(dev, "error")))
    return Verbs(status, problem, devices=tuple(devices), note=_str(part, "note"))


def _ucx(part: dict[str, Any]) -> Ucx:
    status, problem = _status(part, "ucx")
    resources = tuple(
        UcxResource(transport=_str(r, "transport") or "", device=_str(r, "device") or "",
                    device_type=_str(r, "device_type") or "", memory_domain=_str(r, "memory_domain") or "")
        for r in (_obj(x, "ucx.resources[]") for x in _list(part, "resources", "ucx")))
    aliases: dict[str, tuple[str, ...]] = {}
    available: list[str] = []
    for raw in _list(part, "aliases", "ucx"):
        a = _obj(raw, "ucx.aliases[]")
        name = _str(a, "name")
        if not name:
            raise InventoryError("ucx.aliases[]: an alias without a name")
        aliases[name] = tuple(_names(a, "transports", "ucx.aliases[]"))
        if a.get("available") is True:
            available.append(name)
    return Ucx(status, problem, version=_str(part, "version"), resources=resources,
               transports=tuple(_names(part, "transports", "ucx")),
               net_devices=tuple(_names(part, "net_devices", "ucx")),
               memory_domains=tuple(_names(part, "memory_domains", "ucx")),
               aliases=aliases, available_aliases=tuple(available),
               tls_names=tuple(_names(part, "tls_names", "ucx")),
               aliases_source=_str(part, "aliases_source"))


def _ofi(part: dict[str, Any]) -> Ofi:
    status, problem = _status(part, "libfabric")
    providers = tuple(
        OfiProvider(name=_str(p, "name") or "", domains=tuple(_names(p, "domains", "provider")),
                    fabrics=tuple(_names(p, "fabrics", "provider")),
                    endpoint_types=tuple(_names(p, "endpoint_types", "provider")))
        for p in (_obj(x, "libfabric.providers[]") for x in _list(part, "providers", "libfabric")))
    return Ofi(status, problem, version=_str(part, "version"), providers=providers,
               provider_names=tuple(_names(part, "provider_names", "libfabric")),
               fi_provider_env=_str(part, "fi_provider_env"))


def load(path: Path | str) -> EngineInventory:
    """Read a saved inventory (a fixture, or one captured on another host)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InventoryError(f"{p}: not readable as JSON: {exc}") from exc
    return EngineInventory.from_dict(data, source=str(p))


def query(env: Mapping[str, str] | None = None, timeout: float = QUERY_TIMEOUT_S) -> EngineInventory:
    """Run this host's engine with --inventory-json.  Never raises for a missing or failing
    engine: the result is then :meth:`EngineInventory.unavailable` naming the reason.

    ``FI_PROVIDER`` is left out of the engine's environment: it hides every other provider
    from fi_getinfo, and the doctor checks FI_PROVIDER itself against the full list.
    """
    from fabscope.errors import FabscopeError
    from fabscope.launch.engine import engine_path

    try:
        exe = engine_path()
    except FabscopeError as exc:
        return EngineInventory.unavailable(exc.message)
    run_env = {k: v for k, v in (env if env is not None else os.environ).items() if k != "FI_PROVIDER"}
    argv = [str(exe), "--inventory-json"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=run_env,
                              check=False)
    except subprocess.TimeoutExpired:
        return EngineInventory.unavailable(f"`{' '.join(argv)}` did not finish within {timeout:g} s")
    except OSError as exc:
        return EngineInventory.unavailable(f"`{' '.join(argv)}` could not run: {exc.strerror}")
    if proc.returncode != 0:
        return EngineInventory.unavailable(
            f"`{' '.join(argv)}` exited {proc.returncode}: {proc.stderr.strip()[:300]} "
            "(an engine older than this front end? run `make setup`)")
    try:
        return EngineInventory.from_dict(json.loads(proc.stdout), source=" ".join(argv))
    except (json.JSONDecodeError, InventoryError) as exc:
        return EngineInventory.unavailable(f"`{' '.join(argv)}` printed no valid inventory: {exc}")


def from_env_or_query(env: Mapping[str, str] | None = None) -> EngineInventory:
    """``$FABSCOPE_INVENTORY`` (a saved inventory file, for fixtures) if set, else :func:`query`."""
    e = env if env is not None else os.environ
    saved = e.get("FABSCOPE_INVENTORY")
    if saved:
        try:
            return load(saved)
        except InventoryError as exc:
            return EngineInventory.unavailable(f"FABSCOPE_INVENTORY={saved}: {exc}")
    return query(env)
