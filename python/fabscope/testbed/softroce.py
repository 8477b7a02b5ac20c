"""Soft-RoCE testbed: a qemu guest whose Debian kernel has ``rdma_rxe``.

The build machines have no RDMA NIC and their kernel has no RDMA support, but a
Debian guest under ``qemu-system-x86_64 -accel tcg`` does: ``rdma link add rxe0
type rxe netdev eth0`` gives a real verbs device, so libibverbs, rdma_cm,
perftest and fabscope run for real.

* :func:`build` makes (once, cached outside the work tree) a bookworm root
  image by ``debootstrap --variant=minbase``, its kernel and a small initrd.
* :func:`run` boots one guest (or two joined by a datagram link through
  127.0.0.1), runs a command in it with ``fabscope`` on PATH and the host repo
  mounted read-only at ``/fabscope``, prints the command's output and returns
  its exit status.
* :func:`capture_sysfs` copies the real rxe sysfs layout out of a guest, for
  the doctor's fixtures.

Guest-side scripts are package data in ``softroce_guest/``. Every wait has a
deadline; a guest that overstays it is killed and the run fails with the last
lines of its console.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import logging
import lzma
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .. import argtypes
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
# Under TCG a server needs a moment after start before its client may connect.
SERVER_HEAD_START_S = 3.0
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

EXIT_TIMEOUT = 124
EXIT_TESTBED_FAILURE = 125


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


def _need_tool(name: str, why: str) -> str:
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


def _load_image(path: Path) -> Image | None:
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


def _locked(lock_path: Path, deadline_s: float, what: str) -> contextlib.AbstractContextManager[None]:
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


def _tail_file(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} unreadable)"
    return "\n".join(text.splitlines()[-lines:])


def _run_logged(
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
                f"last lines of {logfile}:\n{_tail_file(logfile)}"
            ) from None
    if proc.returncode != 0:
        raise SoftRoceError(
            f"{what} failed with exit status {proc.returncode}: {shlex.join(cmd)}\n"
            f"last lines of {logfile}:\n{_tail_file(logfile)}"
        )


def _chroot_env() -> dict[str, str]:
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "DEBIAN_FRONTEND": "noninteractive",
        "LC_ALL": "C",
        "HOME": "/root",
    }


def _tree_size(root: Path) -> int:
    total = 0
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _print_uris(root: Path, packages: Sequence[str], logfile: Path) -> list[dict[str, str]]:
    """URIs and hashes of packages from the image's own apt lists (same suite)."""
    proc = subprocess.run(
        ["chroot", str(root), "apt-get", "download", "--print-uris", *packages],
        capture_output=True, text=True, env=_chroot_env(), timeout=120, check=False,
    )
    with open(logfile, "a") as out:
        out.write(f"\n$ apt-get download --print-uris {' '.join(packages)}\n{proc.stdout}{proc.stderr}")
    if proc.returncode != 0:
        return []
    debs: list[dict[str, str]] = []
    for line in proc.stdout.splitlines():
        m = re.match(r"'(\S+)' (\S+) (\d+) SHA256:([0-9a-f]{64})", line)
        if m:
            debs.append({"uri": m[1], "file": m[2], "size": m[3], "sha256": m[4]})
    return debs


def _unmount_below(root: Path) -> None:
    """Unmount whatever is mounted at or below root, deepest first."""
    prefix = str(root.resolve())
    with contextlib.suppress(OSError):
        mounts = [
            line.split()[1].replace("\\040", " ")
            for line in Path("/proc/mounts").read_text().splitlines()
            if len(line.split()) > 1
        ]
        for mnt in sorted((m for m in mounts if m == prefix or m.startswith(prefix + "/")), reverse=True):
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True, timeout=60)


def _has_pvh_note(elf: bytes) -> bool:
    """Does this ELF64 kernel carry XEN_ELFNOTE_PHYS32_ENTRY (PVH entry point)?"""
    if elf[:5] != b"\x7fELF\x02":
        return False
    phoff = int.from_bytes(elf[0x20:0x28], "little")
    phentsize = int.from_bytes(elf[0x36:0x38], "little")
    phnum = int.from_bytes(elf[0x38:0x3A], "little")
    for i in range(phnum):
        ph = elf[phoff + i * phentsize: phoff + (i + 1) * phentsize]
        if int.from_bytes(ph[0:4], "little") != 4:  # PT_NOTE
            continue
        off = int.from_bytes(ph[8:16], "little")
        end = off + int.from_bytes(ph[32:40], "little")
        while off + 12 <= end:
            namesz, descsz, ntype = (int.from_bytes(elf[off + k: off + k + 4], "little") for k in (0, 4, 8))
            name = elf[off + 12: off + 12 + namesz]
            if name.rstrip(b"\0") == b"Xen" and ntype == 18:
                return True
            off += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def _extract_pvh_vmlinux(bzimage: Path, dest: Path) -> bool:
    """Unpack the ELF kernel from the bzImage if it can boot by PVH.

    Under TCG the bzImage's own xz decompressor takes 3-4 s of every boot;
    qemu loads a PVH-capable ELF directly, so the guest starts at once.
    """
    data = bzimage.read_bytes()
    off = data.find(b"\xfd7zXZ\x00")
    if off < 0:
        log.info("kernel payload is not xz; guests boot the bzImage")
        return False
    try:
        elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data[off:])
    except lzma.LZMAError as exc:
        log.info("cannot unpack the kernel payload (%s); guests boot the bzImage", exc)
        return False
    if not _has_pvh_note(elf):
        log.info("kernel has no PVH entry note; guests boot the bzImage")
        return False
    dest.write_bytes(elf)
    return True


def _dpkg_versions(root: Path) -> dict[str, str]:
    proc = subprocess.run(
        ["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f", "${Package}\t${Version}\n"],
        capture_output=True, text=True, check=False, timeout=60,
    )
    versions: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        name, _, version = line.partition("\t")
        versions[name] = version
    return versions


