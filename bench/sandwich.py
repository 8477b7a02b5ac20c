# SPDX-License-Identifier: BSD-3-Clause
"""The one rule every bench uses to judge fabscope against a peer tool run just before and just after
it (a sandwich: peer, fabscope, peer). The machine's speed moves while a bench runs (the VM's CPU
placement on the host, a TCG guest's levels); two peer runs that disagree say it moved under the
sandwich, and that sandwich is left out instead of being read as a gap between the tools.

A chain of sandwiches (P0 F0 P1 F1 ... Pn) whose peer runs disagree too often leaves a verdict
resting on one or two of them. The benches then run more repeats (`needs_more`, `chain_needs_more`):
whether to go on is decided by the peer's runs (and the CPU placement probes, on the host) alone,
never by fabscope's figures, so measuring more cannot lean the verdict either way."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from math import comb
from statistics import median

STABLE = 0.15  # the peer's two runs may differ by this much (relative to the smaller) to count
MIN_SANDWICHES = 3  # a chain is extended until its verdict rests on this many (see chain_needs_more)
CONFIDENCE = 0.95  # of the interval around a row's median (median_interval)


def peer_runs_agree(before: float, after: float, stable: float = STABLE) -> bool:
    """Whether the peer's runs before and after fabscope's agree within `stable`."""
    return min(before, after) > 0 and abs(before - after) / min(before, after) <= stable


def usable(peer: Mapping[int, float | None], fab_reps: Iterable[int]) -> tuple[list[int], list[int]]:
    """Of fabscope's repeats that have a figure (`fab_reps`; repeat i ran between the peer's runs i
    and i + 1), those whose two peer runs have figures and agree, and those left out because their
    peer runs disagree. A repeat with a peer run missing is in neither."""
    used: list[int] = []
    left_out: list[int] = []
    for i in sorted(fab_reps):
        before, after = peer.get(i), peer.get(i + 1)
        if not before or not after:
            continue
        (used if peer_runs_agree(before, after) else left_out).append(i)
    return used, left_out


def needs_more(counted: int, repeats: int, done: int) -> bool:
    """Whether a bench that has run `done` repeats (of `repeats` asked for), `counted` of whose
    sandwiches count, runs one more: while fewer than MIN_SANDWICHES count, up to twice the repeats
    asked for (a peer that never settles still ends)."""
    return done < repeats or (counted < MIN_SANDWICHES and done < 2 * repeats)


def chain_needs_more(peer: Mapping[int, float | None], fab_reps: Iterable[int], repeats: int, done: int) -> bool:
    """needs_more for a chain P0 F0 P1 ... (the Soft-RoCE benches): the sandwiches that count are
    `usable`'s."""
    return needs_more(len(usable(peer, fab_reps)[0]), repeats, done)


def run_chain(run_peer: Callable[[int], float | None], run_fabscope: Callable[[int], bool], repeats: int) -> int:
    """Drives one chain P0 F0 P1 F1 ... Pn: `run_peer(i)` makes the peer's run i and returns its
    figure (None: none); `run_fabscope(i)` makes fabscope's run i and says whether it finished.
    `repeats` fabscope runs, then more while chain_needs_more says so. Returns how many ran."""
    peer = {0: run_peer(0)}
    finished: list[int] = []
    rep = 0
    while chain_needs_more(peer, finished, repeats, rep):
        if run_fabscope(rep):
            finished.append(rep)
        rep += 1
        peer[rep] = run_peer(rep)  # closes the sandwich
    return rep


def sandwich_cell(ratio: float | None, used: list[float], left_out: list[int]) -> str:
    """A row's sandwich verdict as the tables show it: the median, how many sandwiches it rests on,
    and the interval the median lies in (median_interval; absent below six sandwiches)."""
    cell = ("-" if ratio is None else f"{ratio:.3f}") + f" ({len(used)} of {len(used) + len(left_out)})"
    band = median_interval(used)
    return cell + ("" if band is None else f" [{band[0]:.3f}-{band[1]:.3f}]")


def meets(is_lat: bool, goal: float, ratio: float) -> bool:
    """Whether a ratio fabscope / peer meets its goal: at most the goal for latency, at least it otherwise."""
    return ratio <= goal if is_lat else ratio >= goal


def median_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The interval that holds the median of the sandwiches' distribution with at least
    `confidence`, from their order statistics alone (no assumption on how the machine's speed moves):
    [x_(k), x_(n+1-k)] with the largest k whose coverage 1 - 2 P(Bin(n, 1/2) < k) is still enough.
    None while n is too small for any k (fewer than six at 95 %). Ten sandwiches that spread by 5 %
    between their quartiles give an interval about 10 % wide: a run of that length cannot tell
    1.03 from 1.07, whatever its median says."""
    xs = sorted(ratios)
    n = len(xs)
    best: tuple[float, float] | None = None
    below = 0  # P(Bin(n, 1/2) < k) * 2^n, for k = 1, 2, ...
    for k in range(1, n // 2 + 1):
        below += comb(n, k - 1)
        if 1 - 2 * below / 2**n < confidence:
            break
        best = (xs[k - 1], xs[n - k])
    return best


def decided(is_lat: bool, goal: float, ratios: Sequence[float]) -> bool | None:
    """Whether the sandwiches decide the goal: True when the whole median_interval meets it, False
    when none of it does, None when the goal lies inside it (the run's noise is wider than the
    distance to the goal: its met or NO is not a verdict) or there are too few sandwiches."""
    band = median_interval(ratios)
    if band is None:
        return None
    ends = [meets(is_lat, goal, x) for x in band]
    return ends[0] if ends[0] == ends[1] else None


def verdict_word(met: bool | None, settled: bool) -> str:
    """The tables' `met` cell: yes or NO on the median, marked when the interval does not settle it."""
    if met is None:
        return "-"
    return ("yes" if met else "NO") + ("" if settled else " (undecided)")


def self_cell(ratios: list[float]) -> str:
    """The tables' peer-vs-itself cell: the median of peer_against_itself and how many it rests on."""
    return f"{median(ratios):.3f} ({len(ratios)})" if ratios else "-"


def peer_against_itself(peer: Mapping[int, float | None]) -> list[float]:
    """The chain's noise floor: each inner peer run i against the mean of the peer runs i - 1 and
    i + 1, the sandwich rule applied to the peer alone (both neighbours must agree, as in usable).
    Its neighbours are two runs away, not one, so this spreads at least as much as fabscope's
    sandwiches would if fabscope were the peer itself: a median away from 1.000 by more than the
    goal's margin says the run could not have judged any tool at that margin."""
    out: list[float] = []
    for i in sorted(peer):
        mid, before, after = peer.get(i), peer.get(i - 1), peer.get(i + 1)
        if mid and before and after and peer_runs_agree(before, after):
            out.append(mid / ((before + after) / 2))
    return out
