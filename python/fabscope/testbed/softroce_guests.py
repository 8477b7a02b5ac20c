# SPDX-License-Identifier: BSD-3-Clause
"""The guests' lifecycle: one or two qemu TCG guests joined by a datagram link, a command run in
one (a server command in the other), every wait with a deadline, the exit status returned."""

from __future__ import annotations

import collections
import contextlib
import logging
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .softroce_base import (
    CONSOLE_TAIL_LINES,
    DEFAULT_SERVER_CMD,
    DEFAULT_TIMEOUT_S,
    ENGINE_REL_PATH,
    GUEST_DIR,
    GUEST_MEMORY_MB,
    POWEROFF_GRACE_S,
    QBOOT,
    SERVER_LISTEN_TIMEOUT_S,
    SUBNET,
    SUBNET2,
    Image,
    SoftRoceError,
    SoftRoceTimeout,
    need_tool,
    repo_root,
    tail_file,
)
from .softroce_image import image
from .softroce_siw import build_siw

log = logging.getLogger("fabscope.testbed.softroce")

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
        qemu = tail_file(self.qemu_log, 12) if self.qemu_log.exists() else ""
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
    keygen = need_tool("ssh-keygen", "make the per-run ssh key the guests' MPI launcher uses (package openssh-client)")
    key = rundir / "ssh_key"
    proc = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", "fabscope-softroce", "-f", str(key)],
                          capture_output=True, text=True, timeout=30, check=False, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise SoftRoceError(f"ssh-keygen could not make the guests' ssh key: {proc.stderr.strip()[-300:]}")
    return {"ssh_key": key, "ssh_key.pub": key.with_name("ssh_key.pub")}


# The server guest's readiness check (init.sh runs it from the control share; not baked into the image).
LISTENING_SCRIPT = "listening.sh"
LISTENING_WHAT = ("a TCP socket in LISTEN (ss -Hltnp) or an rdma_cm id in LISTEN (rdma res show cm_id) "
                  "owned by its process or one below it")


def _write_control_dir(
    ctl: Path, *, nonce: str, role: str, addr: str, peer: str, hosts: str, cmd: Sequence[str],
    rdma: str, wait_go: bool, keep_alive: bool, go_timeout_s: float, siw_ko: Path | None,
    extra_files: dict[str, Path], addr2: str = "", report_listen: bool = False,
) -> None:
    ctl.mkdir(parents=True)
    shutil.copyfile(GUEST_DIR / "init.sh", ctl / "init.sh")
    shutil.copyfile(GUEST_DIR / LISTENING_SCRIPT, ctl / LISTENING_SCRIPT)
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
        "FS_REPORT_LISTEN": "1" if report_listen else "0",
        "FS_LISTEN_TIMEOUT": str(int(SERVER_LISTEN_TIMEOUT_S)),
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


# `run(numa=True)`: the guest's two NUMA nodes. Node 0 has CPUs 0-1, node 1 CPUs 2-3 and the
# NIC(s), so a NIC is local to CPUs other than CPU 0 (a NUMA-aware placement has to move off CPU 0
# to follow it), and each node has two CPUs: two engines of one run (--loopback) get a CPU each on
# either node (with one CPU on node 0, --cpu far put both on it, and they timed each other's time
# slices: 8 ms). The memory is split evenly between the nodes.
NUMA_VCPUS = 4
NUMA_NODE_CPUS: tuple[str, ...] = ("0-1", "2-3")  # per node, as qemu's -numa cpus= takes them
NUMA_NIC_NODE = 1
# The expander bridge that puts the NICs on NUMA_NIC_NODE, and the bus number its root bus gets
# (any free one above pci.0's buses). The guest sees root bus 0000:40, the bridge's internal
# pci-bridge at 0000:40:00.0 and the NIC(s) behind it on bus 41 (eth0 is 0000:41:00.0).
NUMA_PXB_ID = "pxb1"
NUMA_PXB_BUS_NR = 0x40


# Each guest NIC announces a link speed (virtio's VIRTIO_NET_F_SPEED_DUPLEX), as a real NIC does:
# its netdev then reports one (/sys/class/net/eth0/speed; without it, -1), rxe's port rate follows
# it, and a record over it carries a link rate and an expected ceiling (issue 20) instead of none.
# Nothing is shaped: the emulated link runs as fast as TCG lets it, far below this.
GUEST_NIC_SPEED_MBPS = 10000


def _numa_args() -> list[str]:
    """qemu arguments for ``run(numa=True)``: the CPUs, the memory split, the expander bridge.

    The NICs hang off a PCI expander bridge (pxb) with ``numa_node``: qemu describes its root
    bus in ACPI with a _PXM, so the guest's PCI functions behind it report that node. The
    firmware has to set up that extra root bus: SeaBIOS does (it runs before the PVH kernel
    too), qboot does not (a bzImage under qboot found no eth0), so numa never uses qboot."""
    half, rest = GUEST_MEMORY_MB // 2, GUEST_MEMORY_MB - GUEST_MEMORY_MB // 2
    args = ["-smp", str(NUMA_VCPUS)]
    for node, (cpus, mb) in enumerate(zip(NUMA_NODE_CPUS, (half, rest), strict=True)):
        args += ["-object", f"memory-backend-ram,id=mem{node},size={mb}M",
                 "-numa", f"node,nodeid={node},cpus={cpus},memdev=mem{node}"]
    return [*args, "-device", f"pxb,id={NUMA_PXB_ID},bus_nr={NUMA_PXB_BUS_NR},numa_node={NUMA_NIC_NODE},bus=pci.0"]


