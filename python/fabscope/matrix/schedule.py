# SPDX-License-Identifier: BSD-3-Clause
"""Schedules: which pairs of hosts are measured together, round by round.

A round is a list of disjoint pairs of host indices (0..n-1): no host is ever in two
measurements at once, so one slow host cannot slow a neighbour's measurement by sharing its
NIC. Each pair is measured in both directions by the executor (two steps per round).

Schedules are lazy: a schedule is a small description and `round(r)` builds round r in O(n)
when it is needed, so a 10,000-host all-pairs schedule (50 million pairs) or a 100,000-host
shift schedule costs nothing until rounds are run, and any round can be recomputed (for a
retest, or by another process) without keeping the rest.

- all-pairs: the circle method (Berger tables): n-1 rounds of n/2 pairs for even n, every
  unordered pair exactly once; odd n adds a "bye" so one host rests each round (n rounds).
- shift: mpiGraph's ring distances d = 1 .. n/2 (host i with i+d mod n, near neighbours in
  rank order first). mpiGraph has every host send to i+d and receive from i-d at once; here
  each distance is split into disjoint rounds (2, or 3 when the ring of that distance has odd
  length, 1 for d = n/2) so that no host is in two measurements at once.
- bisection: the first half of the host list against the second half, every cross pair once,
  a full matching per round (the bisection of the fabric loaded each round).
- random: k rounds, each a random perfect matching (seeded; the seed is in the output).
- explicit: the pairs of a file (`--pairs FILE`), packed greedily into disjoint rounds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy only for table(): the agent and coordinator also run where it is absent
    import numpy as np
    import numpy.typing as npt

Pair = tuple[int, int]

SCHEDULES = ("all-pairs", "shift", "bisection", "random")


class ScheduleError(ValueError):
    """A schedule cannot be built as asked; the message says what, what exists and the fix."""


@dataclass(frozen=True)
class Schedule:
    """Base: `n` hosts, `rounds` rounds; subclasses build round r on demand."""

    n: int

    name = "schedule"

    @property
    def rounds(self) -> int:
        raise NotImplementedError

    def round(self, r: int) -> list[Pair]:
        raise NotImplementedError

    def _check_round(self, r: int) -> None:
        if not 0 <= r < self.rounds:
            raise IndexError(f"round {r} of a {self.rounds}-round {self.name} schedule")

    @property
    def pairs_total(self) -> int:
        return sum(len(self.round(r)) for r in range(self.rounds))

    def __iter__(self) -> Iterator[list[Pair]]:
        for r in range(self.rounds):
            yield self.round(r)

    def describe(self) -> dict[str, object]:
        return {"name": self.name, "hosts": self.n, "rounds": self.rounds, "pairs": self.pairs_total}


@dataclass(frozen=True)
class AllPairs(Schedule):
    name = "all-pairs"

    @property
    def _slots(self) -> int:
        return self.n + (self.n % 2)  # odd n: one slot is the bye

    @property
    def rounds(self) -> int:
        return self._slots - 1 if self.n >= 2 else 0

    @property
    def pairs_total(self) -> int:
        return self.n * (self.n - 1) // 2

    def round(self, r: int) -> list[Pair]:
        self._check_round(r)
        slots = self._slots
        m = slots - 1  # slot m is fixed, slots 0..m-1 rotate
        bye = self.n  # index == n means "nobody": that host rests this round
        pairs: list[Pair] = []
        first = (m, r % m)
        for a, b in [first] + [((r + k) % m, (r - k) % m) for k in range(1, slots // 2)]:
            if a != bye and b != bye:
                pairs.append((a, b) if a < b else (b, a))
        return pairs

    def table(self) -> npt.NDArray[np.signedinteger[Any]]:
        """Every round at once, as an array [round, pair, (a, b)] with a < b: the same pairs in the
        same order as round(r), built with whole-array arithmetic (10,000 hosts: 50 M pairs, 0.2 GB
        as int16) for a planner or simulator that wants the full schedule, not one round."""
        import numpy as np

        slots = self._slots
        m = slots - 1
        even = self.n % 2 == 0  # even n: the fixed slot m is a host, paired with r; odd n: the bye
        # The narrowest type that holds r + k < 2m: half the memory (and page faults) at 10,000 hosts.
        dtype: type[np.signedinteger[Any]] = np.int16 if 2 * slots < np.iinfo(np.int16).max else np.int32
        out: npt.NDArray[np.signedinteger[Any]] = np.empty((m, self.n // 2, 2), dtype=dtype)
        r = np.arange(m, dtype=dtype)[:, None]
        k = np.arange(1, slots // 2, dtype=dtype)[None, :]
        # (r + k) mod m and (r - k) mod m without a division: both are off the range by less than m.
        a = r + k
        np.subtract(a, dtype(m), out=a, where=a >= m)
        b = r - k
        np.add(b, dtype(m), out=b, where=b < 0)
        lo, hi = out[:, int(even):, 0], out[:, int(even):, 1]
        np.minimum(a, b, out=lo)
        np.maximum(a, b, out=hi)
        if even:
            out[:, 0, 0] = r[:, 0]
            out[:, 0, 1] = m
        return out


@dataclass(frozen=True)
class Shift(Schedule):
    """Ring distances 1..n//2; each distance split into disjoint sub-rounds."""

    name = "shift"

    def _parts(self, d: int) -> int:
        if self.n < 2:
            return 0
        length = self.n // math.gcd(self.n, d)
        if length == 2:
            return 1
        return 3 if length % 2 else 2

    @property
    def rounds(self) -> int:
        # Closed form, O(1): distances whose ring length is odd need 3 sub-rounds.
        return sum(self._parts(d) for d in range(1, self.n // 2 + 1))

    @property
    def pairs_total(self) -> int:
        return self.n * (self.n - 1) // 2

    def _locate(self, r: int) -> tuple[int, int]:
        self._check_round(r)
        for d in range(1, self.n // 2 + 1):
            parts = self._parts(d)
            if r < parts:
                return d, r
            r -= parts
        raise IndexError(r)  # unreachable after _check_round

    def round(self, r: int) -> list[Pair]:
        d, part = self._locate(r)
        return self.distance_round(d, part)

    def distance_round(self, d: int, part: int) -> list[Pair]:
        """Sub-round `part` of distance d: edges j -> j+1 of each ring c, c+d, c+2d, ... whose
        position j is even (part 0), odd (part 1), or the closing edge of an odd ring (part 2)."""
        n = self.n
        rings = math.gcd(n, d)
        length = n // rings
        if length == 2:
            return [(c, c + d) for c in range(rings)]
        if part == 2:
            starts: range = range(length - 1, length)
        else:
            starts = range(part, length - 1 if length % 2 else length, 2)
        pairs: list[Pair] = []
        for c in range(rings):
            for j in starts:
                a, b = (c + j * d) % n, (c + (j + 1) * d) % n
                pairs.append((a, b) if a < b else (b, a))
        return pairs

    def __iter__(self) -> Iterator[list[Pair]]:
        for d in range(1, self.n // 2 + 1):
            for part in range(self._parts(d)):
                yield self.distance_round(d, part)


@dataclass(frozen=True)
class Bisection(Schedule):
    """Hosts 0..h-1 against h..n-1 (h = n//2); round r pairs i with h + (i + r) mod (n-h)."""

    name = "bisection"

    @property
    def rounds(self) -> int:
        return self.n - self.n // 2 if self.n >= 2 else 0

    @property
    def pairs_total(self) -> int:
        return (self.n // 2) * (self.n - self.n // 2)

    def round(self, r: int) -> list[Pair]:
        self._check_round(r)
        half, other = self.n // 2, self.n - self.n // 2
        return [(i, half + (i + r) % other) for i in range(half)]


@dataclass(frozen=True)
class RandomRounds(Schedule):
    """k random perfect matchings (odd n: one host rests in each), reproducible from the seed."""

    k: int = 4
    seed: int = 0

    name = "random"

    @property
    def rounds(self) -> int:
        return self.k if self.n >= 2 else 0

    def round(self, r: int) -> list[Pair]:
        self._check_round(r)
        order = list(range(self.n))
        random.Random(f"{self.seed}:{r}").shuffle(order)
        pairs = [(order[i], order[i + 1]) for i in range(0, self.n - 1, 2)]
        return [(a, b) if a < b else (b, a) for a, b in pairs]


@dataclass(frozen=True)
class Explicit(Schedule):
    """Given pairs, packed greedily into rounds in which no host appears twice."""

    pairs: tuple[Pair, ...] = ()
    packed: tuple[tuple[Pair, ...], ...] = field(default=(), compare=False)

    name = "explicit"

    @staticmethod
    def pack(n: int, pairs: Sequence[Pair]) -> Explicit:
        rounds: list[list[Pair]] = []
        busy: list[set[int]] = []
        for a, b in pairs:
            for i, used in enumerate(busy):
                if a not in used and b not in used:
                    rounds[i].append((a, b))
                    used.update((a, b))
                    break
            else:
                rounds.append([(a, b)])
                busy.append({a, b})
        return Explicit(n, tuple(pairs), tuple(tuple(r) for r in rounds))

    @property
    def rounds(self) -> int:
        return len(self.packed)

    @property
    def pairs_total(self) -> int:
        return len(self.pairs)

    def round(self, r: int) -> list[Pair]:
        self._check_round(r)
        return list(self.packed[r])


def parse_pairs(text: str, hosts: Sequence[str], source: str = "--pairs") -> list[Pair]:
    """Pairs from a file's text: one pair per line, `HOST_A HOST_B` or `HOST_A,HOST_B`; `#`
    starts a comment. Every host must be one of `hosts`; a host paired with itself is refused
    (hp2p's infinite bandwidth, cea-hpc/hp2p#26); a pair given twice (either order) is kept once."""
    index = {h: i for i, h in enumerate(hosts)}
    seen: set[Pair] = set()
    out: list[Pair] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].replace(",", " ").strip()
        if not line:
            continue
        words = line.split()
        if len(words) != 2:
            raise ScheduleError(f"{source} line {lineno}: {raw.strip()!r}: expected two host names (HOST_A HOST_B)")
        unknown = [w for w in words if w not in index]
        if unknown:
            raise ScheduleError(
                f"{source} line {lineno}: {', '.join(unknown)} is not among the matrix hosts "
                f"({', '.join(hosts)}); add it to --hosts/--hostfile or fix the name"
            )
        a, b = index[words[0]], index[words[1]]
        if a == b:
            raise ScheduleError(f"{source} line {lineno}: {words[0]} is paired with itself; a pair needs two hosts")
        key = (a, b) if a < b else (b, a)
        if key not in seen:
            seen.add(key)
            out.append(key)
    if not out:
        raise ScheduleError(f"{source}: no pairs in it; write one pair per line, e.g. `{hosts[0]} {hosts[-1]}`")
    return out


def make(name: str, n: int, *, rounds: int | None = None, seed: int = 0) -> Schedule:
    """The schedule called `name` for n hosts; `rounds` caps the rounds (required for random)."""
    if n < 2:
        raise ScheduleError(f"a matrix needs at least 2 hosts, got {n}")
    sched: Schedule
    if name == "all-pairs":
        sched = AllPairs(n)
    elif name == "shift":
        sched = Shift(n)
    elif name == "bisection":
        sched = Bisection(n)
    elif name == "random":
        sched = RandomRounds(n, k=rounds if rounds is not None else 4, seed=seed)
    else:
        raise ScheduleError(f"--schedule {name}: unknown; choose one of {', '.join(SCHEDULES)} or give --pairs FILE")
    if rounds is not None and rounds < 1:
        raise ScheduleError(f"--rounds {rounds}: must be at least 1")
    if rounds is not None and name != "random" and rounds < sched.rounds:
        return Explicit.pack(n, [p for r in range(rounds) for p in sched.round(r)])
    return sched
