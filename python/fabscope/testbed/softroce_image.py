# SPDX-License-Identifier: BSD-3-Clause
"""The Soft-RoCE guest image: a debootstrap bookworm root, its kernel and initrd, built once and
cached outside the work tree (the recipe in softroce_base is its cache key)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from .elf_pvh import _extract_pvh_vmlinux
from .softroce_base import (
    BUILD_TIMEOUT_S,
    GUEST_DIR,
    GUEST_PACKAGES,
    PRUNED_MODULE_DIRS,
    PRUNED_PATHS,
    RECIPE_VERSION,
    SUITE,
    Image,
    SoftRoceError,
    debian_mirror,
    default_cache_dir,
    load_image,
    locked,
    need_tool,
    recipe_key,
    run_logged,
)

log = logging.getLogger("fabscope.testbed.softroce")

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


def unmount_below(root: Path) -> None:
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
        image = load_image(final)
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
        need_tool(tool, why)
    with locked(cache / ".build.lock", BUILD_TIMEOUT_S, "Soft-RoCE image build"):
        if not force and load_image(final) is not None:
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
                run_logged(stage1, logfile, "debootstrap (download and unpack)", 900)
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
        run_logged(
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
        run_logged(["chroot", str(root), "depmod", "-a", release], logfile, "depmod", 300,
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

        unmount_below(root)  # mkfs.ext4 -d must not copy a /proc left mounted by debootstrap
        shutil.copyfile(kernels[0], work / "vmlinuz")
        pvh = _extract_pvh_vmlinux(kernels[0], work / "vmlinux")
        shutil.copyfile(initrd, work / "initrd.img")
        # mkfs.ext4 -d copies the tree into the image without a loop device.
        # No journal: guests never write the image (snapshot=on).
        size_mb = int(_tree_size(root) * 1.25 / 2**20) + 256
        run_logged(
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
        unmount_below(root)
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
    loaded = load_image(path)
    if loaded is None:
        raise SoftRoceError(f"{path} is incomplete; rebuild with `fabscope testbed softroce build --force`")
    return loaded


