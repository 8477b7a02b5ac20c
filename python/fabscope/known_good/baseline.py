# SPDX-License-Identifier: BSD-3-Clause
"""Named baselines: `fabscope baseline save NAME` (runs from the history by tag, run ids or a time
range) with the configuration's fingerprint, `list`, `show`, `delete`; and what a check against a
baseline needs: its runs and what changed in the configuration since it was made."""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from .. import argtypes
from ..errors import EXIT_OK, EXIT_USAGE, FabscopeError
from ..results import Result
from ..store import Filters, Store, open_store, parse_time

# Keys of a record's transport report (either end) that say what the configuration is: versions of
# the libraries and firmware, drivers, the MTU in force. Addresses and queue numbers are not.
FINGERPRINT_KEYS = ("fw_ver", "driver", "mtu", "active_mtu", "mss", "ucx_version", "library_version",
                    "mpi_library", "provider", "provider_version", "device", "transports")


def port_facts(sysfs_root: str | None = None) -> dict[str, str]:
    """This host's ports as sysfs shows them (devices.py): each netdev's (not loopback) state,
    speed and MTU, each RDMA port's state, rate and active MTU, as ``port.NAME.FACT`` keys."""
    from ..devices import discover

    inv = discover(sysfs_root)
    out: dict[str, str] = {}
    for n in inv.netdevs:
        if n.kind == "loopback":
            continue
        out.update({f"port.{n.name}.state": str(n.operstate), f"port.{n.name}.speed_mbps": str(n.speed_mbps),
                    f"port.{n.name}.mtu": str(n.mtu)})
    for d in inv.rdma_devices:
        for p in d.ports:
            name = f"port.{d.name}/{p.num}"
            out.update({f"{name}.state": str(p.state), f"{name}.rate_gbps": str(p.rate_gbps),
                        f"{name}.mtu": str(p.active_mtu)})
    return out


