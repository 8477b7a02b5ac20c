# SPDX-License-Identifier: BSD-3-Clause
"""Which MPI engines this build has, as pytest skip marks (shared by the mpirun and srun tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from fabscope.launch.mpirun import find_mpi_engine


def have_mpi_engine(mpi: str) -> bool:
    try:
        find_mpi_engine(mpi)
    except FileNotFoundError:
        return False
    return True


needs_openmpi = pytest.mark.skipif(not have_mpi_engine("openmpi"), reason="fabscope-engine-mpi-openmpi not built")
needs_mpich = pytest.mark.skipif(not have_mpi_engine("mpich"), reason="fabscope-engine-mpi-mpich not built")
