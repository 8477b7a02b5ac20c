/* SPDX-License-Identifier: BSD-3-Clause */
/* The null backend (fio's "null" ioengine): every post completes at once, in this process, and
 * nothing touches a network. Two endpoints in one process are paired through connect(): a message
 * whose target sees it (the op's role for the pattern is ACTIVE) counts as an arrival at the other
 * endpoint, so every timing loop of loop.c (ping-pong initiator and responder, sender, receiver,
 * bibw, the idle target of a read) runs on it, driven by the C tests (engine/tests/test_loop.c).
 *
 * It is NOT registered (registry.c), only linked into the C tests, because:
 *  - it carries nothing between processes: two engines on --backend null could never see each
 *    other's messages, so a user's `fabscope run --backend null` would hang or need the peer to
 *    pretend; fio's null engine has no peer to worry about;
 *  - every list of backends (--options-json, --list-backends, --help, the loopback suite's rows,
 *    serve's device check, the man page) would then show a "transport" that measures nothing,
 *    and a suite row "null send lat 0.05 us" could be read as a fabric's number.
 * Its knobs exist for the tests: a device that hangs (--null-stall-after: the deadlines), a full
 * send queue (--null-queue: the core's retry of a post that found no room), a slow link
 * (--null-rx-delay-us: a receiver that has the sender's count before the messages).
 *
 * Thread safety: the two endpoints of a pair run in two threads. An arrival goes into the peer's
 * inbox under the peer's mutex; the pairing itself under one registry mutex, held on every
 * delivery too so that a teardown of one end never races the other end's post. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "../core/backend.h"
#include "../core/clock.h"

struct null_opts {
    long stall_after; /* 0 = never; else posts of a phase after this many never complete */
    long queue;       /* 0 = unlimited; else post finds no room with this many unreaped */
    long rx_delay_us; /* 0 = at once; else arrivals show once none came for this long */
};

#define F(f) FS_FIELD(struct null_opts, f)
static const struct fs_option null_options[] = {
    {"null-stall-after", FS_OPT_INT, F(stall_after), 0, 1e15, "0", NULL,
     "posts of a phase after this many are accepted and never complete, as on a hung device "
     "(0 = never; for the tests of the deadlines)",
     FS_OPTF_LOCAL},
    {"null-queue", FS_OPT_INT, F(queue), 0, 1e9, "0", NULL,
     "a post finds no room while this many completions are unreaped (0 = unlimited; for the "
     "tests of the core's retry)",
     FS_OPTF_LOCAL},
    {"null-rx-delay-us", FS_OPT_INT, F(rx_delay_us), 0, 1e7, "0", NULL,
     "arrivals at this side show only once none came for this many microseconds, after the "
     "sender's count (0 = at once; for the tests of a receiver that learns the count first)",
     FS_OPTF_LOCAL},
    {0},
};
#undef F

struct null_ep {
    struct null_opts o;
    unsigned long id;
    int is_server;
    enum fs_pattern pat;
    int passive_target; /* nothing to progress on this side: the core waits (fs_events.idle) */
    struct null_ep *peer;
    struct null_ep *next; /* in the registry */
    uint64_t phase_posts; /* posts since the phase began (the stall knob counts them) */
    uint64_t stalled;     /* posts accepted that will never complete */
    uint64_t tx_unreaped; /* completed posts progress() has not reported yet */
    uint64_t posts, arrivals; /* totals, for describe() */
    pthread_mutex_t mu;       /* guards inbox, written by the peer's thread */
    pthread_cond_t cv;
    uint64_t inbox;           /* arrivals not reported yet */
    uint64_t last_arrival_ns; /* when the latest of them came (--null-rx-delay-us) */
};

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static struct null_ep *registry;
static unsigned long next_id = 1;

static int null_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    (void)opts;
    if (spec->device[0] || spec->bind[0])
        return fs_fail(err, FS_EXIT_USAGE,
                       "--%s: the null backend uses no device or address (it moves nothing); "
                       "leave --device and --bind out",
                       spec->device[0] ? "device" : "bind");
    return 0;
}

static enum fs_role role_of(enum fs_op op, enum fs_pattern pat)
{
    return pat == FS_PAT_LAT ? fs_ops[op].lat_role : fs_ops[op].bw_role;
}

static int null_setup(const struct fs_be_ctx *ctx, void **be, struct fs_err *err)
{
    struct null_ep *e = calloc(1, sizeof *e);
    *be = e;
    if (!e)
        return fs_fail(err, FS_EXIT_MEASURE, "null: out of memory");
    if (ctx->opts)
        e->o = *(const struct null_opts *)ctx->opts;
    e->is_server = ctx->is_server;
    int pat = fs_pattern_by_name(ctx->spec->pattern);
    int op = fs_op_by_name(ctx->spec->op);
    if (pat < 0 || op < 0)
        return fs_fail(err, FS_EXIT_USAGE, "null: unknown --op %s or --pattern %s",
                       ctx->spec->op, ctx->spec->pattern);
    e->pat = (enum fs_pattern)pat;
    /* As verbs: the target of operations it never sees (a read, a write in bw) has nothing to
     * progress; in bibw both sides send. */
    e->passive_target = e->is_server && e->pat != FS_PAT_BIBW &&
                        role_of((enum fs_op)op, e->pat) == FS_ROLE_PASSIVE;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_mutex_lock(&registry_mu);
    e->id = next_id++;
    e->next = registry;
    registry = e;
    pthread_mutex_unlock(&registry_mu);
    return 0;
}

