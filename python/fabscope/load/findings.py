# SPDX-License-Identifier: BSD-3-Clause
"""Why, under load: the findings of a load run, each with its evidence, cost and fix.

- ``oversubscription``: more links feed the bottleneck than it has (N -> 1): the fair share is the
  most a flow can get however well the fabric behaves; named on its own it means "clean, just full";
- ``loss``: the sending sockets retransmitted more than LOSS_SHARE of their segments (TCP_INFO),
  with the hosts' netdev drop counters: the bottleneck's queue overflowed;
- ``unfair``: Jain's index below UNFAIR_JAIN over the run, or below UNFAIR_SHORT_JAIN in the median interval,
  or flows that stalled (below STALL_SHARE of the fair share) in an interval;
- ``starved``: flows below STARVED_SHARE of the fair share, with their per-interval rates;
- ``hot-spot``: the port whose flows lost the most (the receiver's port on the switch for incast);
- ``ecn``: segments TCP delivered with a CE mark (TCP_INFO tcpi_delivered_ce of the senders): the
  fabric signalled congestion without dropping;
- ``rdma-congestion`` / ``pause``: the RDMA ports' congestion counters (ECN-marked packets, CNPs:
  explain/packets.py's list) and the drivers' pause/PFC counters that moved, per host;
- ``victim``: the victim pair's p99 (or p50) slowed by the load beyond its interval, and its path
  crosses the hot port (the bottleneck's host is one of the pair): the fabric slowed it;
- ``victim-host``: slowed as much, its path clear of the hot port, and its engines ran on the same
  kernel (boot_id) as the load's: they shared the CPUs, a host effect, not the fabric (on 2 CPUs
  with 14 load engines the victim's p99 rose 6.7x on a pair that shared no link with the load);
- ``victim-unexplained``: slowed as much, clear of the hot port and of the load's CPUs: a part of its
  path this run does not observe (a switch uplink shared with the load?).
"""

from __future__ import annotations

from typing import Any

from ..untyped import count, member
from .judge import LOSS_SHARE, STALL_SHARE, STARVED_SHARE, UNFAIR_JAIN, UNFAIR_SHORT_JAIN, stalls, starved
from .model import Finding, FlowResult, LoadRun, VictimResult

# The busiest rail carrying more than this share of the rails' bytes is an imbalance (two rails: 0.5 is even).
RAIL_IMBALANCE = 0.7
# A host whose bytes went this much over one rail sent its flows on it (the hash keeps a flow on one).
ON_ONE_RAIL = 0.9
# An impact factor whose interval lies above this is named (1.0 = no impact; the interval says
# whether the run can tell).
VICTIM_FACTOR = 1.5

QUEUE_FIX = ("give the bottleneck port a deeper buffer, or mark instead of drop: ECN on the switch queue "
             "(and net.ipv4.tcp_ecn=1; for RoCE: DCQCN with ECN marking, PFC on the RDMA priority), or place "
             "the job so fewer senders share one receiver")


def _loss(load: list[FlowResult]) -> tuple[int, int, dict[str, int]]:
    lost = sum(f.retransmitted or 0 for f in load)
    sent = sum(f.segments or 0 for f in load)
    by_dst: dict[str, int] = {}
    for f in load:
        by_dst[f.flow.dst] = by_dst.get(f.flow.dst, 0) + (f.retransmitted or 0)
    return lost, sent, by_dst


def _host_drops(load: list[FlowResult]) -> dict[str, dict[str, int]]:
    """Per host, the largest delta of each netdev drop counter any of its flows saw (the flows ran at
    once, so their windows overlap: the largest is the host's count over the load, not a sum)."""
    out: dict[str, dict[str, int]] = {}
    for f in load:
        for host, side in ((f.flow.src, "local"), (f.flow.dst, "peer")):
            for dev, deltas in f.net_deltas(side).items():
                for name, n in deltas.items():
                    if n > 0:
                        key = f"{dev}:{name}"
                        mine = out.setdefault(host, {})
                        mine[key] = max(mine.get(key, 0), n)
    return out


