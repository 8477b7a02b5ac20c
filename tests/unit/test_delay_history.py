# SPDX-License-Identifier: BSD-3-Clause
"""The `delay` cause read against the history (issue 51): the round trip the same case showed on its
clean runs (fabscope/reference.py: find_delay_reference; results/delay.py judges). Stores built under
tmp_path from real saved netns records (tests/fixtures/records): the clean fs-a -> fs-b stream (1 MiB)
and the deep-queue one (512 KiB); the clean one's size is set to the deep one's so they are one case,
and its round trips are edited where a test plants a path."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from fabscope.reference import ReferenceLookup, find_delay_reference
from fabscope.results import Result, parse_record
from fabscope.results.delay import DELAY_REFERENCE_RUNS
from fabscope.store import open_store

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def _raw(name: str) -> dict[str, Any]:
    return dict(json.loads((RECORDS / name).read_text().splitlines()[0]))


def _clean(rtt_us: int | None = None) -> Result:
    """The clean stream as a run of the deep-queue case (512 KiB), its client's round trip set."""
    rec = copy.deepcopy(_raw("netns-tcp-bw-clean-round-trip.jsonl"))
    rec["size"] = 524288
    if rtt_us is not None:
        rec["transport"]["local"]["rtt_us"] = rtt_us
    rec.pop("explanation", None)
    return parse_record(rec)


def _deep(min_rtt_us: int | None = None) -> Result:
    rec = copy.deepcopy(_raw("netns-tcp-bw-deep-queue.jsonl"))
    if min_rtt_us is not None:
        rec["transport"]["local"]["min_rtt_us"] = min_rtt_us
    rec.pop("explanation", None)
    return parse_record(rec)


def _delay(res: Result) -> Any:
    assert res.explanation is not None
    return next(c for c in res.explanation.causes if c.cause == "delay")


def test_the_round_trip_is_read_against_the_cases_clean_runs(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        ids = [store.add_run("run", ["fabscope", "run"], [_clean(rtt)]) for rtt in (497, 510, 480)]
        assert _delay(_deep()).state == "seen"  # the fixture's own floor shows it too
        got = ReferenceLookup.open(store, None, backend="tcp", op=None).attach(_deep(), run_id=None)
    delay = _delay(got)
    assert delay.state == "seen", delay
    runs = ", ".join(map(str, reversed(ids)))
    assert (f"the client's round trip 23,396 us at the end of the run against 497 us on this path's last 3 clean runs "
            f"of this case (runs {runs}, median) and 15 us at its lowest on this connection") in delay.evidence
    assert "22,899 us of each round trip waited in a queue (47 x the clean runs')" in delay.evidence
    assert "the same window over the 497 us path would carry 47 x as much (rate <= window / round trip)" in delay.evidence
    assert got.explanation is not None and got.explanation.delay_reference is not None
    js = got.to_json()["explanation"]  # what the JSON output and the store carry
    assert js["delay_reference"] == {"rtt_us": {"local": 497.0, "peer": 23.0}, "run_ids": list(reversed(ids))}
    # Read back (a stored run, a file), the record keeps the reference it was judged against.
    again = parse_record(copy.deepcopy(got.to_json()))
    assert _delay(again) == delay


def test_the_history_names_a_queue_the_connections_own_floor_hides(tmp_path: Path) -> None:
    # A queue that stood from the handshake on: the connection's lowest round trip is queued too.
    hidden = _deep(min_rtt_us=20_000)
    assert _delay(hidden).state == "clear", _delay(hidden)
    with open_store(tmp_path / "h.db") as store:
        store.add_run("run", ["fabscope", "run"], [_clean()])
        got = ReferenceLookup.open(store, None, backend="tcp", op=None).attach(hidden, run_id=None)
    delay = _delay(got)
    assert delay.state == "seen" and "against 497 us on this path's last 1 clean run of this case" in delay.evidence
    assert "(47 x the clean runs')" in delay.evidence and delay.fix is not None and "tc -s qdisc" in delay.fix


def test_clean_runs_against_their_history_name_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        for rtt in (497, 4_907):  # a busy host's clean stream: milliseconds of scheduling, no queue
            store.add_run("run", ["fabscope", "run"], [_clean(rtt)])
        got = ReferenceLookup.open(store, None, backend="tcp", op=None).attach(_clean(5_123), run_id=None)
    delay = _delay(got)
    assert delay.state == "clear", delay
    assert "against 2,702 us on this path's last 2 clean runs of this case" in delay.evidence
    assert got.explanation is not None and not got.explanation.seen


def test_only_clean_runs_of_the_same_case_are_the_reference(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        store.add_run("run", ["fabscope", "run"], [_deep()])  # names delay itself: not a clean run
        other = copy.deepcopy(_clean().raw)
        other["peer_host"]["hostname"] = "fs-c"  # another path
        store.add_run("run", ["fabscope", "run"], [parse_record(other)])
        assert find_delay_reference(store, _deep()) is None
        got = ReferenceLookup.open(store, None, backend="tcp", op=None).attach(_deep(), run_id=None)
        assert got.explanation is not None and got.explanation.delay_reference is None
        assert "clean run" not in _delay(got).evidence  # the floor alone, said as before
        ids = [store.add_run("run", ["fabscope", "run"], [_clean()]) for _ in range(DELAY_REFERENCE_RUNS + 2)]
        found = find_delay_reference(store, _deep())
        assert found is not None and found.run_ids == tuple(reversed(ids))[:DELAY_REFERENCE_RUNS]
        without = find_delay_reference(store, _deep(), exclude_run=ids[-1])  # the run being explained
        assert without is not None and ids[-1] not in without.run_ids
