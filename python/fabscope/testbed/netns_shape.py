# SPDX-License-Identifier: BSD-3-Clause
"""Shaping the netns testbed's fabric with tc: known rates to measure against, and faults on purpose.

Three kinds, all on the fabric network only (mgmt0 is never shaped):

- every host (``up --shape RATE``): tbf on each host's ``fabric0`` (its egress), so every flow
  between two hosts runs at RATE, as the two-host testbed always did;
- one host (``up --shape-host fs-c=250mbit``): tbf on that host's ``fabric0`` AND on its port of
  the fabric switch (the switch's egress towards it), so the host is slow both ways: a "bad node";
- one pair (``shape-pair fs-a fs-b 100mbit``): an htb class for one destination on one host (and
  by default the same on the other host towards the first): only that pair is slow, a "bad link".
  The host's other traffic goes through htb's default class at the host's own rate (or
  ``UNSHAPED_HTB_RATE`` when it had none).

Pair shaping is applied on top of what ``up`` made and remembered in the testbed's run directory
(``shapes.json``), so a later ``shape-pair`` rebuilds the host's htb with every pair it has; ``up``
is declarative and clears them all.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .netns_cmd import TestbedError, host_index, json_out, run

FABRIC_DEV = "fabric0"
# tbf parameters: burst 256kb is enough for 1gbit at the kernel's timer granularity; latency 50ms
# bounds the queue so TCP does not bufferbloat.
TBF_BURST = "256kb"
TBF_LATENCY = "50ms"
# htb's default class on a host that has a shaped pair but no rate of its own: far above what two
# veths on this machine carry, so the host's other traffic is not limited in practice.
UNSHAPED_HTB_RATE = "100gbit"
_RATE_RE = re.compile(r"^[0-9]+(\.[0-9]+)?([kmgt]i?)?(bit|bps)$", re.IGNORECASE)


def validate_rate(rate: str, flag: str = "--shape") -> str:
    if not _RATE_RE.match(rate):
        raise TestbedError(
            f"{flag} {rate!r} is not a tc rate; use a number with a unit such as "
            "100mbit, 1gbit, 2.5gbit (tc units: bit, kbit, mbit, gbit, or bps for bytes/s)"
        )
    return rate


def _rate_bits(rate: object) -> float | None:
    # `tc -j` reports tbf and htb rates in bytes per second.
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        return float(rate) * 8
    return None


def root_qdisc(ns: str, dev: str = FABRIC_DEV) -> dict[str, Any] | None:
    """The shaping qdisc at the root of ``dev`` in ``ns``: tbf (with its rate) or htb, else None."""
    for q in json_out(["tc", "-n", ns, "-j", "qdisc", "show", "dev", dev], f"read qdiscs of {dev} in {ns}"):
        if not q.get("root"):
            continue
        raw = q.get("options")
        opts: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if q.get("kind") == "tbf":
            return {"kind": "tbf", "rate_bit_per_s": _rate_bits(opts.get("rate")), "burst": opts.get("burst")}
        if q.get("kind") == "htb":
            return {"kind": "htb", "rate_bit_per_s": _htb_default_rate(ns, dev)}
    return None


_TC_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_HTB_DEFAULT_RE = re.compile(r"^class htb 1:1 .*?\brate ([0-9.]+)([kmgt]?)bit\b", re.IGNORECASE | re.MULTILINE)


def _htb_default_rate(ns: str, dev: str) -> float | None:
    # Text, not -j: this iproute2 prints htb classes as text even when asked for JSON.
    out = run(["tc", "-n", ns, "class", "show", "dev", dev], what=f"read classes of {dev} in {ns}").stdout
    m = _HTB_DEFAULT_RE.search(out)
    return float(m.group(1)) * _TC_UNITS[m.group(2).lower()] if m else None


def set_tbf(ns: str, dev: str, rate: str | None) -> None:
    """tbf at ``rate`` on ``dev`` in ``ns``, or no shaping at all with None (idempotent)."""
    if rate is None:
        if root_qdisc(ns, dev) is not None:
            run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], what=f"remove shaping from {dev} in {ns}")
        return
    # `replace` makes `up --shape` idempotent and lets a second `up` change the rate in place.
    run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", TBF_BURST,
         "latency", TBF_LATENCY], what=f"shape {dev} in {ns} to {rate} with tbf")


def _shapes_file(run_dir: Path) -> Path:
    return run_dir / "shapes.json"


def read_pairs(run_dir: Path) -> dict[str, dict[str, str]]:
    """{host: {destination host: rate}} of the pair shaping in force."""
    try:
        data = json.loads(_shapes_file(run_dir).read_text())
    except (OSError, ValueError):
        return {}
    pairs = data.get("pairs") if isinstance(data, dict) else None
    if not isinstance(pairs, dict):
        return {}
    return {str(h): {str(d): str(r) for d, r in v.items()} for h, v in pairs.items() if isinstance(v, dict)}


def clear_pairs(run_dir: Path) -> None:
    _shapes_file(run_dir).unlink(missing_ok=True)


def _write_pairs(run_dir: Path, pairs: dict[str, dict[str, str]]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    _shapes_file(run_dir).write_text(json.dumps({"pairs": pairs}, indent=1, sort_keys=True) + "\n")


def apply_pairs(host: str, host_rate: str | None, dests: dict[str, str], fabric_ip: dict[str, str]) -> None:
    """Rebuild ``host``'s fabric0 root: htb with a default class at ``host_rate`` and one class per
    destination in ``dests`` (a u32 match on that host's fabric address); plain tbf/none when
    ``dests`` is empty."""
    if not dests:
        set_tbf(host, FABRIC_DEV, host_rate)
        return
    tc = ["tc", "-n", host]
    if root_qdisc(host) is not None:
        run([*tc, "qdisc", "del", "dev", FABRIC_DEV, "root"], what=f"remove shaping from {FABRIC_DEV} in {host}")
    run([*tc, "qdisc", "add", "dev", FABRIC_DEV, "root", "handle", "1:", "htb", "default", "1"],
        what=f"put htb on {FABRIC_DEV} in {host}")
    # cburst as burst: htb's default ceil burst (one MTU) held a 50mbit class to 45 Mbit/s of TCP.
    run([*tc, "class", "add", "dev", FABRIC_DEV, "parent", "1:", "classid", "1:1", "htb", "rate",
         host_rate or UNSHAPED_HTB_RATE, "burst", TBF_BURST, "cburst", TBF_BURST], what=f"htb default class in {host}")
    for dest, rate in sorted(dests.items()):
        classid = f"1:{10 + host_index(dest)}"
        run([*tc, "class", "add", "dev", FABRIC_DEV, "parent", "1:", "classid", classid, "htb", "rate", rate,
             "burst", TBF_BURST, "cburst", TBF_BURST], what=f"htb class for {host} -> {dest} at {rate}")
        run([*tc, "filter", "add", "dev", FABRIC_DEV, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", f"{fabric_ip[dest]}/32", "flowid", classid],
            what=f"steer {host} -> {dest} ({fabric_ip[dest]}) into its htb class")


def shape_pair(
    run_dir: Path, a: str, b: str, rate: str | None, host_rates: dict[str, str | None],
    fabric_ip: dict[str, str], both_ways: bool = True,
) -> dict[str, dict[str, str]]:
    """Limit a -> b (and b -> a unless ``both_ways`` is False) on the fabric to ``rate``; None
    removes that pair's shaping. ``host_rates`` is each host's own rate (None: unshaped).
    Returns every pair shaping now in force."""
    if a == b:
        raise TestbedError(f"shape-pair {a} {b}: a pair needs two different hosts")
    for h in (a, b):
        if h not in fabric_ip:
            raise TestbedError(
                f"shape-pair: {h} is not up; the testbed has {', '.join(sorted(fabric_ip)) or 'no hosts'}"
            )
    if rate is not None:
        validate_rate(rate, "shape-pair")
    pairs = read_pairs(run_dir)
    for src, dst in ((a, b), (b, a)) if both_ways else ((a, b),):
        dests = pairs.setdefault(src, {})
        if rate is None:
            dests.pop(dst, None)
        else:
            dests[dst] = rate
        apply_pairs(src, host_rates.get(src), dests, fabric_ip)
        if not dests:
            pairs.pop(src)
    _write_pairs(run_dir, pairs)
    return pairs
