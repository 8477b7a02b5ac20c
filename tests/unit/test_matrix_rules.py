"""The matrix rule and attribution, on synthetic fabrics (pure logic) and real engine records
(tests/fixtures/records) for the evidence."""

from __future__ import annotations

import copy
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from fabscope.matrix import driver, render, rules  # noqa: E402
from fabscope.matrix.findings import moved_errors  # noqa: E402
from fabscope.matrix.rules import Job, Rule  # noqa: E402
from fabscope.matrix.schedule import AllPairs, RandomRounds  # noqa: E402
from fabscope.results import parse_record  # noqa: E402
from fabscope.results.counters import Counters  # noqa: E402
from fabscope.results.matrix import EXIT_BAD_FABRIC, MATRIX_SCHEMA, Measurement  # noqa: E402

RECORDS = REPO / "tests" / "fixtures" / "records"
HOSTS = [f"h{i}" for i in range(8)]


class Fabric:
    """bw = 10 Gb/s x node and link factors x (1 + noise); latency = 2 us / the same factors."""

    def __init__(self, nodes: dict[str, float] | None = None, links: dict[tuple[str, str], float] | None = None,
                 noise: float = 0.03, seed: int = 1, flaky: dict[tuple[str, str], int] | None = None) -> None:
        self.nodes, self.links, self.noise = nodes or {}, links or {}, noise
        self.rng = random.Random(seed)
        self.flaky = dict(flaky or {})  # (src, dst) -> how many first measurements come out slow
        self.unreachable: dict[str, str] = {}
        self.jobs: list[Job] = []

    def factor(self, a: str, b: str) -> float:
        f = self.nodes.get(a, 1.0) * self.nodes.get(b, 1.0)
        return f * self.links.get((min(a, b), max(a, b)), 1.0)

    def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
        hosts = [h for j in jobs for h in j[:2]]
        assert len(hosts) == len(set(hosts)), f"a host in two measurements at once: {jobs}"
        self.jobs += jobs
        out = []
        for src, dst, pattern, phase in jobs:
            f = self.factor(src, dst) * (1 + self.noise * self.rng.gauss(0, 1))
            if self.flaky.get((src, dst), 0) > 0:
                self.flaky[(src, dst)] -= 1
                f *= 0.3
            value = 2.0 / f if pattern == "lat" else 10.0 * f
            out.append(Measurement(src, dst, pattern, value, phase=phase, round=round_no, verdict="verified"))
        return out


def run(fabric: Fabric, patterns: Sequence[str] = ("bw",), rule: Rule | None = None, hosts: list[str] = HOSTS,
        schedule: Any = None, directions: str = "both") -> Any:
    return driver.run(hosts, list(patterns), schedule or AllPairs(len(hosts)), rule or Rule(), fabric,
                      backend="sim", directions=directions)


def kinds(result: Any) -> list[tuple[str, list[str]]]:
    return [(f.kind, f.hosts) for f in result.findings]


def test_clean_fabric_has_no_findings_and_no_retests() -> None:
    result = run(Fabric(), patterns=("lat", "bw"))
    assert result.findings == []
    assert result.retests == 0
    assert result.exit_code == 0
    assert result.centres["bw"]["median"] == pytest.approx(10, rel=0.05)


def test_bad_node_named_alone() -> None:
    result = run(Fabric(nodes={"h3": 0.4}))
    assert kinds(result) == [("node", ["h3"])]
    ev = result.findings[0].evidence
    assert ev["partners"] == 7 and ev["share"] == 1.0
    assert ev["patterns"]["bw"]["median_with_partners"] == pytest.approx(4, rel=0.1)
    assert result.exit_code == EXIT_BAD_FABRIC


def test_bad_link_names_the_pair_and_neither_host() -> None:
    result = run(Fabric(links={("h2", "h5"): 0.5}))
    assert kinds(result) == [("link", ["h2", "h5"])]
    assert result.findings[0].evidence["partners"] == {"h2": 7, "h5": 7}


