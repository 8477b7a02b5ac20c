/* SPDX-License-Identifier: BSD-3-Clause */
/* The mpi backend's collectives (mpi_coll.c), run by every rank of the job (main_mpi.c). */
#ifndef FS_MPI_COLL_H
#define FS_MPI_COLL_H

#include <stdint.h>

#include "../core/spec.h"

struct cJSON;

/* What the library selected towards rank `peer` on `peer_host`, and its collective settings for
 * `pattern` (mpi.c, which owns the reading of MPI's selections). */
void fs_mpi_describe_collective(int peer, const char *peer_host, const char *pattern,
                                uint64_t size, struct cJSON *o);

/* Every size of spec's collective pattern across MPI_COMM_WORLD; rank 0 prints the records.
 * Returns the job's exit code (FS_EXIT_*), the same on every rank. */
int fs_mpi_collective_main(const struct fs_spec *spec, int rank, int nranks);

#endif
