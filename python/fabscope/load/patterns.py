# SPDX-License-Identifier: BSD-3-Clause
"""Which flows a load pattern runs, and the requests no pattern can honour (exit 2, named).

A flow is one engine pair (one TCP connection; a QP for verbs): ``--flows N`` puts N of them on
every (sender, receiver) pair of the pattern, as iperf3 -P does on one pair.

- incast: every host but ``--receiver`` sends to it (N-1 links into one);
- fanout: ``--sender`` sends to every other host (one link out to N-1);
- alltoall: every host sends to every other (N (N-1) pairs);
- permutation: a random derangement (seeded, in the output): every host sends to one and receives
  from one, all at once.

The limits come from ``serve.policy.Limits`` (the one owner of what one host accepts): a pair may
have at most ``max_connections_per_source`` flows and a host at most ``max_connections`` incoming.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import EXIT_USAGE, FabscopeError
from ..serve.policy import Limits

PATTERNS = ("incast", "fanout", "alltoall", "permutation")
MIN_HOSTS = {"incast": 2, "fanout": 2, "alltoall": 2, "permutation": 2}


@dataclass(frozen=True)
class Flow:
    """One engine pair: ``index`` numbers the flows of a run (0..); ``lane`` is its place among the
    flows of its (src, dst) pair; ``role`` is "load" or "victim"."""

    index: int
    src: str
    dst: str
    lane: int = 0
    role: str = "load"

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}#{self.lane}"


def pairs_of(pattern: str, hosts: Sequence[str], receiver: str | None = None, sender: str | None = None,
             seed: int = 0) -> list[tuple[str, str]]:
    """The (sender, receiver) pairs of a pattern over ``hosts`` (checked already)."""
    if pattern == "incast":
        dst = receiver or hosts[0]
        return [(h, dst) for h in hosts if h != dst]
    if pattern == "fanout":
        src = sender or hosts[0]
        return [(src, h) for h in hosts if h != src]
    if pattern == "alltoall":
        return [(a, b) for a in hosts for b in hosts if a != b]
    if pattern == "permutation":
        rng = random.Random(seed)
        order = list(hosts)
        while True:  # a derangement: nobody sends to itself (expected e tries)
            rng.shuffle(order)
            if all(a != b for a, b in zip(hosts, order, strict=True)):
                return list(zip(hosts, order, strict=True))
    raise FabscopeError(f"load: unknown pattern {pattern!r}; choose one of {', '.join(PATTERNS)}", EXIT_USAGE)


def flows_of(pairs: Sequence[tuple[str, str]], per_pair: int) -> list[Flow]:
    return [Flow(i * per_pair + lane, src, dst, lane) for i, (src, dst) in enumerate(pairs) for lane in range(per_pair)]


def check_request(pattern: str, hosts: Sequence[str], flows: int, receiver: str | None, sender: str | None,
                  victim: Sequence[str] | None, limits: Limits | None = None) -> None:
    """Every refusal names what was asked, what there is, and the fix (exit 2)."""
    limits = limits or Limits()
    if len(set(hosts)) != len(hosts):
        dup = sorted({h for h in hosts if list(hosts).count(h) > 1})
        raise FabscopeError(f"--hosts names {', '.join(dup)} more than once; name each host once", EXIT_USAGE)
    need = MIN_HOSTS[pattern]
    if len(hosts) < need:
        raise FabscopeError(f"load {pattern} needs at least {need} hosts in --hosts; got {len(hosts)} "
                            f"({', '.join(hosts) or 'none'}): add hosts", EXIT_USAGE)
    if receiver is not None and pattern != "incast":
        raise FabscopeError(f"--receiver applies to incast only (this is {pattern}): drop it", EXIT_USAGE)
    if sender is not None and pattern != "fanout":
        raise FabscopeError(f"--sender applies to fanout only (this is {pattern}): drop it", EXIT_USAGE)
    for flag, host in (("--receiver", receiver), ("--sender", sender)):
        if host is not None and host not in hosts:
            raise FabscopeError(f"{flag} {host}: not among --hosts ({', '.join(hosts)}); name one of them, or add "
                                f"{host} to --hosts", EXIT_USAGE)
    if flows > limits.max_connections_per_source:
        raise FabscopeError(f"--flows {flows}: a serve accepts at most {limits.max_connections_per_source} "
                            f"connections from one source (serve's --max-connections-per-source); ask for at "
                            f"most {limits.max_connections_per_source}", EXIT_USAGE)
    incoming = max_incoming(pairs_of(pattern, hosts, receiver, sender), flows)
    if incoming > limits.max_connections:
        raise FabscopeError(f"load {pattern} with --flows {flows} over {len(hosts)} hosts puts {incoming} flows "
                            f"into one host, more than a serve's limit of {limits.max_connections} connections "
                            f"(--max-connections); use fewer --flows or fewer hosts", EXIT_USAGE)
    if victim is not None:
        if len(victim) != 2 or victim[0] == victim[1]:
            raise FabscopeError(f"--victim {','.join(victim)}: give two different hosts, H1,H2", EXIT_USAGE)
        inside = [h for h in victim if h in hosts]
        if inside:
            raise FabscopeError(f"--victim {','.join(victim)}: {', '.join(inside)} "
                                f"{'is' if len(inside) == 1 else 'are'} in the loaded set (--hosts "
                                f"{','.join(hosts)}); the victim pair must be two hosts outside the load", EXIT_USAGE)


def max_incoming(pairs: Sequence[tuple[str, str]], per_pair: int) -> int:
    into: dict[str, int] = {}
    for _, dst in pairs:
        into[dst] = into.get(dst, 0) + per_pair
    return max(into.values(), default=0)
