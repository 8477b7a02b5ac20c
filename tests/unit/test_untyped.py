# SPDX-License-Identifier: BSD-3-Clause
"""fabscope/untyped.py: the lenient readers of JSON nothing guarantees, and a reader that uses them on
input from another host (an engine's inventory), which must read a malformed number as absent."""

from __future__ import annotations

import json

from conftest import REPO
from fabscope.inventory import EngineInventory
from fabscope.untyped import count, count_at, mapping, member, number, number_at


def test_numbers_are_finite_non_bool_values_and_counts_stay_exact() -> None:
    assert [number(v) for v in (3, 2.5, True, float("inf"), float("nan"), "7", None)] == \
        [3.0, 2.5, None, None, None, None, None]
    big = 2**64 - 1  # a 64-bit counter: a float would round it
    assert count(big) == big and count(7.9) == 7 and count(False) is None and count(float("-inf")) is None
    assert count_at({"n": 5}, "n") == 5 and count_at(["n"], "n") is None and number_at({"x": "1"}, "x") is None


def test_mappings_read_as_empty_when_absent_or_of_another_type() -> None:
    assert mapping({"a": 1}) == {"a": 1} and mapping([1]) == {} and mapping(None) == {}
    assert member({"a": {"b": 1}}, "a") == {"b": 1} and member({"a": [1]}, "a") == {} and member("x", "a") == {}


def test_an_inventory_with_an_infinite_or_boolean_port_number_reads_it_as_absent() -> None:
    doc = json.loads((REPO / "tests" / "fixtures" / "inventory" / "rxe-qemu.json").read_text())
    port = doc["verbs"]["devices"][0]["ports"][0]
    port["lid"], port["max_mtu"], port["rate_gbps"] = float("inf"), True, float("nan")
    inv = EngineInventory.from_dict(json.loads(json.dumps(doc)), source="test")  # Infinity and NaN in the JSON
    parsed = inv.verbs.devices[0].ports[0]
    assert (parsed.lid, parsed.max_mtu, parsed.rate_gbps) == (None, None, None)
    assert parsed.active_mtu == port["active_mtu"]  # the rest as it was
