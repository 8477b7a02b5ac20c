# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope load`: the patterns' flows, the refusals (exit 2, named), Jain's index, the fair share,
the starved flows, the impact factor's interval, and the findings from flows with known figures."""

from __future__ import annotations

import math

import pytest

from conftest import fabscope
from fabscope.errors import FabscopeError
from fabscope.load import judge
from fabscope.load.patterns import check_request, flows_of, max_incoming, pairs_of
from fabscope.results.histogram import Histogram
from fabscope.serve.policy import Limits

HOSTS = ["a", "b", "c", "d"]


def test_each_pattern_sends_what_it_says() -> None:
    assert pairs_of("incast", HOSTS, receiver="c") == [("a", "c"), ("b", "c"), ("d", "c")]
    assert pairs_of("fanout", HOSTS, sender="b") == [("b", "a"), ("b", "c"), ("b", "d")]
    assert len(pairs_of("alltoall", HOSTS)) == 12 and all(s != d for s, d in pairs_of("alltoall", HOSTS))
    perm = pairs_of("permutation", HOSTS, seed=7)
    assert sorted(s for s, _ in perm) == HOSTS and sorted(d for _, d in perm) == HOSTS
    assert all(s != d for s, d in perm)
    assert perm == pairs_of("permutation", HOSTS, seed=7)  # the seed decides
    flows = flows_of(pairs_of("incast", HOSTS), 3)
    assert len(flows) == 9 and [f.index for f in flows] == list(range(9))
    assert {f.lane for f in flows} == {0, 1, 2} and flows[4].name == "c->a#1"
    assert max_incoming(pairs_of("incast", HOSTS), 3) == 9


@pytest.mark.parametrize(("args", "said"), [
    (("incast", ["a"], 1, None, None, None), "needs at least 2 hosts"),
    (("incast", HOSTS, 1, "z", None, None), "--receiver z: not among --hosts (a, b, c, d)"),
    (("fanout", HOSTS, 1, "a", None, None), "--receiver applies to incast only"),
    (("incast", HOSTS, Limits.max_connections_per_source + 1, None, None, None), "connections from one source"),
    (("alltoall", HOSTS, 1, None, None, ["b", "x"]), "b is in the loaded set"),
    (("alltoall", HOSTS, 1, None, None, ["x"]), "give two different hosts"),
])
def test_refusals_name_what_was_asked(args: tuple, said: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(FabscopeError) as exc:
        check_request(*args)
    assert exc.value.exit_code == 2 and said in exc.value.message


def test_more_flows_into_a_host_than_a_serve_accepts() -> None:
    hosts = [f"h{i}" for i in range(10)]
    with pytest.raises(FabscopeError, match=r"puts 72 flows into one host, more than a serve's limit of 64"):
        check_request("incast", hosts, 8, None, None, None)
    check_request("incast", hosts, 7, None, None, None)  # 63: within


@pytest.mark.parametrize(("argv", "said"), [
    (["load", "incast", "--hosts", "a,b", "--receiver", "c"], "--receiver c: not among --hosts"),
    (["load", "alltoall", "--hosts", "a,b,c", "--victim", "c,d"], "c is in the loaded set"),
    (["load", "incast", "--hosts", "a", "--flows", "2"], "needs at least 2 hosts"),
    (["load", "incast", "--hosts", "a,b", "--flows", "17"], "--flows 17: a serve accepts at most 16"),
    (["load", "bisect", "--hosts", "a,b"], "invalid choice: 'bisect'"),
])
def test_bad_input_is_exit_2_named(argv: list[str], said: str) -> None:
    out = fabscope(*argv)
    assert out.returncode == 2, out.stderr
    assert said in out.stderr and "Traceback" not in out.stderr


def test_jain_and_the_fair_share() -> None:
    assert judge.jain([5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert judge.jain([9.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert judge.jain([]) is None
    b = judge.bottleneck_of("incast", pairs_of("incast", HOSTS, receiver="a"), 2, 1.0, "test")
    assert (b.host, b.links_in, b.flows) == ("a", 3, 6)
    assert b.fair_share_gbps == pytest.approx(1 / 6) and b.oversubscription == 3
    assert judge.starved({"x": 0.16, "y": 0.05, "z": 0.2}, 1 / 6) == ["y"]
    assert judge.starved({"x": 1.0, "y": 0.3}, None) == ["y"]  # no rate: half the mean (0.325)


def test_impact_factor_and_its_interval() -> None:
    alone = Histogram.from_samples_ns([10_000 + (i % 100) for i in range(5000)])
    slow = Histogram.from_samples_ns([30_000 + (i % 100) * 3 for i in range(5000)])
    imp = judge.impact(alone, slow, 0.5)
    assert imp.factor == pytest.approx(3.0, rel=0.05)
    assert imp.low <= imp.factor <= imp.high and imp.high / imp.low < 1.2
    same = judge.impact(alone, alone, 0.99)
    assert same.low <= 1.0 <= same.high
    lo, hi = judge.quantile_interval(Histogram.from_samples_ns([1000.0] * 10 + [5000.0]), 0.5)
    assert math.isclose(lo, hi)


def test_a_flow_that_stalls_for_an_interval_is_named() -> None:
    # the shallow queue's shape on the netns testbed: one flow near zero for an interval
    series = {"b": [0.0119, 0.0007, 0.0098], "c": [0.0231, 0.0168, 0.0189], "d": [0.0112, 0.0154, 0.0126]}
    assert judge.stalls(series, 0.1 / 7) == {"b": [1]}
    # the deep queue's: every flow within 73 % of the fair share in every interval
    assert judge.stalls({"b": [0.0154, 0.0119], "c": [0.0105, 0.0140]}, 0.1 / 7) == {}
    # no known rate: against each interval's mean
    assert judge.stalls({"x": [1.0, 0.1], "y": [1.0, 1.9]}, None) == {"x": [1]}
