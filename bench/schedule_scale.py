# SPDX-License-Identifier: BSD-3-Clause
"""How long the matrix schedules take to produce at fabric scale (not a test: it always exits 0).

- all-pairs for 10,000 hosts, whole (AllPairs.table: 9,999 rounds x 5,000 pairs as one array),
  checked: every unordered pair exactly once, no host twice in a round;
- all-pairs for 10,000 hosts, lazily (make + three rounds built on demand);
- shift for 100,000 hosts (5 G pairs: only lazily; one round of each distance kind built).

Goal (issue #12): each under a second on an idle machine. The first whole build pays for 0.4 GB
of fresh pages, so the best of --repeats is reported beside the first."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from fabscope.matrix import schedule as sch


def _timed(fn: Callable[[], object], repeats: int) -> tuple[list[float], object]:
    times: list[float] = []
    out: object = None
    for _ in range(repeats):
        out = None
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return times, out


def _check_all_pairs(table: np.ndarray, n: int) -> str:
    flat = table.reshape(-1, 2).astype(np.int64)
    seen = np.zeros(n * n, dtype=bool)
    seen[flat[:, 0] * n + flat[:, 1]] = True
    unique = int(seen.sum())
    rounds_ok = all(len(np.unique(table[r])) == 2 * table.shape[1] for r in (0, table.shape[0] // 2, -1))
    ok = unique == len(flat) == n * (n - 1) // 2 and bool((flat[:, 0] < flat[:, 1]).all()) and rounds_ok
    return f"{unique:,} distinct pairs of {n * (n - 1) // 2:,}: {'ok' if ok else 'WRONG'}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=10_000, help="all-pairs fabric size")
    p.add_argument("--shift-hosts", type=int, default=100_000, help="shift fabric size")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    n = args.hosts

    times, table = _timed(lambda: sch.AllPairs(n).table(), args.repeats)
    assert isinstance(table, np.ndarray)
    print(f"all-pairs {n:,} hosts, whole table {table.shape} ({table.nbytes / 1e9:.2f} GB): "
          f"first {times[0]:.2f} s, best {min(times):.2f} s; {_check_all_pairs(table, n)}")
    del table

    def lazy() -> object:
        s = sch.make("all-pairs", n)
        return [s.round(r) for r in (0, s.rounds // 2, s.rounds - 1)]

    times, _ = _timed(lazy, args.repeats)
    print(f"all-pairs {n:,} hosts, lazy (make + 3 rounds): best {min(times) * 1e3:.1f} ms")

    def shift() -> object:
        s = sch.make("shift", args.shift_hosts)
        return s.pairs_total, s.round(0), s.round(s.rounds - 1)

    times, _ = _timed(shift, args.repeats)
    print(f"shift {args.shift_hosts:,} hosts, lazy (make, size, first and last round): best {min(times):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
