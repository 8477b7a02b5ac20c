# SPDX-License-Identifier: BSD-3-Clause
"""The Soft-RoCE testbed's shared facts: the image recipe, run-time settings, errors, paths
and host checks, the cached image's description, and the logged/locked steps every stage uses."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_TESTBED_FAILURE, EXIT_TIMEOUT
from .lock import exclusive

log = logging.getLogger("fabscope.testbed.softroce")

# --------------------------------------------------------------------------
# The recipe. Everything that shapes the cached image is listed here or in the
# BAKED_FILES, and all of it goes into the cache key: change any of it and the
# next build() builds a new image instead of reusing a stale one.

SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
GUEST_PACKAGES: tuple[str, ...] = (
    "linux-image-amd64",
    "kmod",
    "iproute2",
    "rdma-core",
    "ibverbs-utils",
    "ibverbs-providers",
    "rdmacm-utils",
    "perftest",
    "tcpdump",
    "tshark",
    "python3",
    "libcjson1",
    "libibverbs1",
    "librdmacm1",
    # The engine built on the host links every backend it found; the guest runs that same
    # binary, so it needs their runtime libraries too.
    "libucx0",
    "libfabric1",
    # The peers fabscope is compared with and the MPI runtimes it runs under (issue 27).
    # Debian 12 has no fabtests package: libfabric-bin carries fi_pingpong (-e msg|rdm|dgram)
    # and fi_info. MPI ranks reach the other guest over ssh (openssh-client, which Open MPI's
    # mpirun depends on anyway) into dropbear (a small server, started by init.sh with a key
    # made per testbed run).
    "ucx-utils",
    "libfabric-bin",
    "openmpi-bin",
    "mpich",
    "openssh-client",
    "dropbear-bin",
)
# Module trees no guest on a virtio machine ever loads. Dropping them halves the
# image (faster mkfs, smaller cache); depmod runs again afterwards.
PRUNED_MODULE_DIRS: tuple[str, ...] = (
    "kernel/drivers/gpu",
    "kernel/drivers/media",
    "kernel/drivers/net/wireless",
    "kernel/drivers/net/ethernet",
    "kernel/drivers/infiniband/hw",
    "kernel/drivers/staging",
    "kernel/drivers/bluetooth",
    "kernel/drivers/iio",
    "kernel/drivers/usb",
    "kernel/drivers/hid",
    "kernel/drivers/mmc",
    "kernel/drivers/isdn",
    "kernel/drivers/scsi",
    "kernel/drivers/mtd",
    "kernel/drivers/platform",
    "kernel/sound",
    "kernel/net/bluetooth",
    "kernel/net/wireless",
    "kernel/net/mac80211",
)
# Documentation and translations the guest never shows anyone.
PRUNED_PATHS: tuple[str, ...] = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt/archives",
    "var/lib/apt/lists",
)
GUEST_DIR = Path(__file__).resolve().parent / "softroce_guest"
BAKED_FILES: tuple[str, ...] = ("fabscope-init", "initramfs-hook", "initramfs.conf", "dpkg-excludes")
# Bump when build() changes in a way the lists above do not show.
RECIPE_VERSION = "2"
SIW_RECIPE_VERSION = "2"

# --------------------------------------------------------------------------
# Run-time settings.

DEFAULT_TIMEOUT_S = 600.0
# Two guests: the client guest's command starts once the server guest's command listens (a TCP socket
# or an rdma_cm id in LISTEN owned by it or a process below it: softroce_guest/listening.sh, polled by
# init.sh). A server that listens on nothing within this long is an error, not a slow start.
SERVER_LISTEN_TIMEOUT_S = 180.0
# Grace for a guest to power off after its command reported its exit status.
POWEROFF_GRACE_S = 20.0
# The guests' network is private to their two qemu processes, so serve listens there without a key.
DEFAULT_SERVER_CMD: tuple[str, ...] = ("fabscope", "serve", "--bind", "0.0.0.0", "--insecure-no-auth")
ENGINE_REL_PATH = "build/engine/fabscope-engine"
SUBNET = "192.168.77"
#: The second link's subnet (``links=2``): eth1 and the second RDMA device (rxe1/siw1).
SUBNET2 = "192.168.78"
GUEST_MEMORY_MB = 1024
CONSOLE_TAIL_LINES = 40
BUILD_TIMEOUT_S = 1800.0
QBOOT = Path("/usr/share/qemu/qboot.rom")


class SoftRoceError(Exception):
    """The testbed itself failed (not the command run inside it)."""

    exit_status = EXIT_TESTBED_FAILURE


class SoftRoceTimeout(SoftRoceError):
    """A guest did not finish within its deadline and was killed."""

    exit_status = EXIT_TIMEOUT


# --------------------------------------------------------------------------
# Paths and host checks.


def default_cache_dir() -> Path:
    """``${FABSCOPE_CACHE:-/var/cache/fabscope}/softroce``."""
    return Path(os.environ.get("FABSCOPE_CACHE") or "/var/cache/fabscope") / "softroce"


def repo_root() -> Path:
    """The fabscope checkout this module lives in (shared into the guest)."""
    env = os.environ.get("FABSCOPE_REPO")
    if env:
        root = Path(env).resolve()
        if not (root / "python" / "fabscope").is_dir():
            raise SoftRoceError(
                f"FABSCOPE_REPO={env} is not a fabscope checkout: it has no python/fabscope/. "
                "Unset it or point it at the repo root."
            )
        return root
    root = Path(__file__).resolve().parents[3]
    if not (root / "python" / "fabscope").is_dir():
        raise SoftRoceError(
            f"cannot find the fabscope repo around {Path(__file__).resolve()} "
            "(expected <repo>/python/fabscope/testbed/softroce.py); "
            "set FABSCOPE_REPO to the repo root."
        )
    return root


def need_tool(name: str, why: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if not found:
        raise SoftRoceError(
            f"{name} not found on this host; it is needed to {why}. "
            "`make setup` installs it (deps/apt-packages.txt), "
            "or apt-get install the package that provides it."
        )
    return found


def debian_mirror(apt: Path = Path("/etc/apt")) -> str:
    """The Debian mirror the host's apt uses (FABSCOPE_DEBIAN_MIRROR overrides).

    Reads /etc/apt/sources.list (one-line format) and sources.list.d/*.sources
    (deb822) and returns the first URI that serves the bookworm suite.
    """
    env = os.environ.get("FABSCOPE_DEBIAN_MIRROR")
    if env:
        return env.rstrip("/")
    candidates: list[str] = []
    one_line: list[Path] = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    for path in one_line:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                words = [w for w in re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()]
                if len(words) >= 3 and words[0] == "deb" and words[2] == SUITE:
                    candidates.append(words[1])
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        with contextlib.suppress(OSError):
            for stanza in re.split(r"\n\s*\n", path.read_text()):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if ":" in line and not line.lstrip().startswith("#"):
                        key, value = line.split(":", 1)
                        fields[key.strip().lower()] = value.strip()
                if (
                    "deb" in fields.get("types", "").split()
                    and SUITE in fields.get("suites", "").split()
                    and fields.get("enabled", "yes").lower() != "no"
                ):
                    candidates.extend(fields.get("uris", "").split())
    for uri in candidates:
        if uri.startswith(("http://", "https://")):
            return uri.rstrip("/")
    return DEFAULT_MIRROR


def recipe_key() -> str:
    """Hash of everything that shapes the image; names its cache directory."""
    h = hashlib.sha256()
    recipe = {
        "version": RECIPE_VERSION,
        "suite": SUITE,
        "packages": sorted(GUEST_PACKAGES),
        "pruned_modules": list(PRUNED_MODULE_DIRS),
        "pruned_paths": list(PRUNED_PATHS),
    }
    h.update(json.dumps(recipe, sort_keys=True).encode())
    for name in BAKED_FILES:
        h.update(b"\0" + name.encode() + b"\0")
        h.update((GUEST_DIR / name).read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Image:
    """A built guest image in the cache."""

    path: Path
    manifest: dict[str, object]

    @property
    def kernel(self) -> Path:
        return self.path / "vmlinuz"

    @property
    def pvh_kernel(self) -> Path | None:
        """The unpacked ELF kernel (boots by PVH, no decompression), if built."""
        path = self.path / "vmlinux"
        return path if self.manifest.get("pvh_vmlinux") and path.is_file() else None

    @property
    def initrd(self) -> Path:
        return self.path / "initrd.img"

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs.img"

    @property
    def kernel_release(self) -> str:
        return str(self.manifest["kernel_release"])


def load_image(path: Path) -> Image | None:
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    image = Image(path, manifest)
    if not all(p.is_file() for p in (image.kernel, image.initrd, image.rootfs)):
        return None
    return image


# --------------------------------------------------------------------------
# Build.


def locked(lock_path: Path, deadline_s: float, what: str) -> contextlib.AbstractContextManager[None]:
    """Hold an exclusive flock, waiting at most deadline_s for it."""
    return exclusive(
        lock_path,
        deadline_s,
        lambda: SoftRoceError(
            f"waited {deadline_s:.0f} s for {lock_path} ({what} by another process); "
            "if no other build is running, delete the lock file"
        ),
        waiting=lambda: log.info("waiting for another process's %s (%s)", what, lock_path),
        poll_s=1.0,
    )


def tail_file(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} unreadable)"
    return "\n".join(text.splitlines()[-lines:])


def run_logged(
    cmd: Sequence[str], logfile: Path, what: str, timeout_s: float, env: dict[str, str] | None = None
) -> None:
    """Run a build step with its output appended to logfile; fail clearly."""
    with open(logfile, "a") as out:
        out.write(f"\n$ {shlex.join(cmd)}\n")
        out.flush()
        try:
            proc = subprocess.run(
                list(cmd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                timeout=timeout_s, env=env, check=False,
            )
        except subprocess.TimeoutExpired:
            raise SoftRoceError(
                f"{what} did not finish within {timeout_s:.0f} s: {shlex.join(cmd)}\n"
                f"last lines of {logfile}:\n{tail_file(logfile)}"
            ) from None
    if proc.returncode != 0:
        raise SoftRoceError(
            f"{what} failed with exit status {proc.returncode}: {shlex.join(cmd)}\n"
            f"last lines of {logfile}:\n{tail_file(logfile)}"
        )


