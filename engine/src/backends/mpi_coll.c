/* SPDX-License-Identifier: BSD-3-Clause */
/* The mpi backend's collectives: every rank of MPI_COMM_WORLD in one allreduce, reduce_scatter,
 * allgather, alltoall, bcast or barrier per iteration, timed by the core's collective loop
 * (core/collective.h). Rank 0 prints one fabscope.collective/1 record per size.
 *
 * Every element is checked after the timed loop: each rank contributes value(rank, element), an
 * integer from 1 to 65,521, so every sum over up to 256 ranks is an integer below 2^24 and exact
 * in int32, float32 and float64 in any order of summation: the bound is 0 for every datatype. */
#define _GNU_SOURCE
#include "mpi_coll.h"

#include <cjson/cJSON.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/clock.h"
#include "../core/collective.h"
#include "../core/counters.h"
#include "../core/linkfacts.h"
#include "../core/placement.h"
#include "../core/sysinfo.h"

/* Ranks whose sums stay exact in float32 (256 x 65,521 < 2^24). */
#define COLL_MAX_EXACT_RANKS 256
#define COLL_VALUE_MOD 65521

struct coll {
    enum fs_pattern pat;
    enum fs_dtype dt;
    MPI_Datatype mdt;
    int rank, nranks, in_place;
    uint64_t count; /* elements of the size (collective.h's layout) */
    int block;      /* elements per rank's block (reduce_scatter, allgather, alltoall) */
    void *sbuf, *rbuf;
    char (*hosts)[MPI_MAX_PROCESSOR_NAME];
    /* The first rank of each host reads that host's counters around the measured phase, for the
     * front end's path verdict per host (results/collective.py). */
    int host_leader;
    struct fs_cnt_snap *before, *after;
    /* The host probe (probe_hosts): the first rank of each host, in rank order, and this rank's
     * place among them (-1: not a first rank); its buffers and the send still in flight. */
    int *leaders, nleaders, leader_index, probe_dir;
    char *probe_sbuf, *probe_rbuf;
    MPI_Request probe_send;
    struct fs_samples probe_times;
    /* Rank 0: where every rank ran (place_ranks), added to each size's record. */
    cJSON *placement, *oversubscribed;
};

/* The host probe's message, whatever the collective's size: large enough that a link's rate
 * decides its time, not its latency or a shaper's burst (tc tbf lets 256 KiB through at once on
 * the netns testbed), small enough to cost little (84 us at 100 Gbit/s, 0.4 s at 20 Mbit/s). */
#define PROBE_BYTES (1024u * 1024u)
#define PROBE_REPS 3

static double value(int rank, uint64_t element)
{
    return (double)((((uint64_t)rank * 131u) + element) % COLL_VALUE_MOD + 1);
}

static void put(const struct coll *c, void *buf, uint64_t i, double v)
{
    switch (c->dt) {
    case FS_DT_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case FS_DT_FLOAT32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
    }
}

static double get(const struct coll *c, const void *buf, uint64_t i)
{
    switch (c->dt) {
    case FS_DT_INT32: return ((const int32_t *)buf)[i];
    case FS_DT_FLOAT32: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
    }
}

/* The elements of the result this rank checks, and what each must be. */
static uint64_t result_count(const struct coll *c)
{
    return c->pat == FS_PAT_REDUCE_SCATTER ? (uint64_t)c->block : c->count;
}

static double expected(const struct coll *c, uint64_t j)
{
    double sum = 0;
    uint64_t b = (uint64_t)c->block;
    switch (c->pat) {
    case FS_PAT_ALLREDUCE:
        for (int q = 0; q < c->nranks; q++)
            sum += value(q, j);
        return sum;
    case FS_PAT_REDUCE_SCATTER:
        for (int q = 0; q < c->nranks; q++)
            sum += value(q, (uint64_t)c->rank * b + j);
        return sum;
    case FS_PAT_ALLGATHER: return value((int)(j / b), j);
    case FS_PAT_ALLTOALL: return value((int)(j / b), (uint64_t)c->rank * b + j % b);
    default: return value(0, j); /* bcast from rank 0 */
    }
}

/* Every rank's input as the operation reads it (in place: in the receive buffer), and the
 * receive buffer of a separate-buffer run set to 0, which no result element can be. */
