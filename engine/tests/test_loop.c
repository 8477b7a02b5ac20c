/* SPDX-License-Identifier: BSD-3-Clause */
/* The timing loops (src/core/loop.c) on the null backend (src/backends/null.c): a client and a
 * server side, each in its own thread as two engines would be, joined by a socketpair for the
 * control channel and by the null backend's in-process pairing for the "data". Each side runs
 * what engine.c's size_phases runs for one size: warmup (when asked) and the measured phase, each
 * followed by the phase_done exchange. Nothing here is mocked but the transport, which the null
 * backend replaces by "every post completes at once". */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "engine.h"

extern const struct fs_backend_ops fs_backend_null;

#define RUN_LIMIT_S 20

struct side {
    struct fs_run r;
    struct fs_err err;
    int rc;
    int ran_warmup;
    size_t samples_after_warmup;
    struct fs_side_view warm, warm_theirs, mine, theirs;
    double seconds; /* wall time of the side's phases */
};

/* "name=value": a core row or a row of the null backend, as the engine's parser assigns it. */
static int assign(struct fs_run *r, const char *arg)
{
    char name[64];
    const char *eq = strchr(arg, '=');
    if (!eq || (size_t)(eq - arg) >= sizeof name)
        return -1;
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = '\0';
    const struct fs_opt_set *set = &r->core_set;
    const struct fs_option *o = fs_opt_find(set, name);
    if (!o) {
        set = &r->be_set;
        o = fs_opt_find(set, name);
    }
    struct fs_err err = {0};
    if (!o || fs_opt_assign(set, o, eq + 1, &err)) {
        fprintf(stderr, "test_loop: option %s refused: %s\n", arg, err.msg);
        return -1;
    }
    return 0;
}

/* A side that side_free accepts: nothing allocated, no control socket. */
static void side_blank(struct side *s)
{
    memset(s, 0, sizeof *s);
    s->r.ctl.fd = -1;
}

/* A side configured from the shared options (both ends) and its own (NULL-terminated lists),
 * validated as engine.c does; 0, or -1 with s->err (a usage error). */
static int side_init(struct side *s, int is_server, const char *const *shared,
                     const char *const *own)
{
    struct fs_run *r = &s->r;
    side_blank(s);
    r->is_server = is_server;
    r->core_set = (struct fs_opt_set){"core", fs_core_options, &r->spec};
    r->bops = &fs_backend_null;
    r->bopts = calloc(1, fs_backend_null.options_size);
    r->be_set = (struct fs_opt_set){"null", fs_backend_null.options, r->bopts};
    if (!r->bopts || fs_opt_set_defaults(&r->core_set, &s->err) ||
        fs_opt_set_defaults(&r->be_set, &s->err))
        return -1;
    snprintf(r->spec.backend, sizeof r->spec.backend, "null");
    /* A loaded machine (this one runs emulated guests beside the tests) must not change what
     * is checked. Warmup ends at its count, never at --warmup-time (1 s by default), which the
     * test of that bound sets again. Waits sleep (block) unless a test asks for busy polling:
     * two threads spinning against each other for a ping-pong on oversubscribed CPUs took 20 s
     * for 200 round trips, where a sleeping side is woken as soon as its message is there. */
    if (assign(r, "warmup-time=60") || assign(r, "poll=block"))
        return -1;
    for (const char *const *a = shared; a && *a; a++)
        if (assign(r, *a))
            return -1;
    for (const char *const *a = own; a && *a; a++)
        if (assign(r, *a))
            return -1;
    return fs_run_validate(r, &s->err);
}

static void side_free(struct side *s)
{
    struct fs_run *r = &s->r;
    if (r->be)
        r->bops->teardown(r->be);
    fs_ctl_close(&r->ctl);
    fs_samples_free(&r->samples);
    free(r->bopts);
    free(r->iv_tx.v), free(r->iv_rx.v), free(r->peer_iv_tx.v), free(r->peer_iv_rx.v);
    cJSON_Delete(r->peer_done);
}

/* As engine.c's send_error: the peer stops at once instead of at its deadline. */
static void tell_peer(struct side *s)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "error");
    cJSON_AddNumberToObject(m, "code", s->err.code);
    cJSON_AddStringToObject(m, "message", s->err.msg);
    struct fs_err ignore;
    fs_ctl_send(&s->r.ctl, m, 1000, &ignore);
    cJSON_Delete(m);
}

