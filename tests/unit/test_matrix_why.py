# SPDX-License-Identifier: BSD-3-Clause
"""The causes a matrix finding carries (issue 20): the explanations of its slow pairs' real records
(tests/fixtures/records), counted and worded by fabscope.results.findingwhy.

The fabric is simulated (which pairs are slow); every measurement carries a real engine record, and
a planted cause changes one engine-reported count of it, as tests/unit/test_explain.py does: a
retransmission count for loss, an engine's CPU time and involuntary switches for a CPU hog."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fabscope.matrix import driver, render
from fabscope.matrix.rules import Job, Rule
from fabscope.matrix.schedule import AllPairs
from fabscope.results import parse_record
from fabscope.results.explain import CAUSES
from fabscope.results.findingwhy import MEANING, ORDER, RATE_LIMIT
from fabscope.results.matrix import Finding, MatrixRun, Measurement

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
HOSTS = [f"h{i}" for i in range(8)]
Record = Callable[[str, str], dict[str, Any] | None]


def raw(name: str, line: int = 0) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((RECORDS / name).read_text().splitlines()[line])
    return rec


# Loopback TCP bw from an engine that reports TCP_INFO retransmissions: every check clear or unchecked.
CLEAN_TCP = raw("tcp-send-bw-32k-sndbuf-explain-buffers.jsonl", 0)
NUMA_AUTO = raw("softroce-numa-verbs-lat-cpu-auto.jsonl")  # verbs lat, both engines on their device's node
NUMA_FAR = raw("softroce-numa-verbs-lat-cpu-far.jsonl")  # the same guest with --cpu far: placement


def lossy(rec: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(rec)
    out["transport"]["local"]["phase_retransmitted_segments"] = 30
    return out


def hogged(rec: dict[str, Any], side: str) -> dict[str, Any]:
    """Another process on `side`'s engine CPU: it ran 40 % of the phase, taken off its CPU 500 times."""
    out = copy.deepcopy(rec)
    cu = out["cpu_use"][side]
    cu.update(user_ns=int(cu["wall_ns"] * 0.3), sys_ns=int(cu["wall_ns"] * 0.1), involuntary_switches=500)
    return out


class RecordFabric:
    """A fabric without noise: value = 10 Gb/s (or 2 us) x node and link factors; each measurement
    carries the record ``record(src, dst)`` gives."""

    def __init__(self, record: Record, nodes: dict[str, float] | None = None,
                 links: dict[tuple[str, str], float] | None = None) -> None:
        self.record, self.nodes, self.links = record, nodes or {}, links or {}
        self.unreachable: dict[str, str] = {}

    def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
        out = []
        for src, dst, pattern, phase in jobs:
            f = self.nodes.get(src, 1.0) * self.nodes.get(dst, 1.0) * self.links.get((min(src, dst), max(src, dst)), 1.0)
            value = 2.0 / f if pattern == "lat" else 10.0 * f
            out.append(Measurement(src, dst, pattern, value, phase=phase, round=round_no, verdict="verified",
                                   result=None if (rec := self.record(src, dst)) is None
                                   else parse_record(rec, judge_path=False)))
        return out


def run(fabric: RecordFabric, pattern: str = "bw") -> MatrixRun:
    return driver.run(HOSTS, [pattern], AllPairs(len(HOSTS)), Rule(), fabric, backend="sim")


def finding(res: MatrixRun, kind: str, hosts: list[str]) -> Finding:
    return next(f for f in res.findings if f.kind == kind and f.hosts == hosts)


