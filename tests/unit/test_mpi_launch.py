# SPDX-License-Identifier: BSD-3-Clause
"""How `run --backend mpi` turns --hosts and --device into a launch, and what the record then says
about it (mpirun.check_hosts, device_mapping, describe_launch): pure functions, no process started."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

from fabscope.launch.mpirun import build_mpi_command, check_hosts, describe_launch, device_mapping, placement_warnings


def test_hosts_are_two_different_names() -> None:
    assert check_hosts(["fs-a", " fs-b"]) == ["fs-a", "fs-b"]
    for bad, words in ((["fs-a"], "exactly two"), (["a", "b", "c"], "exactly two"), (["fs-a", "fs-a"], "twice"),
                       (["fs-a", ""], "not a host name"), (["fs-a", "x;rm"], "not a host name")):
        with pytest.raises(ValueError, match=words):
            check_hosts(bad)


def test_device_maps_to_each_mpis_own_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMPI_MCA_pml", raising=False)
    monkeypatch.delenv("OMPI_MCA_btl", raising=False)
    assert device_mapping("openmpi", ["--sizes=8"]) is None
    ob1 = device_mapping("openmpi", ["--device=fabric0"])
    assert ob1 is not None and ob1.mca == {"btl_tcp_if_include": "fabric0"} and ob1.env == {}
    ucx = device_mapping("openmpi", ["--device", "fabric0"], mca={"pml": "ucx"})
    assert ucx is not None and ucx.env == {"UCX_NET_DEVICES": "fabric0"} and ucx.mca
    port = device_mapping("openmpi", ["--device=mlx5_0:1"])
    assert port is not None and port.mca == {} and port.env == {"UCX_NET_DEVICES": "mlx5_0:1"}
    mpich = device_mapping("mpich", ["--device=fabric0"])
    assert mpich is not None and mpich.env == {"UCX_NET_DEVICES": "fabric0"} and mpich.mca == {}
    with pytest.raises(ValueError, match="says otherwise"):
        device_mapping("openmpi", ["--device=fabric0"], mca={"btl_tcp_if_include": "mgmt0"})
    with pytest.raises(ValueError, match="--bind"):
        device_mapping("openmpi", ["--bind=10.0.0.1"])


def test_the_record_says_hosts_mca_env_and_mapping() -> None:
    cmd = ["timeout", "--kill-after=5", "40", "mpirun.openmpi", "-np", "2", "-H", "fs-a,fs-b", "--map-by", "node",
           "--mca", "btl_tcp_if_include", "fabric0", "-x", "UCX_TLS", "/x/fabscope-engine-mpi-openmpi", "--sizes=8"]
    env = {"OMPI_MCA_routed": "direct", "OMPI_MCA_btl_tcp_if_include": "mgmt0", "UCX_TLS": "tcp", "HOME": "/root",
           "MPIR_CVAR_NOLOCAL": "1"}
    launch = describe_launch(cmd, env, device_mapping("openmpi", ["--device=fabric0"]))
    assert launch["hosts"] == ["fs-a", "fs-b"] and launch["deadline_s"] == 40.0
    assert launch["mca"] == {"btl_tcp_if_include": "fabric0", "routed": "direct"}  # the argv wins
    assert launch["env"] == {"MPIR_CVAR_NOLOCAL": "1", "OMPI_MCA_btl_tcp_if_include": "mgmt0",
                             "OMPI_MCA_routed": "direct", "UCX_TLS": "tcp"}
    assert launch["device_mapping"]["mca"] == {"btl_tcp_if_include": "fabric0"}
    mpich = describe_launch(["mpirun.mpich", "-np", "2", "-hosts", "a,b", "/x/fabscope-engine-mpi-mpich"], env)
    assert mpich["mca"] == {} and "OMPI_MCA_routed" not in mpich["env"] and mpich["hosts"] == ["a", "b"]
    srun = describe_launch(["srun", "--nodelist=n2,n1", "--mpi=pmix", "/x/e"], {"SLURM_CONF": "/c"})
    assert srun["hosts"] == ["n2", "n1"] and srun["mpi_plugin"] == "pmix"


def test_a_rank_elsewhere_than_asked_is_a_warning() -> None:
    rec = {"host": {"hostname": "fs-a"}, "peer_host": {"hostname": "fs-c.example"}}
    assert placement_warnings(rec, ["fs-a", "fs-c"]) == []
    assert placement_warnings(rec, None) == []
    (warning,) = placement_warnings(rec, ["fs-a", "fs-b"])
    assert "rank 1 ran on fs-c.example, not on fs-b" in warning


def test_collective_ranks_place_themselves_unless_a_binding_was_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collective's ranks are placed by --cpu (the engine), so the launcher binds nothing; a
    binding the user gave (Open MPI's MCA parameter, HYDRA_BINDING) is kept, never overridden."""
    for key in ("OMPI_MCA_hwloc_base_binding_policy", "HYDRA_BINDING"):
        monkeypatch.delenv(key, raising=False)
    cmd, _ = build_mpi_command(["--sizes", "8"], mpi="openmpi", check_launcher=False, ppn=2)
    assert cmd[cmd.index("--bind-to") + 1] == "none"
    cmd, _ = build_mpi_command(["--sizes", "8"], mpi="mpich", check_launcher=False, ppn=2)
    assert cmd[cmd.index("-bind-to") + 1] == "none"
    cmd, _ = build_mpi_command(["--sizes", "8"], mpi="openmpi", check_launcher=False, ppn=2,
                               mca={"hwloc_base_binding_policy": "core"})
    assert "--bind-to" not in cmd and cmd[cmd.index("hwloc_base_binding_policy") + 1] == "core"
    monkeypatch.setenv("HYDRA_BINDING", "core")
    cmd, _ = build_mpi_command(["--sizes", "8"], mpi="mpich", check_launcher=False, ppn=2)
    assert "-bind-to" not in cmd
    # A pair keeps the launcher's binding as before.
    monkeypatch.delenv("HYDRA_BINDING")
    cmd, _ = build_mpi_command(["--sizes", "8"], mpi="mpich", check_launcher=False)
    assert cmd[cmd.index("-bind-to") + 1] == "core"