def fingerprint(results: Iterable[Result], fabscope_versions: Iterable[str], kernel: str,
                ports: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the runs were made on: fabscope and engine versions, the kernel, every
    FINGERPRINT_KEYS value of the records' transport reports (each key: all values seen), and
    ``ports`` (port_facts of the host that saved or checks it)."""
    found: dict[str, set[str]] = {"fabscope": set(fabscope_versions), "kernel": {kernel}}
    found.update({k: {v} for k, v in (ports or {}).items()})
    for r in results:
        found.setdefault("engine", set()).add(r.version)
        for side, report in (("local", r.transport.local), ("peer", r.transport.peer or {})):
            _walk(f"transport.{side}", report, found, 0)
    return {k: " | ".join(sorted(v)) for k, v in sorted(found.items()) if v}


def _walk(prefix: str, obj: Mapping[str, Any], found: dict[str, set[str]], depth: int) -> None:
    for key, value in obj.items():
        if isinstance(value, Mapping) and depth < 2:
            _walk(f"{prefix}.{key}", value, found, depth + 1)
        elif key in FINGERPRINT_KEYS or prefix.endswith(".mtu"):
            found.setdefault(f"{prefix}.{key}", set()).add(json.dumps(value, sort_keys=True))


def changes(then: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """What differs between a baseline's fingerprint and the current one, one line each."""
    return [f"{k}: {then.get(k, '(absent)')} -> {now.get(k, '(absent)')}"
            for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]


def this_kernel() -> str:
    return platform.release()


def find(store: Store, name: str) -> dict[str, Any]:
    """One baseline by name; a missing one is an error listing those that exist."""
    every = store.baselines()
    for b in every:
        if b["name"] == name:
            return b
    raise FabscopeError(f"no baseline {name!r} in {store.path} (baselines there: "
                        f"{', '.join(b['name'] for b in every) or 'none'}); `fabscope baseline save {name} --tag TAG` "
                        "makes one", EXIT_USAGE)


def runs_of(store: Store, baseline: Mapping[str, Any]) -> list[list[Result]]:
    return [store.results([int(i)]) for i in baseline["run_ids"]]


def _select(store: Store, ns: argparse.Namespace) -> tuple[list[int], str]:
    if ns.runs:
        ids = [i for spec in ns.runs.split(",") for i in store.run_ids_for(spec.strip())]
        return ids, f"runs {ns.runs}"
    since = parse_time(ns.since, "--since") if ns.since else None
    until = parse_time(ns.until, "--until") if ns.until else None
    runs = store.runs(Filters(tag=ns.tag, since=since, until=until))
    if not runs:
        what = " ".join(x for x in (f"tag {ns.tag!r}" if ns.tag else "", f"since {since}" if since else "",
                                    f"until {until}" if until else "") if x)
        raise FabscopeError(f"no runs with results in {store.path} match {what}; `fabscope history` lists the runs",
                            EXIT_USAGE)
    return sorted(r.id for r in runs), " ".join(
        x for x in (f"tag={ns.tag}" if ns.tag else "", f"since={since}" if since else "",
                    f"until={until}" if until else "") if x)


def _save(ns: argparse.Namespace) -> int:
    if not (ns.tag or ns.runs or ns.since or ns.until):
        raise FabscopeError("baseline save: say which runs: --tag TAG, --runs ID,ID, or --since/--until", EXIT_USAGE)
    if ns.runs and (ns.tag or ns.since or ns.until):
        raise FabscopeError("baseline save: --runs names the runs itself; drop --tag/--since/--until", EXIT_USAGE)
    with open_store(ns.store) as store:
        ids, selection = _select(store, ns)
        infos = [store.run(i) for i in ids]
        results = store.results(ids)
        if not results:
            raise FabscopeError(f"baseline save: runs {ids} hold no results", EXIT_USAGE)
        fp = fingerprint(results, [i.fabscope_version for i in infos], this_kernel(), port_facts())
        store.save_baseline(ns.name, ids, fp, selection)
    print(f"baseline {ns.name}: {len(ids)} run(s) ({', '.join(map(str, ids))}), {len(results)} result(s), "
          f"kept in {store.path}")
    return EXIT_OK


def _list(ns: argparse.Namespace) -> int:
    with open_store(ns.store, readonly=True) as store:
        every = store.baselines()
    if ns.format == "json":
        sys.stdout.write("".join(json.dumps(b, sort_keys=True) + "\n" for b in every))
        return EXIT_OK
    for b in every:
        print(f"{b['name']}\t{b['created_at']}\t{len(b['run_ids'])} run(s)\t{b['selection']}")
    if not every:
        print("no baselines (`fabscope baseline save NAME --tag TAG` makes one)")
    return EXIT_OK


def _show(ns: argparse.Namespace) -> int:
    with open_store(ns.store, readonly=True) as store:
        b = find(store, ns.name)
    if ns.format == "json":
        print(json.dumps(b, sort_keys=True))
        return EXIT_OK
    print(f"baseline {b['name']}: made {b['created_at']} from {b['selection']}, runs {b['run_ids']}")
    for k, v in b["fingerprint"].items():
        print(f"  {k}: {v}")
    return EXIT_OK


def _delete(ns: argparse.Namespace) -> int:
    with open_store(ns.store) as store:
        find(store, ns.name)
        store.delete_baseline(ns.name)
    print(f"baseline {ns.name} deleted")
    return EXIT_OK


def fill_baseline_parser(p: argparse.ArgumentParser) -> None:
    """`fabscope baseline save|list|show|delete` (cli.py names the subcommand)."""
    sub = p.add_subparsers(dest="action", parser_class=type(p), required=True)
    name = argtypes.text(200)
    save = sub.add_parser("save", help="name runs from the history as a baseline, with their fingerprint")
    save.add_argument("name", type=name)
    save.add_argument("--tag", type=name, default=None, help="every run with this tag")
    save.add_argument("--runs", type=name, default=None, metavar="ID,ID", help="these runs (ids, latest, latest~N)")
    save.add_argument("--since", default=None, help="runs from this time (2026-11-20, 6h, 7d)")
    save.add_argument("--until", default=None, help="runs up to this time")
    save.set_defaults(func=_save)
    lst = sub.add_parser("list", help="the baselines kept")
    lst.set_defaults(func=_list)
    show = sub.add_parser("show", help="one baseline: its runs and fingerprint")
    show.add_argument("name", type=name)
    show.set_defaults(func=_show)
    delete = sub.add_parser("delete", help="forget a baseline (its runs stay in the history)")
    delete.add_argument("name", type=name)
    delete.set_defaults(func=_delete)
    for child in (save, lst, show, delete):
        child.add_argument("--store", metavar="PATH", default=None, help="the history file")
        child.add_argument("--format", choices=["text", "json"], default="text")