static void fill(const struct coll *c)
{
    void *in = c->in_place ? c->rbuf : c->sbuf;
    if (c->pat == FS_PAT_BARRIER)
        return;
    if (!c->in_place && c->pat != FS_PAT_BCAST)
        memset(c->rbuf, 0, c->count * fs_dtype_sizes[c->dt]);
    switch (c->pat) {
    case FS_PAT_ALLGATHER:
        /* Its own block only: the send buffer, or its place in the receive buffer. */
        for (uint64_t i = 0; i < (uint64_t)c->block; i++) {
            uint64_t g = (uint64_t)c->rank * (uint64_t)c->block + i;
            put(c, in, c->in_place ? g : i, value(c->rank, g));
        }
        break;
    case FS_PAT_BCAST:
        for (uint64_t j = 0; j < c->count; j++)
            put(c, c->rbuf, j, c->rank == 0 ? value(0, j) : 0);
        break;
    default:
        for (uint64_t j = 0; j < c->count; j++)
            put(c, in, j, value(c->rank, j));
        break;
    }
}

static int coll_sync(void *ctx, int stop, int *all_stop, struct fs_err *err)
{
    (void)ctx;
    int rc = MPI_Allreduce(&stop, all_stop, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : fs_fail(err, FS_EXIT_MEASURE, "mpi: MPI_Allreduce (the ranks' "
                                                                 "meeting between iterations) failed");
}

static int coll_run(void *ctx, struct fs_err *err)
{
    struct coll *c = ctx;
    const void *s = c->in_place ? MPI_IN_PLACE : c->sbuf;
    int n = (int)c->count, b = c->block, rc;
    const char *call;
    switch (c->pat) {
    case FS_PAT_ALLREDUCE:
        call = "MPI_Allreduce";
        rc = MPI_Allreduce(s, c->rbuf, n, c->mdt, MPI_SUM, MPI_COMM_WORLD);
        break;
    case FS_PAT_REDUCE_SCATTER:
        call = "MPI_Reduce_scatter_block";
        rc = MPI_Reduce_scatter_block(s, c->rbuf, b, c->mdt, MPI_SUM, MPI_COMM_WORLD);
        break;
    case FS_PAT_ALLGATHER:
        call = "MPI_Allgather";
        rc = c->in_place ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->rbuf, b, c->mdt,
                                         MPI_COMM_WORLD)
                         : MPI_Allgather(c->sbuf, b, c->mdt, c->rbuf, b, c->mdt, MPI_COMM_WORLD);
        break;
    case FS_PAT_ALLTOALL:
        call = "MPI_Alltoall";
        rc = c->in_place ? MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, c->rbuf, b, c->mdt,
                                        MPI_COMM_WORLD)
                         : MPI_Alltoall(c->sbuf, b, c->mdt, c->rbuf, b, c->mdt, MPI_COMM_WORLD);
        break;
    case FS_PAT_BCAST:
        call = "MPI_Bcast";
        rc = MPI_Bcast(c->rbuf, n, c->mdt, 0, MPI_COMM_WORLD);
        break;
    default:
        call = "MPI_Barrier";
        rc = MPI_Barrier(MPI_COMM_WORLD);
        break;
    }
    if (rc == MPI_SUCCESS)
        return 0;
    char s2[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, s2, &len);
    return fs_fail(err, FS_EXIT_MEASURE, "mpi: %s failed on rank %d: %s", call, c->rank, s2);
}

/* The first wrong element on one rank, gathered to rank 0. */
struct wrong {
    int64_t element; /* -1: every element was right */
    double want, got;
};

static struct wrong check(const struct coll *c)
{
    struct wrong w = {-1, 0, 0};
    if (c->pat == FS_PAT_BARRIER)
        return w;
    uint64_t n = result_count(c);
    for (uint64_t j = 0; j < n; j++) {
        double want = expected(c, j), got = get(c, c->rbuf, j);
        if (got != want) {
            w = (struct wrong){(int64_t)j, want, got};
            break;
        }
    }
    return w;
}

/* Test only (tests/integration/test_mpi_collectives.py): FABSCOPE_TEST_CORRUPT_RESULT=RANK:ELEMENT
 * changes that element of that rank's result after the checked collective returned, as a library
 * or fabric returning wrong data would, so the check and its report are exercised for real. */
static void corrupt_for_test(const struct coll *c)
{
    const char *t = getenv("FABSCOPE_TEST_CORRUPT_RESULT");
    int r = -1;
    unsigned long long e = 0;
    if (!t || sscanf(t, "%d:%llu", &r, &e) != 2 || r != c->rank || e >= result_count(c))
        return;
    put(c, c->rbuf, e, get(c, c->rbuf, e) + 1);
}

