# SPDX-License-Identifier: BSD-3-Clause
"""Collectives across hosts of the netns testbed under mpirun (Open MPI through the testbed's rsh
agent, MPICH hydra) and under srun (the Slurm testbed with one slurmd per host, started once for the
module on the same hosts): ranks placed --ppn per host in host order, every element checked, and the
path proven per host: each host's requested device counted at least the bytes the collective must
move there, else the run is misrouted (exit 5) naming the hosts and where their bytes went."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import netns_helpers as nh
import pytest
from mpi_marks import needs_mpich, needs_openmpi

from conftest import fabscope, json_lines
from fabscope.testbed import netns
from fabscope.testbed import slurm as slurmbed

pytestmark = [pytest.mark.netns, pytest.mark.mpi, nh.needs_root]

HOSTS = 3
QUICK = ("--iters", "10", "--warmup", "2", "--timeout", "10")


@pytest.fixture(scope="module")
def testbed() -> Iterator[dict[str, str]]:
    with netns.session():
        netns.up(None, HOSTS)
        try:
            yield netns.launcher_env()
        finally:
            netns.down()


@pytest.fixture(scope="module")
def slurm_env(testbed: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The Slurm testbed on the module's netns hosts (slow to start: once for every srun test)."""
    missing = slurmbed.missing_tools()
    if missing:
        pytest.skip(f"Slurm is not installed here ({', '.join(missing)} missing); `make setup` installs it")
    with slurmbed.running(tmp_path_factory.mktemp("slurm-coll"), 60, netns.host_names(HOSTS)) as c:
        yield {**testbed, **c.env()}


def collective(env: dict[str, str], *args: str) -> tuple[int, list[dict[str, Any]], str]:
    out = fabscope("run", "--backend", "mpi", *args, *QUICK, "--format", "json", env=env, timeout=240)
    return out.returncode, json_lines(out.stdout), out.stderr


@needs_openmpi
@pytest.mark.parametrize("pattern", ["allreduce", "alltoall"])
def test_openmpi_collective_over_fabric0_verified_on_every_host(testbed: dict[str, str], pattern: str) -> None:
    rc, recs, err = collective(testbed, "--hosts", "fs-a,fs-b,fs-c", "--pattern", pattern, "--sizes", "96K",
                               "--device", "fabric0")
    assert rc == 0, err
    (rec,) = recs
    assert rec["rank_hosts"] == ["fs-a", "fs-b", "fs-c"] and rec["verified"]["ok"] is True
    path = rec["path"]
    assert path["verdict"] == "verified" and path["requested"] == "fabric0" and path["misrouted_hosts"] == []
    assert path["why"] == []  # a verified path names no route
    assert {h["host"] for h in path["hosts"]} == {"fs-a", "fs-b", "fs-c"}
    for host in path["hosts"]:
        assert host["counted_bytes"] >= host["required_bytes"] > 0, host
    # The testbed's links are veth pairs: no rate to judge against, and the record says so per host.
    figures = rec["figures"]
    assert figures["expected_gbps"] is None and figures["fraction"] is None
    assert all(f"{h}: fabric0 is virtual" in figures["expected_basis"] for h in ("fs-a", "fs-b", "fs-c")), figures


@needs_mpich
def test_mpich_ppn_places_ranks_host_by_host(testbed: dict[str, str]) -> None:
    rc, recs, err = collective(testbed, "--mpi", "mpich", "--hosts", "fs-b,fs-c", "--ppn", "2", "--pattern",
                               "allgather", "--sizes", "64K", "--device", "fabric0")
    assert rc == 0, err
    (rec,) = recs
    assert rec["ranks"] == 4 and rec["rank_hosts"] == ["fs-b", "fs-b", "fs-c", "fs-c"]
    assert rec["verified"]["ok"] is True and rec["path"]["verdict"] == "verified"
    # allgather: each host holds 2 of 4 ranks and must receive the other host's 2 blocks of 16 KiB
    assert all(h["required_bytes"] == 10 * 2 * 16384 for h in rec["path"]["hosts"]), rec["path"]


