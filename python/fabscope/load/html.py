# SPDX-License-Identifier: BSD-3-Clause
"""A load run as one self-contained HTML page (no network): the sender x receiver heatmap of rates
under load, the fairness, every flow's rate per interval, the victim's latency under load against
alone, and the findings."""

from __future__ import annotations

from html import escape

from .model import LoadRun


def _cell(gbps: float | None, top: float) -> str:
    if gbps is None:
        return '<td class="none">-</td>'
    shade = int(230 - 160 * (gbps / top)) if top > 0 else 230
    return f'<td style="background: rgb({shade},{shade},255)" title="{gbps:.6g} Gb/s">{gbps:.3g}</td>'


def page(run: LoadRun) -> str:
    load = [f for f in run.flows if f.flow.role == "load"]
    by_pair: dict[tuple[str, str], float] = {}
    for f in load:
        if f.gbps is not None:
            key = (f.flow.src, f.flow.dst)
            by_pair[key] = by_pair.get(key, 0.0) + f.gbps
    top = max(by_pair.values(), default=0.0)
    hosts = run.hosts
    rows = ["<tr><th>sender \\ receiver</th>" + "".join(f"<th>{escape(h)}</th>" for h in hosts) + "</tr>"]
    for s in hosts:
        rows.append(f"<tr><th>{escape(s)}</th>" + "".join(
            _cell(by_pair.get((s, d)), top) if (s, d) in by_pair else '<td class="none"></td>' for d in hosts) + "</tr>")
    flows = ["<tr><th>flow</th><th>Gb/s</th><th>retransmitted</th><th>per interval (Gb/s)</th></tr>"]
    for f in load:
        ivs = " ".join(f"{x:.3g}" for x in f.intervals_gbps)
        rate = "-" if f.gbps is None else f"{f.gbps:.4g}"
        retrans = "-" if f.retransmitted is None else str(f.retransmitted)
        flows.append(f"<tr><td>{escape(f.flow.name)}</td><td>{rate}</td><td>{retrans}</td>"
                     f"<td>{escape(ivs or (f.error or ''))}</td></tr>")
    b = run.bottleneck
    index = run.fairness
    victim = ""
    if run.victim is not None and run.victim.impacts:
        items = "".join(f"<li>p{i.q * 100:g}: alone {i.isolated_us:.2f} us, under load {i.congested_us:.2f} us: "
                        f"impact factor <b>{i.factor:.2f}</b> (95 % interval {i.low:.2f}-{i.high:.2f})</li>"
                        for i in run.victim.impacts)
        victim = f"<h2>Victim {escape(' <-> '.join(run.victim.pair))}</h2><ul>{items}</ul>"
    found = "".join(f"<li><b>{escape(f.kind)}</b>: {escape(f.summary)}"
                    + (f"<br>cost: {escape(f.cost)}" if f.cost else "") + (f"<br>fix: {escape(f.fix)}" if f.fix else "")
                    + "</li>" for f in run.findings) or "<li>none</li>"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>fabscope load {escape(run.pattern)}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;
padding:4px 8px;text-align:right}} td.none{{background:#f4f4f4}}</style></head><body>
<h1>fabscope load {escape(run.pattern)}</h1>
<p>{len(hosts)} hosts, {run.flows_per_pair} flow(s) per pair, backend {escape(run.backend)}, {run.duration_s:g} s.
Total {'-' if run.total_gbps is None else f'{run.total_gbps:.4g}'} Gb/s over the flows' windows,
{'-' if run.concurrent_gbps is None else f'{run.concurrent_gbps:.4g}'} Gb/s while every flow ran;
bottleneck {escape(b.where)}: {b.links_in} link(s) in, fair share
{'-' if b.fair_share_gbps is None else f'{b.fair_share_gbps:.4g}'} Gb/s; Jain's fairness index
{'-' if index is None else f'{index:.3f}'}.</p>
<h2>Rates under load, sender x receiver (Gb/s)</h2><table id="heatmap">{''.join(rows)}</table>
<h2>Flows</h2><table id="flows">{''.join(flows)}</table>
{victim}
<h2>Findings</h2><ul id="findings">{found}</ul>
</body></html>
"""
