# SPDX-License-Identifier: BSD-3-Clause
"""A load run as text and CSV (its JSON is ``LoadRun.to_json``), all from the same object."""

from __future__ import annotations

import csv
import io

from .model import LoadRun


def _g(x: float | None, digits: str = ".4g") -> str:
    return "-" if x is None else format(x, digits)


def text(run: LoadRun) -> str:
    b = run.bottleneck
    lines = [f"load {run.pattern}: {len(run.hosts)} hosts, {run.flows_per_pair} flow(s) per pair, "
             f"{sum(1 for f in run.flows if f.flow.role == 'load')} flows, --backend {run.backend}, "
             f"{run.duration_s:g} s, launcher {run.launcher}" + (f", seed {run.seed}" if run.seed is not None else "")]
    lines.append(f"{'flow':<28} {'Gb/s':>9} {'retrans':>8} {'CE':>6} {'segments':>9}  per interval (Gb/s)")
    for f in run.flows:
        if f.flow.role != "load":
            continue
        if f.error:
            lines.append(f"{f.flow.name:<28} {'failed':>9}  {f.error}")
            continue
        ivs = " ".join(f"{x:.3g}" for x in f.intervals_gbps)
        retrans = "-" if f.retransmitted is None else str(f.retransmitted)
        ce = "-" if f.ce_marked is None else str(f.ce_marked)
        lines.append(f"{f.flow.name:<28} {_g(f.gbps):>9} {retrans:>8} {ce:>6} "
                     f"{f.segments if f.segments is not None else '-':>9}  {ivs}")
    share = b.fair_share_gbps
    together, total = run.concurrent_gbps, run.total_gbps
    lines.append(f"total {_g(total)} Gb/s over the flows' windows, {_g(together)} Gb/s while every flow ran "
                 f"(sum of the flows' own rates {run.sum_of_rates_gbps:.4g}); "
                 f"bottleneck {b.where}: {b.links_in} link(s) in, {b.flows} flows, rate {_g(b.rate_gbps)} Gb/s "
                 f"({b.rate_source}), fair share {_g(share)} Gb/s"
                 + (f", total {total / b.rate_gbps:.0%} of the rate" if b.rate_gbps and total is not None else ""))
    index = run.fairness
    short = " ".join(f"{j:.2f}" for j in run.interval_fairness)
    lines.append(f"Jain's fairness index {_g(index, '.3f')} (1 = equal shares, {1 / max(1, len(run.rates)):.3f} = one "
                 "flow has all)" + (f"; per interval {short}" if short else ""))
    if run.start_spread_s is not None:
        lines.append(f"the flows' engines started within {run.start_spread_s * 1e3:.0f} ms of each other")
    if run.rails:
        per_host = run.rail_bytes()
        for host, split in sorted(per_host.items()):
            whole = sum(split.values()) or 1
            lines.append(f"rails {host}: " + ", ".join(f"{r} {split.get(r, 0) / 1e6:.1f} MB ({split.get(r, 0) / whole:.0%})"
                                                      for r in run.rails))
    if run.victim is not None:
        v = run.victim
        lines.append(f"victim {v.pair[0]} <-> {v.pair[1]} (ping-pong, half round trip):")
        for imp in v.impacts:
            lines.append(f"  p{imp.q * 100:g}: isolated {imp.isolated_us:.2f} us, during the load {imp.congested_us:.2f} us: "
                         f"impact factor {imp.factor:.2f} (95 % interval {imp.low:.2f}-{imp.high:.2f})")
        if not v.impacts:
            lines.append(f"  no impact factor: {v.isolated.error or (v.congested.error if v.congested else 'not run')}")
    lines.append("findings:" if run.findings else "findings: none")
    for fd in run.findings:
        lines.append(f"  [{fd.kind}] {fd.summary}")
        if fd.cost:
            lines.append(f"      cost: {fd.cost}")
        if fd.fix:
            lines.append(f"      fix: {fd.fix}")
    for note in run.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def csv_text(run: LoadRun) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["flow", "role", "src", "dst", "lane", "gbps", "retransmitted_segments", "ce_marked_segments", "segments",
                "latency_p50_us", "latency_p99_us", "intervals_gbps", "error"])
    for f in run.flows:
        lat = f.result.latency if f.result else None
        w.writerow([f.flow.index, f.flow.role, f.flow.src, f.flow.dst, f.flow.lane, _g(f.gbps, ".6g"),
                    "" if f.retransmitted is None else f.retransmitted, "" if f.ce_marked is None else f.ce_marked,
                    "" if f.segments is None else f.segments,
                    lat.p50 if lat and f.flow.role == "victim" else "", lat.p99 if lat and f.flow.role == "victim" else "",
                    " ".join(f"{x:.6g}" for x in f.intervals_gbps), f.error or ""])
    return buf.getvalue()