static void *run_side(void *arg)
{
    struct side *s = arg;
    struct fs_run *r = &s->r;
    uint64_t size = r->spec.sizes.v[0];
    uint64_t t0 = fs_now_ns();
    s->rc = -1;
    if (r->bops->prepare(r->be, r->op, size, &s->err))
        goto out;
    if (r->spec.warmup > 0 && r->spec.warmup_time > 0) { /* the condition of size_phases */
        s->ran_warmup = 1;
        if (fs_phase_run(r, FS_PHASE_WARMUP, size, &s->warm, &s->err) ||
            fs_phase_exchange(r, &s->warm, NULL, &s->warm_theirs, NULL, &s->err))
            goto out;
    }
    s->samples_after_warmup = r->samples.n;
    if (fs_phase_run(r, FS_PHASE_MEASURE, size, &s->mine, &s->err) ||
        fs_phase_exchange(r, &s->mine, NULL, &s->theirs, NULL, &s->err))
        goto out;
    s->rc = 0;
out:
    if (s->rc)
        tell_peer(s);
    s->seconds = (double)(fs_now_ns() - t0) / 1e9;
    return NULL;
}

/* What the server side knows of its machine when a test sets it: the CPUs it may run on
 * (fs_sysinfo) and whether the client's boot id differs (engine.c's note_peer_boot). A blank
 * side has 0 and 0: not known. */
static int server_cpus_allowed, server_peer_elsewhere;

/* Both sides of one run: connected, run in two threads, joined. 0 when both were set up (their
 * rc says how the phases went), -1 when a side was refused before running (c->err or s->err). */
static int run_pair(struct side *c, struct side *s, const char *const *shared,
                    const char *const *client_own, const char *const *server_own)
{
    int fds[2];
    side_blank(c), side_blank(s);
    if (side_init(c, 0, shared, client_own) || side_init(s, 1, shared, server_own))
        return -1;
    s->r.si.cpus_allowed_n = server_cpus_allowed;
    s->r.peer_elsewhere = server_peer_elsewhere;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds))
        return -1;
    fs_ctl_init(&c->r.ctl, fds[0], "server (test thread)");
    fs_ctl_init(&s->r.ctl, fds[1], "client (test thread)");
    struct side *both[2] = {c, s};
    for (int i = 0; i < 2; i++) {
        struct fs_run *r = &both[i]->r;
        struct fs_be_ctx ctx = {.spec = &r->spec, .opts = r->bopts, .is_server = r->is_server,
                                .max_size = r->spec.sizes.v[0], .block = r->block};
        if (r->bops->setup(&ctx, &r->be, &both[i]->err))
            return -1;
    }
    for (int i = 0; i < 2; i++) {
        cJSON *addr = cJSON_CreateObject();
        int rc = both[1 - i]->r.bops->local_address(both[1 - i]->r.be, addr, &both[i]->err) ||
                 both[i]->r.bops->connect(both[i]->r.be, addr, 1000, &both[i]->err);
        cJSON_Delete(addr);
        if (rc)
            return -1;
    }
    pthread_t th[2];
    if (pthread_create(&th[0], NULL, run_side, c))
        return -1;
    if (pthread_create(&th[1], NULL, run_side, s)) {
        pthread_join(th[0], NULL); /* the client ends at its deadline without a peer */
        return -1;
    }
    /* Every run here ends within seconds, at the latest at a --timeout of the loop: one that
     * outlives RUN_LIMIT_S broke a deadline, and the test fails saying so instead of hanging. */
    struct timespec limit;
    clock_gettime(CLOCK_REALTIME, &limit);
    limit.tv_sec += RUN_LIMIT_S;
    for (int i = 0; i < 2; i++)
        if (pthread_timedjoin_np(th[i], NULL, &limit)) {
            fprintf(stderr, "test_loop: a %s/%s run still ran after %d s: a deadline of the "
                            "timing loop was not kept\n",
                    c->r.spec.op, c->r.spec.pattern, RUN_LIMIT_S);
            _exit(1);
        }
    return 0;
}

static uint64_t sum(const struct fs_counts *k)
{
    uint64_t t = 0;
    for (size_t i = 0; i < k->n; i++)
        t += k->v[i];
    return t;
}

static int all_samples_positive(const struct fs_samples *x)
{
    for (size_t i = 0; i < x->n; i++)
        if (!(x->v[i] > 0) || !isfinite(x->v[i]))
            return 0;
    return 1;
}

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Latency: the initiator keeps one sample per measured iteration, none of the warmup's; the
 * responder answers each (ACTIVE ops) or, for a read, is the idle target that only waits for the
 * count. */
