"""The explanation's decision (fabscope.results.explain) on real saved records (tests/fixtures/records).

Variants change one engine-reported fact of a real record (a retransmission count, a path MTU) to
check the rule that reads it; the planted runs themselves are in tests/integration/test_explain_runs.py."""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path
from typing import Any

from fabscope.report.render import render_csv, render_text
from fabscope.results import load_file, parse_record
from fabscope.results.explain import CAUSES, explain

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
FACTS = RECORDS / "tcp-send-bw-32k-64k-explain-facts.jsonl"


def raw(name: str, line: int = 0) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((RECORDS / name).read_text().splitlines()[line])
    return rec


def states(rec: dict[str, Any]) -> dict[str, str]:
    return {c.cause: c.state for c in explain(rec).causes}


def test_every_cause_is_accounted_for_on_every_saved_record() -> None:
    for path in sorted(RECORDS.glob("*.jsonl")):
        for res in load_file(path):
            assert res.explanation is not None
            assert [c.cause for c in res.explanation.causes] == list(CAUSES), path.name
            for c in res.explanation.causes:
                assert c.state in ("seen", "clear", "unchecked") and c.evidence, (path.name, c)
            assert res.to_json()["explanation"] == res.explanation.to_json()


def test_loopback_64k_is_segmentation_and_32k_is_nothing() -> None:
    small, big = load_file(FACTS)
    assert small.explanation is not None and big.explanation is not None
    assert [c.cause for c in big.explanation.seen] == ["segmentation"]
    (seg,) = big.explanation.seen
    mss = big.transport.local["mss"]
    assert f"over MSS {mss:,} B: 2 packets per message, the last one {65536 - mss:,} B" in seg.evidence
    assert small.explanation.seen == ()
    assert states(small.raw)["retransmission"] == "clear" and states(small.raw)["mtu"] == "clear"
    assert states(small.raw)["placement"] == "unchecked"  # lo has no NUMA node


def test_text_prints_one_why_line_per_seen_cause_else_one_count_line_and_csv_a_column() -> None:
    small, big = load_file(FACTS)
    text = render_text([small, big])
    assert "# why (65536 B): segmentation: 65,536 B per message over MSS" in text
    assert "# why (32768 B)" not in text  # a size with nothing seen has no line of its own
    assert render_text([small]).rstrip().endswith("# why: nothing seen; 3 checks clear, 2 unchecked")
    rows = list(csv.DictReader(io.StringIO(render_csv([small, big]))))
    assert [r["why"] for r in rows] == ["3 checks clear, 2 unchecked", "segmentation"]


def test_a_record_from_before_the_facts_says_unchecked_and_why() -> None:
    rec = raw("tcp-send-bw-loopback.jsonl")
    got = {c.cause: c for c in explain(rec).causes}
    assert got["retransmission"].state == "unchecked" and "TCP_INFO" in got["retransmission"].evidence
    assert got["mtu"].state == "unchecked" and "before 0.2" in got["mtu"].evidence
    # The 0.1.0 engine already reported the MSS: its 64 KiB record shows the tail segment.
    assert [c for c, v in got.items() if v.seen] == ["segmentation"]


def test_retransmissions_are_named_unless_the_receiver_reported_them_as_duplicates() -> None:
    _, big = (json.loads(line) for line in FACTS.read_text().splitlines())
    lossy = copy.deepcopy(big)
    lossy["transport"]["local"]["phase_retransmitted_segments"] = 55000
    lossy["transport"]["local"]["phase_spurious_retransmissions"] = 12
    cause = next(c for c in explain(lossy).causes if c.cause == "retransmission")
    assert cause.seen and "retransmitted 55,000 segments (12 reported back as duplicates" in cause.evidence
    assert cause.fix and "tc -s qdisc" in cause.fix
    # Late ACKs on a busy host: every retransmission DSACKed back is no loss.
    spurious = copy.deepcopy(big)
    spurious["transport"]["local"]["phase_retransmitted_segments"] = 40
    spurious["transport"]["local"]["phase_spurious_retransmissions"] = 40
    assert states(spurious)["retransmission"] == "clear"
    # In bw only the client sends: the receiver's count is not the stream's.
    receiver = copy.deepcopy(big)
    receiver["transport"]["peer"]["phase_retransmitted_segments"] = 500
    assert states(receiver)["retransmission"] == "clear"


def test_path_mtu_below_the_netdev_mtu_is_named() -> None:
    _, big = (json.loads(line) for line in FACTS.read_text().splitlines())
    low = copy.deepcopy(big)
    low["transport"]["local"]["path_mtu"] = 1500
    mtu = next(c for c in explain(low).causes if c.cause == "mtu")
    assert mtu.seen and "path MTU 1,500 B below the 65,536 B MTU of lo" in mtu.evidence


def test_verbs_record_checks_mtu_and_segmentation_against_the_path_mtu() -> None:
    res = parse_record(raw("softroce-verbs-write-bw-two-devices.jsonl"))
    assert res.explanation is not None
    got = {c.cause: c for c in res.explanation.causes}
    assert got["mtu"].state == "clear" and "1,024 B" in got["mtu"].evidence
    assert got["segmentation"].state in ("clear", "seen") and "path MTU 1,024 B" in got["segmentation"].evidence
    assert got["retransmission"].state == "unchecked"  # the snapshot holds no rxe loss counters
