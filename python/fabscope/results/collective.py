# SPDX-License-Identifier: BSD-3-Clause
"""``fabscope.collective/1``: one size of a collective (allreduce, reduce_scatter, allgather,
alltoall, bcast, barrier) across the ranks of an MPI job, as the MPI engine prints it, typed.

The engine times; this module derives the figures once: the time of one collective is the slowest
rank's (the engine reduced every iteration across ranks); algbw = size / time; busbw = algbw x
nccl-tests' factor for the operation (its doc/PERFORMANCE.md), so that the figure compares with a
link's rate whatever the operation and the number of ranks."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .deltas import counter_deltas
from .errors import RecordError
from .misroute import collective_route_reasons

COLLECTIVE_SCHEMA = "fabscope.collective/1"

# busbw = algbw x factor(n): what each rank's link must carry for the operation, per byte of the
# size (nccl-tests: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; bcast 1).
BUS_FACTORS: Mapping[str, Callable[[int], float]] = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "bcast": lambda n: 1.0,
}
COLLECTIVE_PATTERNS = (*BUS_FACTORS, "barrier")

# A host held the collective back when its slower-of-best receive in the engine's host probe
# (`host_probe`: 1 MiB from each ring neighbour, both ways) took at least this many times the other
# hosts' median: a slow link shows as a large factor (10x shaped on the netns testbed gave 7x),
# a clean testbed on this shared machine stays under 1.5x.
HELD_BACK_FACTOR = 3.0


def is_collective(pattern: str) -> bool:
    return pattern in COLLECTIVE_PATTERNS


@dataclass(frozen=True)
class Spread:
    """Order statistics over the iterations, nanoseconds."""

    min: float
    p50: float
    mean: float
    p99: float
    max: float


def required_bytes(pattern: str, size: int, ranks: int, ranks_here: int, has_root: bool) -> tuple[int, str]:
    """The bytes a host must receive (bcast's root host: send) per collective, whatever the
    algorithm, when `ranks_here` of the job's `ranks` run on it: the data its ranks' results need
    from the other hosts (every element of an allreduce result depends on every host's input, so at
    least one element from outside; reduce_scatter: its ranks' blocks; allgather: the other
    hosts' blocks; alltoall: each of its ranks' blocks from each rank elsewhere). 0 when no
    fabric traffic is needed (every rank here, or barrier)."""
    others = ranks - ranks_here
    if others <= 0 or pattern == "barrier":
        return 0, "rx"
    block = size // ranks
    if pattern == "allreduce":
        return size, "rx"
    if pattern == "reduce_scatter":
        return ranks_here * block, "rx"
    if pattern == "allgather":
        return others * block, "rx"
    if pattern == "alltoall":
        return ranks_here * others * block, "rx"
    return size, "tx" if has_root else "rx"  # bcast from rank 0


@dataclass(frozen=True)
class HostPath:
    """One host's share of the path verdict: what the requested device counted in the measured
    phase against what the algorithm must move there."""

    host: str
    ranks: tuple[int, ...]
    device: str
    direction: str  # "rx" or "tx"
    required_bytes: int
    counted_bytes: int | None  # None: the device was not among the host's counters
    carriers: dict[str, int]  # every device that moved bytes in `direction`, with its bytes

    @property
    def verified(self) -> bool:
        return self.counted_bytes is not None and self.counted_bytes >= self.required_bytes

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "ranks": list(self.ranks), "device": self.device, "direction": self.direction,
                "required_bytes": self.required_bytes, "counted_bytes": self.counted_bytes,
                "verdict": "verified" if self.verified else "misrouted", "carriers": self.carriers}


@dataclass(frozen=True)
class CollectiveResult:
    pattern: str
    ranks: int
    size: int  # bytes: the whole result of allreduce/bcast, the send buffer of reduce_scatter/alltoall,
    #            the receive buffer of allgather (nccl-tests' convention)
    datatype: str | None
    reduce_op: str | None
    in_place: bool
    iterations: int
    time_ns: Spread  # one collective: the slowest rank's time of each iteration
    skew_ns: Spread  # slowest minus fastest rank of each iteration
    last_rank: int  # the rank that was slowest most often
    last_rank_times: int
    rank_hosts: tuple[str, ...]
    library: str
    verified: bool
    raw: Mapping[str, Any]

    @property
    def bus_factor(self) -> float | None:
        factor = BUS_FACTORS.get(self.pattern)
        return factor(self.ranks) if factor else None

    @property
    def algbw_gbps(self) -> float | None:
        """Bytes of the size per second of the median collective, in Gbit/s; None for barrier."""
        if self.pattern == "barrier" or self.time_ns.p50 <= 0:
            return None
        return self.size * 8 / self.time_ns.p50

    @property
    def busbw_gbps(self) -> float | None:
        alg, factor = self.algbw_gbps, self.bus_factor
        return None if alg is None or factor is None else alg * factor

    @property
    def last_host(self) -> str | None:
        return self.rank_hosts[self.last_rank] if 0 <= self.last_rank < len(self.rank_hosts) else None

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.rank_hosts))

    @property
    def requested_device(self) -> str | None:
        """--device, else the first of UCX_NET_DEVICES as the launcher gave it to the ranks (the
        request a user makes with the environment), without a ":PORT"."""
        device = self.raw.get("requested_device")
        if not device:
            transport = self.raw.get("transport")
            launcher = transport.get("launcher") if isinstance(transport, dict) else None
            env = launcher.get("env") if isinstance(launcher, dict) else None
            device = str(env.get("UCX_NET_DEVICES", "")).split(",")[0] if isinstance(env, dict) else None
        return str(device).split(":", 1)[0] if device and device != "all" else None

    def host_paths(self) -> list[HostPath]:
        """Each host's path (the hosts whose first rank read the counters), judged against the bytes
        the algorithm must move there during the measured iterations; [] without --device."""
        device = self.requested_device
        entries = self.raw.get("host_counters")
        if not device or not isinstance(entries, list):
            return []
        out: list[HostPath] = []
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("counters"), dict):
                continue
            host = self.rank_hosts[int(entry.get("rank", 0))]
            ranks = tuple(r for r, h in enumerate(self.rank_hosts) if h == host)
            need, direction = required_bytes(self.pattern, self.size, self.ranks, len(ranks), 0 in ranks)
            deltas = counter_deltas(entry["counters"])
            carriers = {name: moved for name, d in deltas.items()
                        if (moved := (d.rx_bytes if direction == "rx" else d.tx_bytes))}
            mine = deltas.get(device)
            counted = (mine.rx_bytes if direction == "rx" else mine.tx_bytes) if mine else None
            out.append(HostPath(host, ranks, device, direction, need * self.iterations, counted, carriers))
        return out

    def rank_cpus(self) -> list[tuple[int, str, int | None, str]]:
        """Where each rank ran (the engine's rank_placement, --cpu as a pair's engine is placed):
        (rank, host, CPU or None when not pinned, how it was chosen)."""
        out = []
        for e in self.raw.get("rank_placement") or []:
            if isinstance(e, dict):
                cpu = e.get("cpu")
                out.append((int(e.get("rank", -1)), str(e.get("host", "")), int(cpu) if isinstance(cpu, (int, float))
                            else None, str(e.get("how", ""))))
        return out

    @property
    def cpu_asked(self) -> str | None:
        """--cpu as the ranks were given it (auto unless the user said), or None without placement."""
        entries = self.raw.get("rank_placement")
        first = entries[0] if isinstance(entries, list) and entries else None
        return str(first.get("asked")) if isinstance(first, dict) else None

    @property
    def oversubscribed(self) -> list[str]:
        """The engine's statements of ranks sharing a machine's CPUs ([] when each has its own)."""
        said = self.raw.get("oversubscribed")
        return [str(x) for x in said] if isinstance(said, list) else []

    def held_back(self) -> tuple[list[str], str]:
        """The hosts that held the collective back, with what that rests on: from the engine's host
        probe, each host's receive from its ring neighbours both ways (a host whose link is slow
        receives slowly from both; its neighbours only from it); the rank that was last most often
        is said beside it, not used: in a ring or pipeline it is the one *after* the slow host.
        [] when nobody stands out, or it cannot be told (one host; two hosts: a slow host and a
        slow link between them look the same)."""
        if len(self.hosts) < 2:
            return [], "every rank on one host"
        probe = self.raw.get("host_probe")
        entries = probe.get("hosts") if isinstance(probe, dict) else None
        if not isinstance(probe, dict) or not isinstance(entries, list) or not entries:
            return [], "no host probe in the record"
        both_ways: dict[str, float] = {}
        for e in entries:
            if isinstance(e, dict) and 0 <= int(e.get("rank", -1)) < len(self.rank_hosts):
                both_ways[self.rank_hosts[int(e["rank"])]] = min(float(e["from_left_ns"]), float(e["from_right_ns"]))
        if len(both_ways) < 3:
            return [], "two hosts: a slow host cannot be told from a slow link between them"
        last = f"the rank last most often: {self.last_rank} on {self.last_host} ({self.last_rank_times}/{self.iterations})"
        named, said = [], []
        for host, t in both_ways.items():
            others = statistics.median(v for h, v in both_ways.items() if h != host)
            if others > 0 and t >= HELD_BACK_FACTOR * others:
                named.append(host)
                said.append(f"{host} received the {probe.get('bytes')} B probe in {_ms(t)} or more both ways, "
                            f"{t / others:.1f}x the other hosts' median {_ms(others)}")
        if not named:
            slowest = max(both_ways, key=lambda h: both_ways[h])
            others = statistics.median(v for h, v in both_ways.items() if h != slowest)
            return [], (f"no host stands out: the slowest both ways, {slowest}, {_ms(both_ways[slowest])} against the "
                        f"others' median {_ms(others)} (named from {HELD_BACK_FACTOR:g}x); {last}")
        return named, f"{'; '.join(said)}; {last}"

    def ceiling(self) -> tuple[float | None, str]:
        """The expected ceiling of busbw, Gbit/s: the slowest link in the communicator (the
        requested device's rate on every host that read it), with what it rests on; None with why
        when a host's rate is unknown (a virtual netdev, a driver without a speed) or no device was
        asked. All ranks on one host need no link: None."""
        entries = [e for e in self.raw.get("host_counters") or [] if isinstance(e, dict)]
        links = [(self.rank_hosts[int(e.get("rank", 0))], e.get("link")) for e in entries]
        if len(self.hosts) < 2:
            return None, "every rank on one host: no link between them"
        if not links:
            return None, "no host read its link"
        unknown = [f"{host}: {link.get('rate_source') if isinstance(link, dict) else 'not read'}"
                   for host, link in links
                   if not isinstance(link, dict) or not isinstance(link.get("rate_gbps"), (int, float))]
        if unknown:
            return None, "; ".join(unknown)
        host, slowest = min(((h, lk) for h, lk in links if isinstance(lk, dict)), key=lambda x: float(x[1]["rate_gbps"]))
        return float(slowest["rate_gbps"]), f"the slowest link: {slowest.get('device')} on {host} ({slowest.get('rate_source')})"

    @property
    def fraction(self) -> float | None:
        """busbw over the expected ceiling, or None when either is unknown."""
        ceiling, _ = self.ceiling()
        bus = self.busbw_gbps
        return None if ceiling is None or bus is None or ceiling <= 0 else bus / ceiling

    @property
    def path_verdict(self) -> str:
        """verified (every host's device carried its share), misrouted (a host's did not: named in
        misrouted_hosts), or unverified (no --device asked, or no host needs the fabric)."""
        paths = [p for p in self.host_paths() if p.required_bytes > 0]
        if not paths:
            return "unverified"
        return "verified" if all(p.verified for p in paths) else "misrouted"

    @property
    def misrouted_hosts(self) -> list[str]:
        return [p.host for p in self.host_paths() if p.required_bytes > 0 and not p.verified]

    @property
    def misrouted(self) -> bool:
        return self.path_verdict == "misrouted"

    def route_reasons(self) -> list[tuple[str, str]]:
        """(reason, fix) for each setting the job's transport shows chose the device that carried a
        misrouted host's bytes (results/misroute.py, the pair run's reasons); [] when not misrouted."""
        wrong = [p for p in self.host_paths() if p.required_bytes > 0 and not p.verified]
        transport = self.raw.get("transport")
        if not wrong or not isinstance(transport, dict):
            return []
        carried: dict[str, int] = {}
        for p in wrong:
            for name, moved in p.carriers.items():
                if name != p.device:
                    carried[name] = carried.get(name, 0) + moved
        carrier = max(carried, key=lambda n: carried[n]) if carried else ""
        asked = str(self.raw.get("requested_device") or "") or wrong[0].device
        rdma = any(wrong[0].device in (e.get("counters") or {}).get("rdma", {})
                   for e in self.raw.get("host_counters") or [] if isinstance(e, dict))
        return collective_route_reasons(transport, asked, rdma or ":" in asked, carrier)

    def figures(self) -> dict[str, Any]:
        """What this module derives, added to the record as ``figures`` (JSON output)."""
        ceiling, basis = self.ceiling()
        held, held_basis = self.held_back()
        return {"algbw_gbps": self.algbw_gbps, "busbw_gbps": self.busbw_gbps, "bus_factor": self.bus_factor,
                "last_rank_host": self.last_host, "expected_gbps": ceiling, "expected_basis": basis,
                "fraction": self.fraction, "held_back_by": held, "held_back_basis": held_basis}

    def path(self) -> dict[str, Any]:
        """The path verdict, per host, and for a misrouted one why (``why``: each reason with its fix,
        as a pair run's ``route`` cause words them)."""
        return {"verdict": self.path_verdict, "requested": self.requested_device,
                "misrouted_hosts": self.misrouted_hosts, "hosts": [p.as_dict() for p in self.host_paths()],
                "why": [{"reason": reason, "fix": fix} for reason, fix in self.route_reasons()]}

    def to_json(self) -> dict[str, Any]:
        return {**self.raw, "figures": self.figures(), "path": self.path()}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f} ms"