def build(cache_dir: Path | None = None, force: bool = False) -> Path:
    """Build the guest image once; return its cache directory.

    The directory is ``<cache_dir>/<recipe key>`` and holds ``vmlinuz``,
    ``initrd.img``, ``rootfs.img`` (ext4, never written: guests boot it with
    ``snapshot=on``) and ``manifest.json``. An existing complete build is
    reused unless ``force``.
    """
    cache = (cache_dir or default_cache_dir()).resolve()
    key = recipe_key()
    final = cache / key
    if not force:
        image = _load_image(final)
        if image is not None:
            log.debug("reusing cached image %s", final)
            return final
    if os.geteuid() != 0:
        raise SoftRoceError(
            f"building the Soft-RoCE image needs root (debootstrap, chroot); no usable image in {final}. "
            "Run `fabscope testbed softroce build` as root (e.g. sudo -E), or point FABSCOPE_CACHE "
            "at a cache that already holds one."
        )
    for tool, why in (
        ("debootstrap", "build the guest root file system"),
        ("mkfs.ext4", "make the guest disk image"),
        ("chroot", "configure the guest root file system"),
        ("dpkg-query", "record package versions"),
    ):
        _need_tool(tool, why)
    with _locked(cache / ".build.lock", BUILD_TIMEOUT_S, "Soft-RoCE image build"):
        if not force and _load_image(final) is not None:
            return final  # another process built it while we waited
        return _build_locked(cache, key, final)


