# SPDX-License-Identifier: BSD-3-Clause
"""siw (iWARP) for the guests: Debian's kernel does not build it, so it is built out of tree
against the headers of the guest's exact kernel, and cached beside the image."""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from .softroce_base import BUILD_TIMEOUT_S, SIW_RECIPE_VERSION, Image, SoftRoceError, locked, need_tool, run_logged

log = logging.getLogger("fabscope.testbed.softroce")

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
        need_tool(tool, why)
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
    with locked(img.path.parent / ".build.lock", BUILD_TIMEOUT_S, "siw build"):
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
                run_logged(["dpkg-deb", "-x", str(deb_cache / str(by_pkg[pkg]["file"])), str(hdr)],
                            logfile, f"unpacking {pkg}", 300)
            # Only siw's own directory is needed from the 140 MB source tarball.
            src_deb = deb_cache / str(by_pkg[wanted[0]]["file"])
            member = f"linux-source-{series}/drivers/infiniband/sw/siw"
            pipeline = (
                f"set -o pipefail; dpkg-deb --fsys-tarfile {shlex.quote(str(src_deb))} "
                f"| tar -xO ./usr/src/linux-source-{series}.tar.xz "
                f"| tar -xJ -C {shlex.quote(str(work))} {shlex.quote(member)}"
            )
            run_logged(["bash", "-c", pipeline], logfile, "extracting siw from linux-source", 900)
            kdir = hdr / "usr/src" / f"linux-headers-{release}"
            _relocate_headers(hdr, kdir)
            siw_src = work / member
            run_logged(
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
            run_logged(["strip", "--strip-debug", str(built)], logfile, "strip --strip-debug siw.ko", 120)
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


