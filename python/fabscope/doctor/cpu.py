# SPDX-License-Identifier: BSD-3-Clause
"""CPU placement and power management: NUMA node of the NIC vs the CPUs this process may
use, the frequency governor, cpuidle driver/governor and /dev/cpu_dma_latency."""

from __future__ import annotations

import os

from fabscope.devices import PciInfo, RdmaDevice, read_int, read_text
from fabscope.doctor.core import Context, Finding, check

# Measured on the fabscope build machine (KVM guest, cpuidle-haltpoll, guest_halt_poll_ns 0):
# a blocking receive that lets the vCPU halt pays about this much extra per message.
HALTPOLL_WAKE_US = 40


def parse_cpulist(text: str | None) -> set[int] | None:
    """'0-3,8,10-11' -> {0,1,2,3,8,10,11}; None for unreadable/empty text."""
    if text is None:
        return None
    text = text.strip()
    if not text:
        return set()
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                cpus.update(range(int(lo), int(hi) + 1))
            else:
                cpus.add(int(part))
    except ValueError:
        return None
    return cpus


def fmt_cpus(cpus: set[int]) -> str:
    if not cpus:
        return "none"
    s = sorted(cpus)
    ranges: list[str] = []
    start = prev = s[0]
    for c in s[1:]:
        if c == prev + 1:
            prev = c
            continue
        ranges.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = c
    ranges.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(ranges)


def allowed_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))


@check("cpu.numa", "cpu")
def check_numa(ctx: Context) -> list[Finding]:
    """The NIC's NUMA node against the CPUs this process may run on."""
    inv = ctx.inventory
    cpus = ctx.cpu_affinity if ctx.cpu_affinity is not None else allowed_cpus()
    out: list[Finding] = []
    # A software RDMA device (rxe, siw) has no PCI function of its own: its adapter is its netdev's.
    by_netdev = {nd.name: nd for nd in inv.netdevs}

    def rdma_pci(d: RdmaDevice) -> PciInfo | None:
        if d.pci:
            return d.pci
        names = [*d.netdevs, *(p.netdev for p in d.ports if p.netdev)]
        return next((nd.pci for n in names if (nd := by_netdev.get(n)) is not None and nd.pci), None)

    nics: list[tuple[str, int | None]] = [(d.name, pci.numa_node if (pci := rdma_pci(d)) else None)
                                          for d in inv.rdma_devices]
    if not nics:
        nics = [(nd.name, nd.pci.numa_node if nd.pci else None) for nd in inv.netdevs if nd.pci is not None]
    if not nics:
        return [Finding("cpu.numa", "info", "no PCI network adapter found; NUMA placement not checked",
                        f"{ctx.sys('class/infiniband')} and {ctx.sys('class/net')}")]
    for name, node in nics:
        fid = f"cpu.numa.{name}"
        if node is None:
            out.append(Finding(fid, "info", f"{name}: no NUMA information (numa_node -1: single node or VM)",
                               f"numa_node of {name}'s PCI function is -1 or absent; allowed CPUs {fmt_cpus(cpus)}"))
            continue
        node_path = ctx.sys(f"devices/system/node/node{node}/cpulist")
        local = parse_cpulist(read_text(node_path))
        ev = f"{name} on NUMA node {node}; {node_path} = {fmt_cpus(local) if local is not None else 'unreadable'}; " \
             f"sched_getaffinity = {fmt_cpus(cpus)}"
        if local is None:
            out.append(Finding(fid, "info", f"{name}: NUMA node {node} CPU list unreadable", ev))
        elif not (cpus & local):
            out.append(Finding(
                fid, "warn", f"{name} is on NUMA node {node} but this process may only run on remote CPUs",
                ev, "every doorbell and completion then crosses the socket interconnect: 1.4 vs 1.9 us "
                "latency in a published 40G RoCE comparison",
                f"fabscope places its engines there by itself (--cpu auto, the default); other tools: "
                f"`numactl --cpunodebind={node} --membind={node} <cmd>` "
                f"(mpirun: `--bind-to core --map-by ppr:1:numa`, or pin to CPUs {fmt_cpus(local)})"))
        elif not cpus <= local:
            out.append(Finding(
                fid, "info", f"{name} is on NUMA node {node}; this process may also run on remote CPUs", ev,
                "without pinning the scheduler may move the process off the NIC's node",
                f"pin benchmarks: `numactl --cpunodebind={node} --membind={node} <cmd>`"))
        else:
            out.append(Finding(fid, "ok", f"{name}: all allowed CPUs are on its NUMA node {node}", ev))
    return out


