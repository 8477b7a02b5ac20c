# SPDX-License-Identifier: BSD-3-Clause
"""What the hosts did: where the engines ran (placement against the device's NUMA node), the CPU
(another task on it, a slow governor, deep idle states) and socket buffers fixed too small."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...untyped import count_at, member
from .facts import _fmt, _senders, _tcp_kernel
from .model import Cause

# A busy-polling engine owns its CPU: below this share of the phase's wall time on CPU, with the
# scheduler taking the CPU away at least this often, something else ran there. (A lone busy poller
# runs > 95 %; two on one CPU get ~50 % each, taken off every few ms.) A blocking engine is not
# judged (see _cpu).
CPU_SHARE_MIN = 0.80


CPU_TAKEN_MIN = 20


CPU_TAKEN_RATE = 20.0


# Frequency governors that hold the clock low until load shows: a latency run never shows enough.
# (intel_pstate's 'powersave' with HWP ramps faster than acpi-cpufreq's, but still lags a ping-pong.)
SLOW_GOVERNORS = frozenset({"powersave", "conservative"})


# cpuidle drivers whose idle states cost tens of microseconds to leave (measured here: haltpoll
# pays ~40 us per blocking message on a quiet machine).
DEEP_IDLE_DRIVERS = frozenset({"haltpoll", "intel_idle", "acpi_idle"})


# A socket buffer fixed by the user (SO_SNDBUF/SO_RCVBUF: the kernel's autotuning is off for it, and
# the kernel doubles the value, keeping half for its bookkeeping) limits the window when what the
# stream had in flight (the rate achieved x TCP_INFO's smoothed round trip) reaches this share of the
# payload the buffer can hold. Measured on loopback at 32 KiB: --tcp-sndbuf 4096 -> 132 % (named);
# 65536 -> 15 %; autotuned -> 2 % of the 4 MiB the kernel grew it to.
# The smoothed round trip is an average over the connection and overstates what a stream on a
# path of this host (loopback, veth) sees, so "in flight" can read several times the buffer's
# payload (netns, --tcp-sndbuf 4096: 72 KB per 56 us); the buffer still bounds the window there.
BUFFER_FILL = 0.5


def _cpu_sides(rec: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(side, its ``cpu_use``) for the sides whose engine reported its CPU use in the phase."""
    use = member(rec, "cpu_use")
    return [(side, member(use, side)) for side in ("local", "peer") if count_at(member(use, side), "wall_ns")]


def _where(cu: Mapping[str, Any]) -> str:
    cpu, node = count_at(cu, "cpu"), count_at(cu, "numa_node")
    if cpu is None:
        return "on an unknown CPU"
    return f"on CPU {cpu}" + (f" (NUMA node {node})" if node is not None else "")


def where_engines_ran(rec: Mapping[str, Any]) -> str | None:
    """One line on where each side's engine ran and why (--cpu and the device's NUMA node), for the
    text output; None when the record carries no placement (an older engine)."""
    use = member(rec, "cpu_use")
    parts: list[str] = []
    for side, host in (("local", "host"), ("peer", "peer_host")):
        place = member(member(rec, host), "placement")
        if not place:
            continue
        cu = member(use, side)
        cpu, cpu_node, dev_node = count_at(cu, "cpu"), count_at(cu, "numa_node"), count_at(place, "device_numa_node")
        on = f"CPU {cpu}" if cpu is not None else "an unknown CPU"
        on += f", NUMA node {cpu_node}" if cpu_node is not None else ""
        device = place.get("device") or ""
        dev = f"; {device} on node {dev_node}" if dev_node is not None and device else ""
        parts.append(f"{side} on {on} (--cpu {place.get('asked')}{dev})")
    return "; ".join(parts) if parts else None


