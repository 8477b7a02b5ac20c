# SPDX-License-Identifier: BSD-3-Clause
"""The real rxe sysfs layout copied out of a guest, for the doctor's fixtures."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from .softroce_base import GUEST_DIR, SUITE, Image, SoftRoceError
from .softroce_guests import run
from .softroce_image import image

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


