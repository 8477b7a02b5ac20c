# SPDX-License-Identifier: BSD-3-Clause
"""How a run is started: the engine asked for what it knows (engine.py: --options-json,
--inventory-json) and its argv, the run's plan (plan.py: RunPlan, execute, the exit rule), the
processes started and read (runner.py: loopback, peer, MPI), the MPI launchers (mpirun.py, with
mpi_params.py checking the MCA parameters and the environment passed to the ranks) and
librspreload for sockets over RDMA (rspreload.py)."""