def test_latency_rule() -> None:
    result = run(Fabric(nodes={"h6": 0.3}), patterns=("lat",))
    assert kinds(result) == [("node", ["h6"])]


def test_one_slow_measurement_is_retested_and_cleared() -> None:
    fabric = Fabric(flaky={("h1", "h4"): 1})
    result = run(fabric)
    assert result.findings == []
    retests = [m for m in result.measurements if m.phase == "retest"]
    # slow screen + fine retest is no majority of 3 either way: one more retest decides (fine).
    assert [(m.src, m.dst, m.suspect) for m in retests] == [("h1", "h4", False)] * 2
    assert result.retests == 2


def test_a_slow_direction_confirmed_by_its_retests() -> None:
    fabric = Fabric(flaky={("h1", "h4"): 5})
    result = run(fabric, rule=Rule(retests=2))
    assert kinds(result) == [("link", ["h1", "h4"])]
    assert sum(1 for m in result.measurements if (m.src, m.dst) == ("h1", "h4")) == 2  # screen + 1 retest: majority


def test_retests_bounded() -> None:
    rule = Rule(retests=0)
    fabric = Fabric(flaky={("h1", "h4"): 1})
    result = run(fabric, rule=rule)
    assert result.retests == 0
    assert kinds(result) == [("link", ["h1", "h4"])]  # no retest allowed: the screen decides, and says so in the rule


def test_screen_schedule_gets_fresh_partners_to_tell_node_from_link() -> None:
    hosts = [f"h{i:02d}" for i in range(32)]
    fabric = Fabric(nodes={"h07": 0.4})
    result = run(fabric, hosts=hosts, schedule=RandomRounds(32, k=1, seed=3))
    assert kinds(result) == [("node", ["h07"])]
    partners = {m.dst for m in result.measurements if m.src == "h07"}
    assert len(partners) >= 3  # one screen round gave it one partner; the rule added fresh ones
    assert any(m.phase == "partner" for m in result.measurements)
    assert len(result.measurements) < 32 * 31  # far fewer than all-pairs


def test_one_direction_screen_halves_the_measurements() -> None:
    both = run(Fabric(links={("h2", "h5"): 0.5}))
    one = run(Fabric(links={("h2", "h5"): 0.5}), directions="one")
    assert kinds(one) == kinds(both) == [("link", ["h2", "h5"])]
    assert len(one.measurements) < 0.6 * len(both.measurements)


def test_two_bad_nodes_and_a_link() -> None:
    hosts = [f"h{i:02d}" for i in range(16)]
    result = run(Fabric(nodes={"h03": 0.5, "h11": 0.6}, links={("h05", "h09"): 0.5}), hosts=hosts)
    assert sorted(kinds(result)) == [("link", ["h05", "h09"]), ("node", ["h03"]), ("node", ["h11"])]


def test_unreachable_host_keeps_the_rest() -> None:
    fabric = Fabric()
    fabric.unreachable["h2"] = "its agent did not check in within 60 s"
    result = run(fabric)
    assert all("h2" not in (m.src, m.dst) for m in result.measurements)
    assert len(result.measurements) == 7 * 6  # every pair of the other seven, both directions
    assert result.unreachable == {"h2": "its agent did not check in within 60 s"}
    assert result.exit_code == 3


def test_line_rate_reference() -> None:
    # The whole fabric at 10 Gb/s on 25 Gb/s ports: below 0.8 x line rate everywhere - every host is bad.
    result = run(Fabric(), rule=Rule(line_rate_gbps=25.0, retests=0))
    assert {k for k, _ in kinds(result)} == {"node"}
    assert len(result.findings) == len(HOSTS)
    assert "25 Gb/s line rate" in result.rule["text"]


def test_robust_centre() -> None:
    c = rules.robust_centre([10, 10.2, 9.8, 10.1, 1.0, 0.5])
    assert c is not None and 9.8 <= c.median <= 10.1
    assert rules.robust_centre([]) is None