static int null_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    (void)err;
    struct null_ep *e = be;
    cJSON_AddNumberToObject(obj, "pid", (double)getpid());
    cJSON_AddNumberToObject(obj, "endpoint", (double)e->id);
    return 0;
}

static int null_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    (void)deadline_ms; /* nothing to wait for: the peer's endpoint exists or it does not */
    struct null_ep *e = be;
    const cJSON *pid = cJSON_GetObjectItemCaseSensitive(peer, "pid");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(peer, "endpoint");
    if (!cJSON_IsNumber(pid) || !cJSON_IsNumber(id))
        return fs_fail(err, FS_EXIT_PEER, "null: the peer's address lacks pid/endpoint");
    if ((pid_t)pid->valuedouble != getpid())
        return fs_fail(err, FS_EXIT_USAGE,
                       "null: the peer's endpoint is in process %.0f, this one is %ld; the null "
                       "backend carries nothing between processes, both ends must run in one "
                       "(as the C tests of the timing loop do)",
                       pid->valuedouble, (long)getpid());
    pthread_mutex_lock(&registry_mu);
    struct null_ep *p = registry;
    while (p && (double)p->id != id->valuedouble)
        p = p->next;
    if (p && p != e)
        e->peer = p;
    pthread_mutex_unlock(&registry_mu);
    if (!p || p == e)
        return fs_fail(err, FS_EXIT_PEER, "null: no other endpoint %.0f in this process",
                       id->valuedouble);
    return 0;
}

static int null_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    (void)be, (void)op, (void)size, (void)err; /* no buffers: nothing is copied */
    return 0;
}

static void deliver(struct null_ep *e)
{
    pthread_mutex_lock(&registry_mu);
    struct null_ep *p = e->peer;
    if (p) {
        pthread_mutex_lock(&p->mu);
        p->inbox++;
        p->last_arrival_ns = fs_now_ns();
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_unlock(&registry_mu);
}

static int null_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    (void)size;
    struct null_ep *e = be;
    if (!e->peer)
        return fs_fail(err, FS_EXIT_MEASURE, "null: post before connect");
    if (e->o.queue > 0 && e->tx_unreaped >= (uint64_t)e->o.queue)
        return 0;
    e->posts++;
    if (e->o.stall_after > 0 && ++e->phase_posts > (uint64_t)e->o.stall_after) {
        e->stalled++;
        return 1;
    }
    e->tx_unreaped++;
    if (role_of(op, e->pat) == FS_ROLE_ACTIVE)
        deliver(e);
    return 1;
}

static int null_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    (void)err;
    struct null_ep *e = be;
    if (e->passive_target) {
        ev->idle = 1;
        return 0;
    }
    pthread_mutex_lock(&e->mu);
    if (!e->inbox && !e->tx_unreaped && wait_ms > 0) {
        /* Block mode: sleep until the peer delivers, as a device's completion channel would. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!e->inbox && pthread_cond_timedwait(&e->cv, &e->mu, &until) != ETIMEDOUT) {
        }
    }
    uint64_t rx = 0;
    const uint64_t delay_ns = (uint64_t)e->o.rx_delay_us * 1000u;
    if (!delay_ns || fs_now_ns() - e->last_arrival_ns >= delay_ns) {
        rx = e->inbox;
        e->inbox = 0;
    }
    pthread_mutex_unlock(&e->mu);
    e->arrivals += rx;
    ev->rx_done += rx;
    ev->tx_done += e->tx_unreaped;
    e->tx_unreaped = 0;
    return 0;
}

static void null_describe(void *be, cJSON *o)
{
    struct null_ep *e = be;
    cJSON_AddStringToObject(o, "kind", "null");
    cJSON_AddNumberToObject(o, "posts", (double)e->posts);
    cJSON_AddNumberToObject(o, "arrivals", (double)e->arrivals);
    cJSON_AddNumberToObject(o, "stalled_posts", (double)e->stalled);
}

static void null_phase_begin(void *be)
{
    struct null_ep *e = be;
    e->phase_posts = 0;
}

static void null_teardown(void *be)
{
    struct null_ep *e = be;
    if (!e)
        return;
    pthread_mutex_lock(&registry_mu);
    for (struct null_ep **p = &registry; *p; p = &(*p)->next)
        if (*p == e) {
            *p = e->next;
            break;
        }
    for (struct null_ep *p = registry; p; p = p->next)
        if (p->peer == e)
            p->peer = NULL;
    int paired = e->id != 0; /* a failed setup (unknown op) registered nothing */
    pthread_mutex_unlock(&registry_mu);
    if (paired) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
    }
    free(e);
}

const struct fs_backend_ops fs_backend_null = {
    .abi = FS_BACKEND_ABI,
    .name = "null",
    .summary = "no transport: every post completes at once in this process (the C tests)",
    .ops = FS_BIT(FS_OP_COUNT) - 1,
    .patterns = FS_BIT(FS_PAT_COUNT) - 1,
    .options = null_options,
    .options_size = sizeof(struct null_opts),
    FS_BACKEND_HOOKS(null),
    .phase_begin = null_phase_begin,
};