def _build_locked(cache: Path, key: str, final: Path) -> Path:
    started = time.monotonic()
    mirror = debian_mirror()
    work = cache / f".build-{key}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    logfile = work / "build.log"
    root = work / "root"
    debs = cache / "debs"  # downloaded packages, kept across recipe changes
    debs.mkdir(parents=True, exist_ok=True)
    log.info("building the Soft-RoCE guest image %s from %s (log: %s)", key, mirror, logfile)
    try:
        # Stage 1 (download + unpack) separately from stage 2 (configure), so that
        # the initramfs-tools config is in place before the kernel's postinst
        # builds the initrd: it then builds the small MODULES=list one directly.
        stage1 = [
            "debootstrap", "--foreign", "--variant=minbase", f"--cache-dir={debs}",
            "--include=" + ",".join(GUEST_PACKAGES), SUITE, str(root), mirror,
        ]
        for attempt in (1, 2):
            try:
                _run_logged(stage1, logfile, "debootstrap (download and unpack)", 900)
                break
            except SoftRoceError:
                if attempt == 2:
                    raise
                log.warning("debootstrap stage 1 failed; retrying once (mirror hiccups happen)")
                shutil.rmtree(root, ignore_errors=True)
        log.info("debootstrap stage 1 done after %.0f s", time.monotonic() - started)
        conf_d = root / "etc/initramfs-tools/conf.d"
        hooks = root / "etc/initramfs-tools/hooks"
        conf_d.mkdir(parents=True, exist_ok=True)
        hooks.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GUEST_DIR / "initramfs.conf", conf_d / "fabscope.conf")
        shutil.copyfile(GUEST_DIR / "initramfs-hook", hooks / "fabscope")
        (hooks / "fabscope").chmod(0o755)
        dpkg_cfg = root / "etc/dpkg/dpkg.cfg.d"
        dpkg_cfg.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GUEST_DIR / "dpkg-excludes", dpkg_cfg / "fabscope-excludes")
        _run_logged(
            ["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"],
            logfile, "debootstrap --second-stage (configure)", 900, env=_chroot_env(),
        )
        log.info("debootstrap stage 2 done after %.0f s", time.monotonic() - started)

        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        if len(kernels) != 1:
            raise SoftRoceError(
                f"expected exactly one kernel in {root}/boot after installing linux-image-amd64, "
                f"found {[k.name for k in kernels]}; see {logfile}"
            )
        release = kernels[0].name.removeprefix("vmlinuz-")
        initrd = root / "boot" / f"initrd.img-{release}"
        if not initrd.is_file():
            raise SoftRoceError(f"the kernel's postinst made no {initrd}; see {logfile}")
        versions = _dpkg_versions(root)
        # For --siw: the exact source and headers of this kernel, from the same
        # suite the image came from (the host's apt may carry newer ones).
        abi = release.removesuffix("-amd64")
        series = ".".join(release.split(".")[:2])
        siw_debs = _print_uris(
            root,
            [f"linux-source-{series}", f"linux-headers-{release}", f"linux-headers-{abi}-common",
             f"linux-kbuild-{series}"],
            logfile,
        )

        modules = root / "usr/lib/modules" / release
        for rel in PRUNED_MODULE_DIRS:
            shutil.rmtree(modules / rel, ignore_errors=True)
        _run_logged(["chroot", str(root), "depmod", "-a", release], logfile, "depmod", 300,
                    env=_chroot_env())
        for rel in PRUNED_PATHS:
            target = root / rel
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
        init = root / "sbin" / "fabscope-init"
        shutil.copyfile(GUEST_DIR / "fabscope-init", init)
        init.chmod(0o755)
        (root / "etc/hostname").write_text("softroce\n")
        (root / "etc/fstab").write_text("# root is mounted by the initrd; see fabscope-init\n")

        _unmount_below(root)  # mkfs.ext4 -d must not copy a /proc left mounted by debootstrap
        shutil.copyfile(kernels[0], work / "vmlinuz")
        pvh = _extract_pvh_vmlinux(kernels[0], work / "vmlinux")
        shutil.copyfile(initrd, work / "initrd.img")
        # mkfs.ext4 -d copies the tree into the image without a loop device.
        # No journal: guests never write the image (snapshot=on).
        size_mb = int(_tree_size(root) * 1.25 / 2**20) + 256
        _run_logged(
            ["mkfs.ext4", "-q", "-F", "-L", "fabscope-root", "-O", "^has_journal",
             "-d", str(root), str(work / "rootfs.img"), f"{size_mb}M"],
            logfile, "mkfs.ext4 -d", 600,
        )
        shutil.rmtree(root)
        manifest: dict[str, object] = {
            "key": key,
            "recipe_version": RECIPE_VERSION,
            "suite": SUITE,
            "mirror": mirror,
            "packages": list(GUEST_PACKAGES),
            "kernel_release": release,
            "pvh_vmlinux": pvh,
            "versions": {
                name: versions.get(name, "")
                for name in (f"linux-image-{release}", "rdma-core", "perftest", "python3", "tshark",
                             "libibverbs1", "librdmacm1", "libcjson1", "iproute2")
            },
            "siw_debs": siw_debs,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.monotonic() - started, 1),
            "image_size_mb": size_mb,
        }
        (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if final.exists():
            shutil.rmtree(final)
        work.rename(final)
    except BaseException:
        # Keep the log for the error message's path, drop the big root tree
        # (after any mount a killed debootstrap left in it: never delete through one).
        _unmount_below(root)
        shutil.rmtree(root, ignore_errors=True)
        raise
    # Older recipes' images are dead weight (about 1 GB each), but the newest
    # older one may still be in use by a process that loaded the previous
    # recipe (a checkout switched mid-run): keep it, drop the rest.
    others = sorted(
        (d for d in cache.iterdir() if d.is_dir() and re.fullmatch(r"[0-9a-f]{16}", d.name) and d != final),
        key=lambda d: d.stat().st_mtime, reverse=True,
    )
    for other in others[1:]:
        log.info("removing the image of an older recipe: %s", other)
        shutil.rmtree(other, ignore_errors=True)
    log.info("built %s in %.0f s", final, time.monotonic() - started)
    return final


def why_it_cannot_boot(cache_dir: Path | None = None) -> str | None:
    """Why a guest cannot boot on this host (what is missing and how to get it), or None."""
    if shutil.which("qemu-system-x86_64") is None:
        return "qemu-system-x86_64 missing (make setup installs qemu-system-x86)"
    cached = (cache_dir or default_cache_dir()) / recipe_key() / "manifest.json"
    if os.geteuid() != 0 and not cached.exists():
        return "no cached Soft-RoCE image and not root (building it needs debootstrap as root)"
    return None


def image(cache_dir: Path | None = None) -> Image:
    """The cached image, built first if missing."""
    path = build(cache_dir)
    loaded = _load_image(path)
    if loaded is None:
        raise SoftRoceError(f"{path} is incomplete; rebuild with `fabscope testbed softroce build --force`")
    return loaded


# --------------------------------------------------------------------------
# siw (iWARP): Debian's kernel does not build it, so build it out of tree
# against the headers of the guest's exact kernel.


def _download(uri: str, dest: Path, sha256: str, timeout_s: float) -> None:
    if dest.is_file() and _sha256(dest) == sha256:
        return
    tmp = dest.with_suffix(dest.suffix + ".part")
    log.info("downloading %s", uri)
    try:
        with urllib.request.urlopen(uri, timeout=60) as resp, open(tmp, "wb") as out:
            end = time.monotonic() + timeout_s
            while chunk := resp.read(1 << 20):
                out.write(chunk)
                if time.monotonic() > end:
                    raise SoftRoceError(f"downloading {uri} took longer than {timeout_s:.0f} s")
    except OSError as exc:
        raise SoftRoceError(f"cannot download {uri}: {exc}") from exc
    if _sha256(tmp) != sha256:
        tmp.unlink()
        raise SoftRoceError(f"{uri}: SHA256 differs from the image's apt lists; try again or rebuild")
    tmp.rename(dest)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def build_siw(img: Image, force: bool = False) -> Path:
    """Build (once, cached next to the image) siw.ko for the guest's kernel."""
    out_dir = img.path / f"siw-{SIW_RECIPE_VERSION}"
    ko = out_dir / "siw.ko"
    if ko.is_file() and not force:
        return ko
    for tool, why in (("make", "build siw.ko"), ("gcc", "build siw.ko"), ("dpkg-deb", "unpack the kernel packages"),
                      ("xz", "unpack linux-source"), ("modinfo", "check siw.ko"),
                      ("strip", "strip siw.ko's debug info")):
        _need_tool(tool, why)
    raw = img.manifest.get("siw_debs")
    debs = [d for d in raw if isinstance(d, dict)] if isinstance(raw, list) else []
    by_pkg = {str(d["file"]).split("_", 1)[0]: d for d in debs}
    release = img.kernel_release
    abi = release.removesuffix("-amd64")
    series = ".".join(release.split(".")[:2])
    wanted = [f"linux-source-{series}", f"linux-headers-{release}", f"linux-headers-{abi}-common",
              f"linux-kbuild-{series}"]
    missing = [p for p in wanted if p not in by_pkg]
    if missing:
        raise SoftRoceError(
            f"the image manifest does not say where to get {missing} for kernel {release}; "
            "rebuild the image (`fabscope testbed softroce build --force`)"
        )
    with _locked(img.path.parent / ".build.lock", BUILD_TIMEOUT_S, "siw build"):
        if ko.is_file() and not force:
            return ko
        started = time.monotonic()
        deb_cache = img.path.parent / "debs"
        deb_cache.mkdir(exist_ok=True)
        for pkg in wanted:
            d = by_pkg[pkg]
            _download(str(d["uri"]), deb_cache / str(d["file"]), str(d["sha256"]), 900)
        work = img.path / f".siw-build-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        logfile = work / "build.log"
        try:
            hdr = work / "hdr"
            for pkg in wanted[1:]:
                _run_logged(["dpkg-deb", "-x", str(deb_cache / str(by_pkg[pkg]["file"])), str(hdr)],
                            logfile, f"unpacking {pkg}", 300)
            # Only siw's own directory is needed from the 140 MB source tarball.
            src_deb = deb_cache / str(by_pkg[wanted[0]]["file"])
            member = f"linux-source-{series}/drivers/infiniband/sw/siw"
            pipeline = (
                f"set -o pipefail; dpkg-deb --fsys-tarfile {shlex.quote(str(src_deb))} "
                f"| tar -xO ./usr/src/linux-source-{series}.tar.xz "
                f"| tar -xJ -C {shlex.quote(str(work))} {shlex.quote(member)}"
            )
            _run_logged(["bash", "-c", pipeline], logfile, "extracting siw from linux-source", 900)
            kdir = hdr / "usr/src" / f"linux-headers-{release}"
            _relocate_headers(hdr, kdir)
            siw_src = work / member
            _run_logged(
                ["make", "-C", str(kdir), f"M={siw_src}", "CONFIG_RDMA_SIW=m", "modules",
                 f"-j{os.cpu_count() or 1}"],
                logfile, "building siw.ko", 900,
            )
            built = siw_src / "siw.ko"
            vermagic = subprocess.run(["modinfo", "-F", "vermagic", str(built)], capture_output=True,
                                      text=True, check=False).stdout.strip()
            if not vermagic.startswith(release + " "):
                raise SoftRoceError(f"siw.ko vermagic {vermagic!r} does not match the guest kernel {release}")
            # 5 MB of debug info would only slow insmod down under TCG.
            _run_logged(["strip", "--strip-debug", str(built)], logfile, "strip --strip-debug siw.ko", 120)
            out_dir.mkdir(exist_ok=True)
            shutil.copyfile(built, ko.with_suffix(".part"))
            ko.with_suffix(".part").rename(ko)
            shutil.copyfile(logfile, out_dir / "build.log")
        except BaseException:
            log.error("siw build failed; log kept at %s", logfile)
            raise
        shutil.rmtree(work, ignore_errors=True)
        for old in img.path.glob("siw-*"):
            if old != out_dir:
                shutil.rmtree(old, ignore_errors=True)
        log.info("built %s in %.0f s", ko, time.monotonic() - started)
        return ko


def _relocate_headers(hdr: Path, kdir: Path) -> None:
    """Make the unpacked Debian headers usable outside /usr: rewrite absolute
    paths (Makefile includes, symlinks) to point into hdr."""
    for path in [*hdr.rglob("*")]:
        if path.is_symlink():
            target = os.readlink(path)
            if target.startswith("/usr/"):
                path.unlink()
                path.symlink_to(str(hdr) + target)
    for mk in (kdir / "Makefile",):
        text = mk.read_text()
        mk.write_text(text.replace(" /usr/src/", f" {hdr}/usr/src/"))


# --------------------------------------------------------------------------
# Run.


@dataclass
class _Guest:
    """One qemu process and what its console has told us."""

    name: str
    ctl: Path
    nonce: str
    output: TextIO | None  # where the command's output goes (None: nowhere)
    prefix: str = ""
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=CONSOLE_TAIL_LINES))
    events: dict[str, float] = field(default_factory=dict)
    stage: str = "starting qemu"
    error: str | None = None
    exit_status: int | None = None
    reader: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def label(self) -> str:
        return "the guest" if self.name == "guest" else f"the {self.name} guest"

    @property
    def console_log(self) -> Path:
        return self.ctl.parent / f"{self.name}.console.log"

    @property
    def qemu_log(self) -> Path:
        return self.ctl.parent / f"{self.name}.qemu.log"

    def read_console(self) -> None:
        """Reader thread: log the console, follow markers, forward the command's output."""
        assert self.proc is not None and self.proc.stdout is not None
        marker = re.compile(rf"@@fabscope:(?:{self.nonce}:([^@]*)|boot-error:([^@]*))@@")
        in_cmd = False
        held: str | None = None  # last output line, held back (see init.sh: the extra echo)
        with open(self.console_log, "w") as logf:
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n").replace("\r", "")
                # Host-side time since qemu start: shows where a slow boot spends it.
                logf.write(f"[{time.monotonic() - self.started:7.2f}] {line}\n")
                logf.flush()
                m = marker.search(line)
                with self.lock:
                    if not m:
                        self.tail.append(line)
                        if in_cmd:
                            if held is not None:
                                self._emit(held)
                            held = line
                        continue
                    before = line[: m.start()]
                    if before:
                        self.tail.append(before)
                    now = time.monotonic() - self.started
                    event = m[1] if m[1] is not None else "boot-error:" + m[2]
                    self.tail.append(f"[testbed {now:.1f} s: {event}]")
                    kind, _, arg = event.partition(":")
                    self.events.setdefault(arg.split(":")[0] if kind == "stage" else kind, now)
                    if kind == "begin":
                        in_cmd = True
                        self.stage = "running the command"
                    elif kind == "exit":
                        if in_cmd:
                            if before:
                                if held is not None:
                                    self._emit(held)
                                self._emit(before)
                            elif held is not None and held != "":
                                self._emit(held)
                        in_cmd = False
                        held = None
                        with contextlib.suppress(ValueError):
                            self.exit_status = int(arg)
                        self.stage = "powering off"
                    elif kind in ("error", "boot-error"):
                        self.error = arg
                    elif kind == "stage":
                        self.stage = f"booted; after setup step {arg!r}"
                    elif kind == "ready":
                        self.stage = "ready; waiting to start the command"
            if held:
                self._emit(held)

    def _emit(self, line: str) -> None:
        if self.output is not None:
            self.output.write(self.prefix + line + "\n")
            self.output.flush()

    def tail_text(self) -> str:
        with self.lock:
            lines = list(self.tail)
        text = "\n".join(f"    {line}" for line in lines) or "    (no console output)"
        qemu = _tail_file(self.qemu_log, 12) if self.qemu_log.exists() else ""
        said = [
            line for line in qemu.splitlines()
            # The argv line is ours; the hub warning is expected (single guest: no peer by design).
            if line.strip() and not line.startswith("$ ") and "is not connected to host network" not in line
        ]
        if said:
            text += "\n  qemu said:\n" + "\n".join(f"    {line}" for line in said)
        return text

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        if self.reader is not None:
            self.reader.join(timeout=5)

    def rc_from_ctl(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.ctl / "rc").read_text().strip())
        return self.exit_status