def _host_counters(load: list[FlowResult]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, int]]]:
    """Per host, the largest delta any of its flows saw of each RDMA congestion counter and of each
    pause counter of the netdevs behind its RDMA ports (overlapping windows: the largest, not a sum)."""
    from ..results.explain import RDMA_CONGESTION_COUNTERS

    congestion: dict[str, dict[str, int]] = {}
    pauses: dict[str, dict[str, int]] = {}

    def keep(into: dict[str, dict[str, int]], host: str, key: str, n: int | None) -> None:
        if n is not None and n > 0:
            mine = into.setdefault(host, {})
            mine[key] = max(mine.get(key, 0), n)

    for f in load:
        if f.result is None:
            continue
        for host, side in ((f.flow.src, f.result.counters.local), (f.flow.dst, f.result.counters.peer)):
            if side is None:
                continue
            for port in side.rdma.values():
                for key in RDMA_CONGESTION_COUNTERS:
                    keep(congestion, host, f"{port.name}:{key}", port.delta(key))
            for netdev in side.netdevs_behind_rdma():
                eth = netdev.ethtool()
                for key in sorted(eth.after) if eth is not None else []:
                    keep(pauses, host, f"{netdev.name}:{key}", eth.delta(key) if eth is not None else None)
    return congestion, pauses