def test_a_lossy_link_says_loss_and_a_clean_but_slow_link_says_rate_limit() -> None:
    """One matrix, two bad links: h1-h4 retransmits (its records' TCP_INFO count), h2-h6 is as slow
    with every check clear."""
    def record(src: str, dst: str) -> dict[str, Any]:
        return lossy(CLEAN_TCP) if {src, dst} == {"h1", "h4"} else CLEAN_TCP

    res = run(RecordFabric(record, links={("h1", "h4"): 0.5, ("h2", "h6"): 0.5}))
    assert sorted((f.kind, f.hosts) for f in res.findings) == [("link", ["h1", "h4"]), ("link", ["h2", "h6"])]
    loss, limit = finding(res, "link", ["h1", "h4"]), finding(res, "link", ["h2", "h6"])
    assert loss.why is not None and limit.why is not None
    assert loss.why.diagnosis == "loss (retransmissions or drops) on 2 of 2 slow pairs"
    (retrans,) = loss.why.causes
    assert retrans.cause == "retransmission" and (retrans.pairs, retrans.of) == (2, 2)
    assert retrans.evidence.startswith("h1 -> h4 bw (local h1, peer h4): the client retransmitted 30 segments")
    assert retrans.fix and "tc -s qdisc" in retrans.fix
    assert limit.why.causes == () and limit.why.diagnosis == RATE_LIMIT
    doc = res.to_json()["findings"]
    by_hosts = {tuple(f["hosts"]): f for f in doc}
    assert by_hosts[("h1", "h4")]["diagnosis"] == "loss (retransmissions or drops) on 2 of 2 slow pairs"
    assert {"cause": "retransmission", "pairs": 2, "of": 2}.items() <= by_hosts[("h1", "h4")]["causes"][0].items()
    assert "30 segments" in by_hosts[("h1", "h4")]["causes"][0]["evidence"]
    assert by_hosts[("h2", "h6")]["causes"] == [] and by_hosts[("h2", "h6")]["diagnosis"] == RATE_LIMIT
    text = render.text(res)
    assert "BAD LINK: h1 <-> h4" in text and "  why: loss (retransmissions or drops) on 2 of 2 slow pairs\n" in text
    assert "BAD LINK: h2 <-> h6" in text and f"  why: {RATE_LIMIT}\n" in text


def test_a_node_with_a_cpu_hog_says_cpu_and_one_placed_far_says_placement() -> None:
    """Verbs latency on the NUMA guest's records: h3's engine shares its CPU with a hog; h6's ran on
    the other node than its device (the real --cpu far record)."""
    def record(src: str, dst: str) -> dict[str, Any]:
        if "h3" in (src, dst):
            return hogged(NUMA_AUTO, "local" if src == "h3" else "peer")
        return NUMA_FAR if "h6" in (src, dst) else NUMA_AUTO

    res = run(RecordFabric(record, nodes={"h3": 0.4, "h6": 0.4}), pattern="lat")
    assert sorted((f.kind, f.hosts) for f in res.findings) == [("node", ["h3"]), ("node", ["h6"])]
    hog, far = finding(res, "node", ["h3"]), finding(res, "node", ["h6"])
    assert hog.why is not None and far.why is not None
    (cpu,) = hog.why.causes
    assert cpu.cause == "cpu" and cpu.pairs == cpu.of == hog.why.slow_pairs
    assert hog.why.diagnosis.startswith(f"a CPU hog (another process on an engine's CPU) on {cpu.pairs} of {cpu.of}")
    assert "ran 40% of the" in cpu.evidence and "another process shared its CPU" in cpu.evidence
    # h6's slow pair with h3 shows h3's hog: a partner's cause, named apart.
    assert [(c.cause, c.pairs, c.of) for c in far.why.causes] == [("placement", 12, 14), ("cpu", 2, 14)]
    assert far.why.diagnosis == ("remote NUMA placement (an engine on another node than its device) on 12 of 14 slow "
                                 "pairs; on fewer of its slow pairs: cpu (2 of 14)")
    assert "and rxe0 (on eth0) is on node 1 (--cpu far)" in far.why.causes[0].evidence
    assert "  why: a CPU hog" in render.text(res)