static void test_lat(void)
{
    static struct side c, s; /* large (counter snapshots): off the stack */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "iters=200", "warmup=30"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0);
    CHECK(c.ran_warmup && c.warm.tx_msgs == 30 && s.warm.rx_msgs == 30);
    CHECK(c.samples_after_warmup == 0); /* warmup iterations are not samples */
    CHECK(c.r.samples.n == 200 && c.mine.tx_msgs == 200);
    CHECK(all_samples_positive(&c.r.samples));
    CHECK(s.mine.rx_msgs == 200 && s.r.samples.n == 0);
    CHECK(c.theirs.rx_msgs == 200 && s.theirs.tx_msgs == 200); /* the phase_done exchange */
    CHECK(c.mine.tx_span_ns > 0 && c.mine.wall_ns > 0);
    cJSON *tr = cJSON_CreateObject(); /* what the record's transport would say */
    c.r.bops->describe(c.r.be, tr);
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(tr, "kind"));
    CHECK(kind && strcmp(kind, "null") == 0);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(tr, "posts")) == 230);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(tr, "arrivals")) == 230);
    cJSON_Delete(tr);
    side_free(&c), side_free(&s);

    /* A read: the target has nothing to progress (the null backend says idle, as verbs does),
     * sleeps on the control channel and wakes for the initiator's count. */
    CHECK(run_pair(&c, &s, LIST("op=read", "pattern=lat", "iters=100", "warmup=10"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0);
    CHECK(c.samples_after_warmup == 0 && c.r.samples.n == 100 && c.mine.tx_msgs == 100);
    CHECK(s.mine.rx_msgs == 0 && s.mine.tx_msgs == 0 && s.mine.control_polls >= 1);
    side_free(&c), side_free(&s);

    /* No warmup at all: --warmup 0 (or --warmup-time 0) skips the phase. Busy polling. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "iters=50", "warmup=0", "poll=busy"),
                   NULL, NULL) == 0);
    CHECK(c.rc == 0 && !c.ran_warmup && c.r.samples.n == 50);
    side_free(&c), side_free(&s);

    /* A warmup bounded by time: a billion iterations asked, --warmup-time 0.1 ends it. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "iters=40", "warmup=1000000000",
                                "warmup-time=0.1"),
                   NULL, NULL) == 0);
    CHECK(c.rc == 0 && c.ran_warmup);
    CHECK(c.warm.tx_msgs > 0 && c.warm.tx_msgs < 1000000000ull);
    CHECK(c.warm.tx_span_ns >= 100000000ull && c.warm.tx_span_ns < 3000000000ull);
    CHECK(s.warm.rx_msgs == c.warm.tx_msgs);
    CHECK(c.samples_after_warmup == 0 && c.r.samples.n == 40);
    side_free(&c), side_free(&s);

    /* A responder whose post finds no room (a send queue of one) retries after progress. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "iters=100", "warmup=0"), NULL,
                   LIST("null-queue=1")) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.r.samples.n == 100 && s.mine.rx_msgs == 100);
    side_free(&c), side_free(&s);

    /* --duration on a latency run: samples for as long as asked, one per iteration. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "duration=0.2", "warmup=0"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0);
    CHECK(c.mine.tx_msgs > 0 && c.r.samples.n == c.mine.tx_msgs);
    CHECK(s.mine.rx_msgs == c.mine.tx_msgs);
    CHECK(c.mine.tx_span_ns >= 200000000ull && c.mine.tx_span_ns < 2000000000ull);
    side_free(&c), side_free(&s);
}

/* Bandwidth: the sender's count, the receiver's count of arrivals, no samples; bibw both ways. */
static void test_bw(void)
{
    static struct side c, s; /* large (counter snapshots): off the stack */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bw", "iters=5000", "warmup=100",
                                "tx-depth=16"),
                   NULL, NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0);
    CHECK(c.warm.tx_msgs == 100 && s.warm.rx_msgs == 100);
    CHECK(c.mine.tx_msgs == 5000 && c.mine.rx_msgs == 0);
    CHECK(s.mine.rx_msgs == 5000 && s.mine.rx_timed_msgs == 5000 && s.mine.tx_msgs == 0);
    CHECK(c.theirs.rx_msgs == 5000);
    CHECK(c.r.samples.n == 0 && s.r.samples.n == 0);
    CHECK(s.mine.rx_span_ns > 0 && c.mine.tx_span_ns > 0);
    side_free(&c), side_free(&s);

    /* Busy polling, and a sender whose queue holds 3 (posts find no room, the window waits). */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bw", "iters=3000", "warmup=0", "poll=busy"),
                   LIST("null-queue=3"), NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.mine.tx_msgs == 3000 && s.mine.rx_msgs == 3000);
    side_free(&c), side_free(&s);

    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bibw", "iters=4000", "warmup=50"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0);
    CHECK(c.warm.tx_msgs == 50 && c.warm.rx_msgs == 50 && s.warm.tx_msgs == 50);
    CHECK(c.mine.tx_msgs == 4000 && c.mine.rx_msgs == 4000);
    CHECK(s.mine.tx_msgs == 4000 && s.mine.rx_msgs == 4000);
    CHECK(c.theirs.tx_msgs == 4000 && c.theirs.rx_msgs == 4000);
    side_free(&c), side_free(&s);

    /* A slow link: the sender's count reaches each receiver before the messages do (they show
     * 20 ms after the last one), and the receivers go on until every message has arrived. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bw", "iters=2000", "warmup=0"), NULL,
                   LIST("null-rx-delay-us=20000")) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.mine.tx_msgs == 2000 && s.mine.rx_msgs == 2000);
    side_free(&c), side_free(&s);
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bibw", "iters=2000", "warmup=0",
                                "null-rx-delay-us=20000"),
                   NULL, NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.mine.rx_msgs == 2000 && s.mine.rx_msgs == 2000);
    CHECK(c.mine.tx_msgs == 2000 && s.mine.tx_msgs == 2000);
    side_free(&c), side_free(&s);

    /* A one-sided write: the target sees nothing and idles; the initiator's count is the run. */
    CHECK(run_pair(&c, &s, LIST("op=write", "pattern=bw", "iters=2000", "warmup=10"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.mine.tx_msgs == 2000);
    CHECK(s.mine.rx_msgs == 0 && s.mine.tx_msgs == 0);
    side_free(&c), side_free(&s);

    /* bibw of reads: both initiate, neither receives, each waits for the other's count. */
    CHECK(run_pair(&c, &s, LIST("op=read", "pattern=bibw", "iters=1500", "warmup=0"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0);
    CHECK(c.mine.tx_msgs == 1500 && s.mine.tx_msgs == 1500);
    CHECK(c.mine.rx_msgs == 0 && s.mine.rx_msgs == 0);
    side_free(&c), side_free(&s);
}

/* --duration with --interval: one count per interval on each side, adding up to the phase's
 * messages; the peer's counts arrive in phase_done. */
static void test_intervals(void)
{
    static struct side c, s; /* large (counter snapshots): off the stack */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bw", "duration=0.3", "interval=0.1",
                                "warmup=0"),
                   NULL, NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0);
    CHECK(c.r.interval_ns == 100000000ull);
    CHECK(c.mine.tx_span_ns >= 300000000ull && c.mine.tx_span_ns < 3000000000ull);
    /* Three whole intervals, and one more for what completed after the 0.3 s mark, if anything:
     * the last interval is the one of the last event, which lies within the side's span. (Not
     * every interval need hold messages: a loaded machine may not run a thread for 0.1 s.) */
    const uint64_t len = c.r.interval_ns;
    CHECK(c.r.iv_tx.n >= 3 && c.r.iv_tx.n <= c.mine.tx_span_ns / len + 1);
    CHECK(sum(&c.r.iv_tx) == c.mine.tx_msgs && c.r.iv_rx.n == 0 && !c.r.iv_tx.overflow);
    CHECK(s.mine.rx_msgs == c.mine.tx_msgs && sum(&s.r.iv_rx) == s.mine.rx_msgs);
    CHECK(s.r.iv_rx.n == s.mine.rx_span_ns / len + 1); /* the receiver's span ends at its last */
    CHECK(c.r.peer_iv_rx.n == s.r.iv_rx.n && sum(&c.r.peer_iv_rx) == s.mine.rx_msgs);
    side_free(&c), side_free(&s);

    /* Auto (-1): 1 s intervals on a duration run (a 0.2 s run has one, or two if the machine
     * kept the sender from its last completion past 1 s); off for --iters. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bw", "duration=0.2", "warmup=0"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && c.r.interval_ns == 1000000000ull);
    CHECK(c.r.iv_tx.n >= 1 && c.r.iv_tx.n <= c.mine.tx_span_ns / c.r.interval_ns + 1);
    CHECK(sum(&c.r.iv_tx) == c.mine.tx_msgs);
    side_free(&c), side_free(&s);
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bw", "iters=100", "warmup=0"), NULL,
                   NULL) == 0);
    CHECK(c.rc == 0 && c.r.interval_ns == 0 && c.r.iv_tx.n == 0);
    side_free(&c), side_free(&s);

    /* A warmup before a duration run leaves the measured intervals alone. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bibw", "duration=0.2", "interval=0.05",
                                "warmup=500"),
                   NULL, NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.warm.tx_msgs == 500);
    CHECK(sum(&c.r.iv_tx) == c.mine.tx_msgs && sum(&c.r.iv_rx) == c.mine.rx_msgs);
    CHECK(c.r.iv_tx.n >= 4 && c.r.iv_tx.n <= c.mine.tx_span_ns / c.r.interval_ns + 1);
    CHECK(c.r.iv_rx.n == c.mine.rx_span_ns / c.r.interval_ns + 1);
    side_free(&c), side_free(&s);

    /* Refused before anything runs: intervals on a latency run, and more than 4096 of them. */
    static struct side x;
    CHECK(side_init(&x, 0, LIST("pattern=lat", "interval=0.5"), NULL) == -1 &&
          x.err.code == FS_EXIT_USAGE && strstr(x.err.msg, "not lat"));
    side_free(&x);
    CHECK(side_init(&x, 0, LIST("pattern=bw", "duration=10", "interval=0.001"), NULL) == -1 &&
          x.err.code == FS_EXIT_USAGE && strstr(x.err.msg, "at most 4096"));
    side_free(&x);
    CHECK(side_init(&x, 0, LIST("pattern=bw", "interval=0.0005"), NULL) == -1 &&
          x.err.code == FS_EXIT_USAGE && strstr(x.err.msg, "shortest interval"));
    side_free(&x);
}

/* A backend that stops completing: the no-progress deadline (--timeout) ends both sides with the
 * peer exit code and says so, at the deadline and not much later. */
static void test_deadline(void)
{
    static struct side c, s; /* large (counter snapshots): off the stack */
    /* 2 s: past the 1 s heartbeat, so both sides, waiting in vain, hear each other's heartbeats,
     * which prove a process alive, not a data path, and must not push the deadline back (they
     * would keep both alive forever: the run limit then fails the test). */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "iters=1000", "warmup=0",
                                "timeout=2"),
                   LIST("null-stall-after=20"), NULL) == 0);
    CHECK(c.rc == -1 && c.err.code == FS_EXIT_PEER && strstr(c.err.msg, "no progress for 2.0 s"));
    CHECK(s.rc == -1 && s.err.code == FS_EXIT_PEER && strstr(s.err.msg, "no progress for 2.0 s"));
    /* ... and the message says what the heartbeats prove: the peer lives, its data path stalled. */
    CHECK(strstr(c.err.msg, "is alive") && strstr(c.err.msg, "the data path stalled"));
    CHECK(strstr(s.err.msg, "is alive") && strstr(s.err.msg, "the data path stalled"));
    CHECK(c.r.samples.n == 20); /* the 21st post is the one that never completes */
    CHECK(c.seconds >= 2.0 && c.seconds < 3.0 && s.seconds < 3.0); /* not a deadline later */
    side_free(&c), side_free(&s);

    /* A stalled sender in block mode (its progress sleeps 50 ms slices): the same deadline. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=bw", "iters=100000", "warmup=0",
                                "timeout=0.5", "poll=block"),
                   LIST("null-stall-after=500"), NULL) == 0);
    CHECK(c.rc == -1 && c.err.code == FS_EXIT_PEER && strstr(c.err.msg, "no progress for 0.5 s"));
    /* Half a second: no heartbeat (1 s) was heard, so nothing proves the peer alive. */
    CHECK(strstr(c.err.msg, "stopped answering") && !strstr(c.err.msg, "is alive"));
    CHECK(s.rc == -1 && s.err.code == FS_EXIT_PEER && strstr(s.err.msg, "no progress for 0.5 s"));
    CHECK(c.seconds >= 0.5 && c.seconds < 2.0 && s.seconds < 2.0);
    side_free(&c), side_free(&s);

    /* The stall knob counts per phase: a warmup of 10 and 10 measured pass under stall-after 15. */
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "iters=10", "warmup=10", "timeout=2"),
                   LIST("null-stall-after=15"), NULL) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.r.samples.n == 10);
    side_free(&c), side_free(&s);
}