static void print_json(cJSON *o)
{
    char *text = cJSON_PrintUnformatted(o);
    if (text) {
        fputs(text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
    }
    cJSON_free(text);
}

/* Rank 0 says what failed (stderr, and a fabscope.error/1 record with --format json). */
static int report(const struct fs_spec *spec, int rank, const struct fs_err *err)
{
    if (rank != 0)
        return err->code;
    fprintf(stderr, "fabscope-engine: %s\n", err->msg);
    if (strcmp(spec->format, "json") == 0) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "schema", "fabscope.error/1");
        cJSON_AddNumberToObject(e, "exit_code", err->code);
        cJSON_AddStringToObject(e, "message", err->msg);
        print_json(e);
        cJSON_Delete(e);
    }
    return err->code;
}

/* Every rank's status agreed: the worst exit code of any rank (0 = all fine); the message of the
 * lowest failing rank reaches rank 0's err. */
static int agree(int rank, int nranks, struct fs_err *err)
{
    int mine = err->code, worst = 0;
    MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (!worst)
        return 0;
    char *all = rank == 0 ? malloc((size_t)nranks * sizeof err->msg) : NULL;
    MPI_Gather(err->msg, (int)sizeof err->msg, MPI_CHAR, all, (int)sizeof err->msg, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    int codes[1] = {mine};
    int *every = rank == 0 ? malloc((size_t)nranks * sizeof *every) : NULL;
    MPI_Gather(codes, 1, MPI_INT, every, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0 && all && every)
        for (int r = 0; r < nranks; r++)
            if (every[r] == worst) {
                if (r != 0)
                    fs_fail(err, worst, "rank %d: %s", r, all + (size_t)r * sizeof err->msg);
                break;
            }
    err->code = worst;
    free(all);
    free(every);
    return -1;
}

/* Ranks sharing this rank's memory (same node), for the check that the buffers fit. */
static int local_ranks(int *leader)
{
    MPI_Comm node;
    int n = 1, me = 0;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &n);
        MPI_Comm_rank(node, &me);
        MPI_Comm_free(&node);
    }
    *leader = me == 0;
    return n;
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return (uint64_t)kb * 1024;
}

/* Every size checked before anything is allocated; *max_size: the largest, each buffer's size. */
static int plan_sizes(struct coll *c, const struct fs_spec *spec, uint64_t *max_size,
                      struct fs_err *err)
{
    uint64_t max_bytes = 0;
    *max_size = 0;
    for (size_t i = 0; i < spec->sizes.n; i++) {
        uint64_t count, bytes;
        if (fs_collective_layout(c->pat, c->dt, spec->sizes.v[i], c->nranks, &count, &bytes, err))
            return -1;
        if (bytes > max_bytes)
            max_bytes = bytes;
        if (spec->sizes.v[i] > *max_size)
            *max_size = spec->sizes.v[i];
    }
    int here = local_ranks(&c->host_leader);
    uint64_t avail = mem_available(), need = max_bytes * (uint64_t)here;
    if (avail && need > avail)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--sizes: %s of the largest size needs %llu MiB per rank, %llu MiB for "
                       "the %d ranks on host %s, which has %llu MiB available (MemAvailable); "
                       "nothing was allocated. Use a smaller size or fewer ranks per host (--ppn)",
                       fs_pattern_names[c->pat], (unsigned long long)(max_bytes >> 20),
                       (unsigned long long)(need >> 20), here, c->hosts[c->rank],
                       (unsigned long long)(avail >> 20));
    return 0;
}

static int same_version(int rank, int nranks, struct fs_err *err)
{
    char mine[32] = "", *all = malloc((size_t)nranks * sizeof mine);
    snprintf(mine, sizeof mine, "%s", FS_TOOL_VERSION);
    const char *forced = getenv("FABSCOPE_TEST_ENGINE_VERSION"); /* test only: a rank of another
                                                                    * version, for real */
    if (forced)
        snprintf(mine, sizeof mine, "%s", forced);
    if (!all)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    MPI_Allgather(mine, sizeof mine, MPI_CHAR, all, sizeof mine, MPI_CHAR, MPI_COMM_WORLD);
    int rc = 0;
    for (int r = 1; r < nranks && !rc; r++)
        if (strcmp(all + (size_t)r * sizeof mine, all) != 0)
            rc = fs_fail(err, FS_EXIT_USAGE,
                         "the ranks run different fabscope versions: rank 0 runs %s, rank %d runs "
                         "%s; install one version on every host",
                         all, r, all + (size_t)r * sizeof mine);
    (void)rank;
    free(all);
    return rc;
}

