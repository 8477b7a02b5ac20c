# SPDX-License-Identifier: BSD-3-Clause
"""Collectives under srun, for real: the private one-node Slurm of test_mpi_srun (its `cluster`
fixture) starts --ppn ranks of each MPI engine (--ntasks), and the collective is measured and
checked as under mpirun."""

from __future__ import annotations

import pytest
from mpi_marks import needs_mpich, needs_openmpi
from test_mpi_srun import cluster, needs_srun  # noqa: F401  (the fixture, by name)

from conftest import fabscope, json_lines

pytestmark = pytest.mark.mpi


@needs_srun
@pytest.mark.usefixtures("cluster")
@pytest.mark.parametrize(("mpi", "pattern"), [pytest.param("openmpi", "allreduce", marks=needs_openmpi),
                                              pytest.param("mpich", "alltoall", marks=needs_mpich)])
def test_srun_starts_the_ranks_of_a_collective(mpi: str, pattern: str) -> None:
    out = fabscope("run", "--loopback", "--backend", "mpi", "--launcher", "srun", "--mpi", mpi, "--ppn", "2",
                   "--pattern", pattern, "--sizes", "64K", "--iters", "20", "--warmup", "2", "--timeout", "20",
                   "--format", "json", timeout=180)
    assert out.returncode == 0, out.stderr
    (rec,) = json_lines(out.stdout)
    assert rec["ranks"] == 2 and rec["pattern"] == pattern and rec["verified"]["ok"] is True
    launcher = rec["transport"]["launcher"]
    assert launcher["name"] == "srun" and "--ntasks=2" in launcher["argv"]