/* The backend itself: a valid ops struct, not registered (see null.c why), refuses a device and a
 * peer in another process. */
static void test_null_backend(void)
{
    struct fs_err err = {0};
    CHECK(fs_backend_check(&fs_backend_null, &err) == 0);
    CHECK(fs_backend_by_name("null") == NULL);
    static struct side x;
    CHECK(side_init(&x, 0, LIST("device=eth0"), NULL) == -1 && x.err.code == FS_EXIT_USAGE &&
          strstr(x.err.msg, "no device"));
    side_free(&x);
    CHECK(side_init(&x, 0, LIST("pattern=lat"), NULL) == 0);
    struct fs_be_ctx ctx = {.spec = &x.r.spec, .opts = x.r.bopts, .max_size = 8};
    CHECK(fs_backend_null.setup(&ctx, &x.r.be, &err) == 0);
    cJSON *addr = cJSON_CreateObject();
    cJSON_AddNumberToObject(addr, "pid", (double)getpid() + 1);
    cJSON_AddNumberToObject(addr, "endpoint", 1);
    CHECK(fs_backend_null.connect(x.r.be, addr, 100, &err) == -1 && err.code == FS_EXIT_USAGE &&
          strstr(err.msg, "between processes"));
    cJSON_Delete(addr);
    CHECK(fs_backend_null.post(x.r.be, FS_OP_SEND, 8, &err) == -1 && strstr(err.msg, "connect"));
    side_free(&x);
}

