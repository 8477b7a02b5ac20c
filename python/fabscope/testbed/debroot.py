# SPDX-License-Identifier: BSD-3-Clause
"""A clean Debian root to install a package into: what the .deb test (tests/packaging) runs in.

:func:`build` makes once, and caches, a ``debootstrap --variant=minbase`` root of the Soft-RoCE
guests' suite with the packages asked for (a package's Depends, so that installing the .deb needs
nothing from the network), from the same mirror and the same download cache as the guest image
(``testbed.softroce``). :func:`run_in_copy` runs a shell script as root inside a throw-away copy of
that root: an overlay mount in a private mount namespace, with /proc, /sys and /dev bound in, gone
when the script ends (nothing to unmount, nothing left in the cache). Every step has a deadline.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from . import softroce_base as softroce
from .softroce_base import SoftRoceError as DebRootError
from .softroce_image import unmount_below

RECIPE_VERSION = "2"  # 2: built without the host's PYTHON* settings (a root of 1 may hold the checkout's path)
BUILD_TIMEOUT_S = 1200.0


def cache_dir() -> Path:
    """``${FABSCOPE_CACHE:-/var/cache/fabscope}/debroot`` (beside the guest image's cache)."""
    return softroce.default_cache_dir().parent / "debroot"


def recipe_key(packages: Sequence[str]) -> str:
    recipe = {"version": RECIPE_VERSION, "suite": softroce.SUITE, "packages": sorted(set(packages))}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def build(packages: Sequence[str]) -> Path:
    """The cached root with `packages` installed (built on first use, as root); returns its directory."""
    key = recipe_key(packages)
    cache = cache_dir().resolve()
    final = cache / key / "root"
    if (final / "etc/debian_version").is_file() and (cache / key / "manifest.json").is_file():
        return final
    if os.geteuid() != 0:
        raise DebRootError(f"building a Debian root needs root (debootstrap, chroot); none cached at {final}")
    softroce.need_tool("debootstrap", "build the clean Debian root")
    with softroce.locked(cache / ".build.lock", BUILD_TIMEOUT_S, "Debian root build"):
        if (cache / key / "manifest.json").is_file():
            return final
        started = time.monotonic()
        work = cache / f".build-{key}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        debs = softroce.default_cache_dir() / "debs"  # shared with the guest image: each .deb downloaded once
        debs.mkdir(parents=True, exist_ok=True)
        cmd = ["debootstrap", "--variant=minbase", f"--cache-dir={debs}", "--include=" + ",".join(sorted(set(packages))),
               softroce.SUITE, str(work / "root"), softroce.debian_mirror()]
        # The root's own python3 compiles its modules while debootstrap configures it, in the chroot
        # with our environment: a PYTHONPYCACHEPREFIX of the host (scripts/test.sh sets one under the
        # checkout) made it write the checkout's path into the root. The host's Python settings stay
        # out; the rest (a proxy, say) is what debootstrap itself may need.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        try:
            softroce.run_logged(cmd, work / "build.log", "debootstrap (clean Debian root)", BUILD_TIMEOUT_S, env)
            for path in ("var/cache/apt/archives", "var/lib/apt/lists"):  # what apt downloaded: not needed again
                for item in (work / "root" / path).glob("*.deb"):
                    item.unlink()
            shutil.rmtree(cache / key, ignore_errors=True)
            (cache / key).mkdir(parents=True)
            (work / "root").rename(final)
            manifest = {"packages": sorted(set(packages)), "suite": softroce.SUITE,
                        "build_seconds": round(time.monotonic() - started, 1)}
            (cache / key / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        finally:
            unmount_below(work)
            shutil.rmtree(work, ignore_errors=True)
    return final


def run_in_copy(root: Path, script: str, files: Sequence[Path] = (), timeout_s: float = 300.0
                ) -> subprocess.CompletedProcess[str]:
    """Runs `script` (sh, as root, in the chroot) in a throw-away overlay of `root`; `files` are copied
    to /tmp/in/ first. The root itself is never written to."""
    with tempfile.TemporaryDirectory(prefix="fabscope-debroot-") as tmp:
        upper, workdir, merged = (Path(tmp) / d for d in ("upper", "work", "merged"))
        for d in (upper, workdir, merged):
            d.mkdir()
        inbox = upper / "tmp/in"
        inbox.mkdir(parents=True)
        for f in files:
            shutil.copy2(f, inbox / f.name)
        (inbox / "script.sh").write_text(script)
        host = (f"set -e; mount -t overlay overlay -o lowerdir={root},upperdir={upper},workdir={workdir} {merged}; "
                f"mount --rbind /proc {merged}/proc; mount --rbind /sys {merged}/sys; "
                f"mount --rbind /dev {merged}/dev; "
                f"exec chroot {merged} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "
                "DEBIAN_FRONTEND=noninteractive TERM=dumb /bin/sh -e /tmp/in/script.sh")
        try:
            return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", host],
                                  capture_output=True, text=True, timeout=timeout_s, check=False,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise DebRootError(f"the script in the clean root did not finish within {timeout_s:.0f} s; "
                               f"output so far:\n{exc.stdout!r}\n{exc.stderr!r}") from None