def test_a_node_with_port_errors_is_told_from_a_cpu_hog() -> None:
    """A netns record whose fabric0 dropped 7 received packets during the run, on h0's side."""
    netns = raw("netns-tcp-bw-device-fabric0-verified.jsonl")
    dropped = copy.deepcopy(netns)
    dev = dropped["counters"]["local"]["net"]["fabric0"]
    dev["before"]["rx_dropped"], dev["after"]["rx_dropped"] = 5, 12

    res = run(RecordFabric(lambda s, d: dropped if s == "h0" else netns, nodes={"h0": 0.4}))
    (node,) = res.findings
    assert node.why is not None
    assert "port errors (rx_dropped +" in node.why.diagnosis and "on fabric0 (h0)" in node.why.diagnosis
    assert "CPU hog" not in node.why.diagnosis
    # The engine's explanation names the same drop as loss on the pairs h0 sent on.
    retrans = next(c for c in node.why.causes if c.cause == "retransmission")
    assert "rx_dropped +7 on fabric0" in retrans.evidence and retrans.evidence.startswith("h0 -> ")


def test_no_rate_limit_is_claimed_where_loss_could_not_be_checked() -> None:
    """The netns records are from an engine without TCP_INFO retransmission counts: a slow link with
    nothing seen is not called a rate limit."""
    netns = raw("netns-tcp-bw-device-fabric0-verified.jsonl")
    res = run(RecordFabric(lambda s, d: netns, links={("h2", "h5"): 0.5}))
    (link,) = res.findings
    assert link.why is not None and link.why.diagnosis != RATE_LIMIT
    assert link.why.diagnosis.startswith("no cause seen, but loss could not be checked on 2 of 2 slow pairs (")
    assert "TCP_INFO" in link.why.diagnosis and "loss and a rate limit are not told apart" in link.why.diagnosis


def test_a_cause_every_pair_shows_is_the_fabrics_not_the_findings() -> None:
    """64 KiB over loopback's MSS: segmentation on every pair; the slow link is still a rate limit."""
    seg = raw("tcp-send-bw-32k-64k-explain-facts.jsonl", 1)
    res = run(RecordFabric(lambda s, d: seg, links={("h2", "h5"): 0.5}))
    (link,) = res.findings
    assert link.why is not None
    (cause,) = link.why.causes
    assert cause.cause == "segmentation" and cause.fabric_wide and cause.clean_pairs == cause.clean_of > 0
    assert link.why.diagnosis == (f"{RATE_LIMIT}; seen on the fabric's clean pairs too, so not what sets this apart: "
                                  "segmentation")


def test_a_finding_without_records_says_so() -> None:
    res = run(RecordFabric(lambda s, d: None, links={("h2", "h5"): 0.5}))
    (link,) = res.findings
    assert link.why is not None and link.why.causes == ()
    assert link.why.diagnosis == ("no cause can be told: none of its 2 slow pairs carries a record the checks can read "
                                  "(h2 -> h5 bw: the measurement carries no engine record)")
    assert link.why.unexplained and res.to_json()["findings"][0]["unexplained"] == list(link.why.unexplained)


def test_every_cause_has_a_meaning_and_a_place_in_the_diagnosis() -> None:
    assert set(MEANING) == set(CAUSES) and set(ORDER) == {*CAUSES, "port errors"}


def test_loss_on_a_lossy_fabric_does_not_make_a_slow_link_a_rate_limit() -> None:
    """Every pair retransmits: loss is the fabric's, and the slow link is not called a rate limit."""
    res = run(RecordFabric(lambda s, d: lossy(CLEAN_TCP), links={("h2", "h5"): 0.5}))
    (link,) = res.findings
    assert link.why is not None and [c.cause for c in link.why.causes] == ["retransmission"]
    assert link.why.causes[0].fabric_wide
    assert link.why.diagnosis.startswith("no cause sets it apart: loss is seen on 2 of 2 slow pairs")
    assert RATE_LIMIT not in link.why.diagnosis