def _qemu_argv(
    qemu: str, img: Image, repo: Path, ctl: Path, out: Path, nics: Sequence[tuple[str, str]],
    numa: bool = False, vcpus: int = 1,
) -> list[str]:
    """``nics``: (qemu -netdev spec without its id, MAC) per NIC: eth0, eth1, ...
    ``numa``: two NUMA nodes, the NICs on node 1 (see :func:`_numa_args`)."""
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

    # Every PCI device names its bus: qemu puts a device without bus= on the newest PCI bus, which
    # with numa is the expander bridge's root bus, and that bus takes only bridges.
    def share(path: Path, tag: str, readonly: bool) -> list[str]:
        opts = f"local,id=fs_{tag},path={_qemu_opt_path(path)},security_model=none,multidevs=remap"
        return ["-fsdev", opts + (",readonly=on" if readonly else ""),
                "-device", f"virtio-9p-pci,fsdev=fs_{tag},mount_tag={tag},bus=pci.0"]

    # The PVH ELF kernel skips 3-4 s of in-guest decompression under TCG. For a
    # bzImage, qboot reaches the kernel about 0.5 s sooner than SeaBIOS (it
    # ships with Debian's qemu-system-data; SeaBIOS is qemu's default otherwise),
    # but not with numa: qboot leaves the expander bridge's bus unconfigured.
    kernel = img.pvh_kernel or img.kernel
    bios = ["-bios", str(QBOOT)] if img.pvh_kernel is None and QBOOT.is_file() and not numa else []
    nic_bus = NUMA_PXB_ID if numa else "pci.0"
    return [
        qemu, "-accel", accel, *bios, "-cpu", "max", "-m", str(GUEST_MEMORY_MB),
        *(_numa_args() if numa else ["-smp", str(vcpus)]),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-serial", "stdio",
        "-kernel", str(kernel), "-initrd", str(img.initrd), "-append", cmdline,
        # snapshot=on: writes go to a throw-away overlay, the cached image stays
        # pristine and two guests can boot it at once.
        "-drive", f"file={_qemu_opt_path(img.rootfs)},format=raw,if=none,id=rootfs,snapshot=on",
        *share(repo, "fabscope", True),
        *share(ctl, "fsctl", False),
        *share(out, "fsout", False),
        *(arg for i, (netdev, mac) in enumerate(nics)
          for arg in ("-netdev", f"{netdev},id=n{i}", "-device",
                      f"virtio-net-pci,netdev=n{i},mac={mac},bus={nic_bus},speed={GUEST_NIC_SPEED_MBPS},duplex=full")),
        # Last, where `-drive if=virtio` put it: without numa every slot stays as before (eth0 at 00:05.0).
        "-device", "virtio-blk-pci,drive=rootfs,bus=pci.0",
    ]


VCPU_CHOICES = (1, 2)


def layout_refusal(*, two_guests: bool, numa: bool, vcpus: int, pin_cpus: bool) -> str | None:
    """Why these guest options cannot go together, or None: the one rule for the CLI's --two-guests,
    --numa, --vcpus and --pin-cpus and for run()'s keywords of the same names (named both ways)."""
    if numa and two_guests:
        return ("--numa (numa) boots ONE guest with two NUMA nodes and cannot be combined with --two-guests "
                "(two_guests): drop one of them (a NUMA layout for two guests is not built)")
    if vcpus not in VCPU_CHOICES:
        return f"--vcpus (vcpus) must be 1 or 2, got {vcpus}"
    if vcpus != 1 and (two_guests or numa):
        return (f"--vcpus {vcpus} (vcpus={vcpus}) is for a single guest: two guests have one vCPU each "
                "(--pin-cpus gives each a host CPU of its own) and --numa has its own layout; drop --vcpus")
    if pin_cpus and not two_guests:
        return ("--pin-cpus (pin_cpus) pins each of two guests to a host CPU of its own: add --two-guests "
                "(two_guests); a single guest runs where the host schedules it")
    return None


