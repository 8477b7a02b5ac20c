# SPDX-License-Identifier: BSD-3-Clause
"""MPI between two hosts of the netns testbed, under real launchers: `fabscope run --backend mpi
--hosts H1,H2` with mpirun (Open MPI, MPICH hydra) through `fabscope testbed netns env`, and with
srun on a Slurm whose nodes are the testbed's hosts (one slurmd inside each).

Every record names both hosts and what MPI selected; `--device fabric0` is mapped onto MPI's own
settings and verified by the byte counters of both hosts; bytes routed over mgmt0 are caught
(exit 5) whether the device was asked with --device or with UCX_NET_DEVICES in the environment;
the published "UCX_NET_DEVICES had no effect" case is reproduced and fixed; bad input ends with
exit 2 or 3 naming what was wrong, within --timeout."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import netns_helpers as nh
import pytest
from mpi_marks import needs_mpich, needs_openmpi

from conftest import fabscope, json_lines
from fabscope.testbed import netns
from fabscope.testbed import slurm as slurmbed

pytestmark = [pytest.mark.netns, pytest.mark.mpi, nh.needs_root]

HOSTS = 3
BW = ("run", "--backend", "mpi", "--pattern", "bw", "--sizes", "64K", "--iters", "300", "--timeout", "5")


@pytest.fixture(scope="module")
def testbed() -> Iterator[dict[str, str]]:
    """Three hosts for the module, held against other users; the launcher environment."""
    with netns.session():
        netns.up(None, HOSTS)
        try:
            yield netns.launcher_env()
        finally:
            netns.down()


def run(env: dict[str, str], *args: str, timeout: float = 120) -> tuple[int, list[dict[str, Any]], str]:
    out = fabscope(*args, "--format", "json", env=env, timeout=timeout)
    return out.returncode, json_lines(out.stdout), out.stderr


def one(recs: list[dict[str, Any]]) -> dict[str, Any]:
    results = [r for r in recs if str(r.get("schema", "")).startswith("fabscope.result/")]
    assert len(results) == 1, recs
    return results[0]


def sides(rec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The path verdict's sides by host name."""
    return {side["host"]: side for side in rec["path"]["sides"].values()}


@needs_openmpi
def test_openmpi_mpirun_places_the_ranks_and_verifies_fabric0_on_both_hosts(testbed: dict[str, str]) -> None:
    rc, recs, err = run(testbed, *BW, "--hosts", "fs-a,fs-c", "--device", "fabric0")
    assert rc == 0, err
    rec = one(recs)
    assert (rec["host"]["hostname"], rec["peer_host"]["hostname"]) == ("fs-a", "fs-c")
    launcher = rec["transport"]["launcher"]
    assert launcher["hosts"] == ["fs-a", "fs-c"]
    assert launcher["mca"]["btl_tcp_if_include"] == "fabric0"  # the --device mapping, said
    assert launcher["device_mapping"]["mca"] == {"btl_tcp_if_include": "fabric0"}
    assert launcher["mca"]["plm_rsh_agent"].endswith("rsh-agent")  # OMPI_MCA_* of the environment
    # What MPI selected, on both ranks.
    for side in ("local", "peer"):
        selected = rec["transport"][side]["selected"]
        assert selected["pml"] == "ob1" and "tcp" in selected["btl"]["send"]
    assert rec["transport"]["peer"]["processor"] == "fs-c"
    path = rec["path"]
    assert path["verdict"] == "verified" and path["requested"] == "fabric0"
    assert set(sides(rec)) == {"fs-a", "fs-c"}
    assert all(s["verdict"] == "verified" for s in sides(rec).values())


@needs_mpich
def test_mpich_hydra_places_the_ranks_and_verifies_fabric0(testbed: dict[str, str]) -> None:
    rc, recs, err = run(testbed, *BW, "--mpi", "mpich", "--hosts", "fs-b,fs-a", "--device", "fabric0")
    assert rc == 0, err
    rec = one(recs)
    assert (rec["host"]["hostname"], rec["peer_host"]["hostname"]) == ("fs-b", "fs-a")
    assert rec["transport"]["local"]["selected"]["netmod"] == "ucx"
    assert rec["transport"]["local"]["selected"]["intranode"].startswith("no: the peer is on another node")
    assert rec["transport"]["launcher"]["env"]["UCX_NET_DEVICES"] == "fabric0"
    assert rec["transport"]["launcher"]["mca"] == {}  # Open MPI's parameters mean nothing to MPICH
    assert rec["path"]["verdict"] == "verified"
    assert set(sides(rec)) == {"fs-a", "fs-b"}


