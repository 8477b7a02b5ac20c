# SPDX-License-Identifier: BSD-3-Clause
"""The path verdict's sides, typed (results/pathsides.py): what each host judged and which devices
carried its bytes, for the explanation, the matrix and the report. Real records from the fixtures;
a malformed side reads as absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabscope.report.figures import carrier_device
from fabscope.results import load_file, path_sides

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def test_a_misrouted_run_names_the_device_that_carried_it_on_both_hosts() -> None:
    (result,) = load_file(RECORDS / "netns-tcp-bw-bind-misrouted.jsonl")
    assert result.path.verdict == "misrouted"
    for name in ("local", "peer"):
        side = result.path.sides[name]
        raw = result.path.raw["sides"][name]
        assert side.verdict == "misrouted" and side.host == raw["host"]
        assert side.carriers and side.carriers[0].device == raw["carriers"][0]["device"]
        assert side.carriers[0].bytes == raw["carriers"][0]["bytes"] > 0
        assert side.carrier() == raw["carriers"][0]["device"] != result.path.requested
    assert carrier_device(result) == result.path.sides["local"].carrier()


def test_a_run_nothing_was_asked_of_names_its_busiest_device() -> None:
    result = load_file(RECORDS / "netns-tcp-lat-not-requested.jsonl")[0]
    local = result.path.sides["local"]
    assert local.verdict == "not-requested" and local.top and local.carriers[0] == local.top[0]
    assert local.carrier() == local.top[0].device
    assert local.top == tuple(sorted(local.top, key=lambda d: -d.bytes))


@pytest.mark.parametrize("path", [
    None, "x", {"sides": []}, {"sides": {"local": "x", "peer": None}},
])
def test_a_malformed_or_unjudged_side_is_absent(path: object) -> None:
    assert path_sides(path) == {}


def test_malformed_entries_are_left_out_of_a_side() -> None:
    path = {"sides": {"local": {"verdict": 3, "host": "a", "observed_bytes": True,
                                "carriers": [{"device": "eth0", "bytes": 10, "share": 0.5}, {"device": 1, "bytes": 2},
                                             {"device": "eth1", "bytes": -1}, {"device": "lo", "bytes": 5,
                                                                               "share": float("nan")}],
                                "top": "x"}}}
    side = path_sides(json.loads(json.dumps(path, allow_nan=True)))["local"]
    assert side.verdict is None and side.host == "a" and side.observed_bytes is None and side.top == ()
    assert [(c.device, c.bytes, c.share) for c in side.carriers] == [("eth0", 10, 0.5), ("lo", 5, None)]