@check("cpu.governor", "cpu")
def check_governor(ctx: Context) -> list[Finding]:
    """cpufreq scaling governor of the CPUs this process may run on."""
    cpus = allowed_cpus() if ctx.live else parse_cpulist(read_text(ctx.sys("devices/system/cpu/online"))) or set()
    govs: dict[str, list[int]] = {}
    for c in sorted(cpus):
        g = read_text(ctx.sys(f"devices/system/cpu/cpu{c}/cpufreq/scaling_governor"))
        if g is not None:
            govs.setdefault(g, []).append(c)
    base = ctx.sys("devices/system/cpu/cpu*/cpufreq/scaling_governor")
    if not govs:
        return [Finding("cpu.governor", "info", "no cpufreq on this machine (frequency is not under OS "
                        "control: a VM, or the firmware owns it)", f"{base}: absent")]
    ev = f"{base}: " + "; ".join(f"{g} on CPUs {fmt_cpus(set(cs))}" for g, cs in govs.items())
    slow = {g for g in govs if g in ("powersave", "ondemand", "conservative", "schedutil")}
    if slow:
        return [Finding("cpu.governor", "warn", f"CPU frequency governor {', '.join(sorted(slow))}",
                        ev, "a CPU that clocks down between messages adds latency and jitter; perftest "
                        "warns 'Conflicting CPU frequency values detected' (perftest #372)",
                        "`cpupower frequency-set -g performance` (persist with tuned-adm profile "
                        "network-latency or the BIOS power profile)")]
    return [Finding("cpu.governor", "ok", "CPU frequency governor: " + ", ".join(govs), ev)]


@check("cpu.idle", "cpu")
def check_idle(ctx: Context) -> list[Finding]:
    """cpuidle driver and governor, deep C-states, and /dev/cpu_dma_latency."""
    out: list[Finding] = []
    drv_path = ctx.sys("devices/system/cpu/cpuidle/current_driver")
    gov_path = ctx.sys("devices/system/cpu/cpuidle/current_governor")
    driver = read_text(drv_path)
    gov = read_text(gov_path) or read_text(ctx.sys("devices/system/cpu/cpuidle/current_governor_ro"))
    # Deepest enabled idle state of cpu0 and its exit latency.
    states: list[tuple[str, int, bool]] = []
    for i in range(16):
        sdir = ctx.sys(f"devices/system/cpu/cpu0/cpuidle/state{i}")
        name = read_text(sdir / "name")
        if name is None:
            break
        lat = read_int(sdir / "latency") or 0
        disabled = read_text(sdir / "disable") == "1"
        states.append((name, lat, disabled))
    st_desc = ", ".join(f"{n} {lat} us{' (disabled)' if dis else ''}" for n, lat, dis in states) or "none"
    ev = f"{drv_path} = {driver or 'absent'}; {gov_path} = {gov or 'absent'}; cpu0 states: {st_desc}"
    if driver == "haltpoll" or gov == "haltpoll":
        poll_ns = read_int(ctx.sys("module/haltpoll/parameters/guest_halt_poll_ns"))
        ev += f"; guest_halt_poll_ns = {poll_ns if poll_ns is not None else 'unreadable'}"
        out.append(Finding(
            "cpu.idle.haltpoll", "warn",
            f"guest cpuidle 'haltpoll': an idle vCPU halts, and waking it costs about {HALTPOLL_WAKE_US} us "
            "per blocking message on this kind of VM",
            ev,
            "a blocking receive (TCP, rdma_cm events, MPI with blocking progress) lets the vCPU halt; the "
            "wake-up is a VM exit plus an IPI, so quiet ping-pong latency is dominated by it. Busy-polling "
            "benchmarks do not see it, blocking ones do",
            "for latency runs: poll instead of block (fabscope --poll, UCX_ASYNC_MODE=poll), or raise the "
            "poll window: `echo 200000 > /sys/module/haltpoll/parameters/guest_halt_poll_ns`, or hold "
            "/dev/cpu_dma_latency at 0 during the run; on the host side `idle=poll` for the guest trades "
            "power for latency"))
    deep = [(n, lat) for n, lat, dis in states if not dis and lat > 10]
    if deep:
        out.append(Finding(
            "cpu.idle.cstates", "warn",
            f"deep C-states enabled (deepest {deep[-1][0]}, exit latency {deep[-1][1]} us)", ev,
            "a core waking from a deep C-state adds its exit latency to the next message",
            "for latency-critical hosts: `cpupower idle-set -D 10` (disable states with exit latency > "
            "10 us) or kernel option `intel_idle.max_cstate=1 processor.max_cstate=1`; or keep "
            "/dev/cpu_dma_latency open at 0 during runs (tuned-adm profile network-latency does this)"))
    if driver is None and not states:
        out.append(Finding("cpu.idle", "info", "no cpuidle driver: the CPU idles with the default halt",
                           ev))
    elif not out:
        out.append(Finding("cpu.idle", "ok", f"cpuidle driver {driver}, governor {gov}; no deep C-states", ev))
    dma = ctx.dev_root / "cpu_dma_latency"
    if os.path.exists(dma):
        out.append(Finding(
            "cpu.idle.dma_latency", "info",
            f"{dma} is available: a benchmark can hold it at 0 us to keep CPUs out of deep idle while it runs",
            f"{dma}: present",
            "the PM QoS request lasts only while the file is held open; nothing changes after the run",
            "by hand: `exec 3>/dev/cpu_dma_latency; printf '\\x00\\x00\\x00\\x00' >&3` and keep fd 3 open"))
    else:
        out.append(Finding("cpu.idle.dma_latency", "info",
                           f"{dma} is absent (kernel without PM QoS): idle depth cannot be capped per run",
                           f"{dma}: absent"))
    return out
