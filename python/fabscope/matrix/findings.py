# SPDX-License-Identifier: BSD-3-Clause
"""Attribution: from confirmed-bad directions to bad nodes, bad links and misrouted pairs.

- a **bad node**: slow with more than ``node_share`` of its partners (its row and column);
- a **bad link**: a slow pair whose hosts are not bad nodes (each is fine with its others);
- **misrouted**: a pair whose bytes went over another device than the one asked for (the
  path verdict of its records), whatever its speed.

Evidence comes from the records themselves: the figures against the fabric's centre, the bytes
each device carried (the path verdict's carriers) and the error counters that moved on the
host's side of each record (symbol errors, link downed, receive errors, transmit discards, and
the netdev's rx/tx errors and drops), under the names the engine's counter reader uses. A bad
node or link also carries the causes seen on its slow measurements: each record's explanation
(``parse_record``), counted and worded by ``fabscope.results.findingwhy``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..results.counters import CounterSide
from ..results.findingwhy import FindingWhy, Observed, judge
from ..results.matrix import Finding, Measurement, metric_of
from .rules import Centre, Key, Rule, directions, judgeable, partners_of, threshold

# Counters that mean something went wrong on the wire or in the NIC when they move.
ERROR_COUNTERS = (
    "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
    "port_xmit_discards", "port_xmit_constraint_errors", "port_rcv_constraint_errors", "local_link_integrity_errors",
    "excessive_buffer_overrun_errors", "port_rcv_switch_relay_errors", "VL15_dropped",
    "rx_errors", "tx_errors", "rx_dropped", "tx_dropped", "rx_crc_errors", "rx_missed_errors", "tx_carrier_errors",
)


def _side_of(m: Measurement, host: str) -> str | None:
    if m.src == host:
        return "local"  # the client engine ran on src: its own counters are "local"
    if m.dst == host:
        return "peer"
    return None


def moved_errors(side: CounterSide | None) -> dict[str, dict[str, int]]:
    """Error counters that moved between before and after, per device: {device: {counter: delta}}."""
    out: dict[str, dict[str, int]] = {}
    for dev in [*(side.net.values() if side else ()), *(side.rdma.values() if side else ())]:
        for key in ERROR_COUNTERS:
            d = dev.delta(key)
            if d is not None and d > 0:
                out.setdefault(dev.name, {})[key] = d
    return out


def host_evidence(host: str, ms: Iterable[Measurement]) -> dict[str, Any]:
    """Bytes per device and error counters that moved on `host`'s side of these measurements."""
    carried: dict[str, int] = defaultdict(int)
    errors: dict[str, dict[str, int]] = {}
    for m in ms:
        side = _side_of(m, host)
        if side is None or m.result is None:
            continue
        judged = m.result.path.sides.get(side)
        for c in judged.carriers if judged else ():
            carried[c.device] += c.bytes
        for dev, moved in moved_errors(m.result.counters.side(side)).items():
            slot = errors.setdefault(dev, {})
            for k, v in moved.items():
                slot[k] = slot.get(k, 0) + v
    return {"bytes_per_device": dict(sorted(carried.items(), key=lambda kv: -kv[1])), "error_counters": errors}


def observe(m: Measurement) -> Observed:
    """The measurement's explanation, decided by ``parse_record`` on its record, or why there is none."""
    if m.result is None:
        return Observed(m.src, m.dst, m.pattern, None, m.error or "the measurement carries no engine record")
    explanation = m.result.explanation
    return Observed(m.src, m.dst, m.pattern, explanation, None if explanation else "its record has no explanation")


class Causes:
    """The causes of each finding: the slow measurements of its bad directions against the fabric's
    clean ones, each record parsed once."""

    def __init__(self, measurements: Sequence[Measurement], states: Mapping[Key, str]) -> None:
        self.judged = [m for m in measurements if judgeable(m)]
        self.clean = [observe(m) for m in self.judged if not m.suspect and states.get(_key(m)) == "clean"]

    def of(self, bad: Iterable[Key], port_errors: Mapping[str, Mapping[str, Mapping[str, int]]]) -> FindingWhy:
        keys = set(bad)
        slow = [observe(m) for m in self.judged if m.suspect and _key(m) in keys]
        return judge(slow, self.clean, port_errors)


def _key(m: Measurement) -> Key:
    return (m.src, m.dst, m.pattern)


def _fmt(pattern: str, value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} us" if metric_of(pattern) == "latency_p50_us" else f"{value:.3g} Gb/s"


