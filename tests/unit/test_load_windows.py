# SPDX-License-Identifier: BSD-3-Clause
"""A load's total and per-interval sums count only bytes that crossed the port at the same time, and a
victim's slowdown is blamed on the fabric only when its path crosses the hot port (issue 48).

The saved run (tests/fixtures/records/load/netns-incast-7to1-shallow.jsonl, README there) is incast
7 -> 1 into a 100 Mbit/s port whose flows' measured phases began up to 4.1 s apart: the old arithmetic
(each flow's rate over its own window, summed; interval k of every flow summed) gave 1.9x the port."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from conftest import REPO
from fabscope.load import findings, judge
from fabscope.load.model import FlowResult, LoadRun, VictimResult, flow_result
from fabscope.load.patterns import Flow

PORT_GBPS = 0.1
# tbf meters the IP packet, the engine counts payload: the payload can only be below the port's rate;
# the tolerance is for the receiver's window starting a control message after the first byte left.
FRAMING = 1.03
SAVED = REPO / "tests" / "fixtures" / "records" / "load" / "netns-incast-7to1-shallow.jsonl"


def saved_lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAVED.read_text().splitlines()]


def as_result(i: int, line: dict[str, Any]) -> FlowResult:
    flow = Flow(i, line["src"], line["dst"], line["lane"], line["role"])
    out = flow_result(flow, [line["record"]], line["error"])
    out.span = (line["started"], line["ended"])
    return out


def saved_run() -> LoadRun:
    lines = saved_lines()
    flows = [as_result(i, line) for i, line in enumerate(lines) if line["role"] == "load"]
    isolated, congested = (as_result(len(flows) + i, line) for i, line in enumerate(lines[len(flows):]))
    pairs = sorted({(f.flow.src, f.flow.dst) for f in flows})
    run = LoadRun("incast", ["fs-a", *[s for s, _ in pairs]], 1, "tcp", "mpirun", 3.0, None, flows,
                  judge.bottleneck_of("incast", pairs, 1, PORT_GBPS, "--line-rate"))
    victim = VictimResult(("fs-i", "fs-j"), isolated, congested)
    iso, con = (v.result.latency.histogram for v in (isolated, congested) if v.result and v.result.latency)
    victim.impacts = [judge.impact(iso, con, q) for q in (0.5, 0.99)]
    run.victim = victim
    return run


def test_the_total_over_the_port_never_exceeds_its_rate() -> None:
    run = saved_run()
    assert len(run.flows) == 7 and run.aligned
    # what the old arithmetic said: more than the port can carry, both ways
    assert run.sum_of_rates_gbps > 1.5 * PORT_GBPS
    series = [f.intervals_gbps for f in run.flows]
    by_index = [sum(s[k] for s in series) for k in range(min(map(len, series)))]
    assert max(by_index) > PORT_GBPS * FRAMING
    # fs-d's phase began 4.1 s after the first: the flows' windows barely overlap
    assert run.phase_spread_s == pytest.approx(4.08, abs=0.01)
    total = run.total_gbps
    assert total is not None and 0.5 * PORT_GBPS < total <= PORT_GBPS * FRAMING
    # no whole interval in which all seven measured: nothing summed as if they had
    assert run.interval_totals_gbps == [] and run.concurrent_gbps is None
    doc = run.to_json()
    assert doc["total_gbps"] == total and doc["sum_of_rates_gbps"] == run.sum_of_rates_gbps


def window(start: float, gbps: list[float], span: float) -> judge.Window:
    return judge.Window(start, 1.0, tuple(gbps), span, sum(gbps))


def test_intervals_are_summed_on_common_boundaries() -> None:
    # A port of 0.1 Gb/s: a carries everything in [0, 2), b everything in [2, 4); b's window began
    # 0.5 s late. Interval k of each (a's [k, k+1), b's [k+0.5, k+1.5)) summed: 0.15 in the second.
    a = window(0.0, [0.1, 0.1], 2.0)
    b = window(0.5, [0.0, 0.05, 0.1], 3.5)
    assert a.gbit[1] + b.gbit[1] == pytest.approx(0.15)
    # on common boundaries (from b's start, while both have whole intervals: [0.5, 1.5)): a's 0.1 only
    assert judge.common_intervals([a, b]) == [pytest.approx([0.1, 0.0])]
    # over the union [0, 4): 0.45 Gbit in 4 s; each flow's own rate summed would be 0.1 + 0.071
    b_full = judge.Window(0.5, 1.0, (0.0, 0.05, 0.1), 3.5, 0.2)
    assert judge.union_s([a, b_full]) == pytest.approx(4.0)
    assert judge.total_gbps([window(0.0, [0.1, 0.1], 2.0), b_full]) == pytest.approx(0.1)
    # windows that never overlap for a whole interval have no common interval
    assert judge.common_intervals([window(0.0, [0.1], 1.0), window(0.6, [0.1], 1.0)]) == []


def kinds(run: LoadRun) -> list[str]:
    return [f.kind for f in findings.decide(run)]


def test_a_victim_on_the_loads_cpus_is_a_host_effect_not_the_fabric() -> None:
    run = saved_run()
    assert run.victim is not None and run.victim.impacts[1].low > findings.VICTIM_FACTOR  # 2.05x at p99
    found = {f.kind: f for f in findings.decide(run)}
    assert "victim" not in found
    host = found["victim-host"]
    assert "does not cross the hot port (fs-a's link" in host.summary and "14 of the load's engines" in host.summary
    shared = host.evidence["shared_cpus"]
    assert shared["load_engines_on_it"] == 14 and shared["cpus_allowed"] == "0,1"
    assert set(shared["victim_cpu_use"]["congested"]) == {"local", "peer"}
    # a host effect is no congestion: alone it leaves the exit code clean; the loss makes it 13
    run.findings = [host]
    assert run.exit_code == 0
    run.findings = findings.decide(run)
    assert run.exit_code == 13


def test_a_victim_through_the_hot_port_is_the_fabrics() -> None:
    run = saved_run()
    b = run.bottleneck
    run.bottleneck = judge.Bottleneck(b.where, "fs-j", b.links_in, b.flows, b.rate_gbps, b.rate_source)
    victim = next(f for f in findings.decide(run) if f.kind.startswith("victim"))
    assert victim.kind == "victim" and "crosses the hot port" in victim.summary


def test_a_victim_on_other_machines_off_the_hot_port_is_not_explained_away() -> None:
    run = saved_run()
    assert run.victim is not None and run.victim.congested is not None and run.victim.congested.result
    congested = copy.deepcopy(run.victim.congested.result.raw)
    for side in ("host", "peer_host"):
        congested[side]["boot_id"] = f"another-machine-{side}"
    run.victim.congested = as_result(99, {"src": "fs-i", "dst": "fs-j", "lane": 0, "role": "victim", "error": None,
                                          "record": congested, "started": 0.0, "ended": 0.0})
    got = [k for k in kinds(run) if k.startswith("victim")]
    assert got == ["victim-unexplained"]