def guest_host_cpus() -> tuple[int, int]:
    """(server CPU, client CPU) that ``pin_cpus`` puts the two guests on: the first two CPUs this
    process may run on."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SoftRoceError(f"pin_cpus needs two host CPUs this process may use, and it may use only "
                            f"CPU {cpus[0]}: run without --pin-cpus, or widen the affinity (taskset -c 0,1 ...)")
    return cpus[0], cpus[1]


def _host_cpus_for_guests() -> tuple[str, int, int]:
    """(taskset, server CPU, client CPU) for ``pin_cpus``. taskset execs qemu with the mask set,
    so every thread qemu starts inherits it."""
    server, client = guest_host_cpus()
    taskset = need_tool("taskset", "pin each guest to a host CPU of its own (package util-linux)")
    return taskset, server, client


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
    numa: bool = False,
    vcpus: int = 1,
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
    (192.168.77.2) runs ``cmd`` once ``server_cmd`` listens (:func:`server_listens`). Their
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

    ``numa`` (single guest only) boots the guest with two NUMA nodes: CPU 0 on node 0, CPUs 1-2
    on node 1, the memory split between them, and the NIC(s) on node 1 behind a PCI expander
    bridge, so the NIC's PCI function reports ``numa_node`` 1 and ``local_cpulist`` 2-3.

    ``vcpus`` (single guest only, 1 or 2): the guest's vCPUs. qemu's TCG runs each vCPU on a host
    thread of its own, so with 2 a server and a client engine in the one guest run at once instead
    of taking turns on one vCPU (a suite of short cases in one guest takes about half the time).

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
    refusal = layout_refusal(two_guests=two_guests, numa=numa, vcpus=vcpus, pin_cpus=pin_cpus)
    if refusal:
        raise SoftRoceError(refusal)
    if package is not None:
        _checked_package(package)
    pins = _host_cpus_for_guests() if pin_cpus else None
    out_stream = stdout if stdout is not None else sys.stdout
    err_stream = stderr if stderr is not None else sys.stderr
    qemu = need_tool("qemu-system-x86_64", "boot the Soft-RoCE guest (package qemu-system-x86)")
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
            argv = _qemu_argv(qemu, img, repo, guest.ctl, out, nics, numa=numa, vcpus=vcpus)
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
                keep_alive=True, go_timeout_s=timeout_s, siw_ko=siw_ko, extra_files=extras, report_listen=True,
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
            rc = _wait_client(client, server, deadline, timeout_s, cmd, server_argv_cmd)
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
    guest: _Guest, server: _Guest | None, deadline: float, timeout_s: float, cmd: Sequence[str],
    server_cmd: Sequence[str] = (),
) -> int:
    """Wait for the command guest; with a server, also start the client when the server listens, and watch it."""
    go_written = False
    done_at: float | None = None
    while True:
        now = time.monotonic()
        if server is not None:
            with server.lock:
                srv_error = server.error
                srv_begin = server.events.get("begin")
                srv_listening = server.events.get("listening")
                srv_exit = server.exit_status
            if srv_error is not None:
                raise SoftRoceError(f"the server guest failed during setup: {srv_error}\n{server.tail_text()}")
            if not server.alive() and guest.rc_from_ctl() is None:
                raise SoftRoceError(
                    f"the server guest stopped (qemu exit status {server.proc.returncode if server.proc else '?'}) "
                    f"while the client was {guest.stage}:\n  server console:\n{server.tail_text()}"
                )
            if not go_written and server_listens(
                server_cmd, begin_at=srv_begin, listening_at=srv_listening, exit_status=srv_exit,
                now=now - server.started, listen_timeout_s=SERVER_LISTEN_TIMEOUT_S, console=server.tail_text,
            ):
                (guest.ctl / "go").write_text("go\n")
                go_written = True
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


def server_listens(
    server_cmd: Sequence[str], *, begin_at: float | None, listening_at: float | None, exit_status: int | None,
    now: float, listen_timeout_s: float, console: Callable[[], str],
) -> bool:
    """Whether the server guest's command listens, so the client guest may start. Times are seconds from
    the server's qemu start; ``begin_at`` is when the command started, ``listening_at`` when init.sh said
    it listens (None: not yet). A command that exited before it listened, or that listens on nothing
    ``listen_timeout_s`` after it started, is a :class:`SoftRoceError` with ``console()`` (its tail)."""
    if listening_at is not None:
        return True
    if exit_status is not None:
        raise SoftRoceError(
            f"the server command ({shlex.join(server_cmd)}) exited with {exit_status} before it listened "
            f"(waited for {LISTENING_WHAT}); the client guest's command was not started. "
            f"Give --server-cmd a server that stays up and listens for the client.\n"
            f"  server console:\n{console()}"
        )
    if begin_at is not None and now - begin_at > listen_timeout_s:
        raise SoftRoceError(
            f"the server command ({shlex.join(server_cmd)}) did not listen within {listen_timeout_s:g} s of its "
            f"start (waited for {LISTENING_WHAT}); the client guest's command was not started. A server that "
            f"listens on UDP only or on nothing cannot be waited for: start it from the client's command instead."
            f"\n  server console:\n{console()}"
        )
    return False


def _log_timing(guest: _Guest) -> None:
    with guest.lock:
        ev = dict(guest.events)
    parts = [f"{k} {v:.1f} s" for k, v in sorted(ev.items(), key=lambda kv: kv[1])]
    log.info("%s: timeline from qemu start: %s; qemu exited %.1f s", guest.name, ", ".join(parts),
             time.monotonic() - guest.started)