@needs_openmpi
def test_seed_case_ucx_net_devices_without_effect_then_fixed(testbed: dict[str, str]) -> None:
    """Open MPI defaults + UCX_NET_DEVICES=fabric0: pml ob1 ignores it and its tcp btl spreads the
    bytes over both networks. fabscope says which setting had no effect, where the bytes went on
    both hosts, and exits 5; with pml ucx (pml_ucx_tls/devices any) the setting takes effect."""
    env = dict(testbed, UCX_NET_DEVICES="fabric0")
    rc, recs, err = run(env, *BW, "--hosts", "fs-a,fs-b")
    rec = one(recs)
    assert rec["transport"]["launcher"]["env"]["UCX_NET_DEVICES"] == "fabric0"
    assert any("UCX_NET_DEVICES=fabric0 had no effect" in s and "ob1" in s
               for s in rec["transport"]["local"]["settings_without_effect"])
    assert rc == 5, err
    assert rec["path"]["verdict"] == "misrouted"
    for host, side in sides(rec).items():
        carriers = {c["device"] for c in side["carriers"]}
        assert "mgmt0" in carriers, (host, side["carriers"])
    text = fabscope(*BW, "--hosts", "fs-a,fs-b", env=env, timeout=120)
    assert text.returncode == 5
    assert "had no effect" in text.stdout and "mgmt0 (fs-a)" in text.stdout and "mgmt0 (fs-b)" in text.stdout

    rc, recs, err = run(env, *BW, "--hosts", "fs-a,fs-b", "--mca", "pml=ucx", "--mca", "pml_ucx_tls=any",
                        "--mca", "pml_ucx_devices=any")
    assert rc == 0, err
    rec = one(recs)
    assert rec["transport"]["local"]["selected"]["pml"] == "ucx"
    assert "fabric0" in rec["transport"]["local"]["ucx"]["devices"]
    assert rec["path"]["verdict"] == "verified"
    assert set(sides(rec)) == {"fs-a", "fs-b"}


LAT = ("run", "--backend", "mpi", "--pattern", "lat", "--sizes", "8", "--iters", "2000", "--timeout", "5")
SHARED_CPU = "share one CPU"
# What forces both ranks onto core 0 on purpose: each host's launcher daemon binds its first rank
# to the first core of the (shared) machine, as every launcher does by default on real nodes.
BIND_TO_CORE = {"openmpi": ("--mca", "hwloc_base_binding_policy=core"), "mpich": ("--env", "HYDRA_BINDING=core")}


@pytest.mark.parametrize("mpi", [pytest.param("openmpi", marks=needs_openmpi),
                                 pytest.param("mpich", marks=needs_mpich)])
def test_latency_between_two_hosts_is_the_network_not_a_shared_cpu(testbed: dict[str, str], mpi: str) -> None:
    """Both hosts' first rank bound to core 0 of this one machine made every half round trip wait
    for the other rank's time slice: 3.25 ms p50 (a scheduler tick), against ~15 us unbound. The
    testbed's environment binds nothing; binding on purpose is said in the record."""
    rc, recs, err = run(testbed, *LAT, "--mpi", mpi, "--hosts", "fs-a,fs-b")
    assert rc == 0, err
    rec = one(recs)
    assert rec["host"]["boot_id"] == rec["peer_host"]["boot_id"]  # one machine, two "hosts"
    assert rec["host"]["cpus_allowed"] != "0" or rec["peer_host"]["cpus_allowed"] != "0"
    assert rec["latency_us"]["p50"] < 500, rec["latency_us"]  # a gross-trap check, not a performance goal
    assert not [w for w in rec["warnings"] if SHARED_CPU in w]

    rc, recs, err = run(testbed, *LAT, "--iters", "200", "--mpi", mpi, "--hosts", "fs-a,fs-b", *BIND_TO_CORE[mpi])
    assert rc == 0, err
    rec = one(recs)
    assert (rec["host"]["cpus_allowed"], rec["peer_host"]["cpus_allowed"]) == ("0", "0")
    (warning,) = [w for w in rec["warnings"] if SHARED_CPU in w]
    assert "CPU 0" in warning and "fs-a and fs-b" in warning and "not the network" in warning
    text = fabscope(*LAT, "--iters", "200", "--mpi", mpi, "--hosts", "fs-a,fs-b", *BIND_TO_CORE[mpi],
                    env=testbed, timeout=120)
    assert text.returncode == 0 and SHARED_CPU in text.stdout