def _qemu_opt_path(path: Path) -> str:
    # qemu's option syntax doubles commas inside values.
    return str(path).replace(",", ",,")


def _link_pair() -> tuple[socket.socket, socket.socket]:
    """The wire between the two guests: a connected pair of Unix datagram sockets.

    One Ethernet frame is one datagram and nothing sits between the guests. The
    TCP link qemu offers (``-netdev socket`` or ``stream`` on 127.0.0.1) made every
    RC send or write round trip 22 ms, for perftest and fabscope alike, while reads,
    UC and UD took 0.3-1 ms. Only RC send/write put two small frames back to back in
    one direction (an ACK, then the next message), the pattern Nagle's algorithm holds
    on a TCP socket; that fits, though it was not traced inside qemu. Over this pair
    ib_send_lat gave 0.33 ms (UDP: 0.31 ms). A full receiver blocks its sender
    instead of dropping (unlike UDP), so a bandwidth test does not turn into
    retransmissions.
    """
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for end in (a, b):
        # Room for a burst of 64 KiB messages at the guest MTU (the default is ~200 KiB;
        # the kernel caps the request at net.core.wmem_max).
        with contextlib.suppress(OSError):
            end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    return a, b


def _ssh_key_pair(rundir: Path) -> dict[str, Path]:
    """A key pair for this two-guest run only: each guest's init.sh installs it for root and starts
    dropbear, so a launcher in one guest (mpirun's rsh agent, hydra's ssh launcher) starts ranks in
    the other. The private key never leaves the run directory and the guests' control shares."""
    keygen = _need_tool("ssh-keygen", "make the per-run ssh key the guests' MPI launcher uses (package openssh-client)")
    key = rundir / "ssh_key"
    proc = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "fabscope-softroce", "-f", str(key)],
                          capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SoftRoceError(f"ssh-keygen could not make the guests' ssh key: {proc.stderr.strip()[-300:]}")
    return {"ssh_key": key, "ssh_key.pub": key.with_name("ssh_key.pub")}