def _fixture(name: str) -> dict[str, Any]:
    line = (RECORDS / name).read_text().splitlines()[0]
    rec: dict[str, Any] = json.loads(line)
    return rec


def test_evidence_from_real_records() -> None:
    """Error counters that moved on a host's side, and the bytes per device of the path verdict."""
    raw = copy.deepcopy(_fixture("netns-tcp-bw-device-fabric0-verified.jsonl"))
    local = raw["counters"]["local"]["net"]["fabric0"]
    local["before"]["rx_dropped"], local["after"]["rx_dropped"] = 5, 12
    local["before"]["tx_errors"], local["after"]["tx_errors"] = 0, 0
    assert moved_errors(Counters.of_record(raw).local) == {"fabric0": {"rx_dropped": 7}}
    result = parse_record(raw)
    assert result.path.verdict == "verified"

    class RecordFabric(Fabric):
        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            out = super().measure(jobs, round_no)
            for m in out:
                if m.src == "h0":
                    m.result = result
            return out

    res = run(RecordFabric(nodes={"h0": 0.4}))
    assert kinds(res) == [("node", ["h0"])]
    ev = res.findings[0].evidence
    assert ev["error_counters"]["fabric0"]["rx_dropped"] >= 7
    assert next(iter(ev["bytes_per_device"])) == "fabric0"
    doc = res.to_json()
    assert doc["schema"] == MATRIX_SCHEMA
    assert doc["findings"][0]["kind"] == "node"
    assert any(p.get("src_host") == "h0" and p.get("schema") == "fabscope.result/1" for p in doc["pairs"])
    assert "rx_dropped" in render.text(res)


def test_misrouted_from_a_real_record() -> None:
    raw = _fixture("netns-ucx-tag-bw-misrouted.jsonl")
    result = parse_record(raw)
    assert result.misrouted

    class Misrouting(Fabric):
        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            out = super().measure(jobs, round_no)
            for m in out:
                if {m.src, m.dst} == {"h1", "h6"}:
                    m.verdict, m.result = "misrouted", result
            return out

    res = run(Misrouting())
    assert kinds(res) == [("misrouted", ["h1", "h6"])]
    assert "mgmt0" in res.findings[0].summary
    assert res.exit_code == 5
    table = render.table(res, "bw")
    assert "!" in table


def test_text_and_csv_render() -> None:
    res = run(Fabric(links={("h2", "h5"): 0.5}), patterns=("lat", "bw"))
    text = render.text(res)
    assert "BAD LINK: h2 <-> h5" in text
    assert "rule: suspect: bandwidth < 0.8 x the fabric median" in text
    rows = render.csv_text(res).splitlines()
    assert rows[0] == "src,dst,pattern,metric,value,unit,mark,measurements"
    assert len(rows) == 1 + 2 * 8 * 7
    assert any(r.startswith("h2,h5,bw,") and ",bad," in r for r in rows)


def test_parallel_caps_jobs_at_once() -> None:
    batches: list[int] = []

    class Counting(Fabric):
        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            batches.append(len(jobs))
            return super().measure(jobs, round_no)

    fabric = Counting()
    result = driver.run(HOSTS, ["bw"], AllPairs(8), Rule(), fabric, parallel=1)
    assert set(batches) == {1}
    assert len(result.measurements) == 8 * 7


def test_a_failed_measurement_is_never_silent() -> None:
    class Failing(Fabric):
        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            out = super().measure(jobs, round_no)
            for m in out:
                if (m.src, m.dst) == ("h2", "h3"):
                    m.value, m.error = None, "the engine on h3 did not start: memlock"
            return out

    res = run(Failing())
    assert res.findings == [] and res.exit_code == 4
    assert res.to_json()["failed"] == [{"src": "h2", "dst": "h3", "pattern": "bw",
                                        "error": "the engine on h3 did not start: memlock"}]
    assert "FAILED h2 -> h3 bw: the engine on h3 did not start: memlock" in render.text(res)