@pytest.fixture
def fabric_shaped(testbed: dict[str, str]) -> Iterator[float]:
    """Every host's fabric0 shaped to 1 Gbit/s for one test (the module's testbed is unshaped)."""
    netns.up("1gbit", HOSTS)
    try:
        yield 1e9
    finally:
        netns.up(None, HOSTS)


@pytest.mark.parametrize("mpi", [pytest.param("openmpi", marks=needs_openmpi),
                                 pytest.param("mpich", marks=needs_mpich)])
def test_bandwidth_over_a_shaped_fabric_never_exceeds_the_shaped_rate(
    testbed: dict[str, str], fabric_shaped: float, mpi: str
) -> None:
    """100 x 1 MiB (the quick suite's row) through a 1 Gbit/s fabric0: timed from the first message
    to complete, Open MPI reported 2.13 Gb/s and MPICH 1.34 (both pipeline the messages in flight,
    so the first completes after most bytes arrived). A loaded machine only lowers the rate.
    The deadline is 20 s, not 5: in one clean-clone CI run of about ten, Open MPI's stream over
    the shaped veth moved nothing for 5 s and the receiving rank ended the run (not reproduced in
    15 runs since, loaded or not; the engine now says whether the peer was alive then). This test
    is about the rate's upper bound, not the stall."""
    rc, recs, err = run(testbed, "run", "--backend", "mpi", "--pattern", "bw", "--sizes", "1M", "--iters", "100",
                        "--warmup", "50", "--timeout", "20", "--mpi", mpi, "--hosts", "fs-a,fs-b", "--device", "fabric0")
    assert rc == 0, err
    rec = one(recs)
    assert rec["path"]["verdict"] == "verified"
    assert rec["bandwidth_measured_at"].startswith("receiver")
    assert rec["bandwidth_gbps"] * 1e9 <= 1.05 * fabric_shaped, rec["bandwidth_gbps"]


@pytest.fixture
def fabric_route_over_mgmt(testbed: dict[str, str]) -> Iterator[None]:
    """fs-a reaches fs-c's fabric address through mgmt0: the kernel, not MPI, decides the path."""
    route = ["ip", "route", "add", f"{netns.fabric_ip('fs-c')}/32", "dev", "mgmt0"]
    subprocess.run(netns.ns_exec_argv("fs-a", route), check=True, timeout=10)
    try:
        yield
    finally:
        subprocess.run(netns.ns_exec_argv("fs-a", ["ip", "route", "del", f"{netns.fabric_ip('fs-c')}/32"]),
                       check=False, timeout=10)


@needs_openmpi
def test_misroute_over_mgmt_is_caught_with_device_and_with_ucx_net_devices(
    testbed: dict[str, str], fabric_route_over_mgmt: None
) -> None:
    rc, recs, err = run(testbed, *BW, "--hosts", "fs-a,fs-c", "--device", "fabric0")
    assert rc == 5, err
    rec = one(recs)
    assert rec["path"]["verdict"] == "misrouted" and "mgmt0" in rec["path"]["summary"]
    # The same bytes, the device asked only through the environment UCX gets.
    env = dict(testbed, UCX_NET_DEVICES="fabric0")
    rc, recs, err = run(env, *BW, "--hosts", "fs-a,fs-c", "--mca", "pml=ucx", "--mca", "pml_ucx_tls=any",
                        "--mca", "pml_ucx_devices=any")
    assert rc == 5, err
    rec = one(recs)
    assert rec["transport"]["local"]["selected"]["pml"] == "ucx"
    assert rec["path"]["verdict"] == "misrouted" and "mgmt0" in rec["path"]["summary"]