def _write_control_dir(
    ctl: Path, *, nonce: str, role: str, addr: str, peer: str, hosts: str, cmd: Sequence[str],
    rdma: str, wait_go: bool, keep_alive: bool, go_timeout_s: float, siw_ko: Path | None,
    extra_files: dict[str, Path], addr2: str = "",
) -> None:
    ctl.mkdir(parents=True)
    shutil.copyfile(GUEST_DIR / "init.sh", ctl / "init.sh")
    env = {
        "FS_NONCE": nonce,
        "FS_ROLE": role,
        "FS_HOSTNAME": role if role != "single" else "softroce",
        "FS_ADDR": addr,
        "FS_ADDR2": addr2,
        "FS_PEER_ADDR": peer,
        "FS_RDMA": rdma,
        "FS_WAIT_GO": "1" if wait_go else "0",
        "FS_GO_TIMEOUT": str(max(1, int(go_timeout_s))),
        "FS_KEEP_ALIVE": "1" if keep_alive else "0",
        "FS_ENGINE": ENGINE_REL_PATH,
    }
    (ctl / "env").write_text("".join(f"{k}={shlex.quote(v)}\n" for k, v in env.items()))
    (ctl / "hosts").write_text(hosts)
    # exec: the command's exit status is the script's, argv exactly as given.
    (ctl / "cmd.sh").write_text(f"#!/bin/sh\nexec {shlex.join(cmd)}\n")
    if siw_ko is not None:
        shutil.copyfile(siw_ko, ctl / "siw.ko")
    for name, src in extra_files.items():
        shutil.copy(src, ctl / name)  # with its mode: an owner-only token file stays owner-only


def _qemu_argv(
    qemu: str, img: Image, repo: Path, ctl: Path, out: Path, nics: Sequence[tuple[str, str]]
) -> list[str]:
    """``nics``: (qemu -netdev spec without its id, MAC) per NIC: eth0, eth1, ..."""
    accel = os.environ.get("FABSCOPE_QEMU_ACCEL", "tcg")
    # quiet: the console carries the command's output. panic=-1 with qemu's
    # -no-reboot: if init dies, qemu exits at once instead of hanging until the
    # deadline. fsck.mode=skip: the image is read-only to us anyway.
    # mitigations=off, no_timer_check: a throw-away test guest; both save boot
    # time under TCG (the IO-APIC timer check also fails noisily under PVH).
    cmdline = (
        "console=ttyS0 root=/dev/vda rw rootfstype=ext4 init=/sbin/fabscope-init "
        "panic=-1 quiet fsck.mode=skip mitigations=off no_timer_check"
    )

    def share(path: Path, tag: str, readonly: bool) -> list[str]:
        opts = f"local,path={_qemu_opt_path(path)},mount_tag={tag},security_model=none,multidevs=remap"
        return ["-virtfs", opts + (",readonly=on" if readonly else "")]

    # The PVH ELF kernel skips 3-4 s of in-guest decompression under TCG. For a
    # bzImage, qboot reaches the kernel about 0.5 s sooner than SeaBIOS (it
    # ships with Debian's qemu-system-data; SeaBIOS is qemu's default otherwise).
    kernel = img.pvh_kernel or img.kernel
    bios = ["-bios", str(QBOOT)] if img.pvh_kernel is None and QBOOT.is_file() else []
    return [
        qemu, "-accel", accel, *bios, "-cpu", "max", "-m", str(GUEST_MEMORY_MB), "-smp", "1",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-serial", "stdio",
        "-kernel", str(kernel), "-initrd", str(img.initrd), "-append", cmdline,
        # snapshot=on: writes go to a throw-away overlay, the cached image stays
        # pristine and two guests can boot it at once.
        "-drive", f"file={_qemu_opt_path(img.rootfs)},format=raw,if=virtio,snapshot=on",
        *share(repo, "fabscope", True),
        *share(ctl, "fsctl", False),
        *share(out, "fsout", False),
        *(arg for i, (netdev, mac) in enumerate(nics)
          for arg in ("-netdev", f"{netdev},id=n{i}", "-device", f"virtio-net-pci,netdev=n{i},mac={mac}")),
    ]


def _host_cpus_for_guests(two_guests: bool) -> tuple[str, int, int]:
    """(taskset, server CPU, client CPU) for ``pin_cpus``: the first two CPUs this process may
    run on. taskset execs qemu with the mask set, so every thread qemu starts inherits it."""
    if not two_guests:
        raise SoftRoceError("pin_cpus pins each of two guests to a CPU of its own: it needs two_guests "
                            "(--two-guests); a single guest runs where the host schedules it")
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SoftRoceError(f"pin_cpus needs two host CPUs this process may use, and it may use only "
                            f"CPU {cpus[0]}: run without --pin-cpus, or widen the affinity (taskset -c 0,1 ...)")
    taskset = _need_tool("taskset", "pin each guest to a host CPU of its own (package util-linux)")
    return taskset, cpus[0], cpus[1]


def _start(guest: _Guest, argv: list[str], pass_fds: Sequence[int] = ()) -> None:
    guest.ctl.parent.mkdir(parents=True, exist_ok=True)
    with open(guest.qemu_log, "w") as qlog:
        qlog.write(f"$ {shlex.join(argv)}\n")
        qlog.flush()
        guest.started = time.monotonic()
        guest.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=qlog, pass_fds=pass_fds
        )
    guest.stage = "booting (kernel and initrd)"
    guest.reader = threading.Thread(target=guest.read_console, name=f"softroce-{guest.name}", daemon=True)
    guest.reader.start()