/* A ping-pong whose round trip is longer than 1 ms (each request shows 1.5 ms after it was sent,
 * as a UCX tag round trip between two emulated guests takes 1.2-1.4 ms): the responder's wait for
 * the next request is on the initiator's clock, so it must not read its control channel (a
 * syscall) in it. With a fixed 1 ms stall threshold it did in most waits: 198-591 control polls
 * for 210 requests; with the threshold at 4 round trips, 5-61 (the 100 ms housekeeping and the
 * final count). */
static void test_slow_pingpong_keeps_the_control_channel_out_of_the_wait(void)
{
    static struct side c, s;
    CHECK(run_pair(&c, &s, LIST("op=send", "pattern=lat", "iters=200", "warmup=10", "poll=busy"),
                   NULL, LIST("null-rx-delay-us=1500")) == 0);
    CHECK(c.rc == 0 && s.rc == 0 && c.r.samples.n == 200 && s.mine.rx_msgs == 200);
    CHECK(s.mine.control_polls < 100);
    CHECK(c.mine.control_polls < 100);
    side_free(&c), side_free(&s);
}

/* The idle target of a read latency test spins in busy poll mode where it has a CPU the initiator
 * cannot need (two CPUs or more, or the initiator on another machine), and sleeps on the control
 * channel where it would share the initiator's only CPU, always in block mode, and in bandwidth
 * tests (a software device's kernel needs that CPU). Either way its phase ends at the
 * initiator's count. */
