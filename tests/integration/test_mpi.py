# SPDX-License-Identifier: BSD-3-Clause
"""MPI engines under mpirun on one host: Open MPI (ob1+vader, ob1+tcp, pml ucx over tcp and sm),
MPICH; the components each run reports, and a setting that had no effect."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from engine_pair import check_bandwidth, check_latency, parse_lines, run_client_alone
from mpi_marks import have_mpi_engine, needs_mpich, needs_openmpi

from conftest import fabscope

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from fabscope.launch.mpirun import build_mpi_command, find_mpi_engine

ARGS = ["--sizes", "8", "--iters", "300", "--warmup", "20", "--timeout", "10"]


def _run(
    engine_args: list[str], mpi: str = "openmpi", mca: dict[str, str] | None = None, env: dict[str, str] | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    cmd, full_env = build_mpi_command(engine_args, mpi=mpi, mca=mca, env=env)
    out = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=180, check=False)
    records, _ = parse_lines(out.stdout)
    return out.returncode, records, out.stderr + out.stdout[-2000:]


def _local(rec: dict[str, Any]) -> dict[str, Any]:
    return rec["transport"]["local"]


@needs_openmpi
def test_openmpi_default_is_ob1_vader() -> None:
    rc, recs, log = _run(ARGS)
    assert rc == 0, log
    check_latency(recs[0])
    sel = _local(recs[0])["selected"]
    assert sel["pml"] == "ob1"
    assert sel["btl"]["send"] == ["vader"]
    assert _local(recs[0])["settings_without_effect"] == []


@needs_openmpi
def test_openmpi_ob1_tcp_on_loopback() -> None:
    rc, recs, log = _run([*ARGS, "--pattern", "bw", "--sizes", "64K"], mca={"btl": "tcp,self", "btl_tcp_if_include": "lo"})
    assert rc == 0, log
    check_bandwidth(recs[0])
    sel = _local(recs[0])["selected"]
    assert sel["pml"] == "ob1" and sel["btl"]["send"] == ["tcp"]


@needs_openmpi
@pytest.mark.parametrize(("tls", "expect"), [("tcp", {"tcp"}), ("sm,self", {"posix", "sysv", "cma", "self"})])
def test_openmpi_pml_ucx(tls: str, expect: set[str]) -> None:
    rc, recs, log = _run(ARGS, mca={"pml": "ucx", "pml_ucx_tls": "any", "pml_ucx_devices": "any"}, env={"UCX_TLS": tls})
    assert rc == 0, log
    check_latency(recs[0])
    local = _local(recs[0])
    assert local["selected"]["pml"] == "ucx"
    assert set(local["ucx"]["transports"]) <= expect, local["ucx"]
    assert local["ucx"]["lanes"]


@needs_openmpi
def test_openmpi_ucx_net_devices_without_effect() -> None:
    """UCX #10049's shape: UCX_NET_DEVICES set, but the pml does not use UCX at all."""
    rc, recs, log = _run(ARGS, env={"UCX_NET_DEVICES": "eth0"})
    assert rc == 0, log
    local = _local(recs[0])
    assert local["selected"]["pml"] == "ob1"
    notes = local["settings_without_effect"]
    assert any("UCX_NET_DEVICES=eth0 had no effect" in n and "ob1" in n for n in notes), notes


@needs_mpich
def test_mpich() -> None:
    rc, recs, log = _run([*ARGS, "--pattern", "lat"], mpi="mpich")
    assert rc == 0, log
    check_latency(recs[0])
    sel = _local(recs[0])["selected"]
    assert sel["device"].startswith("ch4:") or sel["device"].startswith("ch3:"), sel
    assert "MPICH" in _local(recs[0])["library"]


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_bad_option_under_mpirun_ends_at_once(mpi: str) -> None:
    """Rank 0 refuses the option before it connects; rank 1, waiting for that connection, must
    end too (it used to wait its whole --timeout), and the message is the engine's own, without
    the launcher's boxes about a rank that exited non-zero."""
    if not have_mpi_engine(mpi):
        pytest.skip(f"fabscope-engine-mpi-{mpi} not built")
    t0 = time.monotonic()
    out = fabscope("run", "--loopback", "--backend", "mpi", "--mpi", mpi, "--pattern", "nope", "--timeout", "20",
                   timeout=60)
    assert out.returncode == 2, out.stderr
    assert "--pattern" in out.stderr and "lat, bw, bibw" in out.stderr
    assert "-----" not in out.stderr and "=====" not in out.stderr, out.stderr
    assert time.monotonic() - t0 < 10


@needs_openmpi
def test_ranks_report_the_cpu_the_launcher_bound_them_to() -> None:
    """mpirun binds each rank to a core: the record says which CPU each engine ran on."""
    rc, recs, log = _run(ARGS)
    assert rc == 0, log
    cpus = {recs[0]["host"]["cpu"], recs[0]["peer_host"]["cpu"]}
    assert None not in cpus and len(cpus) == 2, (recs[0]["host"], recs[0]["peer_host"])
    assert recs[0]["host"]["cpus_allowed"] == str(recs[0]["host"]["cpu"])


@needs_openmpi
def test_mpi_engine_missing_peer() -> None:
    """A singleton MPI engine pointed at a port where nothing listens: exit 3, fast."""
    res = run_client_alone(["--backend", "mpi", "--timeout", "3"], exe=find_mpi_engine("openmpi"))
    assert res.rc == 3, res.stderr
    assert res.elapsed_s < 15


def test_build_command_has_deadline() -> None:
    if not have_mpi_engine("openmpi"):
        pytest.skip("fabscope-engine-mpi-openmpi not built")
    cmd, env = build_mpi_command(["--sizes", "8"], mca={"pml": "ob1"}, env={"UCX_TLS": "tcp"})
    assert cmd[0] == "timeout" and "--kill-after=5" in cmd
    assert ["--mca", "pml", "ob1"] == cmd[cmd.index("--mca") : cmd.index("--mca") + 3]
    assert "-x" in cmd and env["UCX_TLS"] == "tcp"
    with pytest.raises(ValueError):
        build_mpi_command([], mpi="mpich", mca={"pml": "ob1"})


@needs_openmpi
def test_only_rank_0_records_reach_the_launchers_stdout() -> None:
    """The launcher forwards each rank's stdout in chunks, not lines: under srun a record of rank 0 came
    back with other output inside it and was lost. Everything but rank 0's records (rank 1, and what
    the libraries print while MPI starts: UCX logs to stdout) goes to stderr. UCX at log level info
    prints on both ranks; with --tag-output each stdout line names its rank."""
    cmd, env = build_mpi_command(["--sizes", "8", "--iters", "20", "--format", "json"], mca=dict(
        pml="ucx", pml_ucx_tls="any", pml_ucx_devices="any"), env={"UCX_TLS": "tcp,self", "UCX_LOG_LEVEL": "info"})
    at = cmd.index("-np")
    cmd[at:at] = ["--tag-output"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines and all(line.startswith('[1,0]<stdout>:{"schema":"fabscope.') for line in lines), lines
    assert "[1,1]<stderr>:" in out.stderr and " UCX  INFO " in out.stderr, out.stderr[-2000:]  # said, not lost