static void add_library(cJSON *rec, const struct coll *c, uint64_t size)
{
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    ver[strcspn(ver, "\n")] = '\0';
    cJSON *t = cJSON_AddObjectToObject(rec, "transport");
    cJSON_AddStringToObject(t, "kind", "mpi");
    cJSON_AddStringToObject(t, "library", ver);
    /* Rank 0's view towards the first rank on another host (the fabric's path), else rank 1. */
    int peer = 1;
    for (int r = 1; r < c->nranks; r++)
        if (strcmp(c->hosts[r], c->hosts[0]) != 0) {
            peer = r;
            break;
        }
    cJSON_AddNumberToObject(t, "described_peer", peer);
    fs_mpi_describe_collective(peer, c->hosts[peer], fs_pattern_names[c->pat], size, t);
    cJSON *h = cJSON_AddArrayToObject(rec, "rank_hosts");
    for (int r = 0; r < c->nranks; r++)
        cJSON_AddItemToArray(h, cJSON_CreateString(c->hosts[r]));
}

/* Each host leader's counters (fs_counters_json: before and after the measured phase) and its
 * requested netdev's rate, gathered to rank 0 as [{"rank": r, "counters": {...}, "link":
 * {device, rate_gbps, rate_source}}, ...]; NULL on the other ranks. */
static cJSON *gather_json(const struct coll *c, const char *mine);

static cJSON *gather_counters(const struct coll *c, const char *device)
{
    char *mine = NULL;
    if (c->host_leader && c->before && c->after) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "counters", fs_counters_json(c->before, c->after));
        /* The requested netdev's rate, for the front end's ceiling (the slowest link). */
        cJSON *link = cJSON_AddObjectToObject(j, "link");
        char nd[64];
        snprintf(nd, sizeof nd, "%.*s", (int)strcspn(device, ":"), device);
        cJSON_AddStringToObject(link, "device", nd);
        if (!nd[0])
            fs_link_add_rate(link, 0, "no --device: no link to judge against");
        else if (strchr(device, ':'))
            fs_link_add_rate(link, 0, "an RDMA port: its rate is not read for collectives yet");
        else
            fs_link_add_netdev_rate(link, nd);
        mine = cJSON_PrintUnformatted(j);
        cJSON_Delete(j);
    }
    cJSON *out = gather_json(c, mine);
    cJSON_free(mine);
    return out;
}

/* Every rank's JSON text (NULL: none from that rank) gathered to rank 0 as an array of the parsed
 * objects, in rank order, each with its "rank"; NULL on the other ranks. */
static cJSON *gather_json(const struct coll *c, const char *mine)
{
    int len = mine ? (int)strlen(mine) + 1 : 0;
    int *lens = c->rank == 0 ? calloc((size_t)c->nranks, sizeof *lens) : NULL;
    int *offs = c->rank == 0 ? calloc((size_t)c->nranks, sizeof *offs) : NULL;
    MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char *all = NULL;
    if (c->rank == 0 && lens && offs) {
        size_t total = 0;
        for (int r = 0; r < c->nranks; r++) {
            offs[r] = (int)total;
            total += (size_t)lens[r];
        }
        all = malloc(total + 1);
    }
    MPI_Gatherv(mine ? mine : "", len, MPI_CHAR, all, lens, offs, MPI_CHAR, 0, MPI_COMM_WORLD);
    cJSON *out = NULL;
    if (c->rank == 0 && all) {
        out = cJSON_CreateArray();
        for (int r = 0; r < c->nranks; r++) {
            if (!lens[r])
                continue;
            cJSON *e = cJSON_Parse(all + offs[r]);
            if (!e)
                continue;
            cJSON_AddNumberToObject(e, "rank", r);
            cJSON_AddItemToArray(out, e);
        }
    }
    free(all);
    free(lens);
    free(offs);
    return out;
}

/* The host probe: after the measured phase, the first rank of each host receives one message
 * from the previous host's first rank (in rank order, round the ring: "from_left") while sending
 * one to the next, then the same the other way round ("from_right"); each rank times only its
 * receive (the send completes in the untimed meeting that follows). A host whose link is slow
 * receives slowly both ways; a host beside it only one way. The front end decides
 * (results/collective.py); this only measures. Every rank takes part in the meetings. */
static int probe_sync(void *ctx, int stop, int *all_stop, struct fs_err *err)
{
    struct coll *c = ctx;
    if (c->probe_send != MPI_REQUEST_NULL)
        MPI_Wait(&c->probe_send, MPI_STATUS_IGNORE);
    return coll_sync(ctx, stop, all_stop, err);
}