def _rails(run: LoadRun) -> list[Finding]:
    """The split of the senders' bytes between the rails; an imbalance; the flows a slow rail slowed."""
    per_host = run.rail_bytes()
    totals = {r: sum(h.get(r, 0) for h in per_host.values()) for r in run.rails}
    whole = sum(totals.values())
    if not whole:
        return []
    found: list[Finding] = []
    busiest = max(totals, key=lambda r: totals[r])
    share = totals[busiest] / whole
    split = ", ".join(f"{r} {totals[r] / whole:.0%}" for r in run.rails)
    on_rail = {h: max(b, key=lambda r: b[r]) for h, b in per_host.items() if sum(b.values()) and
               max(b.values()) / sum(b.values()) >= ON_ONE_RAIL}
    if share > RAIL_IMBALANCE:
        found.append(Finding(
            "rail-imbalance", f"the rails carried {split} of the bytes: the hash put most flows on {busiest}",
            {"bytes_per_rail": totals, "bytes_per_host": per_host, "host_on_rail": on_rail},
            cost=f"{busiest} runs at up to {share / (1 / len(run.rails)):.1f}x its even share while the other rail idles",
            fix="more flows per pair (--flows: more 5-tuples to hash), a flowlet or per-packet spraying policy, or "
                "a hash over the L4 ports (net.ipv4.fib_multipath_hash_policy=1 on Linux hosts)"))
    rates = {f.flow.src: f.gbps for f in run.flows if f.flow.role == "load" and f.gbps is not None}
    by_rail: dict[str, list[float]] = {}
    for host, rail in on_rail.items():
        if host in rates and rates[host] is not None:
            by_rail.setdefault(rail, []).append(float(rates[host] or 0.0))
    if len(by_rail) > 1:
        medians = {r: sorted(v)[len(v) // 2] for r, v in by_rail.items()}
        slow = min(medians, key=lambda r: medians[r])
        fast = max(medians, key=lambda r: medians[r])
        if medians[slow] < STARVED_SHARE * medians[fast]:
            hosts = sorted(h for h, r in on_rail.items() if r == slow)
            found.append(Finding(
                "slow-rail", f"the flows on {slow} ({', '.join(hosts)}) ran at {medians[slow]:.4g} Gb/s in the median, "
                             f"those on {fast} at {medians[fast]:.4g}: {slow} is slower on their path",
                {"median_gbps_per_rail": medians, "host_on_rail": on_rail},
                fix=f"check {slow}'s uplinks (rate, errors, shaping) on those hosts"))
    return found


def decide(run: LoadRun) -> list[Finding]:
    load = [f for f in run.flows if f.flow.role == "load"]
    found: list[Finding] = []
    b = run.bottleneck
    share = b.fair_share_gbps
    if b.links_in > 1:
        rate = f"{b.rate_gbps:.4g} Gb/s" if b.rate_gbps else "its rate (unknown: give --line-rate)"
        found.append(Finding(
            "oversubscription",
            f"{b.links_in} links into one at {b.where}: oversubscribed {b.links_in}:1; {b.flows} flows share {rate}"
            + (f", a fair share of {share:.4g} Gb/s each" if share else ""),
            {"links_in": b.links_in, "flows": b.flows, "rate_gbps": b.rate_gbps, "fair_share_gbps": share,
             "total_gbps": run.total_gbps, "concurrent_gbps": run.concurrent_gbps},
            cost=f"each flow gets at most 1/{b.flows} of the port", fix="expected for this pattern; spread the "
            "receivers (placement), or add bandwidth at the receiving port, if the total is not enough"))
    lost, sent, by_dst = _loss(load)
    drops = _host_drops(load)
    if sent and lost / sent > LOSS_SHARE:
        per_flow = {f.flow.name: f.retransmitted for f in load if f.retransmitted}
        found.append(Finding(
            "loss", f"the senders retransmitted {lost} of {sent} segments ({lost / sent:.2%}): the queue at the "
                    f"bottleneck overflowed and dropped",
            {"retransmitted_segments": lost, "segments": sent, "per_flow": per_flow, "drops_per_host": drops},
            cost="each loss halves (Reno) or cuts (CUBIC) a flow's window and costs a round trip or a timeout: "
                 "flows fall behind and the total falls below the bottleneck's rate",
            fix=QUEUE_FIX))
        hot = max(by_dst, key=lambda h: by_dst[h])
        found.append(Finding(
            "hot-spot", f"the port towards {hot} (its switch port) is the hot spot: {by_dst[hot]} of the {lost} "
                        "retransmitted segments were on the flows into it",
            {"host": hot, "retransmitted_into": by_dst, "drops_per_host": drops}, fix=QUEUE_FIX))
    marked = {f.flow.name: n for f in load if (n := f.ce_marked)}
    if marked:
        total_ce = sum(marked.values())
        found.append(Finding(
            "ecn", f"the fabric marked {total_ce} delivered segments CE (ECN) on {len(marked)} flows: a queue "
                   "signalled congestion and the senders slowed without waiting for a drop",
            {"ce_marked_per_flow": marked}, cost="the senders' windows were cut: the rate each flow gets is the "
            "fair share at best", fix="ECN is working as meant; if the marks come with loss, mark earlier "
            "(a lower marking threshold on the switch queue)"))
    congestion, pauses = _host_counters(load)
    if congestion:
        found.append(Finding(
            "rdma-congestion", "RDMA congestion counters moved on " + ", ".join(sorted(congestion)) +
            ": ECN-marked packets and CNPs (DCQCN cut the senders' rates)", {"per_host": congestion},
            fix="expected under incast with DCQCN; if the rates collapse, tune the ECN marking thresholds and "
                "DCQCN's rate-increase timers, or spread the receivers"))
    if pauses:
        found.append(Finding(
            "pause", "pause frames (PFC) counted on " + ", ".join(sorted(pauses)) + ": a port ran out of buffer "
            "and stopped its sender", {"per_host": pauses},
            cost="a paused port stops every flow of its priority, the victims' too (head-of-line blocking)",
            fix="ECN (DCQCN) marks before the buffer fills, so PFC stays the last resort; check the PFC "
                "headroom on the switch"))
    index = run.fairness
    rates = {f.flow.name: g for f in load if (g := f.gbps) is not None}
    short = run.interval_fairness
    short_median = sorted(short)[len(short) // 2] if short else None
    unfair_run = index is not None and index < UNFAIR_JAIN
    unfair_short = short_median is not None and short_median < UNFAIR_SHORT_JAIN
    # Against the fair share (a fixed rate) a flow stalls in its own intervals, whenever they were;
    # against the intervals' mean the flows must be compared on common boundaries.
    stalled = stalls({f.flow.name: f.intervals_gbps for f in load if f.gbps is not None} if share
                     else run.common_series, share)
    if len(rates) > 1 and index is not None and (unfair_run or unfair_short or stalled):
        ref = "the fair share" if share else "the interval's mean"
        when = (f"Jain's fairness index {index:.3f} over {len(rates)} flows" if unfair_run else
                f"in the short term: Jain's index over the {len(rates)} flows is {short_median:.3f} in the median "
                f"interval ({min(short):.3f} at worst; {index:.3f} over the whole run, where the flows' turns "
                "average out)" if unfair_short else
                f"flows took turns: {len(stalled)} of {len(rates)} stalled (below {STALL_SHARE:.0%} of {ref}) in "
                f"an interval: " + ", ".join(f"{n} in interval{'s' if len(k) > 1 else ''} "
                                             f"{','.join(str(i + 1) for i in k)}" for n, k in sorted(stalled.items()))
                + f" (Jain's index {index:.3f} over the run, {min(short):.3f} in the worst interval)")
        found.append(Finding(
            "unfair", f"{when} (1 = equal shares; below {UNFAIR_JAIN} over the run or {UNFAIR_SHORT_JAIN} in the "
                      "median interval is named): "
                      f"{min(rates, key=lambda k: rates[k])} got {min(rates.values()):.4g} Gb/s, "
                      f"{max(rates, key=lambda k: rates[k])} {max(rates.values()):.4g} Gb/s",
            {"jain": index, "interval_jain": short, "stalled_intervals": stalled, "min_gbps": min(rates.values()),
             "max_gbps": max(rates.values())},
            cost="a job waits for its slowest flow: the unfair share sets the job's pace",
            fix=QUEUE_FIX if lost else "look at the slow flows' intervals and their path"))
    low = starved(rates, share)
    if low:
        ref = f"the fair share ({share:.4g} Gb/s)" if share else f"the flows' mean ({sum(rates.values()) / len(rates):.4g} Gb/s)"
        intervals = {f.flow.name: f.intervals_gbps for f in load if f.flow.name in low}
        found.append(Finding(
            "starved", f"{len(low)} flow{'s' if len(low) > 1 else ''} below {STARVED_SHARE:.0%} of {ref}: "
                       + ", ".join(f"{n} {rates[n]:.4g} Gb/s" for n in low),
            {"flows": {n: rates[n] for n in low}, "intervals_gbps": intervals}, fix=QUEUE_FIX if lost else None))
    if run.rails:
        found += _rails(run)
    if run.victim is not None:
        found += _victim(run, run.victim)
    return found


def _boot_ids(f: FlowResult) -> set[str]:
    """The kernels (boot_id) the flow's two engines ran on."""
    if f.result is None:
        return set()
    return {b for side in ("host", "peer_host") if isinstance(b := member(f.result.raw, side).get("boot_id"), str) and b}


def _cpu_use(f: FlowResult) -> dict[str, dict[str, Any]]:
    """Per side of the victim's engines, their CPU during its phase: the share of a CPU they got and
    the involuntary switches (the scheduler taking the CPU away) per second."""
    out: dict[str, dict[str, Any]] = {}
    if f.result is None:
        return out
    for side, use in member(f.result.raw, "cpu_use").items():
        if not isinstance(use, dict) or not (wall := count(use.get("wall_ns"))):
            continue
        busy = (count(use.get("user_ns")) or 0) + (count(use.get("sys_ns")) or 0)
        out[str(side)] = {"cpu_share": round(busy / wall, 3),
                          "involuntary_switches_per_s": round((count(use.get("involuntary_switches")) or 0) / wall * 1e9)}
    return out


def _victim(run: LoadRun, victim: VictimResult) -> list[Finding]:
    """The victim's slowdown, attributed to what it shared with the load: the hot port, or the CPUs."""
    imp = next((i for i in victim.impacts if i.low > VICTIM_FACTOR), None)
    if imp is None:
        return []
    b = run.bottleneck
    pair = "<->".join(victim.pair)
    said = (f"the victim pair {pair} is {imp.factor:.2f}x slower at p{imp.q * 100:g} during the load "
            f"({imp.isolated_us:.1f} -> {imp.congested_us:.1f} us, 95 % interval {imp.low:.2f}-{imp.high:.2f}x)")
    evidence: dict[str, Any] = {**imp.to_json(), "hot_port": b.where, "hot_host": b.host}
    kernels = _boot_ids(victim.congested) if victim.congested is not None else set()
    load = [f for f in run.flows if f.flow.role == "load"]
    sharing = sum(len([h for h in ("host", "peer_host") if member(f.result.raw, h).get("boot_id") in kernels])
                  for f in load if f.result is not None) if kernels else 0
    if sharing:
        rec = victim.congested.result.raw if victim.congested and victim.congested.result else {}
        evidence["shared_cpus"] = {
            "boot_id": sorted(kernels), "load_engines_on_it": sharing,
            "cpus_allowed": member(rec, "host").get("cpus_allowed"),
            "victim_cpu_use": {"isolated": _cpu_use(victim.isolated),
                               "congested": _cpu_use(victim.congested) if victim.congested else {}}}
    if b.host in victim.pair:
        return [Finding(
            "victim", f"{said}: its path crosses the hot port ({b.where})", evidence,
            cost="every message of the victim's job waits this much longer",
            fix="isolate the victim's traffic (another traffic class or rail), or give the loaded port "
                "shallower queues with ECN so queueing delay stays low")]
    if sharing:
        return [Finding(
            "victim-host", f"{said}, but its path does not cross the hot port ({b.where}): its engines ran on the "
                           f"same kernel as {sharing} of the load's engines (boot_id {', '.join(sorted(kernels))}; "
                           f"CPUs {evidence['shared_cpus']['cpus_allowed'] or 'unknown'}) and waited for the CPUs "
                           "they took: a host effect, not the fabric", evidence,
            cost="the victim's latency here measures the hosts' CPU contention; the fabric's share is unknown",
            fix="run the victim on hosts that run no load engine (separate machines), or give it CPUs of its own "
                "(--cpu, isolcpus)")]
    return [Finding(
        "victim-unexplained", f"{said}, but its path does not cross the hot port ({b.where}) and it shares no kernel "
                              "with the load: a part of its path this run does not observe (a switch uplink the "
                              "load also crosses?)", evidence,
        fix="look at the switch ports between the victim's hosts (counters, ECN marks, pause frames)")]