def run(
    cmd: list[str],
    two_guests: bool = False,
    siw: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    server_cmd: list[str] | None = None,
    *,
    cache_dir: Path | None = None,
    out_dir: Path | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    extra_files: dict[str, Path] | None = None,
    links: int = 1,
    pin_cpus: bool = False,
    package: Path | None = None,
) -> int:
    """Boot the guest(s), run ``cmd`` inside, print its output, return its exit status.

    ``cmd`` runs as root in ``/out`` with ``fabscope`` and ``fabscope-engine``
    on PATH, the repo at ``/fabscope`` (read-only) and ``out_dir`` at ``/out``
    (per guest ``out_dir/server``, ``out_dir/client`` with two guests; a
    temporary directory if not given). The RDMA device is ``rxe0`` (``siw0``
    with ``siw``) on ``eth0``; ``peer`` in /etc/hosts names the other guest
    (the guest itself when alone).

    With ``two_guests`` a server guest (192.168.77.1) runs ``server_cmd``
    (default ``fabscope serve --bind 0.0.0.0 --insecure-no-auth``) and the client guest
    (192.168.77.2) runs ``cmd`` once the server has had a head start. Their
    only link is a pair of connected Unix datagram sockets (see :func:`_link_pair`).

    ``links=2`` gives each guest a second NIC, eth1 on its own link (a second
    socket pair; a second hub for one guest) in ``SUBNET2`` (.1 server, .2
    client), with a second RDMA device on it (``rxe1``/``siw1``): two rails,
    for ``--device rxe0,rxe1``. ``FABSCOPE_RDMA_DEVS`` in the guest lists them.

    ``pin_cpus`` (two guests) runs each guest's qemu, every thread of it, on a
    host CPU of its own (the first two this process may use): the server guest
    on one, the client guest on the other. Each busy poller then has a CPU to
    itself, and a guest's packet work is not scheduled onto the CPU where the
    other guest spins; the run-to-run spread of a latency figure drops from
    15-25 % to 2-8 % here. Refused with fewer than two usable CPUs.

    ``package`` (a ``make deb`` .deb): each guest installs it at boot (``dpkg -i``; the image has its
    Depends) and ``fabscope`` is the packaged ``/usr/bin/fabscope`` with ``/usr/bin/fabscope-engine``,
    not the tree on the share. It costs about 11 s of boot per guest under TCG (packaging/README.md).

    ``timeout_s`` bounds the whole run from the first qemu start; on expiry
    the guests are killed and :class:`SoftRoceTimeout` is raised. Testbed
    failures raise :class:`SoftRoceError`; both carry the console's last lines.
    """
    if not cmd:
        raise SoftRoceError("no command given: usage `fabscope testbed softroce run [options] -- CMD...`")
    if timeout_s <= 0:
        raise SoftRoceError(f"timeout must be positive, got {timeout_s}")
    if links not in (1, 2):
        raise SoftRoceError(f"links must be 1 or 2, got {links}")
    if package is not None:
        _checked_package(package)
    pins = _host_cpus_for_guests(two_guests) if pin_cpus else None
    out_stream = stdout if stdout is not None else sys.stdout
    err_stream = stderr if stderr is not None else sys.stderr
    qemu = _need_tool("qemu-system-x86_64", "boot the Soft-RoCE guest (package qemu-system-x86)")
    repo = repo_root()
    img = image(cache_dir)
    siw_ko = build_siw(img) if siw else None
    rdma = "siw" if siw else "rxe"
    if not (repo / ENGINE_REL_PATH).exists():
        log.info("note: %s is not built; fabscope-engine will fail in the guest", repo / ENGINE_REL_PATH)

    rundir = Path(tempfile.mkdtemp(prefix="fabscope-softroce-"))
    out = out_dir.resolve() if out_dir is not None else rundir / "out"
    out.mkdir(parents=True, exist_ok=True)
    nonce = secrets.token_hex(8)
    extras = dict(extra_files or {})
    if package is not None:
        extras[PACKAGE_CTL_NAME] = package
    guests: list[_Guest] = []
    ok = False
    try:
        deadline = time.monotonic() + timeout_s
        if not two_guests:
            addr = f"{SUBNET}.1"
            guest = _Guest("guest", rundir / "guest", nonce, out_stream)
            _write_control_dir(
                guest.ctl, nonce=nonce, role="single", addr=addr, peer=addr,
                hosts=f"127.0.0.1 localhost\n{addr} softroce peer\n", cmd=cmd, rdma=rdma,
                wait_go=False, keep_alive=False, go_timeout_s=timeout_s, siw_ko=siw_ko, extra_files=extras,
                addr2=f"{SUBNET2}.1" if links == 2 else "",
            )
            # A hub with only this NIC on it: eth0 exists and has carrier, and
            # no packet can leave the guest (rxe loops its own traffic back).
            nics = [(f"hubport,hubid={i}", f"52:54:00:{77 + i}:00:01") for i in range(links)]
            argv = _qemu_argv(qemu, img, repo, guest.ctl, out, nics)
            guests.append(guest)
            _start(guest, argv)
            rc = _wait_client(guest, None, deadline, timeout_s, cmd)
        else:
            server_argv_cmd = list(server_cmd) if server_cmd else list(DEFAULT_SERVER_CMD)
            extras = {**extras, **_ssh_key_pair(rundir)}
            hosts = f"127.0.0.1 localhost\n{SUBNET}.1 server\n{SUBNET}.2 client\n"
            server = _Guest("server", rundir / "server", nonce, err_stream, prefix="[server] ")
            client = _Guest("client", rundir / "client", nonce, out_stream)
            _write_control_dir(
                server.ctl, nonce=nonce, role="server", addr=f"{SUBNET}.1", peer=f"{SUBNET}.2",
                hosts=hosts + f"{SUBNET}.2 peer\n", cmd=server_argv_cmd, rdma=rdma, wait_go=False,
                keep_alive=True, go_timeout_s=timeout_s, siw_ko=siw_ko, extra_files=extras,
                addr2=f"{SUBNET2}.1" if links == 2 else "",
            )
            _write_control_dir(
                client.ctl, nonce=nonce, role="client", addr=f"{SUBNET}.2", peer=f"{SUBNET}.1",
                hosts=hosts + f"{SUBNET}.1 peer\n", cmd=cmd, rdma=rdma, wait_go=True,
                keep_alive=False, go_timeout_s=timeout_s, siw_ko=siw_ko, extra_files=extras,
                addr2=f"{SUBNET2}.2" if links == 2 else "",
            )
            (out / "server").mkdir(exist_ok=True)
            (out / "client").mkdir(exist_ok=True)
            pairs = [_link_pair() for _ in range(links)]
            try:
                for side, guest in enumerate((server, client)):
                    guests.append(guest)
                    ends = [pair[side] for pair in pairs]
                    nics = [(f"dgram,local.type=fd,local.str={end.fileno()}", f"52:54:00:{77 + i}:00:0{side + 1}")
                            for i, end in enumerate(ends)]
                    argv = _qemu_argv(qemu, img, repo, guest.ctl, out / guest.name, nics)
                    if pins:
                        argv = [pins[0], "-c", str(pins[1 + side]), *argv]
                    _start(guest, argv, pass_fds=[end.fileno() for end in ends])
            finally:
                for pair in pairs:
                    for end in pair:
                        end.close()
            rc = _wait_client(client, server, deadline, timeout_s, cmd)
            srv_rc = server.rc_from_ctl()
            if srv_rc not in (None, 0):
                err_stream.write(
                    f"softroce: note: the server command ({shlex.join(server_argv_cmd)}) exited with {srv_rc}\n"
                )
        ok = True
        return rc
    except SoftRoceError as exc:
        exc.args = (f"{exc}\n  consoles and qemu logs kept in {rundir}",)
        raise
    finally:
        for g in guests:
            g.kill()
        # A failed run keeps its directory for the post-mortem (the error names it).
        if ok and os.environ.get("FABSCOPE_SOFTROCE_KEEP"):
            log.info("consoles and qemu logs kept in %s (FABSCOPE_SOFTROCE_KEEP is set)", rundir)
        elif ok:
            shutil.rmtree(rundir, ignore_errors=True)