static int probe_run(void *ctx, struct fs_err *err)
{
    struct coll *c = ctx;
    if (c->leader_index < 0)
        return 0;
    int n = c->nleaders, k = c->leader_index;
    int left = c->leaders[(k + n - 1) % n], right = c->leaders[(k + 1) % n];
    int from = c->probe_dir ? right : left, to = c->probe_dir ? left : right;
    MPI_Request recv;
    int rc = MPI_Irecv(c->probe_rbuf, (int)PROBE_BYTES, MPI_BYTE, from, 7, MPI_COMM_WORLD, &recv);
    if (rc == MPI_SUCCESS)
        rc = MPI_Isend(c->probe_sbuf, (int)PROBE_BYTES, MPI_BYTE, to, 7, MPI_COMM_WORLD,
                       &c->probe_send);
    if (rc == MPI_SUCCESS)
        rc = MPI_Wait(&recv, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : fs_fail(err, FS_EXIT_MEASURE, "mpi: the host probe's message "
                                                                 "from rank %d to rank %d failed",
                                           from, c->rank);
}

/* --cpu for every rank, as it places a pair's engine (placement.c), each rank taking its own
 * slot among the ranks of its machine: hosts with one boot_id are one machine (the netns
 * testbed's hosts share this one's CPUs), so its ranks get distinct CPUs while there are enough.
 * Rank 0 keeps where each ran (rank_placement) and, per machine, ranks that share a CPU or
 * outnumber the CPUs they may use (oversubscribed): stated in every record, never silent. */
static int place_ranks(struct coll *c, const struct fs_spec *spec, struct fs_err *err)
{
    static struct fs_sysinfo si;
    fs_sysinfo_read(&si);
    char (*boots)[64] = calloc((size_t)c->nranks, sizeof *boots);
    if (!boots)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    char mine_boot[64];
    snprintf(mine_boot, sizeof mine_boot, "%s", si.boot_id[0] ? si.boot_id : c->hosts[c->rank]);
    MPI_Allgather(mine_boot, sizeof mine_boot, MPI_CHAR, boots, sizeof mine_boot, MPI_CHAR,
                  MPI_COMM_WORLD);
    long slot = 0;
    for (int q = 0; q < c->rank; q++)
        slot += strcmp(boots[q], mine_boot) == 0;
    int rc = fs_place(spec->cpu, slot, spec->device, &si, err);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "host", c->hosts[c->rank]);
    cJSON_AddStringToObject(j, "machine", mine_boot);
    cJSON_AddNumberToObject(j, "slot", (double)slot);
    fs_placement_json(&si.place, &si, j);
    cJSON_AddStringToObject(j, "cpus_allowed", si.cpus_allowed);
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    cJSON *all = gather_json(c, rc ? NULL : text);
    cJSON_free(text);
    if (c->rank == 0 && all) {
        c->oversubscribed = cJSON_CreateArray();
        for (int r = 0; r < c->nranks; r++) {
            int first = 1;
            for (int q = 0; q < r && first; q++)
                first = strcmp(boots[q], boots[r]) != 0;
            if (!first)
                continue;
            /* This machine's ranks (from r on): two pinned to one CPU, or more unpinned ranks
             * than the CPUs they may use. */
            int shared = 0, unpinned = 0;
            char ranks[256] = "", hosts[512] = "";
            for (int q = r; q < c->nranks; q++) {
                if (strcmp(boots[q], boots[r]) != 0)
                    continue;
                size_t at = strlen(ranks), ht = strlen(hosts);
                snprintf(ranks + at, sizeof ranks - at, "%s%d", at ? "," : "", q);
                if (!strstr(hosts, c->hosts[q]))
                    snprintf(hosts + ht, sizeof hosts - ht, "%s%s", ht ? "," : "", c->hosts[q]);
                cJSON *cpu = cJSON_GetObjectItem(cJSON_GetArrayItem(all, q), "cpu");
                if (!cJSON_IsNumber(cpu)) {
                    unpinned++;
                    continue;
                }
                for (int p = r; p < q && !shared; p++) {
                    cJSON *other = cJSON_GetObjectItem(cJSON_GetArrayItem(all, p), "cpu");
                    shared = strcmp(boots[p], boots[r]) == 0 && cJSON_IsNumber(other) &&
                             other->valuedouble == cpu->valuedouble;
                }
            }
            if (!shared && !(unpinned > 1 && unpinned > si.cpus_allowed_n))
                continue;
            char said[1024], why[96];
            long number;
            struct fs_err ignored = {0};
            if (!shared)
                snprintf(why, sizeof why, "are not pinned and outnumber the CPUs they may use");
            else if (fs_cpu_asked_check(spec->cpu, &number, &ignored) == 0 && number >= 0)
                snprintf(why, sizeof why, "share CPU %ld: --cpu %ld pins every rank there", number,
                         number);
            else
                snprintf(why, sizeof why, "share CPUs: more ranks than the CPUs they may use");
            snprintf(said, sizeof said,
                     "ranks %s (on %s, one machine) %s: a spinning rank waits for a time slice of "
                     "the CPU it shares, and the collective with it; use fewer ranks per host "
                     "(--ppn), hosts on other machines or --cpu auto",
                     ranks, hosts, why);
            cJSON_AddItemToArray(c->oversubscribed, cJSON_CreateString(said));
        }
        c->placement = all;
    } else {
        cJSON_Delete(all);
    }
    free(boots);
    return rc;
}

