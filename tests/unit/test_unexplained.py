# SPDX-License-Identifier: BSD-3-Clause
"""A result far below its expected ceiling with no cause seen says so in words, with the strongest
signals the checks read, instead of a row of "clear" (results/explain/, Explanation.unexplained).
Real records: the tcp row of the two-guest suite (eth0 reports 10 Gb/s; TCG moves ~0.17 Gb/s)."""

from __future__ import annotations

from pathlib import Path

from fabscope.report.render import labelled_why_lines, render_text
from fabscope.results.files import load_file

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def test_far_below_the_ceiling_with_nothing_seen_is_said_in_words() -> None:
    bw = [r for r in load_file(RECORDS / "softroce-suite-rxe0-tcp-behind.jsonl") if r.pattern == "bw"]
    assert bw
    for res in bw:
        expl = res.explanation
        assert expl is not None and not expl.seen and expl.achieved_fraction is not None
        text = expl.unexplained()
        assert text is not None
        assert text.startswith(f"{1 / expl.achieved_fraction:.1f} x below its expected ceiling of 9.41 Gb/s")
        assert "no checked cause explains it; the strongest signals were: retransmission: " in text
        assert expl.to_json()["unexplained"] == text
        assert labelled_why_lines("tcp", res) == [f"why (tcp {res.size} B): {text}"]
    assert "# why (65536 B): 56.2 x below its expected ceiling" in render_text(bw)


def test_a_result_near_its_ceiling_or_without_one_is_not_called_unexplained() -> None:
    lat = [r for r in load_file(RECORDS / "softroce-suite-rxe0-tcp-behind.jsonl") if r.pattern == "lat"]
    assert lat and all(r.explanation is not None and r.explanation.unexplained() is None for r in lat)
    (loop, *_) = load_file(RECORDS / "tcp-send-bw-loopback.jsonl")  # lo: no link rate, no ceiling
    assert loop.explanation is not None and loop.explanation.unexplained() is None


def test_bandwidth_reference_from_the_history_is_what_expected_means_without_a_link_rate(tmp_path: Path) -> None:
    from conftest import fabscope
    from fabscope.store import open_store

    db = tmp_path / "h.db"
    (best,) = load_file(RECORDS / "tcp-send-bw-loopback.jsonl")  # a real loopback bw record, 64 KiB
    with open_store(db) as store:
        store.add_run("run", ["fabscope", "run"], [best], tag="base")
    out = fabscope("run", "--loopback", "--pattern", "bw", "--sizes", "64K", "--iters", "200", "--store", str(db),
                   "--reference", "base", "--format", "json")
    assert out.returncode == 0, out.stderr
    import json

    (rec,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    ref = rec["explanation"]["bandwidth_reference"]
    assert ref["named"] == "base" and ref["gbps"] == best.bandwidth.gbps  # type: ignore[union-attr]
    frac = rec["explanation"]["achieved_fraction"]
    assert frac == round(float(f"{rec['bandwidth_gbps'] / ref['gbps']:.4g}"), 4)
    assert "the reference named (--reference base)" in rec["explanation"]["expected_basis"]
    # A named reference without the case is exit 2, never a silent fall back.
    bad = fabscope("run", "--loopback", "--pattern", "bw", "--sizes", "1M", "--iters", "50", "--store", str(db),
                   "--reference", "base")
    assert bad.returncode == 2 and "holds no result of this case" in bad.stderr, bad.stderr


def test_delay_reads_the_round_trip_against_the_paths_floor() -> None:
    (deep,) = load_file(RECORDS / "netns-tcp-bw-deep-queue.jsonl")
    (clean,) = load_file(RECORDS / "netns-tcp-bw-clean-round-trip.jsonl")
    assert deep.explanation is not None and clean.explanation is not None
    delay = next(c for c in deep.explanation.causes if c.cause == "delay")
    assert delay.seen and "round trip 23,396 us at the end of the run against 15 us at its lowest" in delay.evidence
    assert "23,381 us of each round trip waited in a queue" in delay.evidence and "rate <= window / round trip" in \
        delay.evidence
    assert delay.fix is not None and "tc -s qdisc show" in delay.fix
    assert [c.cause for c in clean.explanation.seen] == []  # the same path without the queue names nothing
    assert next(c for c in clean.explanation.causes if c.cause == "delay").state == "clear"
