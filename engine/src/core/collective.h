/* SPDX-License-Identifier: BSD-3-Clause */
/* The collective loop: every rank of a job runs one collective per iteration, the core times it
 * on each rank, and after the loop each iteration's time across ranks is the slowest rank's
 * (DESIGN: reduce after the loop, not inside it). The backend moves the bytes and meets the other
 * ranks; the core owns the clock, the loop and the statistics, as in the pair loops. */
#ifndef FS_COLLECTIVE_H
#define FS_COLLECTIVE_H

#include <stddef.h>

#include "fs.h"
#include "spec.h"
#include "stats.h"

struct cJSON;

/* The element types a collective moves; the default when --datatype is not given. */
enum fs_dtype { FS_DT_INT32, FS_DT_FLOAT32, FS_DT_FLOAT64, FS_DT_COUNT };
#define FS_DT_DEFAULT FS_DT_FLOAT32
extern const char *const fs_dtype_names[FS_DT_COUNT];
extern const size_t fs_dtype_sizes[FS_DT_COUNT];
enum fs_dtype fs_dtype_of(const struct fs_spec *spec);

/* The options that apply to collectives only, checked against the pattern: a pair pattern with
 * --datatype/--reduce-op/--in-place, --in-place for bcast or barrier, --reduce-op for an operation
 * that does not reduce; and a collective outside a job of ranks (the plain engine, a singleton):
 * exit 2 naming the fix. Validation alone (--validate-only) accepts a collective. */
int fs_collective_check(const struct fs_spec *spec, enum fs_pattern pat, struct fs_err *err);

/* How many elements each rank's buffers hold for a collective of `size` bytes over `nranks`
 * ranks (nccl-tests' convention: size is the whole result buffer of allreduce/bcast, the whole
 * send buffer of reduce_scatter and alltoall, the whole receive buffer of allgather), and the
 * bytes per rank it allocates. -1 with a usage error naming the fix when size is not a whole
 * number of elements, or cannot be split evenly over the ranks. */
int fs_collective_layout(enum fs_pattern pat, enum fs_dtype dt, uint64_t size, int nranks,
                         uint64_t *count, uint64_t *bytes_per_rank, struct fs_err *err);

/* What the backend does for the loop. */
struct fs_coll_hooks {
    /* Untimed: every rank meets the others and they agree whether to go on: *all_stop is 1 when
     * any rank passed stop = 1. */
    int (*sync)(void *ctx, int stop, int *all_stop, struct fs_err *err);
    /* One collective, complete on this rank when it returns. */
    int (*run)(void *ctx, struct fs_err *err);
};

/* One phase (warm-up or measured): iterations until `iters` or `seconds` (> 0) on any rank,
 * whichever comes first; each iteration's time on this rank goes into out (nanoseconds). */
int fs_coll_phase(const struct fs_coll_hooks *h, void *ctx, long iters, double seconds,
                  struct fs_samples *out, struct fs_err *err);

/* Each iteration across ranks, as the backend reduced them after the loop: the slowest rank's
 * time, the fastest rank's, and which rank was slowest. */
struct fs_coll_across {
    double *max_ns, *min_ns;
    int *last_rank;
    size_t n;
};

/* The size's record (schema fabscope.collective/1) from the across-rank times: the time of one
 * collective (slowest rank) min/p50/p99/..., the rank skew (slowest minus fastest rank) and the
 * rank that was last most often. The backend adds what it knows (library, hosts, verification).
 * Sorts the arrays in place. NULL when out of memory. */
struct cJSON *fs_coll_record(const struct fs_spec *spec, enum fs_pattern pat, int nranks,
                             uint64_t size, uint64_t count, struct fs_coll_across *across);

#endif