/* The first rank of each host (by processor name, as rank_hosts says), and the probe's buffers
 * on those ranks when there are two hosts or more. */
static void probe_setup(struct coll *c, struct fs_err *err)
{
    c->probe_send = MPI_REQUEST_NULL;
    c->leader_index = -1;
    c->leaders = calloc((size_t)c->nranks, sizeof *c->leaders);
    if (!c->leaders) {
        fs_fail(err, FS_EXIT_MEASURE, "out of memory");
        return;
    }
    for (int r = 0; r < c->nranks; r++) {
        int first = 1;
        for (int q = 0; q < r && first; q++)
            first = strcmp(c->hosts[q], c->hosts[r]) != 0;
        if (!first)
            continue;
        if (r == c->rank)
            c->leader_index = c->nleaders;
        c->leaders[c->nleaders++] = r;
    }
    if (c->nleaders < 2 || c->leader_index < 0)
        return;
    c->probe_sbuf = calloc(1, PROBE_BYTES);
    c->probe_rbuf = calloc(1, PROBE_BYTES);
    if (!c->probe_sbuf || !c->probe_rbuf)
        fs_fail(err, FS_EXIT_MEASURE, "cannot allocate 2 x %u bytes for the host probe",
                PROBE_BYTES);
}

/* The probe's times (rank 0: host_probe, one entry per host's first rank), or NULL with fewer than
 * two hosts. */
