# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope devices` and `fabscope doctor`: their options (fill_devices_parser,
fill_doctor_parser, which the CLI's one parser tree calls) and what they run. main_devices and
main_doctor run either without the CLI around it. Mistakes on the command line are explained in
one message and give EXIT_USAGE (2), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from fabscope import argtypes
from fabscope.devices import discover_with_engine, render_text, sysfs_root_from_env
from fabscope.doctor import EXIT_USAGE, Context, run_doctor
from fabscope.doctor import render_text as render_report
from fabscope.errors import FabscopeError


class UsageError(FabscopeError):
    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


class _Parser(argtypes.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message}\n{self.format_usage().strip()}")


def _common(p: argparse.ArgumentParser, description: str) -> None:
    p.description = description
    p.add_argument("--json", action="store_true", help="print schema-versioned JSON instead of a table")
    p.add_argument("--sysfs-root", metavar="P", type=Path, default=None,
                   help="read sysfs from P instead of /sys (default: $FABSCOPE_SYSFS_ROOT or /sys)")


def _check_root(args: argparse.Namespace) -> None:
    """The sysfs root (--sysfs-root, $FABSCOPE_SYSFS_ROOT or /sys), checked, as args.root."""
    root = sysfs_root_from_env(args.sysfs_root)
    try:
        found = root.is_dir()
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise UsageError(f"--sysfs-root {argtypes.shown(str(root))}: {exc.strerror}") from None
    if not found:
        raise UsageError(
            f"--sysfs-root {argtypes.shown(str(root))}: no such directory. It must be a sysfs tree (containing "
            f"class/net and, with RDMA, class/infiniband); leave it out to read /sys")
    args.root = root


def _check_doctor(args: argparse.Namespace) -> None:
    _check_root(args)
    if args.key_file and args.peer is None:
        raise UsageError("--key-file applies only with --peer HOST (the key of that host's serve)")


def fill_devices_parser(p: argparse.ArgumentParser) -> None:
    """`fabscope devices`'s options, on the parser the CLI's tree gives it (or a standalone one)."""
    _common(p, "RDMA devices, ports, GIDs, netdevs, PCI and NUMA placement")
    p.set_defaults(func=_devices, check=_check_root)


def fill_doctor_parser(p: argparse.ArgumentParser) -> None:
    """`fabscope doctor`'s options, on the parser the CLI's tree gives it (or a standalone one)."""
    _common(p, "check this host for known RDMA/HPC pitfalls, each with the fix")
    p.add_argument("--expect-link-layer", choices=["InfiniBand", "Ethernet"], default=None,
                   help="report an error for any RDMA port with the other link layer")
    p.add_argument("--device", metavar="NAME", default=None,
                   help="the device runs will ask for (an RDMA device, rxe0 or its port rxe0:1, or a netdev): "
                        "settings that choose a device are checked against it (default: every RDMA device here)")
    p.add_argument("--peer", metavar="HOST[:PORT]", default=None, type=argtypes.host_port(18515),
                   help="also run the checks on a host running `fabscope serve`, and compare the two hosts")
    p.add_argument("--key-file", metavar="FILE", default=None,
                   help="with --peer: the shared key of that `fabscope serve` (its --key-file)")
    p.set_defaults(func=_doctor, check=_check_doctor)


def _standalone(prog: str, fill: Callable[[argparse.ArgumentParser], None], argv: Sequence[str] | None,
                parse_only: bool) -> int:
    """The command without the CLI around it (tests, the guests): usage errors printed, exit 2."""
    parser = _Parser(prog=prog)
    fill(parser)
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        args.check(args)
    except UsageError as exc:
        print(f"{prog}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    if parse_only:
        return 0
    rc: int = args.func(args)
    return rc


def main_devices(argv: Sequence[str] | None = None, parse_only: bool = False) -> int:
    """parse_only: check the arguments, read nothing."""
    return _standalone("fabscope devices", fill_devices_parser, argv, parse_only)


def main_doctor(argv: Sequence[str] | None = None, parse_only: bool = False) -> int:
    """parse_only: check the arguments, run no check."""
    return _standalone("fabscope doctor", fill_doctor_parser, argv, parse_only)


def _devices(args: argparse.Namespace) -> int:
    inv = discover_with_engine(args.root)
    sys.stdout.write(inv.to_json() + "\n" if args.json else render_text(inv))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    ctx = Context(sysfs_root=args.root, expected_link_layer=args.expect_link_layer, device=args.device)
    if args.peer is None:
        report = run_doctor(ctx)
        sys.stdout.write(report.to_json() + "\n" if args.json else render_report(report))
        return report.exit_code
    from fabscope.doctor.peer import fetch, report_from_dict

    from ..session.auth import load_key

    try:
        key = load_key(args.key_file) if args.key_file else None
        peer_report, peer_facts = fetch(args.peer, key=key)
    except FabscopeError as exc:
        print(f"fabscope doctor: {exc.message}", file=sys.stderr)
        return exc.exit_code
    report = run_doctor(ctx, peer_facts=peer_facts)
    peer = report_from_dict(peer_report)
    if args.json:
        both = {"schema": "fabscope.doctor-pair/1", "local": report.to_dict(), "peer": peer.to_dict()}
        sys.stdout.write(json.dumps(both, indent=2) + "\n")
    else:
        sys.stdout.write(render_report(report) + "\n" + render_report(peer))
    return max(report.exit_code, peer.exit_code, key=lambda c: (c != 0, c))
