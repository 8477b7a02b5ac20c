# SPDX-License-Identifier: BSD-3-Clause
"""results.collective: the figures derived from a collective's record (busbw factors, the bytes a
host must move, the per-host path verdict, the ceiling) on a real record from the netns testbed,
and the record's validation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fabscope.report.collective import render_text
from fabscope.results import RecordError
from fabscope.results.collective import parse_collective, required_bytes

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
MISROUTED = RECORDS / "collective" / "netns-mpi-alltoall-3hosts-misrouted.jsonl"


def _raw() -> dict[str, object]:
    raw: dict[str, object] = json.loads(MISROUTED.read_text().splitlines()[0])
    return raw


@pytest.mark.parametrize(("pattern", "factor"), [("allreduce", 14 / 8), ("reduce_scatter", 7 / 8),
                                                  ("allgather", 7 / 8), ("alltoall", 7 / 8), ("bcast", 1.0)])
def test_busbw_uses_nccl_tests_factors(pattern: str, factor: float) -> None:
    raw = dict(_raw(), pattern=pattern, ranks=8, rank_hosts=[f"h{i}" for i in range(8)])
    res = parse_collective(raw)
    assert res.bus_factor == pytest.approx(factor)
    assert res.algbw_gbps == pytest.approx(98304 * 8 / res.time_ns.p50)
    assert res.busbw_gbps == pytest.approx(res.algbw_gbps * factor)


def test_barrier_has_no_bandwidth() -> None:
    res = parse_collective(dict(_raw(), pattern="barrier"))
    assert res.algbw_gbps is None and res.busbw_gbps is None and res.bus_factor is None


@pytest.mark.parametrize(("pattern", "here", "root", "need"), [
    ("allreduce", 2, False, (4096, "rx")),          # every element needs the other hosts' inputs
    ("reduce_scatter", 2, False, (2 * 1024, "rx")),  # its ranks' 2 blocks of 4096 / 4
    ("allgather", 1, False, (3 * 1024, "rx")),       # the 3 blocks of the other hosts
    ("alltoall", 2, False, (2 * 2 * 1024, "rx")),    # each of its 2 ranks: a block from each of 2 elsewhere
    ("bcast", 2, True, (4096, "tx")),                # the root's host sends it out
    ("bcast", 1, False, (4096, "rx")),
    ("allreduce", 4, True, (0, "rx")),               # every rank here: no fabric needed
    ("barrier", 1, True, (0, "rx")),
])
def test_bytes_a_host_must_move(pattern: str, here: int, root: bool, need: tuple[int, str]) -> None:
    assert required_bytes(pattern, 4096, 4, here, root) == need


def test_every_host_misrouted_over_mgmt0_is_named() -> None:
    res = parse_collective(_raw())
    assert res.requested_device == "fabric0"  # from UCX_NET_DEVICES as the launcher gave it
    assert res.path_verdict == "misrouted" and res.misrouted
    assert res.misrouted_hosts == ["fs-a", "fs-b", "fs-c"]
    for p in res.host_paths():
        # alltoall, 3 ranks on 3 hosts, 96 KiB: 2 blocks of 32 KiB per iteration, 10 iterations
        assert p.required_bytes == 10 * 2 * 32768 and p.direction == "rx"
        assert p.counted_bytes == 0 and p.carriers["mgmt0"] > p.required_bytes
    text = render_text([res])
    assert "# path 98304 B: misrouted (fabric0 on every host)" in text
    assert "fs-b: fabric0 counted 0 B rx, the algorithm must move at least 655360 B there; rx by device: mgmt0" in text


def test_a_misrouted_collective_says_why_as_a_pair_run_does() -> None:
    """The pair run's route reasons (results/misroute.py) read from the job's transport and the
    launcher's environment: pml ob1 from `pml = ^ucx`, btl tcp on every interface, UCX_NET_DEVICES
    without effect; in the JSON path and the text."""
    res = parse_collective(_raw())
    (why,) = res.to_json()["path"]["why"]
    assert why["reason"] == ("Open MPI ran pml ob1 (pml = ^ucx (Open MPI's value)) with btl tcp+tcp, and "
                             "btl_tcp_if_include is not set: btl tcp sends over every interface that reaches the peer, "
                             "here mgmt0, not fabric0; UCX_NET_DEVICES=fabric0 (environment) had no effect: pml ob1 "
                             "does not use UCX")
    assert why["fix"] == ("`fabscope ... --device fabric0` (it sets btl_tcp_if_include=fabric0; mpirun: `--mca "
                          "btl_tcp_if_include fabric0`)")
    assert f"# why: route: {why['reason']}; fix: {why['fix']}" in render_text([res])
    # Told to use fabric0 (btl_tcp_if_include), the same bytes over mgmt0 name no unset include.
    raw = _raw()
    raw["transport"]["mca"]["btl_tcp_if_include"] = "fabric0"  # type: ignore[index]
    assert parse_collective(raw).route_reasons() == []
    assert "# why: route: the library's report in the record names no setting" in render_text([parse_collective(raw)])


def test_no_device_no_ceiling_said_per_host() -> None:
    res = parse_collective(_raw())
    ceiling, basis = res.ceiling()
    assert ceiling is None and res.fraction is None
    assert basis.count("no --device") == 3 and "fs-c:" in basis


def test_the_slowest_link_is_the_ceiling() -> None:
    raw = _raw()
    rates = {0: 100.0, 1: 25.0, 2: 100.0}
    for entry in raw["host_counters"]:  # type: ignore[attr-defined]
        entry["link"] = {"device": "fabric0", "rate_gbps": rates[entry["rank"]], "rate_source": "test"}
    res = parse_collective(raw)
    ceiling, basis = res.ceiling()
    assert ceiling == 25.0 and "fabric0 on fs-b" in basis
    assert res.fraction == pytest.approx(res.busbw_gbps / 25.0)  # type: ignore[operator]


@pytest.mark.parametrize(("change", "field"), [({"ranks": 1}, "ranks"), ({"pattern": "allsum"}, "pattern"),
                                                ({"rank_hosts": ["fs-a"]}, "rank_hosts"),
                                                ({"time_ns": {"min": 1}}, "time_ns.p50")])
def test_a_broken_record_names_its_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(RecordError, match=f"'{field}'"):
        parse_collective(dict(_raw(), **change))


SLOW_FS_C = RECORDS / "collective" / "netns-mpi-allreduce-4hosts-slow-fs-c.jsonl"
CLEAN_4 = RECORDS / "collective" / "netns-mpi-allreduce-4hosts-clean.jsonl"


def _record(path: Path) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(path.read_text().splitlines()[0])
    return raw


def test_the_slowed_host_is_named_not_the_last_rank_after_it() -> None:
    """fs-c's link shaped to a tenth: rank 3 on fs-d, after fs-c in the ring, was last every time;
    the probe names fs-c (slow both ways), and only fs-c (fs-b and fs-d are slow one way)."""
    res = parse_collective(_record(SLOW_FS_C))
    assert res.last_host == "fs-d" and res.last_rank_times == res.iterations
    held, why = res.held_back()
    assert held == ["fs-c"], why
    assert why.startswith("fs-c received the 1048576 B probe in 334.6 ms or more both ways, 8.4x the other hosts' "
                          "median 40.0 ms"), why
    assert "the rank last most often: 3 on fs-d (8/8)" in why
    assert res.figures()["held_back_by"] == ["fs-c"]
    assert "# held back 1048576 B by fs-c: fs-c received" in render_text([res])


def test_the_clean_run_names_nobody() -> None:
    res = parse_collective(_record(CLEAN_4))
    held, why = res.held_back()
    assert held == [] and why.startswith("no host stands out: the slowest both ways, fs-a, 48.0 ms"), why
    assert res.figures()["held_back_by"] == [] and "held back" not in render_text([res])


def test_two_hosts_or_one_name_nobody_and_say_why() -> None:
    raw = _record(SLOW_FS_C)
    two = dict(raw, ranks=2, rank_hosts=["fs-b", "fs-c"],
               host_probe=dict(raw["host_probe"], hosts=raw["host_probe"]["hosts"][1:3]))
    assert parse_collective(two).held_back() == ([], "two hosts: a slow host cannot be told from a slow link "
                                                     "between them")
    one = dict(raw, rank_hosts=["fs-a"] * 4)
    assert parse_collective(one).held_back() == ([], "every rank on one host")
    none = {k: v for k, v in raw.items() if k != "host_probe"}
    assert parse_collective(none).held_back() == ([], "no host probe in the record")