def test_noisy_fabric_widens_the_margin_instead_of_flagging_its_noise() -> None:
    hosts = [f"h{i:02d}" for i in range(24)]
    noisy = run(Fabric(noise=0.10, seed=5), hosts=hosts)
    assert noisy.findings == []  # with 0.8 x median alone, ~2 % of 552 healthy figures fall below it
    assert any("spread" in n and "below" in n for n in noisy.notes)
    found = run(Fabric(noise=0.10, seed=5, nodes={"h04": 0.4}), hosts=hosts)
    assert kinds(found) == [("node", ["h04"])]


def test_interrupted_run_keeps_and_judges_what_was_measured() -> None:
    class Interrupted(Fabric):
        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            if round_no == 4:
                raise KeyboardInterrupt
            return super().measure(jobs, round_no)

    res = run(Interrupted(nodes={"h3": 0.4}))
    assert res.interrupted and res.exit_code == 130
    assert {m.round for m in res.measurements} == {0, 1, 2, 3}
    assert kinds(res) == []  # its slow figures were never retested, so nothing is called...
    assert "suspects not retested (so not called): h1 -> h3 bw, h3 -> h1 bw" in res.notes[0]  # ...but named
    assert res.to_json()["interrupted"] is True


# A wall-clock bound: `measures` keeps it out of scripts/test.sh's four-at-once stage, where it would lose it.
@pytest.mark.measures
def test_timing_counts_the_measured_phases_over_the_jobs_at_once() -> None:
    """The matrix's timing section: measuring is every job's measured phase over the jobs that run
    at once (the wall time the measurements alone would need); the start-up before the first job
    counts in the wall time."""
    class Timed(Fabric):
        def measure(self, jobs: Sequence[Job], round_no: int) -> list[Measurement]:
            out = super().measure(jobs, round_no)
            for i, m in enumerate(out):
                m.measured_s = 1.0 + i  # 1 s and 2 s in a round of two
            return out

    import time

    started = time.monotonic() - 2.0  # as if the launcher and the agents took 2 s
    result = driver.run(HOSTS, ["bw"], AllPairs(8), Rule(), Timed(), parallel=2, started=started)
    t = result.timing
    assert len(t.jobs) == 8 * 7 and t.slots == 2
    assert sorted({j.measured_s for j in t.jobs}) == [1.0, 2.0]
    assert 2.0 <= t.start_s < 2.5 and t.wall_s >= t.start_s
    doc = result.to_json()["timing"]
    assert doc["jobs"] == 56 and doc["jobs_at_once"] == 2 and doc["measuring_s"] == 28 * 3.0 / 2
    assert doc["measuring_fraction"] == pytest.approx(42.0 / t.wall_s, rel=1e-3)  # > 1: nothing really waited
    assert "timing: " in render.text(result) and "56 pair measurements, 2 at once, measuring 42.0 s" in render.text(result)


def test_a_pairs_measuring_time_is_its_longer_span() -> None:
    """A bandwidth pair measured at the receiver: the receiver's span (rx_duration_s, start to the
    last arrival) is what the figure is computed over and outlasts the sender's duration_s by what
    was in flight; a record from an engine without it counts the sender's."""
    from fabscope.matrix.execute import measurement_from

    new = json.loads((RECORDS / "tcp-send-bw-loopback-rx-duration.jsonl").read_text().splitlines()[0])
    assert new["rx_duration_s"] > new["duration_s"]
    m = measurement_from("a", "b", "bw", "screen", 0, [new], None)
    assert m.measured_s == new["rx_duration_s"]
    old = json.loads((RECORDS / "tcp-send-bw-loopback.jsonl").read_text().splitlines()[0])
    assert "rx_duration_s" not in old
    assert measurement_from("a", "b", "bw", "screen", 0, [old], None).measured_s == old["duration_s"]