static cJSON *probe_hosts(struct coll *c, struct fs_err *err)
{
    struct fs_samples *scratch = &c->probe_times;
    if (c->nleaders < 2)
        return NULL;
    const struct fs_coll_hooks hooks = {probe_sync, probe_run};
    double best[2] = {-1, -1}, *all = c->rank == 0 ? malloc(2 * sizeof *all * (size_t)c->nranks)
                                                   : NULL;
    for (int dir = 0; dir < 2; dir++) {
        c->probe_dir = dir;
        fs_samples_clear(scratch);
        if (fs_coll_phase(&hooks, c, PROBE_REPS, 0, scratch, err)) {
            free(all);
            return NULL;
        }
        int stop = 1, all_stop = 0; /* the last send completes before the next direction */
        probe_sync(c, stop, &all_stop, err);
        for (size_t i = 0; c->leader_index >= 0 && i < scratch->n; i++)
            if (best[dir] < 0 || scratch->v[i] < best[dir])
                best[dir] = scratch->v[i];
    }
    MPI_Gather(best, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (c->rank != 0 || !all) {
        free(all);
        return NULL;
    }
    cJSON *probe = cJSON_CreateObject();
    cJSON_AddNumberToObject(probe, "bytes", PROBE_BYTES);
    cJSON_AddNumberToObject(probe, "reps", PROBE_REPS);
    cJSON_AddStringToObject(probe, "how",
                            "after the measured phase, each host's first rank received one message "
                            "from the previous host's first rank (ring in rank order) while sending "
                            "to the next, then the other way round; the fastest of the repetitions "
                            "of each receive, on the receiver's clock");
    cJSON *hosts = cJSON_AddArrayToObject(probe, "hosts");
    for (int i = 0; i < c->nleaders; i++) {
        int r = c->leaders[i];
        cJSON *h = cJSON_CreateObject();
        cJSON_AddNumberToObject(h, "rank", r);
        cJSON_AddNumberToObject(h, "from_left_ns", all[2 * r]);
        cJSON_AddNumberToObject(h, "from_right_ns", all[2 * r + 1]);
        cJSON_AddItemToArray(hosts, h);
    }
    free(all);
    return probe;
}

/* One size: warm-up, the measured phase, the times across ranks, the check. Rank 0 prints. */
static int one_size(struct coll *c, const struct fs_spec *spec, uint64_t size,
                    struct fs_samples *mine, struct fs_err *err)
{
    uint64_t bytes;
    if (fs_collective_layout(c->pat, c->dt, size, c->nranks, &c->count, &bytes, err))
        return -1;
    c->block = c->pat == FS_PAT_BARRIER ? 0 : (int)(c->count / (uint64_t)c->nranks);
    if (c->pat == FS_PAT_ALLREDUCE || c->pat == FS_PAT_BCAST)
        c->block = (int)c->count;
    const struct fs_coll_hooks hooks = {coll_sync, coll_run};
    fill(c);
    fs_samples_clear(mine);
    if (fs_coll_phase(&hooks, c, spec->warmup, spec->warmup_time, NULL, err))
        return -1;
    long iters = spec->duration > 0 ? 0x7fffffffL : spec->iters;
    if (c->before)
        fs_counters_snap(c->before, -1);
    if (fs_coll_phase(&hooks, c, iters, spec->duration, mine, err))
        return -1;
    if (c->after)
        fs_counters_snap(c->after, -1);
    cJSON *counters = gather_counters(c, spec->device);
    cJSON *probe = probe_hosts(c, err);
    if (err->code) {
        cJSON_Delete(counters);
        return -1;
    }
    /* The check: inputs again (an in-place run overwrote them), one more collective, every
     * element of this rank's result compared with what it must be. */
    fill(c);
    if (coll_run(c, err))
        return -1;
    corrupt_for_test(c);
    struct wrong w = check(c), *wrongs = NULL;
    size_t n = mine->n;
    struct fs_coll_across a = {0};
    if (c->rank == 0) {
        wrongs = calloc((size_t)c->nranks, sizeof *wrongs);
        a.max_ns = malloc(n * sizeof *a.max_ns + 1);
        a.min_ns = malloc(n * sizeof *a.min_ns + 1);
        a.last_rank = malloc(n * sizeof *a.last_rank + 1);
    }
    struct {
        double t;
        int rank;
    } *loc = malloc(n * sizeof *loc + 1), *lastloc = c->rank == 0 ? malloc(n * sizeof *loc + 1) : NULL;
    for (size_t i = 0; loc && i < n; i++) {
        loc[i].t = mine->v[i];
        loc[i].rank = c->rank;
    }
    int cnt = (int)n;
    MPI_Reduce(mine->v, a.max_ns, cnt, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(mine->v, a.min_ns, cnt, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(loc, lastloc, cnt, MPI_DOUBLE_INT, MPI_MAXLOC, 0, MPI_COMM_WORLD);
    MPI_Gather(&w, (int)sizeof w, MPI_BYTE, wrongs, (int)sizeof w, MPI_BYTE, 0, MPI_COMM_WORLD);
    int rc = 0;
    if (c->rank == 0) {
        a.n = n;
        for (size_t i = 0; lastloc && a.last_rank && i < n; i++)
            a.last_rank[i] = lastloc[i].rank;
        int bad = -1, nbad = 0;
        for (int r = 0; wrongs && r < c->nranks; r++)
            if (wrongs[r].element >= 0) {
                nbad++;
                if (bad < 0)
                    bad = r;
            }
        cJSON *rec = a.max_ns && a.min_ns && a.last_rank ? fs_coll_record(spec, c->pat, c->nranks,
                                                                           size, c->count, &a)
                                                         : NULL;
        if (!rec) {
            rc = fs_fail(err, FS_EXIT_MEASURE, "out of memory for the size's record");
        } else {
            add_library(rec, c, size);
            cJSON_AddStringToObject(rec, "requested_device", spec->device);
            cJSON_AddItemToObject(rec, "host_counters", counters);
            counters = NULL;
            if (c->placement)
                cJSON_AddItemToObject(rec, "rank_placement", cJSON_Duplicate(c->placement, 1));
            if (c->oversubscribed)
                cJSON_AddItemToObject(rec, "oversubscribed",
                                      cJSON_Duplicate(c->oversubscribed, 1));
            if (probe)
                cJSON_AddItemToObject(rec, "host_probe", probe);
            probe = NULL;
            cJSON *v = cJSON_AddObjectToObject(rec, "verified");
            cJSON_AddNumberToObject(v, "elements_per_rank", (double)(c->pat == FS_PAT_BARRIER
                                                                         ? 0 : result_count(c)));
            cJSON_AddNumberToObject(v, "bound", 0);
            cJSON_AddStringToObject(v, "how", "every element of every rank's result after the "
                                              "timed loop, from fresh inputs; inputs are integers "
                                              "1..65521, so every sum is exact (bound 0)");
            cJSON_AddBoolToObject(v, "ok", bad < 0);
            if (bad < 0)
                print_json(rec);
            cJSON_Delete(rec);
            if (bad >= 0)
                rc = fs_fail(err, FS_EXIT_WRONG_DATA,
                             "wrong data: %s of %llu bytes (%s) returned a wrong result on rank "
                             "%d (host %s): element %lld is %.17g, expected %.17g (%d of %d ranks "
                             "had a wrong element); the MPI library or the fabric corrupted it",
                             fs_pattern_names[c->pat], (unsigned long long)size,
                             fs_dtype_names[c->dt], bad, c->hosts[bad],
                             (long long)wrongs[bad].element, wrongs[bad].got, wrongs[bad].want,
                             nbad, c->nranks);
        }
    }
    cJSON_Delete(counters);
    cJSON_Delete(probe);
    free(wrongs);
    free(loc);
    free(lastloc);
    free(a.max_ns);
    free(a.min_ns);
    free(a.last_rank);
    return rc;
}

static const MPI_Datatype *mpi_type(enum fs_dtype dt)
{
    static MPI_Datatype t[FS_DT_COUNT];
    t[FS_DT_INT32] = MPI_INT32_T;
    t[FS_DT_FLOAT32] = MPI_FLOAT;
    t[FS_DT_FLOAT64] = MPI_DOUBLE;
    return &t[dt];
}

int fs_mpi_collective_main(const struct fs_spec *given, int rank, int nranks)
{
    static struct fs_spec spec;
    spec = *given;
    struct fs_err err = {0};
    struct coll c = {.rank = rank, .nranks = nranks, .in_place = spec.in_place};
    struct fs_samples mine = {0};
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    c.pat = (enum fs_pattern)fs_pattern_by_name(spec.pattern);
    c.dt = fs_dtype_of(&spec);
    c.mdt = *mpi_type(c.dt);
    c.hosts = calloc((size_t)nranks, sizeof *c.hosts);
    char me[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_Get_processor_name(me, &len);
    if (c.hosts)
        MPI_Allgather(me, sizeof me, MPI_CHAR, c.hosts, sizeof me, MPI_CHAR, MPI_COMM_WORLD);
    if (!c.hosts)
        fs_fail(&err, FS_EXIT_MEASURE, "out of memory");
    else if (same_version(rank, nranks, &err) == 0 &&
             fs_collective_check(&spec, c.pat, &err) == 0 && nranks > COLL_MAX_EXACT_RANKS)
        fs_fail(&err, FS_EXIT_USAGE,
                "%d ranks: the collectives' check is exact up to %d ranks; run at most that many",
                nranks, COLL_MAX_EXACT_RANKS);
    if (!err.code && spec.sizes.n == 0 && c.pat != FS_PAT_BARRIER) {
        spec.sizes.n = 1;
        spec.sizes.v[0] = FS_DEFAULT_BW_SIZE;
    }
    if (!err.code && c.pat == FS_PAT_BARRIER) {
        spec.sizes.n = 1;
        spec.sizes.v[0] = 0;
    }
    uint64_t max_size = 0;
    if (!err.code)
        plan_sizes(&c, &spec, &max_size, &err);
    if (!err.code && c.host_leader) {
        c.before = malloc(sizeof *c.before);
        c.after = malloc(sizeof *c.after);
    }
    if (agree(rank, nranks, &err))
        goto out;
    fs_clock_begin();
    struct fs_clock_info clock;
    if (fs_clock_setup(spec.clock, "", &clock, &err) == 0 && max_size) {
        c.sbuf = c.pat == FS_PAT_BCAST ? NULL : malloc(max_size);
        c.rbuf = malloc(max_size);
        if ((!c.sbuf && c.pat != FS_PAT_BCAST) || !c.rbuf)
            fs_fail(&err, FS_EXIT_MEASURE, "cannot allocate 2 x %llu bytes on host %s",
                    (unsigned long long)max_size, me);
    }
    if (!err.code)
        probe_setup(&c, &err);
    if (!err.code)
        place_ranks(&c, &spec, &err);
    if (agree(rank, nranks, &err))
        goto out;
    for (size_t i = 0; i < spec.sizes.n; i++) {
        one_size(&c, &spec, spec.sizes.v[i], &mine, &err);
        if (agree(rank, nranks, &err))
            break;
    }
out:
    fs_samples_free(&mine);
    fs_samples_free(&c.probe_times);
    cJSON_Delete(c.placement);
    cJSON_Delete(c.oversubscribed);
    free(c.leaders);
    free(c.probe_sbuf);
    free(c.probe_rbuf);
    free(c.sbuf);
    free(c.rbuf);
    free(c.hosts);
    free(c.before);
    free(c.after);
    return err.code ? report(&spec, rank, &err) : 0;
}
