"""Schedules of the fabric matrix: disjoint rounds, every pair once, the sizes at scale."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from fabscope.matrix import schedule as sch


def check_rounds(rounds: Iterable[list[tuple[int, int]]], n: int, unique: bool = True) -> set[tuple[int, int]]:
    """Every round disjoint (no host twice), pairs ordered and in range; with unique, no pair twice."""
    seen: set[tuple[int, int]] = set()
    for rnd in rounds:
        hosts = [h for pair in rnd for h in pair]
        assert len(hosts) == len(set(hosts)), f"a host is in two measurements at once: {rnd}"
        for a, b in rnd:
            assert 0 <= a < b < n
            assert not unique or (a, b) not in seen, f"pair {(a, b)} scheduled twice"
            seen.add((a, b))
    return seen


@pytest.mark.parametrize("n", [*range(2, 34), 64, 101])
def test_all_pairs_circle_method(n: int) -> None:
    s = sch.make("all-pairs", n)
    assert s.rounds == (n - 1 if n % 2 == 0 else n)  # odd n: a bye, one host rests per round
    pairs = check_rounds(s, n)
    assert len(pairs) == n * (n - 1) // 2 == s.pairs_total
    for rnd in s:  # every round as full as it can be
        assert len(rnd) == n // 2


@pytest.mark.parametrize("n", [*range(2, 34), 64, 99])
def test_shift_covers_every_pair_once_by_ring_distance(n: int) -> None:
    s = sch.make("shift", n)
    pairs = check_rounds(s, n)
    assert len(pairs) == n * (n - 1) // 2 == s.pairs_total
    assert [r for r in s] == [s.round(i) for i in range(s.rounds)]  # lazy access agrees with iteration
    # mpiGraph's order: distance 1 (ring neighbours) first, the largest distance last.
    first = s.round(0)
    assert all(min((b - a) % n, (a - b) % n) == 1 for a, b in first)
    assert all(min((b - a) % n, (a - b) % n) == n // 2 for a, b in s.round(s.rounds - 1))


@pytest.mark.parametrize("n", range(2, 20))
def test_bisection_every_cross_pair(n: int) -> None:
    s = sch.make("bisection", n)
    pairs = check_rounds(s, n)
    half = n // 2
    assert pairs == {(a, b) for a in range(half) for b in range(half, n)}


def test_random_rounds_are_matchings_and_reproducible() -> None:
    s = sch.make("random", 11, rounds=6, seed=7)
    assert s.rounds == 6
    check_rounds(s, 11, unique=False)
    assert all(len(r) == 5 for r in s)
    assert list(s) == list(sch.make("random", 11, rounds=6, seed=7))
    assert list(s) != list(sch.make("random", 11, rounds=6, seed=8))


def test_rounds_cap_keeps_rounds_disjoint() -> None:
    s = sch.make("all-pairs", 8, rounds=3)
    assert s.rounds == 3
    check_rounds(s, 8)


def test_pairs_file() -> None:
    hosts = ["a", "b", "c", "d"]
    text = "# comment\na b\nc,d\nb a   # the same pair again\na c\n\nb d\n"
    pairs = sch.parse_pairs(text, hosts)
    assert pairs == [(0, 1), (2, 3), (0, 2), (1, 3)]
    packed = sch.Explicit.pack(4, pairs)
    assert packed.rounds == 2
    check_rounds(packed, 4)


@pytest.mark.parametrize("text, says", [
    ("a a\n", "paired with itself"),
    ("a x\n", "x is not among the matrix hosts (a, b, c)"),
    ("a b c\n", "expected two host names"),
    ("# nothing\n", "no pairs"),
])
def test_pairs_file_errors(text: str, says: str) -> None:
    with pytest.raises(sch.ScheduleError, match=re.escape(says)):
        sch.parse_pairs(text, ["a", "b", "c"])


def test_unknown_schedule_names_what_exists() -> None:
    with pytest.raises(sch.ScheduleError, match="all-pairs, shift, bisection, random"):
        sch.make("ring", 4)


# A wall-clock bound: `measures` keeps it out of scripts/test.sh's four-at-once stage, where it would lose it.
@pytest.mark.measures
def test_scale_all_pairs_10k_and_shift_100k() -> None:
    """The schedule for 10,000 hosts (50 M pairs) and shift for 100,000 (5 G pairs) are lazy: made,
    sized and any round built in well under a second (bound generous for a loaded machine)."""
    t0 = time.perf_counter()
    big = sch.make("all-pairs", 10_000)
    assert big.rounds == 9_999 and big.pairs_total == 49_995_000
    for r in (0, 1234, 9_998):
        rnd = big.round(r)
        assert len(rnd) == 5_000
        assert len({h for p in rnd for h in p}) == 10_000
    shift = sch.make("shift", 100_000)
    assert shift.pairs_total == 100_000 * 99_999 // 2
    last = shift.round(shift.rounds - 1)
    assert len({h for p in last for h in p}) == 2 * len(last)
    elapsed = time.perf_counter() - t0
    assert elapsed < 5.0, f"building the large schedules took {elapsed:.2f} s"


@pytest.mark.parametrize("n", [2, 3, 7, 8, 64, 65])
def test_all_pairs_table_is_the_rounds_at_once(n: int) -> None:
    """The whole-array all-pairs schedule equals round(r) for every r, and holds every unordered
    pair exactly once with no host twice in a round."""
    sched = sch.AllPairs(n)
    table = sched.table()
    assert table.shape == (sched.rounds, n // 2, 2)
    assert [[tuple(map(int, p)) for p in rnd] for rnd in table] == [sched.round(r) for r in range(sched.rounds)]
    flat = table.reshape(-1, 2)
    assert (flat[:, 0] < flat[:, 1]).all()
    assert len({(int(a), int(b)) for a, b in flat}) == n * (n - 1) // 2 == len(flat)
    for rnd in table:
        assert len(set(rnd.ravel().tolist())) == 2 * len(rnd)