def _number(obj: Mapping[str, Any], key: str, where: str = "") -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(f"{where}{key}", f"must be a finite number, not {value!r}", "collective record")
    return float(value)


def _spread(obj: Mapping[str, Any], key: str) -> Spread:
    inner = obj.get(key)
    if not isinstance(inner, dict):
        raise RecordError(key, "must be an object", "collective record")
    return Spread(*(_number(inner, k, f"{key}.") for k in ("min", "p50", "mean", "p99", "max")))


def parse_collective(obj: Mapping[str, Any]) -> CollectiveResult:
    """A ``fabscope.collective/1`` record, checked: RecordError naming the field otherwise."""
    if obj.get("schema") != COLLECTIVE_SCHEMA:
        raise RecordError("schema", f"must be {COLLECTIVE_SCHEMA}, not {obj.get('schema')!r}", "collective record")
    pattern = obj.get("pattern")
    if pattern not in COLLECTIVE_PATTERNS:
        raise RecordError("pattern", f"must be one of {', '.join(COLLECTIVE_PATTERNS)}, not {pattern!r}",
                          "collective record")
    ranks = int(_number(obj, "ranks"))
    if ranks < 2:
        raise RecordError("ranks", f"must be at least 2, not {ranks}", "collective record")
    last = obj.get("last_rank")
    hosts = obj.get("rank_hosts")
    if not isinstance(last, dict) or not isinstance(hosts, list) or len(hosts) != ranks:
        raise RecordError("rank_hosts", "must list one host per rank (and last_rank be an object)",
                          "collective record")
    verified = obj.get("verified")
    transport = obj.get("transport")
    return CollectiveResult(
        pattern=str(pattern), ranks=ranks, size=int(_number(obj, "size")),
        datatype=obj.get("datatype") if isinstance(obj.get("datatype"), str) else None,
        reduce_op=obj.get("reduce_op") if isinstance(obj.get("reduce_op"), str) else None,
        in_place=obj.get("in_place") is True, iterations=int(_number(obj, "iterations")),
        time_ns=_spread(obj, "time_ns"), skew_ns=_spread(obj, "skew_ns"),
        last_rank=int(_number(last, "rank", "last_rank.")), last_rank_times=int(_number(last, "times", "last_rank.")),
        rank_hosts=tuple(str(h) for h in hosts),
        library=str(transport.get("library", "")) if isinstance(transport, dict) else "",
        verified=isinstance(verified, dict) and verified.get("ok") is True,
        raw=dict(obj),
    )
