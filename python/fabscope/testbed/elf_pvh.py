# SPDX-License-Identifier: BSD-3-Clause
"""The PVH entry point of a Debian kernel: qemu boots an ELF vmlinux with XEN_ELFNOTE_PHYS32_ENTRY
straight into 64-bit code, skipping 3-4 s of in-guest decompression under TCG."""

from __future__ import annotations

import logging
import lzma
from pathlib import Path

log = logging.getLogger("fabscope.testbed.softroce")

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