static void test_idle_target_spins_only_with_a_cpu_of_its_own(void)
{
    static struct side c, s;
    static const struct {
        int cpus, elsewhere;
        const char *pattern, *poll;
        int spins;
    } cases[] = {{1, 0, "pattern=lat", "poll=busy", 0}, {2, 0, "pattern=lat", "poll=busy", 1},
                 {1, 1, "pattern=lat", "poll=busy", 1}, {0, 0, "pattern=lat", "poll=busy", 0},
                 {2, 1, "pattern=lat", "poll=block", 0}, {2, 1, "pattern=bw", "poll=busy", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        server_cpus_allowed = cases[i].cpus;
        server_peer_elsewhere = cases[i].elsewhere;
        CHECK(run_pair(&c, &s, LIST("op=read", cases[i].pattern, "iters=100", "warmup=10",
                                    cases[i].poll),
                       NULL, NULL) == 0);
        CHECK(c.rc == 0 && s.rc == 0 && c.mine.tx_msgs == 100 && s.mine.rx_msgs == 0);
        CHECK(s.r.idle_side && s.r.idle_spin == cases[i].spins);
        side_free(&c), side_free(&s);
    }
    server_cpus_allowed = server_peer_elsewhere = 0;
}

int main(void)
{
    test_idle_target_spins_only_with_a_cpu_of_its_own();
    test_null_backend();
    test_slow_pingpong_keeps_the_control_channel_out_of_the_wait();
    test_lat();
    test_bw();
    test_intervals();
    test_deadline();
    return CHECK_DONE();
}
