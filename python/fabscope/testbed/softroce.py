# SPDX-License-Identifier: BSD-3-Clause
"""Soft-RoCE testbed: a qemu guest whose Debian kernel has ``rdma_rxe``.

The build machines have no RDMA NIC and their kernel has no RDMA support, but a
Debian guest under ``qemu-system-x86_64 -accel tcg`` does: ``rdma link add rxe0
type rxe netdev eth0`` gives a real verbs device, so libibverbs, rdma_cm,
perftest and fabscope run for real.

This module is the testbed's command line (``fabscope testbed softroce ...``) and
its API, each part in the module that owns it:

* :func:`build` (softroce_image) makes, once and cached outside the work tree, a
  bookworm root image by ``debootstrap --variant=minbase``, its kernel and a
  small initrd; the recipe that keys the cache is in softroce_base, the PVH
  kernel extraction in elf_pvh, the siw module (iWARP) in softroce_siw.
* :func:`run` (softroce_guests) boots one guest (or two joined by a datagram link
  through 127.0.0.1), runs a command in it with ``fabscope`` on PATH and the host
  repo mounted read-only at ``/fabscope``, prints the command's output and
  returns its exit status.
* :func:`capture_sysfs` (softroce_sysfs) copies the real rxe sysfs layout out of
  a guest, for the doctor's fixtures.

Guest-side scripts are package data in ``softroce_guest/``. Every wait has a
deadline; a guest that overstays it is killed and the run fails with the last
lines of its console.
"""
from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path

from .. import argtypes
from ..errors import EXIT_TESTBED_FAILURE as EXIT_TESTBED_FAILURE
from ..errors import EXIT_USAGE, FabscopeError
from . import softroce_guests

# The testbed's API, from the modules that own each part (re-exported: `softroce.run`, ...).
from .softroce_base import DEFAULT_MIRROR as DEFAULT_MIRROR
from .softroce_base import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from .softroce_base import SIW_RECIPE_VERSION, load_image, repo_root
from .softroce_base import SUBNET as SUBNET
from .softroce_base import SUBNET2 as SUBNET2
from .softroce_base import SUITE as SUITE
from .softroce_base import SoftRoceError as SoftRoceError
from .softroce_base import SoftRoceTimeout as SoftRoceTimeout
from .softroce_base import debian_mirror as debian_mirror
from .softroce_base import default_cache_dir as default_cache_dir
from .softroce_base import recipe_key as recipe_key
from .softroce_guests import guest_host_cpus as guest_host_cpus
from .softroce_guests import run as run
from .softroce_image import build as build
from .softroce_image import image as image
from .softroce_image import why_it_cannot_boot as why_it_cannot_boot
from .softroce_siw import build_siw as build_siw
from .softroce_sysfs import capture_sysfs as capture_sysfs

log = logging.getLogger("fabscope.testbed.softroce")

# --------------------------------------------------------------------------
# Command line: python -m fabscope.testbed.softroce build|run|capture-sysfs|info


def _parser() -> argparse.ArgumentParser:
    """`fabscope testbed softroce` on its own (``python -m fabscope.testbed.softroce``)."""
    p = argtypes.ArgumentParser(prog="fabscope testbed softroce")
    fill_parser(p)
    return p