def _placement(rec: Mapping[str, Any]) -> Cause:
    """An engine on another NUMA node than its device: each side's ``host.placement`` (what --cpu
    asked, the device's node and why it is unknown) against the node of the CPU it ran the phase on
    (``cpu_use``)."""
    use = member(rec, "cpu_use")
    seen: list[str] = []
    clear: list[str] = []
    unchecked: list[str] = []
    for side, host in (("local", "host"), ("peer", "peer_host")):
        place, cu = member(member(rec, host), "placement"), member(use, side)
        if not place:
            unchecked.append(f"the {side} engine did not report its placement (an engine older than this front end)")
            continue
        dev_node, cpu_node = count_at(place, "device_numa_node"), count_at(cu, "numa_node")
        nodes = count_at(place, "host_numa_nodes")
        device = place.get("device") or "its device"
        if dev_node is None:
            if nodes is not None and nodes <= 1:
                clear.append(f"the {side} host has one NUMA node: the {side} engine {_where(cu)} is as near as any")
            else:
                unchecked.append(f"{side}: {place.get('why_no_node') or 'the device has no NUMA node'}")
        elif cpu_node is None:
            unchecked.append(f"{side}: the NUMA node of the CPU the engine ran on is unknown ({device} is on node "
                             f"{dev_node})")
        elif cpu_node != dev_node:
            seen.append(f"the {side} engine ran {_where(cu)}, and {device} is on node {dev_node} "
                        f"(--cpu {place.get('asked')})")
        else:
            clear.append(f"the {side} engine {_where(cu)}, the node of {device}")
    if seen:
        return Cause("placement", "seen", "; ".join(seen),
                     cost="every completion, doorbell and DMA crosses the link between the sockets: about 0.5 us "
                          "per message in the field reports (1.9 us that became 1.4 us) and memory bandwidth",
                     fix="run each engine on its device's node: --cpu auto (the default) or --cpu near; under a "
                         "launcher, bind the ranks there (mpirun --bind-to core --map-by numa, srun --cpu-bind)")
    # Clear only when both sides were checked: a side that could not be is said, never passed over.
    return Cause("placement", "unchecked" if unchecked else "clear", "; ".join(unchecked + clear))


