/* SPDX-License-Identifier: BSD-3-Clause */
/* OSU-style MPI point-to-point peer for bench/middleware_peers.py: the project's own few lines,
 * written to behave like osu_latency / osu_bw, so fabscope's MPI backend has a peer measured the
 * way MPI users usually measure.
 *
 *   mpirun -np 2 osu_pingpong lat SIZE ITERS WARMUP
 *       blocking MPI_Send / MPI_Recv ping-pong; rank 0 reads MPI_Wtime around every round trip.
 *       Prints the OSU figure (total time / ITERS / 2 = MEAN half round trip) and, from the same
 *       loop, the median and minimum of the per-iteration half round trips.
 *   mpirun -np 2 osu_pingpong bw SIZE LOOPS WARMUP [WINDOW]
 *       as osu_bw: rank 0 posts WINDOW (64) MPI_Isend of SIZE bytes from one buffer, MPI_Waitall,
 *       then waits for a 4-byte ack from rank 1, which posted WINDOW MPI_Irecv and MPI_Waitall.
 *       Bandwidth = SIZE * WINDOW * LOOPS / time at the sender, in MB/s with MB = 10^6 bytes.
 *
 * Output: one line of key=value pairs, e.g.
 *   osu_pingpong lat size=8 iters=20000 mean_us=0.331 p50_us=0.310 min_us=0.290 wtick_us=0.001
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

static long arg(int argc, char **argv, int i, long dflt)
{
    return i < argc ? strtol(argv[i], NULL, 10) : dflt;
}

static int lat(int rank, long size, long iters, long warmup)
{
    char *buf = malloc((size_t)size);
    double *half = malloc(sizeof(double) * (size_t)iters);
    if (!buf || !half)
        return 1;
    memset(buf, 'a', (size_t)size);
    double t_start = 0.0;
    for (long i = 0; i < warmup + iters; i++) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t_start = MPI_Wtime();
        }
        if (rank == 0) {
            double t0 = MPI_Wtime();
            MPI_Send(buf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (i >= warmup)
                half[i - warmup] = (MPI_Wtime() - t0) * 1e6 / 2.0;
        } else {
            MPI_Recv(buf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
    }
    double total = MPI_Wtime() - t_start;
    if (rank == 0) {
        qsort(half, (size_t)iters, sizeof *half, cmp_double);
        double p50 = iters % 2 ? half[iters / 2] : (half[iters / 2 - 1] + half[iters / 2]) / 2.0;
        printf("osu_pingpong lat size=%ld iters=%ld mean_us=%.4f p50_us=%.4f min_us=%.4f wtick_us=%.4f\n",
               size, iters, total * 1e6 / (double)iters / 2.0, p50, half[0], MPI_Wtick() * 1e6);
    }
    free(half);
    free(buf);
    return 0;
}

static int bw(int rank, long size, long loops, long warmup, long window)
{
    char *buf = malloc((size_t)size);
    MPI_Request *req = malloc(sizeof(MPI_Request) * (size_t)window);
    char ack[4] = {0};
    if (!buf || !req)
        return 1;
    memset(buf, 'b', (size_t)size);
    double t_start = 0.0;
    for (long i = 0; i < warmup + loops; i++) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t_start = MPI_Wtime();
        }
        if (rank == 0) {
            for (long w = 0; w < window; w++)
                MPI_Isend(buf, (int)size, MPI_CHAR, 1, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall((int)window, req, MPI_STATUSES_IGNORE);
            MPI_Recv(ack, 4, MPI_CHAR, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (long w = 0; w < window; w++)
                MPI_Irecv(buf, (int)size, MPI_CHAR, 0, 2, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall((int)window, req, MPI_STATUSES_IGNORE);
            MPI_Send(ack, 4, MPI_CHAR, 0, 3, MPI_COMM_WORLD);
        }
    }
    double total = MPI_Wtime() - t_start;
    if (rank == 0)
        printf("osu_pingpong bw size=%ld loops=%ld window=%ld seconds=%.6f MBps=%.3f\n", size, loops,
               window, total, (double)size * (double)window * (double)loops / total / 1e6);
    free(req);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, nprocs = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
    const char *mode = argc > 1 ? argv[1] : "";
    long size = arg(argc, argv, 2, 8), n = arg(argc, argv, 3, 10000), warmup = arg(argc, argv, 4, 1000);
    long window = arg(argc, argv, 5, 64);
    int rc = 2;
    if (nprocs != 2 || size < 1 || size > (1L << 30) || n < 1 || warmup < 0 || window < 1 ||
        (strcmp(mode, "lat") != 0 && strcmp(mode, "bw") != 0)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 %s lat|bw SIZE ITERS|LOOPS WARMUP [WINDOW]\n", argv[0]);
    } else {
        rc = strcmp(mode, "lat") == 0 ? lat(rank, size, n, warmup) : bw(rank, size, n, warmup, window);
        if (rc && rank == 0)
            fprintf(stderr, "osu_pingpong: out of memory\n");
    }
    if (rc)
        MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
    return 0;
}
