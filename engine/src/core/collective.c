/* SPDX-License-Identifier: BSD-3-Clause */
#include "collective.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

const char *const fs_dtype_names[FS_DT_COUNT] = {"int32", "float32", "float64"};
const size_t fs_dtype_sizes[FS_DT_COUNT] = {4, 4, 8};

enum fs_dtype fs_dtype_of(const struct fs_spec *spec)
{
    for (int i = 0; i < FS_DT_COUNT; i++)
        if (strcmp(spec->datatype, fs_dtype_names[i]) == 0)
            return (enum fs_dtype)i;
    return FS_DT_DEFAULT;
}

static int reduces(enum fs_pattern pat)
{
    return pat == FS_PAT_ALLREDUCE || pat == FS_PAT_REDUCE_SCATTER;
}

int fs_collective_check(const struct fs_spec *spec, enum fs_pattern pat, struct fs_err *err)
{
    const char *name = fs_pattern_names[pat];
    if (!FS_PAT_IS_COLLECTIVE(pat)) {
        const char *given = spec->datatype[0] ? "--datatype" : spec->reduce_op[0] ? "--reduce-op"
                            : spec->in_place                 ? "--in-place"
                                                             : NULL;
        if (given)
            return fs_fail(err, FS_EXIT_USAGE,
                           "%s applies only to the collective patterns (allreduce, reduce_scatter, "
                           "allgather, alltoall, bcast, barrier), but this run is --pattern %s: "
                           "drop it",
                           given, name);
        return 0;
    }
    if (spec->datatype[0]) {
        int known = 0;
        for (int i = 0; i < FS_DT_COUNT; i++)
            known |= strcmp(spec->datatype, fs_dtype_names[i]) == 0;
        if (!known)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--datatype %s: not a datatype the collectives have; use int32, float32 "
                           "or float64",
                           spec->datatype);
    }
    if (spec->reduce_op[0] && strcmp(spec->reduce_op, "sum") != 0)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--reduce-op %s: the mpi backend's collectives reduce with sum only; use "
                       "--reduce-op sum (or leave it out)",
                       spec->reduce_op);
    if (spec->in_place && (pat == FS_PAT_BCAST || pat == FS_PAT_BARRIER))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--in-place: %s has no separate send and receive buffers (MPI_IN_PLACE "
                       "applies to allreduce, reduce_scatter, allgather and alltoall): drop it",
                       name);
    if (spec->reduce_op[0] && !reduces(pat))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--reduce-op %s: --pattern %s does not reduce (only allreduce and "
                       "reduce_scatter do): drop it",
                       spec->reduce_op, name);
    if (pat == FS_PAT_BARRIER && (spec->datatype[0] || spec->sizes.n))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--pattern barrier moves no data: drop %s",
                       spec->datatype[0] ? "--datatype" : "--sizes");
    if (!spec->validate_only && (spec->peer[0] || spec->listen[0] || spec->control_fd >= 0))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--pattern %s is a collective: it runs across every rank of an MPI job, not "
                       "between a client and a server; drop --peer/--listen and run `fabscope run "
                       "--backend mpi --pattern %s --loopback --ppn N` or `--hosts H1,H2,...`",
                       name, name);
    return 0;
}

int fs_collective_layout(enum fs_pattern pat, enum fs_dtype dt, uint64_t size, int nranks,
                         uint64_t *count, uint64_t *bytes_per_rank, struct fs_err *err)
{
    const uint64_t esize = fs_dtype_sizes[dt];
    *count = 0;
    *bytes_per_rank = 0;
    if (pat == FS_PAT_BARRIER)
        return 0;
    if (size % esize)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--sizes %llu: not a whole number of %s elements (%llu bytes each); use a "
                       "multiple of %llu",
                       (unsigned long long)size, fs_dtype_names[dt], (unsigned long long)esize,
                       (unsigned long long)esize);
    *count = size / esize;
    int split = pat == FS_PAT_REDUCE_SCATTER || pat == FS_PAT_ALLGATHER || pat == FS_PAT_ALLTOALL;
    if (split && *count % (uint64_t)nranks)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--sizes %llu: %s splits its %llu %s elements into one block per rank, and "
                       "%llu elements do not divide evenly over %d ranks; use a size that is a "
                       "multiple of %llu bytes (ranks x element size)",
                       (unsigned long long)size, fs_pattern_names[pat],
                       (unsigned long long)*count, fs_dtype_names[dt], (unsigned long long)*count,
                       nranks, (unsigned long long)(esize * (uint64_t)nranks));
    if (*count > (uint64_t)0x7fffffff)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--sizes %llu: %llu elements is beyond MPI's int count; use at most %llu "
                       "bytes",
                       (unsigned long long)size, (unsigned long long)*count,
                       (unsigned long long)(0x7fffffffull * esize));
    /* A send and a receive buffer of the whole size (bcast: one); the check after the loop
     * computes each expected value as it goes (no third buffer). */
    *bytes_per_rank = pat == FS_PAT_BCAST ? size : 2 * size;
    return 0;
}