def attribute(rule: Rule, hosts: Sequence[str], measurements: Sequence[Measurement],
              by_pattern: Mapping[str, Centre]) -> list[Finding]:
    states = directions(rule, measurements)
    bad_dirs = {k for k, st in states.items() if st == "bad"}
    bad_pairs: dict[tuple[str, str], list[tuple[str, str, str]]] = defaultdict(list)
    for s, d, p in bad_dirs:
        bad_pairs[(s, d) if s < d else (d, s)].append((s, d, p))
    partners = partners_of(measurements)
    causes = Causes(measurements, states)
    findings: list[Finding] = []

    index: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    by_pair: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if judgeable(m) and m.value is not None:
            index[(m.src, m.dst, m.pattern)].append(m.value)
            by_pair[m.pair].append(m)

    def values(src: str, dst: str, pattern: str) -> list[float]:
        return index.get((src, dst, pattern), [])

    def centre_json(pattern: str) -> dict[str, Any]:
        c = by_pattern[pattern]
        return {"median": c.median, "spread": c.spread, "threshold": threshold(rule, pattern, c)}

    nodes: set[str] = set()
    for h in hosts:
        mine = partners.get(h, set())
        bad_with = sorted({a if b == h else b for (a, b) in bad_pairs if h in (a, b)})
        if len(mine) >= 2 and bad_with and len(bad_with) / len(mine) > rule.node_share:
            nodes.add(h)
            per_pattern = {}
            for p in sorted({k[2] for k in bad_dirs if h in k[:2]}):
                mine_vals = [v for x in mine for v in values(h, x, p) + values(x, h, p)]
                per_pattern[p] = {"median_with_partners": statistics.median(mine_vals) if mine_vals else None,
                                  "fabric": centre_json(p)}
            ms = [m for x in mine for m in by_pair.get((h, x) if h < x else (x, h), [])]
            evidence = host_evidence(h, ms)
            findings.append(Finding(
                "node", [h],
                f"{h} is slow with {len(bad_with)} of its {len(mine)} partners ({', '.join(bad_with)})",
                {"bad_partners": bad_with, "partners": len(mine), "share": len(bad_with) / len(mine),
                 "patterns": per_pattern, **evidence},
                causes.of((k for k in bad_dirs if h in k[:2]), {h: evidence["error_counters"]}),
            ))
    for (a, b), dirs in sorted(bad_pairs.items()):
        if a in nodes or b in nodes:
            continue  # explained by the node
        figures: list[dict[str, Any]] = []
        for s, d, p in sorted(dirs):
            figures.append({"src": s, "dst": d, "pattern": p, "values": values(s, d, p), "fabric": centre_json(p)})
        ws, wd, wp = sorted(dirs)[0]
        ms = by_pair.get((a, b), [])
        hosts_ev = {a: host_evidence(a, ms), b: host_evidence(b, ms)}
        findings.append(Finding(
            "link", [a, b],
            f"{a} <-> {b} is slow ({ws} -> {wd} {wp}: "
            f"{', '.join(_fmt(wp, v) for v in values(ws, wd, wp))} against a fabric median of "
            f"{_fmt(wp, by_pattern[wp].median)}); {a} is fine with "
            f"{len(partners.get(a, set())) - 1} other partners, {b} with {len(partners.get(b, set())) - 1}",
            {"directions": figures, "partners": {a: len(partners.get(a, set())), b: len(partners.get(b, set()))},
             "hosts": hosts_ev},
            causes.of(dirs, {h: e["error_counters"] for h, e in hosts_ev.items()}),
        ))
    findings += misrouted(measurements)
    return findings


def misrouted(measurements: Iterable[Measurement]) -> list[Finding]:
    by_pair: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.verdict == "misrouted":
            by_pair[m.pair].append(m)
    out = []
    for (a, b), ms in sorted(by_pair.items()):
        paths = [m.result.path if m.result else None for m in ms]
        summaries = sorted({p.summary for p in paths if p and p.summary})
        # What chose the device that carried the bytes (the explanation's route cause), once per reason.
        why = list(dict.fromkeys(c.why_line() for m in ms if m.result and m.result.explanation
                                 for c in m.result.explanation.seen if c.cause == "route"))
        out.append(Finding(
            "misrouted", [a, b],
            f"{a} <-> {b}: {summaries[0] if summaries else 'bytes went over another device than asked'}"
            + "".join(f"; why: {w}" for w in why),
            {"requested": next((p.requested for p in paths if p and p.requested), None), "why": why,
             "measurements": [{"src": m.src, "dst": m.dst, "pattern": m.pattern, "summary": p.summary if p else None}
                              for m, p in zip(ms, paths, strict=True)],
             "hosts": {a: host_evidence(a, ms), b: host_evidence(b, ms)}},
        ))
    return out