@pytest.mark.parametrize("mpi", [pytest.param("openmpi", marks=needs_openmpi), pytest.param("mpich", marks=needs_mpich)])
def test_a_host_route_over_mgmt_is_named_as_the_cause_whatever_mpi_was_told(
    testbed: dict[str, str], fabric_route_over_mgmt: None, mpi: str
) -> None:
    """MPI told fabric0 (btl_tcp_if_include; MPICH's ch4:ucx: UCX_NET_DEVICES) while the kernel sends
    fs-c's fabric address over mgmt0: misrouted, and the route cause is the kernel's route to the
    peer's fabric0 address (each rank's address on the device asked, swapped when the ranks meet),
    with its fix; not MPI's choice of netmod or btl, which did as it was told (naming that, with
    "set UCX_NET_DEVICES=fabric0" as the fix, was the wrong answer)."""
    rc, recs, err = run(testbed, *BW, "--mpi", mpi, "--hosts", "fs-a,fs-c", "--device", "fabric0")
    assert rc == 5, err
    rec = one(recs)
    assert rec["path"]["verdict"] == "misrouted" and "mgmt0" in rec["path"]["summary"], rec["path"]
    fabric_c = netns.fabric_ip("fs-c")
    assert rec["transport"]["local"]["route_to_peer"]["peer"] == fabric_c
    assert rec["transport"]["local"]["route_to_peer"]["dev"] == "mgmt0"
    route = {c["cause"]: c for c in rec["explanation"]["causes"]}["route"]
    assert route["state"] == "seen", route
    assert route["evidence"] == (f"the kernel's route to the peer {fabric_c} leaves by mgmt0, not fabric0 (`ip route get "
                                 f"{fabric_c}`: dev mgmt0): a route that sends the peer's address over another netdev"), route
    assert f"ip route del {fabric_c} dev mgmt0" in route["fix"], route


@needs_openmpi
def test_unknown_device_and_bind_are_usage_errors(testbed: dict[str, str]) -> None:
    rc, recs, err = run(testbed, *BW, "--hosts", "fs-a,fs-b", "--device", "nosuch0")
    assert rc == 2 and not [r for r in recs if r.get("schema", "").startswith("fabscope.result/")]
    assert "--device nosuch0" in err and "fabric0" in err and ("fs-a" in err or "fs-b" in err)
    rc, _, err = run(testbed, "run", "--loopback", "--backend", "mpi", "--sizes", "8", "--device", "nosuch0")
    assert rc == 2 and "nosuch0" in err
    rc, _, err = run(testbed, *BW, "--hosts", "fs-a,fs-b", "--bind", "10.201.0.1")
    assert rc == 2 and "--bind" in err and "--device" in err


@pytest.mark.parametrize("mpi", [pytest.param("openmpi", marks=needs_openmpi),
                                 pytest.param("mpich", marks=needs_mpich)])