def fill_parser(p: argparse.ArgumentParser) -> None:
    """`fabscope testbed softroce`'s arguments, on the parser the CLI's tree gives it (also the
    source of its man page and shell completion)."""
    p.description = "Soft-RoCE testbed: qemu guest(s) with a real rdma_rxe verbs device."
    p.set_defaults(func=_execute, check=_check)
    # Common options belong to every subcommand, so `run -v` and `build --cache-dir D` both work.
    common = argtypes.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", type=Path, default=None,
                        help="image cache (default ${FABSCOPE_CACHE:-/var/cache/fabscope}/softroce)")
    common.add_argument("-v", "--verbose", action="store_true", help="progress and timings on stderr")
    sub = p.add_subparsers(dest="action", required=True)
    b = sub.add_parser("build", parents=[common],
                       help="build the guest image (cached; a changed recipe rebuilds)")
    b.add_argument("--force", action="store_true", help="rebuild even if a cached image exists")
    b.add_argument("--siw", action="store_true", help="also build siw.ko (iWARP) for the guest kernel")
    r = sub.add_parser("run", parents=[common], help="boot the guest(s) and run CMD inside; exit with its status")
    r.add_argument("--two-guests", action="store_true",
                   help="server guest + client guest joined by a datagram link (a Unix socket pair)")
    r.add_argument("--siw", action="store_true", help="siw0 (soft iWARP) instead of rxe0")
    r.add_argument("--links", type=int, choices=(1, 2), default=1,
                   help=f"2: a second NIC per guest (eth1, {SUBNET2}.0/24) with its own RDMA device "
                        "(rxe1), on its own link: two rails for --device rxe0,rxe1 (default 1)")
    r.add_argument("--numa", action="store_true",
                   help="single guest: two NUMA nodes (CPUs 0-1 on node 0, CPUs 2-3 on node 1) with the NIC(s) "
                        "on node 1, behind a PCI expander bridge")
    r.add_argument("--vcpus", type=int, choices=softroce_guests.VCPU_CHOICES, default=1,
                   help="single guest: its vCPUs (default 1). With 2, qemu runs each on a host thread of its "
                        "own, so a server and a client in the one guest each get a CPU, as on a real host")
    r.add_argument("--pin-cpus", action="store_true",
                   help="with --two-guests: each guest's qemu on a host CPU of its own (the first two this "
                        "process may use), so each busy poller has a CPU to itself")
    r.add_argument("--timeout", type=argtypes.finite_float(1, 86400), default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"kill the guest(s) and fail after S seconds (default {DEFAULT_TIMEOUT_S:g})")
    r.add_argument("--server-cmd", default=None, metavar="'CMD ARGS'", type=_shell_words,
                   help="server guest's command, shell-quoted (default: fabscope serve --bind 0.0.0.0 --insecure-no-auth)")
    r.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="host directory mounted read-write at /out in the guest(s)")
    r.add_argument("--package", type=Path, default=None, metavar="PATH.deb",
                   help="install this fabscope .deb (make deb) in the guest(s) at boot and run the packaged "
                        "/usr/bin/fabscope instead of the tree on the share (about 11 s more boot under TCG)")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    c = sub.add_parser("capture-sysfs", parents=[common], help="copy the guest's rxe0/eth0 sysfs into a fixture dir")
    c.add_argument("dest", type=Path, nargs="?", default=None,
                   help="default: tests/fixtures/sysfs/rxe-qemu in the repo")
    sub.add_parser("info", parents=[common], help="show the cache directory, recipe key and the cached image")


def _shell_words(value: str) -> list[str]:
    """argparse type for --server-cmd: a shell-quoted command line, split as the shell would."""
    try:
        words = shlex.split(value)
    except ValueError as exc:  # "No closing quotation"
        raise argparse.ArgumentTypeError(f"{argtypes.shown(value)}: {exc} (quote it as a shell would)") from None
    if not words:
        raise argparse.ArgumentTypeError("an empty command")
    return words


def main(argv: list[str] | None = None, parse_only: bool = False) -> int:
    """parse_only: check the arguments, do nothing."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        _check(args)
    except FabscopeError as exc:
        parser.error(exc.message)
    if parse_only:
        return 0
    return _execute(args)


def _check(args: argparse.Namespace) -> None:
    if args.action == "run" and (refusal := softroce_guests.layout_refusal(
            two_guests=args.two_guests, numa=args.numa, vcpus=args.vcpus, pin_cpus=args.pin_cpus)):
        raise FabscopeError(refusal, EXIT_USAGE)


def _execute(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO if (args.verbose or args.action in ("build", "capture-sysfs")) else logging.WARNING,
        format="softroce: %(message)s", stream=sys.stderr,
    )
    cache: Path | None = args.cache_dir
    try:
        if args.action == "build":
            path = build(cache, force=args.force)
            img = load_image(path)
            if args.siw and img is not None:
                build_siw(img, force=args.force)
            print(path)
            return 0
        if args.action == "run":
            cmd = list(args.cmd)
            if cmd and cmd[0] == "--":
                cmd = cmd[1:]
            server_cmd: list[str] | None = args.server_cmd
            return run(cmd, two_guests=args.two_guests, siw=args.siw, timeout_s=args.timeout,
                       server_cmd=server_cmd, cache_dir=cache, out_dir=args.out, links=args.links,
                       pin_cpus=args.pin_cpus, package=args.package, numa=args.numa, vcpus=args.vcpus)
        if args.action == "capture-sysfs":
            dest = args.dest or repo_root() / "tests/fixtures/sysfs/rxe-qemu"
            print(capture_sysfs(dest, cache_dir=cache))
            return 0
        # info
        root = (cache or default_cache_dir()).resolve()
        key = recipe_key()
        loaded = load_image(root / key)
        print(f"cache dir:  {root}\nrecipe key: {key}\nmirror:     {debian_mirror()}")
        if loaded is None:
            print("image:      not built (run: fabscope testbed softroce build)")
            return 1
        print(f"image:      {loaded.path}\nkernel:     {loaded.kernel_release}\n"
              f"built at:   {loaded.manifest.get('built_at')} in {loaded.manifest.get('build_seconds')} s")
        siw_ko = loaded.path / f"siw-{SIW_RECIPE_VERSION}" / "siw.ko"
        print(f"siw.ko:     {siw_ko if siw_ko.is_file() else 'not built (build --siw)'}")
        return 0
    except SoftRoceError as exc:
        sys.stderr.write(f"softroce: error: {exc}\n")
        return exc.exit_status
    except KeyboardInterrupt:
        sys.stderr.write("softroce: interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