@needs_openmpi
def test_bytes_over_mgmt0_are_misrouted_naming_each_host(testbed: dict[str, str]) -> None:
    """UCX_NET_DEVICES=fabric0 with Open MPI's default pml ob1, which ignores it: the collective's
    bytes go over mgmt0, every host is named with where its bytes went (exit 5), and why: the pml
    and the setting that chose it, the tcp btl on every interface, with the fix (text and JSON)."""
    env = dict(testbed, UCX_NET_DEVICES="fabric0")
    rc, recs, err = collective(env, "--hosts", "fs-a,fs-b,fs-c", "--pattern", "alltoall", "--sizes", "96K")
    assert rc == 5, err
    (rec,) = recs
    assert rec["path"]["verdict"] == "misrouted" and rec["path"]["requested"] == "fabric0"
    assert rec["path"]["misrouted_hosts"] == ["fs-a", "fs-b", "fs-c"]
    for host in rec["path"]["hosts"]:
        assert host["carriers"].get("mgmt0", 0) > host["counted_bytes"], host
    assert "misrouted" in err and "fs-a, fs-b, fs-c" in err
    # Why, as a pair run's route cause says it (results/misroute.py): the pml Open MPI ran and the setting
    # that chose it, as the record names them, the tcp btl left on every interface, and the fix.
    transport = rec["transport"]
    pml_set = f"pml = {transport['mca']['pml']} ({transport['mca_sources']['pml']})"
    (why,) = rec["path"]["why"]
    assert why["reason"].startswith(f"Open MPI ran pml ob1 ({pml_set}) with btl tcp"), why
    assert "btl_tcp_if_include is not set" in why["reason"] and "here mgmt0, not fabric0" in why["reason"], why
    assert "UCX_NET_DEVICES=fabric0 (environment) had no effect: pml ob1 does not use UCX" in why["reason"], why
    assert "--mca btl_tcp_if_include fabric0" in why["fix"] and "--device fabric0" in why["fix"], why
    text = fabscope("run", "--backend", "mpi", "--hosts", "fs-a,fs-b,fs-c", "--pattern", "alltoall", "--sizes", "96K",
                    *QUICK, env=env, timeout=240)
    assert text.returncode == 5, text.stderr
    assert f"# why: route: Open MPI ran pml ob1 ({pml_set})" in text.stdout and "; fix: `fabscope ... --device " \
        "fabric0`" in text.stdout, text.stdout


@pytest.mark.parametrize(("mpi", "pattern"), [pytest.param("openmpi", "allreduce", marks=needs_openmpi),
                                              pytest.param("mpich", "alltoall", marks=needs_mpich)])
def test_srun_one_slurm_node_per_host_verified_on_every_host(slurm_env: dict[str, str], mpi: str,
                                                             pattern: str) -> None:
    """srun places the ranks on the Slurm nodes (one per netns host, each with one CPU for jobs) in
    host order; each host's fabric0 carried its share, and every element is checked."""
    rc, recs, err = collective(slurm_env, "--launcher", "srun", "--mpi", mpi, "--hosts", "fs-a,fs-b,fs-c",
                               "--pattern", pattern, "--sizes", "96K", "--device", "fabric0")
    assert rc == 0, err
    (rec,) = recs
    assert rec["transport"]["launcher"]["name"] == "srun"
    assert "--nodelist=fs-a,fs-b,fs-c" in rec["transport"]["launcher"]["argv"]
    assert rec["ranks"] == 3 and rec["rank_hosts"] == ["fs-a", "fs-b", "fs-c"]
    assert rec["verified"]["ok"] is True and rec["verified"]["elements_per_rank"] == 96 * 1024 // 4
    path = rec["path"]
    assert path["verdict"] == "verified" and path["misrouted_hosts"] == []
    assert {h["host"] for h in path["hosts"]} == {"fs-a", "fs-b", "fs-c"}
    for host in path["hosts"]:
        assert host["ranks"] == [r for r, h in enumerate(rec["rank_hosts"]) if h == host["host"]]
        assert host["counted_bytes"] >= host["required_bytes"] > 0, host


@needs_openmpi
def test_srun_more_ranks_per_node_than_its_cpus_names_the_allocation(slurm_env: dict[str, str]) -> None:
    """Each netns node has one CPU for jobs: --ppn 2 can never be placed, and the error says what
    was asked of Slurm (not the pair run's "one node with 2 CPUs") and the fix."""
    rc, recs, err = collective(slurm_env, "--launcher", "srun", "--hosts", "fs-a,fs-b,fs-c", "--ppn", "2",
                               "--pattern", "allreduce", "--sizes", "96K")
    assert (rc, recs) == (3, []), err
    assert "srun could not get 3 nodes (fs-a,fs-b,fs-c) with 2 CPUs each within 10 s" in err, err
    assert "lower --ppn" in err and "Traceback" not in err
