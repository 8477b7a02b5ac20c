/* SPDX-License-Identifier: BSD-3-Clause */
/* What the mpi backend reads from Open MPI's internals (mpi_ompi_private.c, the one file that
 * includes Open MPI's private headers): which components Open MPI selected, and its progress
 * engine. Open MPI only. */
#ifndef FS_MPI_OMPI_H
#define FS_MPI_OMPI_H

#include <cjson/cJSON.h>
#include <mpi.h>

/* NULL when this run can read Open MPI's internals, else why not (the Open MPI that runs, or the one
 * the engine was built with, is not a version mpi_ompi_private.c knows): a record says so instead
 * of a selection. */
const char *fs_ompi_internals_unknown(void);

/* The names of the selected pml and mtl components (mtl: NULL when none was). */
const char *fs_ompi_pml(void);
const char *fs_ompi_mtl(void);
/* {"eager": [...], "send": [...], "rdma": [...]}: the btls the peer's endpoint lists (pml ob1), or
 * NULL when the peer has no bml endpoint (pml ucx or cm). */
cJSON *fs_ompi_peer_btls(int peer);
/* The peer's pml endpoint (a ucp_ep_h under pml ucx), or NULL. */
void *fs_ompi_peer_pml_endpoint(int peer);
/* Where the MCA parameter `name` got its value, as Open MPI recorded it: "default", "FILE:LINE",
 * "environment OMPI_MCA_name", "command line (mpirun --mca name)"; -1 (out empty) when unknown. */
int fs_ompi_var_source(const char *name, char *out, size_t len);
/* Runs Open MPI's progress engine (opal_progress) up to `passes` times while req is pending, as
 * MPI_Wait does inside: no argument checks, no second look per pass. */
void fs_ompi_progress(MPI_Request req, int passes);

#endif