int fs_coll_phase(const struct fs_coll_hooks *h, void *ctx, long iters, double seconds,
                  struct fs_samples *out, struct fs_err *err)
{
    /* The time limit runs from the ranks' first meeting, not from each rank's own start: a rank
     * that waited there for a late one would otherwise end the phase for all at once. */
    uint64_t until = 0;
    for (long i = 0;; i++) {
        int stop = i >= iters || (until && fs_now_ns() >= until), all_stop = 0;
        if (h->sync(ctx, stop, &all_stop, err))
            return -1;
        if (all_stop)
            return 0;
        if (!until && seconds > 0)
            until = fs_now_ns() + (uint64_t)(seconds * 1e9);
        const uint64_t t0 = fs_now_ns();
        if (h->run(ctx, err))
            return -1;
        const uint64_t t1 = fs_now_ns();
        if (out && fs_samples_push(out, (double)(t1 - t0)))
            return fs_fail(err, FS_EXIT_MEASURE, "out of memory for %zu samples", out->n + 1);
    }
}

static void add_summary(cJSON *o, const char *key, double *v, size_t n)
{
    struct fs_summary s;
    cJSON *x = cJSON_AddObjectToObject(o, key);
    if (fs_summarize(v, n, &s))
        return;
    cJSON_AddNumberToObject(x, "min", s.min);
    cJSON_AddNumberToObject(x, "p50", s.p50);
    cJSON_AddNumberToObject(x, "mean", s.mean);
    cJSON_AddNumberToObject(x, "p99", s.p99);
    cJSON_AddNumberToObject(x, "max", s.max);
    if (s.stdev_valid)
        cJSON_AddNumberToObject(x, "stdev", s.stdev);
    else
        cJSON_AddNullToObject(x, "stdev");
}

cJSON *fs_coll_record(const struct fs_spec *spec, enum fs_pattern pat, int nranks, uint64_t size,
                      uint64_t count, struct fs_coll_across *a)
{
    cJSON *rec = cJSON_CreateObject();
    if (!rec)
        return NULL;
    enum fs_dtype dt = fs_dtype_of(spec);
    cJSON_AddStringToObject(rec, "schema", "fabscope.collective/1");
    cJSON_AddStringToObject(rec, "tool_version", FS_TOOL_VERSION);
    cJSON_AddStringToObject(rec, "backend", "mpi");
    cJSON_AddStringToObject(rec, "pattern", fs_pattern_names[pat]);
    cJSON_AddNumberToObject(rec, "ranks", nranks);
    cJSON_AddNumberToObject(rec, "size", (double)size);
    cJSON_AddNumberToObject(rec, "count", (double)count);
    if (pat == FS_PAT_BARRIER) {
        cJSON_AddNullToObject(rec, "datatype");
    } else {
        cJSON_AddStringToObject(rec, "datatype", fs_dtype_names[dt]);
    }
    if (reduces(pat))
        cJSON_AddStringToObject(rec, "reduce_op", spec->reduce_op[0] ? spec->reduce_op : "sum");
    else
        cJSON_AddNullToObject(rec, "reduce_op");
    cJSON_AddBoolToObject(rec, "in_place", spec->in_place);
    cJSON_AddNumberToObject(rec, "iterations", (double)a->n);
    cJSON_AddStringToObject(
        rec, "timing",
        "every rank times each collective on its own clock after all ranks met (an untimed "
        "MPI_Allreduce of a stop flag); one collective's time is the slowest rank's (MPI_Reduce "
        "MAX after the loop); skew = slowest minus fastest rank of the same iteration");
    /* last_rank before the sorts below reorder the arrays' meaning. */
    int *votes = calloc((size_t)nranks, sizeof *votes);
    int last = -1;
    for (size_t i = 0; votes && i < a->n; i++)
        if (a->last_rank[i] >= 0 && a->last_rank[i] < nranks)
            votes[a->last_rank[i]]++;
    for (int r = 0; votes && r < nranks; r++)
        if (last < 0 || votes[r] > votes[last])
            last = r;
    cJSON *lr = cJSON_AddObjectToObject(rec, "last_rank");
    cJSON_AddNumberToObject(lr, "rank", last);
    cJSON_AddNumberToObject(lr, "times", last >= 0 && votes ? votes[last] : 0);
    cJSON *per = cJSON_AddArrayToObject(lr, "per_rank");
    for (int r = 0; votes && r < nranks; r++)
        cJSON_AddItemToArray(per, cJSON_CreateNumber(votes[r]));
    free(votes);
    for (size_t i = 0; i < a->n; i++)
        a->min_ns[i] = a->max_ns[i] - a->min_ns[i]; /* the skew of iteration i */
    add_summary(rec, "time_ns", a->max_ns, a->n);
    add_summary(rec, "skew_ns", a->min_ns, a->n);
    return rec;
}