def _cpu_hog(rec: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(seen, clear, unchecked) facts on another process on an engine's CPU: a busy-polling engine
    should own its CPU for the whole phase; one that ran for much less than the wall time while the
    scheduler took the CPU away (involuntary switches) shared it."""
    sides = _cpu_sides(rec)
    if not sides:
        return [], [], ["the record carries no engine CPU use over the measured phase (an engine older than this "
                        "front end)"]
    if member(rec, "transport").get("poll") == "block":
        # Measured on the netns testbed: a clean blocking receiver ran 51 % of the phase and was
        # taken off its CPU 648 times a second (the network's softirq work waking it and running
        # beside it), while a hog barely shows (the scheduler favours the sleeper).
        return [], [], ["a blocking engine (--poll block) sleeps by design: neither its CPU share nor its switches "
                        "tell another process on its CPU (--poll busy checks it)"]
    seen: list[str] = []
    clear: list[str] = []
    for side, cu in sides:
        wall_s = (count_at(cu, "wall_ns") or 0) / 1e9
        share = ((count_at(cu, "user_ns") or 0) + (count_at(cu, "sys_ns") or 0)) / 1e9 / wall_s
        taken = count_at(cu, "involuntary_switches") or 0
        rate = taken / wall_s
        facts = (f"the {side} engine {_where(cu)} ran {share:.0%} of the {wall_s:.2f} s phase, "
                 f"taken off its CPU {_fmt(taken)} times ({rate:.0f}/s)")
        shared = share < CPU_SHARE_MIN and taken >= CPU_TAKEN_MIN and rate >= CPU_TAKEN_RATE
        (seen if shared else clear).append(facts + (": another process shared its CPU" if shared else ""))
    return seen, clear, []


def _cpu_governor(rec: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(seen, clear, unchecked) facts on each engine CPU's frequency governor during a latency run:
    one that lowers the clock between bursts of work makes each message pay the slow clock and the
    ramp. Bandwidth runs keep their CPUs busy: not judged."""
    if rec.get("pattern") != "lat":
        return [], [], []
    seen: list[str] = []
    clear: list[str] = []
    unchecked: list[str] = []
    for side, cu in _cpu_sides(rec):
        governor = cu.get("governor")
        if not isinstance(governor, str) or not governor:
            unchecked.append(f"the {side} engine's CPU has no frequency governor to read (no cpufreq: a VM, or the "
                             "firmware sets the clock)")
        elif governor in SLOW_GOVERNORS:
            seen.append(f"the {side} engine {_where(cu)} ran under the '{governor}' frequency governor")
        else:
            clear.append(f"the {side} engine's CPU ran under the '{governor}' frequency governor")
    return seen, clear, unchecked


def _cpu_idle(rec: Mapping[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """(seen, clear, unchecked) facts on a blocking latency run's idle states: each message wakes
    a CPU that sleeps in a state it must leave. A spinning engine never idles its CPU."""
    if rec.get("pattern") != "lat" or member(rec, "transport").get("poll") != "block":
        return [], [], []
    seen: list[str] = []
    clear: list[str] = []
    for side, host in (("local", "host"), ("peer", "peer_host")):
        facts = member(rec, host)
        driver = facts.get("cpuidle_driver")
        if not isinstance(driver, str) or not driver:
            continue
        if driver in DEEP_IDLE_DRIVERS and not facts.get("cpu_dma_latency_held"):
            seen.append(f"the {side} engine waited in the kernel (--poll block) while its host's CPUs idle with "
                        f"cpuidle driver '{driver}' (governor '{facts.get('cpuidle_governor') or '?'}'), "
                        "/dev/cpu_dma_latency not held")
        else:
            held = ", /dev/cpu_dma_latency held at 0" if facts.get("cpu_dma_latency_held") else ""
            clear.append(f"the {side} host's cpuidle driver '{driver}'{held}")
    return seen, clear, []


# What each check of the cpu cause costs and how to fix it, when it sees something.
CPU_HOG_COST = "the time the engine waited for its CPU lands in the latency tail and the bandwidth"


CPU_HOG_FIX = ("give each engine a CPU of its own (--cpu N, or the launcher's binding) and move what runs there "
               "(`ps -eLo psr,pid,comm | sort -n` lists who runs where)")


GOVERNOR_COST = ("each message runs at the lowered clock and pays its ramp (a latency run is too light for the "
                 "governor to raise the clock)")


GOVERNOR_FIX = ("the 'performance' governor on both hosts while measuring (`cpupower frequency-set -g performance`, "
                "or the firmware's performance profile)")


IDLE_COST = ("every message wakes the CPU from idle and adds that state's exit latency (about 40 us per message on "
             "a quiet haltpoll VM, measured)")


IDLE_FIX = ("--poll busy, or --hold-cpu-latency (holds /dev/cpu_dma_latency at 0 during the run), or shallower "
            "idle states (`cpupower idle-set -D 10`)")


def _cpu(rec: Mapping[str, Any]) -> Cause:
    """What took an engine's CPU from it: another process (any run), or the CPU's own power
    management (latency runs: the frequency governor, deep idle states of a blocking engine)."""
    hog, governor, idle = _cpu_hog(rec), _cpu_governor(rec), _cpu_idle(rec)
    seen = [(found, cost, fix) for (found, _, _), cost, fix in
            ((hog, CPU_HOG_COST, CPU_HOG_FIX), (governor, GOVERNOR_COST, GOVERNOR_FIX), (idle, IDLE_COST, IDLE_FIX))
            if found]
    if seen:
        return Cause("cpu", "seen", "; ".join(f for found, _, _ in seen for f in found),
                     cost="; ".join(cost for _, cost, _ in seen), fix="; ".join(fix for _, _, fix in seen))
    facts = hog[2] + hog[1] + governor[1] + idle[1] + governor[2]
    return Cause("cpu", "unchecked" if hog[2] else "clear", "; ".join(facts))


def _buffer_fixed(rec: Mapping[str, Any], option: str) -> int:
    """The bytes the user fixed a socket buffer at (``--tcp-sndbuf``/``--tcp-rcvbuf``), 0 = autotuned."""
    return count_at(member(member(rec, "config"), "backend_options"), option) or 0


def _buffers(rec: Mapping[str, Any]) -> Cause:
    """A socket buffer the user fixed below what the stream needed in flight: the window could not
    open past it. The bandwidth-delay product the record can show is the rate achieved times the
    sender's TCP_INFO round trip (the link rate of a virtual device is unknown); a stream the buffer
    held back fills it, one with room to spare leaves it mostly empty."""
    tr = member(rec, "transport")
    local = member(tr, "local")
    if not _tcp_kernel(local):
        return Cause("buffers", "unchecked", f"the {local.get('kind') or '?'} transport does not report its socket "
                                             "buffers (only kernel TCP does)")
    snd, rcv = _buffer_fixed(rec, "tcp-sndbuf"), _buffer_fixed(rec, "tcp-rcvbuf")
    if not snd and not rcv:
        return Cause("buffers", "clear", "send and receive buffers autotuned by the kernel (they grow with the window "
                                         "up to net.ipv4.tcp_wmem/tcp_rmem's maximum, which the record does not carry)")
    gbps = rec.get("bandwidth_gbps")
    rate = float(gbps) * 1e9 / 8 if isinstance(gbps, (int, float)) and gbps > 0 else None
    size = count_at(rec, "size") or 0
    seen: list[str] = []
    clear: list[str] = []
    unchecked: list[str] = []
    for sender in _senders(rec):
        receiver = "peer" if sender == "local" else "local"
        rtt_us = count_at(member(tr, sender), "rtt_us")
        who = "the client" if sender == "local" else "the server"
        # The smaller of the fixed buffers on this direction: the sender's send, the receiver's receive.
        limits = [(f"{who}'s send buffer", snd, count_at(member(tr, sender), "sndbuf_bytes"), "--tcp-sndbuf"),
                  (f"the {'server' if sender == 'local' else 'client'}'s receive buffer", rcv,
                   count_at(member(tr, receiver), "rcvbuf_bytes"), "--tcp-rcvbuf")]
        fixed = [(name, req, eff, opt) for name, req, eff, opt in limits if req]
        if not fixed:
            continue
        name, req, eff, opt = min(fixed, key=lambda f: (f[2] or 2 * f[1]) // 2)
        payload = (eff or 2 * req) // 2
        buf = f"{name} fixed by {opt} {_fmt(req)} B (effective {_fmt(eff or 2 * req)} B, ~{_fmt(payload)} B of payload)"
        if rec.get("pattern") == "lat":
            # A ping-pong has one message in flight: the buffer limits it when the message does not fit.
            (seen if size > payload else clear).append(f"{buf} against one {_fmt(size)} B message in flight")
            continue
        if rate is None or rtt_us is None:
            missing = "round trip (TCP_INFO rtt: an older engine)" if rtt_us is None else "achieved rate"
            unchecked.append(f"{buf}: the record carries no {missing}")
            continue
        bdp = rate * rtt_us / 1e6
        fact = (f"{buf} against {_fmt(round(bdp))} B in flight ({rate * 8 / 1e9:.2f} Gb/s achieved x {who}'s "
                f"round trip {_fmt(rtt_us)} us, TCP_INFO)")
        (seen if bdp >= BUFFER_FILL * payload else clear).append(fact)
    if seen:
        return Cause("buffers", "seen", "; ".join(seen) + ": the window was held to the buffer",
                     cost="one buffer per round trip: the stream can go no faster than buffer / round trip however "
                          "fast the link is, and the longer the path's round trip the lower that ceiling",
                     fix="leave --tcp-sndbuf/--tcp-rcvbuf at 0 (kernel autotuning) or set them to at least the "
                         "bandwidth-delay product (link rate x round trip); a value above net.core.wmem_max/"
                         "rmem_max is cut to it (sysctl -w net.core.wmem_max=... net.core.rmem_max=...)")
    if unchecked and not clear:
        return Cause("buffers", "unchecked", "; ".join(unchecked))
    return Cause("buffers", "clear", "; ".join(clear + unchecked) or "no fixed buffer on a direction that sends")