def test_bad_hosts_are_named_within_the_timeout(testbed: dict[str, str], mpi: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    rc, _, err = run(testbed, *BW, "--mpi", mpi, "--hosts", "fs-a,fs-e")  # fs-e is not up
    assert rc == 3 and "fs-e" in err, err
    assert time.monotonic() - t0 < 5 + 10, "an unknown host must be named within --timeout"
    rc, _, err = run(testbed, *BW, "--mpi", mpi, "--hosts", "fs-a,fs-a")
    assert rc == 2 and "fs-a" in err and "twice" in err
    rc, _, err = run(testbed, *BW, "--mpi", mpi, "--hosts", "fs-a,fs-b,fs-c")
    assert rc == 2 and "two hosts" in err
    # A launcher that is not installed: nothing on PATH has it.
    rc, _, err = run(dict(testbed, PATH=str(tmp_path)), *BW, "--mpi", mpi, "--hosts", "fs-a,fs-b")
    assert rc == 2 and "mpirun" in err and "nor mpirun is on PATH" in err


# --------------------------------------------------------------------------
# srun: one slurmd per testbed host
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(testbed: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    missing = slurmbed.missing_tools()
    if missing:
        pytest.skip(f"Slurm is not installed here ({', '.join(missing)} missing); `make setup` installs it")
    state_dir = tmp_path_factory.mktemp("slurm-netns")
    with slurmbed.running(state_dir, timeout_s=30, netns_hosts=netns.host_names(HOSTS)) as c:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(testbed, **c.env())
        yield env


@needs_openmpi
def test_srun_places_rank_0_on_the_first_host(cluster: dict[str, str]) -> None:
    rc, recs, err = run(cluster, *BW, "--launcher", "srun", "--hosts", "fs-b,fs-a", "--device", "fabric0")
    assert rc == 0, err
    rec = one(recs)
    assert (rec["host"]["hostname"], rec["peer_host"]["hostname"]) == ("fs-b", "fs-a")
    launcher = rec["transport"]["launcher"]
    assert launcher["name"] == "srun" and launcher["hosts"] == ["fs-b", "fs-a"]
    assert launcher["mca"]["btl_tcp_if_include"] == "fabric0"  # OMPI_MCA_* under srun
    assert rec["path"]["verdict"] == "verified" and set(sides(rec)) == {"fs-a", "fs-b"}


@needs_mpich
def test_srun_mpich_between_two_nodes(cluster: dict[str, str]) -> None:
    rc, recs, err = run(cluster, *BW, "--launcher", "srun", "--mpi", "mpich", "--hosts", "fs-a,fs-c",
                        "--device", "fabric0")
    assert rc == 0, err
    rec = one(recs)
    assert (rec["host"]["hostname"], rec["peer_host"]["hostname"]) == ("fs-a", "fs-c")
    assert rec["path"]["verdict"] == "verified"


@needs_openmpi
def test_srun_names_a_node_that_is_down_or_unknown(cluster: dict[str, str]) -> None:
    down = subprocess.run(["scontrol", "update", "nodename=fs-c", "state=down", "reason=fabscope-test"],
                          env=cluster, capture_output=True, text=True, timeout=15, check=False)
    assert down.returncode == 0, down.stderr
    try:
        t0 = time.monotonic()
        rc, _, err = run(cluster, *BW, "--launcher", "srun", "--hosts", "fs-a,fs-c")
        assert rc == 3 and "fs-c" in err and "down" in err, err
        assert time.monotonic() - t0 < 15
    finally:
        subprocess.run(["scontrol", "update", "nodename=fs-c", "state=resume"], env=cluster, capture_output=True,
                       timeout=15, check=False)
    rc, _, err = run(cluster, *BW, "--launcher", "srun", "--hosts", "fs-a,fs-x")
    assert rc == 2 and "fs-x" in err and "fs-a" in err


@needs_openmpi
def test_srun_latency_and_the_shared_cpu_it_cannot_avoid(cluster: dict[str, str]) -> None:
    """The Slurm testbed gives each node one CPU in turn (fs-a 0, fs-b 1, fs-c 0) and Slurm confines
    a one-task-per-node step to it whatever --cpu-bind says: fs-a/fs-b measure the network, fs-a/fs-c
    share CPU 0 of this 2-CPU machine, and the record says so."""
    rc, recs, err = run(cluster, *LAT, "--launcher", "srun", "--hosts", "fs-a,fs-b")
    assert rc == 0, err
    rec = one(recs)
    assert not [w for w in rec["warnings"] if SHARED_CPU in w], (rec["host"], rec["peer_host"])
    assert rec["latency_us"]["p50"] < 500, rec["latency_us"]
    rc, recs, err = run(cluster, *LAT, "--iters", "200", "--launcher", "srun", "--hosts", "fs-a,fs-c")
    assert rc == 0, err
    rec = one(recs)
    assert [w for w in rec["warnings"] if SHARED_CPU in w and "fs-a and fs-c" in w], (rec["host"], rec["peer_host"])