# `run(package=...)`: the .deb's name in the control share; init.sh installs it when it is there.
PACKAGE_CTL_NAME = "fabscope.deb"


def _checked_package(package: Path) -> Path:
    found = "no such file" if not package.exists() else "not a .deb file"
    if package.suffix != ".deb" or not package.is_file():
        raise SoftRoceError(f"--package {package}: {found}; build the package with `make deb` "
                            "(build/deb/fabscope_VERSION_ARCH.deb) and pass its path")
    return package


def _wait_client(
    guest: _Guest, server: _Guest | None, deadline: float, timeout_s: float, cmd: Sequence[str]
) -> int:
    """Wait for the command guest; with a server, also pace and watch it."""
    go_at: float | None = None
    done_at: float | None = None
    while True:
        now = time.monotonic()
        if server is not None:
            with server.lock:
                srv_error = server.error
                srv_begin = server.events.get("begin")
                srv_exit = server.exit_status
            if srv_error is not None:
                raise SoftRoceError(f"the server guest failed during setup: {srv_error}\n{server.tail_text()}")
            if not server.alive() and guest.rc_from_ctl() is None:
                raise SoftRoceError(
                    f"the server guest stopped (qemu exit status {server.proc.returncode if server.proc else '?'}) "
                    f"while the client was {guest.stage}:\n  server console:\n{server.tail_text()}"
                )
            if srv_begin is not None and go_at is None:
                go_at = now + SERVER_HEAD_START_S
            if srv_exit is not None and not (guest.ctl / "go").exists():
                raise SoftRoceError(
                    f"the server command exited with {srv_exit} before the client started; "
                    f"is it a server that waits for a client?\n  server console:\n{server.tail_text()}"
                )
            if go_at is not None and now >= go_at and not (guest.ctl / "go").exists():
                (guest.ctl / "go").write_text("go\n")
        with guest.lock:
            error = guest.error
        if error is not None:
            guest.kill()
            raise SoftRoceError(f"{guest.label} failed during setup: {error}\n{guest.tail_text()}")
        rc = guest.rc_from_ctl()
        if not guest.alive():
            assert guest.proc is not None
            if guest.reader is not None:
                guest.reader.join(timeout=5)
            rc = guest.rc_from_ctl()
            if rc is None:
                raise SoftRoceError(
                    f"{guest.label} stopped (qemu exit status {guest.proc.returncode}) "
                    f"without reporting the command's exit status; it was {guest.stage}:\n{guest.tail_text()}"
                )
            _log_timing(guest)
            return rc
        if rc is not None:
            # Reported; give it a moment to power off, then stop it ourselves.
            done_at = done_at or now
            if now - done_at > POWEROFF_GRACE_S:
                log.warning("%s did not power off %.0f s after its command ended; killed it",
                            guest.label, POWEROFF_GRACE_S)
                guest.kill()
                _log_timing(guest)
                return rc
        if now > deadline:
            stage = guest.stage
            guest.kill()
            if server is not None:
                server.kill()
            msg = (
                f"{guest.label} did not finish within the {timeout_s:g} s timeout; killed it "
                f"(it was {stage}). Command: {shlex.join(cmd)}\n  last console lines:\n{guest.tail_text()}"
            )
            if server is not None:
                msg += f"\n  server console:\n{server.tail_text()}"
            raise SoftRoceTimeout(msg)
        time.sleep(0.05)


def _log_timing(guest: _Guest) -> None:
    with guest.lock:
        ev = dict(guest.events)
    parts = [f"{k} {v:.1f} s" for k, v in sorted(ev.items(), key=lambda kv: kv[1])]
    log.info("%s: timeline from qemu start: %s; qemu exited %.1f s", guest.name, ", ".join(parts),
             time.monotonic() - guest.started)


# --------------------------------------------------------------------------
# sysfs capture for the doctor's fixtures.


CAPTURE_PERF: tuple[str, ...] = ("ib_write_bw", "-d", "rxe0", "-x", "1", "-F", "-n", "500", "-s", "65536")


