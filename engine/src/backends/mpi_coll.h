/* The mpi backend's collectives (mpi_coll.c), run by every rank of the job (main_mpi.c). */
#ifndef FS_MPI_COLL_H
#define FS_MPI_COLL_H

#include "../core/spec.h"

/* Every size of spec's collective pattern across MPI_COMM_WORLD; rank 0 prints the records.
 * Returns the job's exit code (FS_EXIT_*), the same on every rank. */
int fs_mpi_collective_main(const struct fs_spec *spec, int rank, int nranks);

#endif
