# SPDX-License-Identifier: BSD-3-Clause
"""The Soft-RoCE benches' verdict rule (bench/softroce_vs_perftest.py `sandwiches`, also used by
bench/softroce_vs_middleware_peers.py): each fabscope run against the mean of the peer's runs just
before and just after it, a sandwich spanning a change of the guests' speed left out."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from softroce_vs_perftest import sandwiches, table


def test_each_run_is_judged_against_its_neighbours() -> None:
    # chain P0 F0 P1 F1 P2: F0 sits between 100 and 110, F1 between 110 and 108
    used, left_out = sandwiches({0: 100.0, 1: 110.0, 2: 108.0}, {0: 105.0, 1: 109.0})
    assert used == pytest.approx([1.0, 109.0 / 109.0])
    assert left_out == []


def test_a_sandwich_across_a_change_of_speed_is_left_out() -> None:
    # the peer went from 280 to 380 us around F1: that repeat says nothing about the tools
    used, left_out = sandwiches({0: 280.0, 1: 282.0, 2: 380.0}, {0: 290.0, 1: 300.0})
    assert used == pytest.approx([290.0 / 281.0])
    assert left_out == [1]


def test_a_missing_figure_drops_only_its_sandwiches() -> None:
    used, left_out = sandwiches({0: 100.0, 1: None, 2: 100.0, 3: 100.0}, {0: 101.0, 1: 102.0, 2: None})
    assert used == [] and left_out == []
    used, _ = sandwiches({0: 100.0, 1: 100.0, 2: 100.0}, {0: None, 1: 103.0})
    assert used == pytest.approx([1.03])


def _rec(tool: str, rep: int, value: float) -> dict[str, object]:
    if tool == "perftest":
        return {"section": "bench", "bench": "send_lat", "tool": "perftest", "rep": rep, "rc": 0, "t_typical": value}
    return {"section": "bench", "bench": "send_lat", "tool": "fabscope", "rep": rep, "rc": 0,
            "records": [{"schema": "fabscope.result/1", "latency_us": {"p50": value}}]}


def test_the_verbs_table_judges_the_sandwiches_not_the_medians() -> None:
    # P 200, F 206, P 200, F 300, P 290, F 299, P 290: the guests slowed down in the middle. Each
    # stable sandwich is about 1.03; the unstable one (200 -> 290) is left out. The ratio of the
    # medians (299 / 245) would call a 22 % gap that no pair of neighbouring runs shows.
    recs = [_rec("perftest", 0, 200), _rec("fabscope", 0, 206), _rec("perftest", 1, 200), _rec("fabscope", 1, 300),
            _rec("perftest", 2, 290), _rec("fabscope", 2, 299), _rec("perftest", 3, 290)]
    (row,) = table(recs)
    assert row["sandwich_ratio"] == pytest.approx(1.03, abs=0.001)
    assert row["sandwich_left_out"] == [1]
    assert row["met"] is True
    assert row["ratio"] == pytest.approx(299 / 245)
    assert row["runs"] == 3 and row["n_perftest"] == 4


def test_a_chain_runs_its_repeats_then_more_while_too_few_sandwiches_count() -> None:
    from sandwich import MIN_SANDWICHES, chain_needs_more, usable

    assert MIN_SANDWICHES == 3
    stable = {0: 100.0, 1: 101.0, 2: 99.0, 3: 100.0}
    assert chain_needs_more(stable, [0, 1], repeats=3, done=2)  # the repeats asked for come first
    assert not chain_needs_more(stable, [0, 1, 2], repeats=3, done=3)  # three sandwiches count
    # The guests changed speed under repeat 1 (100 -> 140): two sandwiches count, so one more runs
    moved = {0: 100.0, 1: 100.0, 2: 140.0, 3: 141.0}
    assert usable(moved, [0, 1, 2]) == ([0, 2], [1])
    assert chain_needs_more(moved, [0, 1, 2], repeats=3, done=3)
    # and no more than the repeats asked for again: a chain whose peer never settles ends.
    assert not chain_needs_more(moved, [0, 1, 2], repeats=3, done=6)
    # A fabscope run that failed leaves its sandwich out of the count too.
    assert chain_needs_more(stable, [0, 2], repeats=3, done=3)


def test_a_chain_is_driven_peer_first_and_last_and_extended_on_the_peers_runs() -> None:
    from sandwich import run_chain

    order: list[str] = []
    figures = [100.0, 100.0, 150.0, 151.0, 150.0, 149.0]  # the peer's runs: a jump after run 1

    def peer(i: int) -> float | None:
        order.append(f"P{i}")
        return figures[i]

    def fab(i: int) -> bool:
        order.append(f"F{i}")
        return True

    # Two repeats asked for; the sandwich across the jump (F1) does not count, so the chain runs on to
    # F3, after which three count (F0, F2, F3); the cap, twice the repeats, is four as well.
    assert run_chain(peer, fab, repeats=2) == 4
    assert order == ["P0", "F0", "P1", "F1", "P2", "F2", "P3", "F3", "P4"]


def test_the_median_interval_is_the_order_statistics_with_enough_coverage() -> None:
    from sandwich import median_interval

    # Coverage of [x_(k), x_(n+1-k)] is 1 - 2 P(Bin(n, 1/2) < k): for ten, k = 2 (97.9 %; k = 3
    # would give 89.1 %); for twenty, k = 6 (95.9 %); five cannot reach 95 % (93.8 % for min-max).
    assert median_interval([float(x) for x in range(10, 0, -1)]) == (2.0, 9.0)
    assert median_interval([float(x) for x in range(20)]) == (5.0, 14.0)
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    assert median_interval([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 6.0)


def test_a_goal_inside_the_interval_is_not_decided() -> None:
    from sandwich import decided, verdict_word

    near = [1.0, 1.02, 1.03, 1.04, 1.045, 1.055, 1.06, 1.07, 1.08, 1.1]
    assert decided(True, 1.05, near) is None
    assert verdict_word(False, settled=False) == "NO (undecided)"
    far = [0.90, 0.91, 0.92, 0.93, 0.94, 0.95, 0.96, 0.97, 0.98, 0.99]
    assert decided(True, 1.05, far) is True and decided(False, 0.95, far) is None
    assert decided(False, 0.85, far) is True and decided(True, 0.85, far) is False
    assert verdict_word(True, settled=True) == "yes" and verdict_word(None, settled=False) == "-"
    assert decided(True, 1.05, [1.2, 1.3]) is None  # too few for any interval


def test_the_peer_against_itself_uses_its_neighbours_two_runs_away() -> None:
    from sandwich import peer_against_itself

    # P1 against (P0 + P2) / 2, P2 against (P1 + P3) / 2; P3's neighbours (100, 150) disagree, so
    # it is left out, and the ends (P0, P4) have one neighbour only.
    assert peer_against_itself({0: 100.0, 1: 110.0, 2: 100.0, 3: 100.0, 4: 150.0}) == pytest.approx(
        [110 / 100, 100 / 105])
    assert peer_against_itself({0: 100.0, 1: None, 2: 100.0}) == []


def test_the_verbs_table_marks_a_miss_its_interval_does_not_decide() -> None:
    # Seven sandwiches whose median misses by 1 % while they spread by 10 %: NO, undecided.
    peer = [200.0] * 8
    fab = [190.0, 200.0, 206.0, 212.0, 214.0, 216.0, 230.0]
    recs = [_rec("perftest", 0, peer[0])]
    for i, f in enumerate(fab):
        recs += [_rec("fabscope", i, f), _rec("perftest", i + 1, peer[i + 1])]
    (row,) = table(recs)
    assert row["met"] is False and row["decided"] is None
    assert row["peer_self_ratios"] == pytest.approx([1.0] * 6)