def capture_sysfs(dest: Path, timeout_s: float = 300.0, cache_dir: Path | None = None) -> Path:
    """Copy rxe0's and eth0's real sysfs files out of a guest into dest, with NOTE.md.

    Two guests: the client copies its counters, moves a known payload to the
    server with ib_write_bw (so the fixture's counters show real traffic),
    then copies the whole layout.
    """
    img = image(cache_dir)
    with tempfile.TemporaryDirectory(prefix="fabscope-sysfs-") as tmp:
        out = Path(tmp)
        with open(os.devnull, "w") as sink:
            rc = run(
                ["/bin/sh", "/fabscope-ctl/capture_sysfs.sh", "/out/capture", "peer"],
                two_guests=True, server_cmd=list(CAPTURE_PERF), timeout_s=timeout_s, cache_dir=cache_dir,
                out_dir=out, stdout=sink, stderr=sink,
                extra_files={"capture_sysfs.sh": GUEST_DIR / "capture_sysfs.sh"},
            )
        if rc != 0:
            raise SoftRoceError(f"the sysfs capture script exited with {rc}")
        src = out / "client" / "capture"
        dest = dest.resolve()
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(src, dest, symlinks=True)
    info = (dest / "capture-info.txt").read_text() if (dest / "capture-info.txt").exists() else ""
    kernel_pkg = f"linux-image-{img.kernel_release}"
    note = f"""# rxe sysfs fixture: Soft-RoCE (rdma_rxe) in a qemu guest

Real files, copied (not invented) from a running guest of the fabscope Soft-RoCE
testbed (`testbed/softroce`), for the doctor's and devices.py's tests.

## Where and how

- Command (host, repo root, as root):
  `PYTHONPATH=python python3 -m fabscope.testbed.softroce capture-sysfs tests/fixtures/sysfs/rxe-qemu`
  The guest-side script is `python/fabscope/testbed/softroce_guest/capture_sysfs.sh`.
- Captured (host clock, UTC): {time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
- Guest: Debian {SUITE}, kernel `{img.kernel_release}` ({kernel_pkg} {_manifest_version(img, kernel_pkg)}),
  rdma-core {_manifest_version(img, "rdma-core")}, perftest {_manifest_version(img, "perftest")},
  `qemu-system-x86_64 -accel tcg`, virtio-net NIC, MAC 52:54:00:77:00:02.
- This is the CLIENT guest of a two-guest run (192.168.77.2/24 on eth0; the server
  guest 192.168.77.1 is its only peer, over a datagram link between the two qemu processes).
- Guest setup (testbed init.sh): `modprobe -a virtio_net ib_uverbs rdma_ucm rdma_rxe`,
  `ip addr add 192.168.77.2/24 dev eth0`, `ip link set eth0 up`,
  `rdma link add rxe0 type rxe netdev eth0`.
- Traffic: `counters-before/` was copied first; then
  `{" ".join(CAPTURE_PERF)} 192.168.77.1` (500 x 64 KiB = 32768000 payload
  bytes, RDMA write, RoCE v2 GID index 1; output in `commands/ib_write_bw.txt`);
  then everything else. So `hw_counters/*` and `statistics/*` minus
  `counters-before/` is the cost of that transfer: on rxe the RoCE bytes show in
  both the RDMA counters and the netdev statistics (unlike mlx5).

## Layout

- `sys/` mirrors `/sys` with symlinks resolved: `sys/class/infiniband/rxe0/` holds the
  regular files of `/sys/devices/virtual/infiniband/rxe0/` (and ports/1, hw_counters,
  power). GIDs and gid_attrs were read for indexes 0-7 only (reading all 1024 GID
  files takes minutes under TCG): index 0 is the fe80 link-local GID, index 1 the
  IPv4-mapped ::ffff:192.168.77.2, both `RoCE v2` (rxe has no RoCE v1 entries);
  unused entries read as zeros, their gid_attrs fail with EINVAL.
- rxe has no `ports/1/counters/` (the IB PMA counters), no `hca_type`, no `board_id`;
  `fw_ver` is empty. That is the real layout, not an omission.
- `sys/class/net/eth0/`: mtu, speed (-1 on virtio), operstate, address, statistics/*, etc.
- `sys/class/infiniband_verbs/`: uverbs0 -> rxe0.
- `unreadable.txt`: files the kernel refused to read, with the error.
- `symlinks.txt`: the real symlinks (`readlink` and `readlink -f`).
- `commands/`: `ibv_devinfo -v`, `ibv_devices`, `rdma link show`, `rdma dev show`,
  `ip -d addr show eth0`, `uname -a`, `ib_write_bw`.

## Capture details (from the guest)

```
{info.strip()}
```
"""
    (dest / "NOTE.md").write_text(note)
    return dest


def _manifest_version(img: Image, pkg: str) -> str:
    versions = img.manifest.get("versions")
    if isinstance(versions, dict):
        return str(versions.get(pkg, "?"))
    return "?"


# --------------------------------------------------------------------------
# Command line: python -m fabscope.testbed.softroce build|run|capture-sysfs|info


def _parser() -> argparse.ArgumentParser:
    # Common options belong to every subcommand, so `run -v` and `build --cache-dir D` both work.
    common = argtypes.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", type=Path, default=None,
                        help="image cache (default ${FABSCOPE_CACHE:-/var/cache/fabscope}/softroce)")
    common.add_argument("-v", "--verbose", action="store_true", help="progress and timings on stderr")
    p = argtypes.ArgumentParser(
        prog="fabscope testbed softroce",
        description="Soft-RoCE testbed: qemu guest(s) with a real rdma_rxe verbs device.",
    )
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
    return p


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
    if args.action == "run" and args.pin_cpus and not args.two_guests:
        parser.error("--pin-cpus pins each of two guests to a host CPU of its own: add --two-guests "
                     "(a single guest runs where the host schedules it)")
    if parse_only:
        return 0
    logging.basicConfig(
        level=logging.INFO if (args.verbose or args.action in ("build", "capture-sysfs")) else logging.WARNING,
        format="softroce: %(message)s", stream=sys.stderr,
    )
    cache: Path | None = args.cache_dir
    try:
        if args.action == "build":
            path = build(cache, force=args.force)
            img = _load_image(path)
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
                       pin_cpus=args.pin_cpus, package=args.package)
        if args.action == "capture-sysfs":
            dest = args.dest or repo_root() / "tests/fixtures/sysfs/rxe-qemu"
            print(capture_sysfs(dest, cache_dir=cache))
            return 0
        # info
        root = (cache or default_cache_dir()).resolve()
        key = recipe_key()
        loaded = _load_image(root / key)
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
