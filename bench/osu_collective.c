/* SPDX-License-Identifier: BSD-3-Clause */
/* OSU/IMB-style MPI collective peer for bench/collective_peers.py: the project's own few lines,
 * timing a collective the way MPI users' benchmarks do, so fabscope's collectives have a peer.
 *
 *   mpirun -np N osu_collective OP SIZE ITERS WARMUP
 *       OP: allreduce (float, MPI_SUM), allgather, alltoall, bcast (root 0), reduce_scatter
 *       (MPI_Reduce_scatter_block); SIZE is nccl-tests' size (the whole result / send buffer),
 *       as fabscope's --sizes.
 *   Two figures from two loops:
 *     osu_us   OSU's: MPI_Barrier, then ITERS collectives timed as one loop on every rank; the
 *              loop time / ITERS, the slowest rank's (IMB's t_max).
 *     p50_us   fabscope's: MPI_Barrier before each iteration, each timed alone on every rank; the
 *              median over iterations of the slowest rank's time.
 *
 * Output: one line, e.g. osu_collective allreduce size=65536 ranks=4 iters=1000 osu_us=41.2 p50_us=40.8
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int one(const char *op, float *s, float *r, int count, int block)
{
    if (strcmp(op, "allreduce") == 0)
        return MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (strcmp(op, "reduce_scatter") == 0)
        return MPI_Reduce_scatter_block(s, r, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (strcmp(op, "allgather") == 0)
        return MPI_Allgather(s, block, MPI_FLOAT, r, block, MPI_FLOAT, MPI_COMM_WORLD);
    if (strcmp(op, "alltoall") == 0)
        return MPI_Alltoall(s, block, MPI_FLOAT, r, block, MPI_FLOAT, MPI_COMM_WORLD);
    if (strcmp(op, "bcast") == 0)
        return MPI_Bcast(r, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 5) {
        if (rank == 0)
            fprintf(stderr, "usage: osu_collective OP SIZE ITERS WARMUP\n");
        MPI_Finalize();
        return 2;
    }
    const char *op = argv[1];
    long size = strtol(argv[2], NULL, 10), iters = strtol(argv[3], NULL, 10),
         warmup = strtol(argv[4], NULL, 10);
    int count = (int)(size / (long)sizeof(float)), block = count / n;
    float *s = calloc((size_t)count + 1, sizeof *s), *r = calloc((size_t)count + 1, sizeof *r);
    double *t = calloc((size_t)iters, sizeof *t), *tmax = calloc((size_t)iters, sizeof *tmax);
    if (!s || !r || !t || !tmax || iters < 1 || one(op, s, r, count, block) != MPI_SUCCESS) {
        if (rank == 0)
            fprintf(stderr, "osu_collective: bad arguments or out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (long i = 0; i < warmup; i++)
        one(op, s, r, count, block);
    /* OSU: one timed loop after a barrier. */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        one(op, s, r, count, block);
    double loop = (MPI_Wtime() - t0) / (double)iters, loop_max = 0;
    MPI_Reduce(&loop, &loop_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    /* fabscope's: a barrier before every iteration, each timed alone. */
    for (long i = 0; i < iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double a = MPI_Wtime();
        one(op, s, r, count, block);
        t[i] = MPI_Wtime() - a;
    }
    MPI_Reduce(t, tmax, (int)iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(tmax, (size_t)iters, sizeof *tmax, cmp_double);
        double p50 = iters % 2 ? tmax[iters / 2] : (tmax[iters / 2 - 1] + tmax[iters / 2]) / 2;
        printf("osu_collective %s size=%ld ranks=%d iters=%ld osu_us=%.3f p50_us=%.3f\n", op, size, n,
               iters, loop_max * 1e6, p50 * 1e6);
    }
    free(s);
    free(r);
    free(t);
    free(tmax);
    MPI_Finalize();
    return 0;
}
