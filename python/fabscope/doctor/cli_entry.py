"""Entry points for `fabscope devices` and `fabscope doctor`; the CLI wires each in one line:

    devices -> return main_devices(argv)
    doctor  -> return main_doctor(argv)

Both return the process exit status.  Mistakes on the command line are explained in one
message and give EXIT_USAGE (2), never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from fabscope import argtypes
from fabscope.devices import discover_with_engine, render_text, sysfs_root_from_env
from fabscope.doctor import EXIT_USAGE, Context, run_doctor
from fabscope.doctor import render_text as render_report


class UsageError(Exception):
    pass


class _Parser(argtypes.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().strip()}")


def _common(prog: str, description: str) -> _Parser:
    p = _Parser(prog=prog, description=description)
    p.add_argument("--json", action="store_true", help="print schema-versioned JSON instead of a table")
    p.add_argument("--sysfs-root", metavar="P", type=Path, default=None,
                   help="read sysfs from P instead of /sys (default: $FABSCOPE_SYSFS_ROOT or /sys)")
    return p


def _check_root(root: Path) -> None:
    try:
        found = root.is_dir()
    except OSError as exc:  # e.g. a name longer than the file system allows
        raise UsageError(f"--sysfs-root {argtypes.shown(str(root))}: {exc.strerror}") from None
    if not found:
        raise UsageError(
            f"--sysfs-root {argtypes.shown(str(root))}: no such directory. It must be a sysfs tree (containing "
            f"class/net and, with RDMA, class/infiniband); leave it out to read /sys")


def _parse(parser: _Parser, argv: Sequence[str] | None) -> tuple[argparse.Namespace, Path] | None:
    """The arguments and the checked sysfs root; None once a usage error has been printed."""
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
        root = sysfs_root_from_env(args.sysfs_root)
        _check_root(root)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return None
    return args, root


def devices_parser() -> _Parser:
    return _common("fabscope devices", "RDMA devices, ports, GIDs, netdevs, PCI and NUMA placement")


def doctor_parser() -> _Parser:
    parser = _common("fabscope doctor", "check this host for known RDMA/HPC pitfalls, each with the fix")
    parser.add_argument("--expect-link-layer", choices=["InfiniBand", "Ethernet"], default=None,
                        help="report an error for any RDMA port with the other link layer")
    parser.add_argument("--peer", metavar="HOST[:PORT]", default=None, type=argtypes.host_port(18515),
                        help="also run the checks on a host running `fabscope serve`, and compare the two hosts")
    parser.add_argument("--key-file", metavar="FILE", default=None,
                        help="with --peer: the shared key of that `fabscope serve` (its --key-file)")
    return parser


def main_devices(argv: Sequence[str] | None = None, parse_only: bool = False) -> int:
    """parse_only: check the arguments, read nothing."""
    parsed = _parse(devices_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    args, root = parsed
    if parse_only:
        return 0
    inv = discover_with_engine(root)
    sys.stdout.write(inv.to_json() + "\n" if args.json else render_text(inv))
    return 0


def main_doctor(argv: Sequence[str] | None = None, parse_only: bool = False) -> int:
    """parse_only: check the arguments, run no check."""
    parsed = _parse(doctor_parser(), argv)
    if parsed is None:
        return EXIT_USAGE
    args, root = parsed
    ctx = Context(sysfs_root=root, expected_link_layer=args.expect_link_layer)
    if args.key_file and args.peer is None:
        print("fabscope doctor: --key-file applies only with --peer HOST (the key of that host's serve)",
              file=sys.stderr)
        return EXIT_USAGE
    if parse_only:
        return 0
    if args.peer is None:
        report = run_doctor(ctx)
        sys.stdout.write(report.to_json() + "\n" if args.json else render_report(report))
        return report.exit_code
    from fabscope.auth import load_key
    from fabscope.doctor.peer import fetch, report_from_dict
    from fabscope.errors import FabscopeError

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
