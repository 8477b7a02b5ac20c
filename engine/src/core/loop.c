/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
/* The only timing loops in fabscope. Backends post and progress; everything that reads the clock
 * or decides when a phase ends is here, identical for every transport. */
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

/* CLOCK_REALTIME in ns: where a phase began on the hosts' shared (NTP) time line. Read once per
 * phase, outside the timed loop; the loop's own clock stays fs_now_ns. */
static uint64_t unix_now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Housekeeping (control messages, the no-progress deadline, heartbeats) costs a system call. While
 * data flows it runs every FS_HOUSEKEEP_PERIOD_NS: completions and answers show the peer alive,
 * and the channel carries nothing a side needs before its phase ends. A wait that has been quiet
 * for FS_QUIET_NS (in a ping-pong: FS_STALL_ROUNDS round trips, when that is longer) is
 * different: a stall, or the end of the peer's phase, whose count this side then looks for that
 * often. The loops look at the clock only every FS_CLOCK_EVERY turns,
 * so a busy-polling turn on the measured path pays one increment.
 * Measured (Soft-RoCE between two emulated guests, perftest alternated, six runs each): with a
 * control-socket recv() every 1 ms on each side, the median UC send half round trip was 196 us
 * against 186 (perftest 186); and the sender of a 64 KiB UC write stream fell, a third of the
 * time, to two thirds of its rate for seconds (0.00022 Mpps against 0.000235, perftest 0.00023):
 * each recv() re-enabled bottom halves in the sender's context and ran the device's pending
 * packet work there, until the kernel handed it to ksoftirqd, which then shared the one vCPU
 * with the busy poller. At sub-microsecond round trips a recv() every few hundred turns was a
 * visible part of the latency too (UCX over shared memory). */
#define FS_CLOCK_EVERY 64
#define FS_HOUSEKEEP_PERIOD_NS 100000000ull
#define FS_QUIET_NS 1000000ull
/* A ping-pong's wait counts as a stall only once it lasts FS_STALL_ROUNDS of its previous round
 * trip (and at least FS_QUIET_NS): see stall_after_ns. */
#define FS_STALL_ROUNDS 4
#define FS_HEARTBEAT_NS 1000000000ull
#define FS_BLOCK_SLICE_MS 50
/* Lossy services: how long after the last arrival (with the sender's count known) the missing
 * messages count as lost. Generous: an emulated NIC under TCG stalls for tens of ms. */
#define FS_LOSS_GRACE_NS 500000000ull

static int send_simple(struct fs_run *r, const char *type, struct fs_err *err)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", type);
    int rc = fs_ctl_send(&r->ctl, m, (int)(r->timeout_ns / 1000000), err);
    cJSON_Delete(m);
    return rc;
}

/* Reads whatever control messages are waiting; enforces the no-progress deadline. */
static int housekeeping_due(const struct fs_run *r, uint64_t now)
{
    return now >= r->last_hk_ns + FS_HOUSEKEEP_PERIOD_NS; /* `now` may predate the last pass */
}

static int housekeep_pass(struct fs_run *r, uint64_t now, struct fs_err *err);

/* A failure here is the control channel's own (the peer's report, its silence, a protocol error):
 * marked so that fs_phase_run does not look for the peer's reason a second time. */
static int housekeep(struct fs_run *r, uint64_t now, struct fs_err *err)
{
    if (housekeep_pass(r, now, err)) {
        r->ctl_failed = 1;
        return -1;
    }
    return 0;
}

static int housekeep_pass(struct fs_run *r, uint64_t now, struct fs_err *err)
{
    cJSON *m = NULL;
    int rc;
    r->last_hk_ns = now;
    r->hk_passes++;
    while ((rc = fs_ctl_poll(&r->ctl, &m, err)) == 1) {
        const char *t = fs_ctl_type(m);
        r->peer_heard_ns = now;
        if (strcmp(t, "heartbeat") != 0 || r->idle_side)
            r->last_activity_ns = now;
        if (strcmp(t, "sent") == 0) {
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(m, "n");
            if (!cJSON_IsNumber(n) || n->valuedouble < 0) {
                cJSON_Delete(m);
                return fs_fail(err, FS_EXIT_PEER, "protocol error: 'sent' without a count");
            }
            r->peer_sent = (int64_t)n->valuedouble;
        } else if (strcmp(t, "phase_done") == 0 && !r->peer_done) {
            r->peer_done = m;
            m = NULL;
        } else if (strcmp(t, "error") == 0) {
            const cJSON *msg = cJSON_GetObjectItemCaseSensitive(m, "message");
            fs_fail(err, FS_EXIT_PEER, "the peer %s reported: %s", r->ctl.peer_desc,
                    cJSON_IsString(msg) ? msg->valuestring : "(no message)");
            cJSON_Delete(m);
            return -1;
        } else if (strcmp(t, "heartbeat") != 0) {
            fs_fail(err, FS_EXIT_PEER, "protocol error: unexpected '%s' message during a phase", t);
            cJSON_Delete(m);
            return -1;
        }
        cJSON_Delete(m);
    }
    if (rc < 0)
        return -1;
    /* The peer heard within two of its heartbeat periods: alive, yet nothing moved. */
    if (now - r->last_activity_ns > r->timeout_ns && now - r->peer_heard_ns < 2 * FS_HEARTBEAT_NS)
        return fs_fail(err, FS_EXIT_PEER,
                       "no progress for %.1f s: no data moved, yet the peer %s is alive (its "
                       "heartbeats arrive on the control channel): the data path stalled (packets lost again and again "
                       "with ever longer retransmission timeouts, a queue that does not drain, or "
                       "the transport's flow control). Results measured so far are kept",
                       (double)r->timeout_ns / 1e9, r->ctl.peer_desc);
    if (now - r->last_activity_ns > r->timeout_ns)
        return fs_fail(err, FS_EXIT_PEER,
                       "no progress for %.1f s: the peer %s stopped answering (killed, hung, or "
                       "the link is cut). Results measured so far are kept",
                       (double)r->timeout_ns / 1e9, r->ctl.peer_desc);
    if (now - r->last_heartbeat_ns > FS_HEARTBEAT_NS) {
        /* A passive peer (RDMA read target) sees no data: this tells it we are alive. */
        r->last_heartbeat_ns = now;
        if (send_simple(r, "heartbeat", err))
            return -1;
    }
    return 0;
}

/* A side whose backend has nothing to progress (fs_events.idle: the target of RDMA reads,
 * atomics or writes, which its NIC answers alone) sleeps on the control channel until the peer
 * says something or its own heartbeat is due, as perftest's target sleeps in read(). Nothing
 * here is timed. It used to nap 20 ms between looks: on Soft-RoCE between two emulated guests
 * those 50 wake-ups a second put 3 % on the initiator's median read latency (281 -> 270 us
 * against perftest's 272, six runs each alternated), and each phase ended up to a nap late.
 * With r->idle_spin (see idle_may_spin) it does not sleep: the loop spins, looking at the control
 * channel every FS_QUIET_NS through tick(). Where the NIC is software (rxe, siw), the target's
 * kernel answers each request, and a CPU woken from idle for it adds its wake-up to every round
 * trip; perftest's target spins under -R. */
static int wait_idle(struct fs_run *r, struct fs_err *err)
{
    if (r->idle_spin)
        return 0;
    uint64_t now = fs_now_ns(), due = r->last_heartbeat_ns + FS_HEARTBEAT_NS;
    fs_ctl_wait_readable(&r->ctl, due > now ? (int)((due - now) / 1000000) + 1 : 0);
    return housekeep(r, fs_now_ns(), err);
}

/* Whether an idle side may spin (busy mode, a latency test) without taking the CPU its peer
 * engine runs on: the peer is on another machine, or this one lets us run on two CPUs or more.
 * On one CPU shared with the initiator (one guest with one vCPU) a spinning target would take
 * half its time. Not in bw/bibw even when asked for busy polling: a software device's answers to
 * a window of reads pile up beyond what the kernel does at interrupt exit, the rest goes to
 * ksoftirqd, an ordinary thread that a spinning target competes with (read bw between two
 * Soft-RoCE guests fell to 0.61 of perftest's with the target spinning; one read at a time is
 * answered at interrupt exit and gained 5-10 %). */
static int idle_may_spin(const struct fs_run *r)
{
    return !r->block && r->pat == FS_PAT_LAT && (r->peer_elsewhere || r->si.cpus_allowed_n >= 2);
}

/* How long a wait of a ping-pong whose previous round trip took `round_ns` lasts before it is a
 * stall (then housekeeping may run inside it, and the responder looks for the initiator's final
 * count): FS_STALL_ROUNDS round trips, at least FS_QUIET_NS, at most the housekeeping period (the
 * no-progress deadline is checked that often, whatever the last round took). A fixed FS_QUIET_NS
 * was shorter than a whole round trip of UCX tag messages between two emulated guests (1.2-1.4
 * ms): the responder then read its control channel, a syscall, in about 30 % of its waits for
 * the next request, on the initiator's clock (control_polls 272-301 per 1000 iterations, against
 * 15-17 on the initiator), where ucx_perftest's loop makes no syscall of its own. */
static uint64_t stall_after_ns(uint64_t round_ns)
{
    if (round_ns >= FS_HOUSEKEEP_PERIOD_NS / FS_STALL_ROUNDS)
        return FS_HOUSEKEEP_PERIOD_NS;
    uint64_t stall = FS_STALL_ROUNDS * round_ns;
    return stall > FS_QUIET_NS ? stall : FS_QUIET_NS;
}

/* The periodic look at the clock, at `now`: `events` counts what completed so far in this phase,
 * so a change since the last look is activity (no clock read per message). Housekeeping runs
 * when it is due and not before `not_before`. A side that only lacks the peer's count
 * (`want_count`: a receiver, the responder of a ping-pong) also looks for it once its data path
 * has been quiet for `quiet_ns` (FS_QUIET_NS, or a ping-pong's stall_after_ns), and then every
 * `quiet_ns`: the phase ends that late at most, and a slow stream's pauses are not filled with
 * control-socket syscalls. (Looking after 50 us of quiet and then every 64 turns made a receiver
 * of 64 KiB UC sends between two emulated guests call recv() tens of thousands of times a
 * second.) */
static int tick(struct fs_run *r, uint64_t now, uint64_t events, uint64_t not_before,
               int want_count, uint64_t quiet_ns, struct fs_err *err)
{
    if (events != r->events_seen) {
        r->events_seen = events;
        r->last_activity_ns = now;
    }
    int due = housekeeping_due(r, now) ||
              (want_count && r->peer_sent < 0 && now - r->last_activity_ns >= quiet_ns &&
               now >= r->last_hk_ns + quiet_ns);
    if (!due || now < not_before)
        return 0;
    return housekeep(r, now, err);
}

/* The data path says the peer went away ("closed the data connection", "dropped" it): a peer
 * engine that ended with an error sent it on the control channel before it closed anything, but
 * that frame may arrive later than the data connection's end (loss delays one and not the other).
 * So look there (for up to FS_PEER_WHY_MS) and say why the peer ended, in its own words. */
#define FS_PEER_WHY_MS 1000
static void add_peer_reason(struct fs_run *r, struct fs_err *err)
{
    if (err->code != FS_EXIT_PEER || r->ctl.fd < 0)
        return;
    uint64_t deadline = fs_now_ns() + (uint64_t)FS_PEER_WHY_MS * 1000000ull;
    struct fs_err ctl_err = {0};
    for (;;) {
        cJSON *m = NULL;
        int rc = fs_ctl_poll(&r->ctl, &m, &ctl_err);
        if (rc < 0)
            return; /* the control connection ended too, without a reason */
        if (rc == 1) {
            if (strcmp(fs_ctl_type(m), "error") == 0) {
                const cJSON *msg = cJSON_GetObjectItemCaseSensitive(m, "message");
                char mine[sizeof err->msg];
                snprintf(mine, sizeof mine, "%s", err->msg);
                fs_fail(err, FS_EXIT_PEER, "%s; the peer %s ended first and said why: %.1200s",
                        mine, r->ctl.peer_desc,
                        cJSON_IsString(msg) ? msg->valuestring : "(no message)");
                cJSON_Delete(m);
                return;
            }
            cJSON_Delete(m);
            continue;
        }
        uint64_t now = fs_now_ns();
        if (now >= deadline)
            return;
        fs_ctl_wait_readable(&r->ctl, (int)((deadline - now) / 1000000) + 1);
    }
}

static int progress(struct fs_run *r, struct fs_events *ev, struct fs_err *err)
{
    ev->tx_done = ev->rx_done = 0;
    ev->idle = 0;
    if (r->bops->progress(r->be, r->block ? FS_BLOCK_SLICE_MS : 0, ev, err)) {
        if (!err->code)
            err->code = FS_EXIT_MEASURE;
        return -1;
    }
    return 0;
}

/* The tight completion loop of the measured phase: progress until something completes, the
 * backend says this side is idle, or the clock is due (after FS_CLOCK_EVERY empty turns, and after
 * every empty turn in block mode: that call slept, or moved part of a large message; a clock read
 * is cheap next to that, a control-socket syscall per partial receive is not). Returns 1 when the
 * clock is due (every FS_CLOCK_EVERY turns, whether or not this one completed something), else 0
 * (something completed, or idle), -1 on error; completions are in `ev`. The
 * caller's bookkeeping (clock, deadlines, heartbeats, intervals, the peer's count) runs once per
 * return, never per empty turn. In busy mode the backend may repeat its empty passes itself, up
 * to the turns left before the clock is due (progress's negative wait_ms): its own loop around the
 * library's poll, as the peer tools' loops are. (Counted with bench/instr.py: the core's and the
 * UCX backend's share of an empty turn was ~100 instructions, ucx_perftest's loop's ~13.) */
static inline __attribute__((always_inline)) int spin(struct fs_run *r, struct fs_events *ev,
                                                     unsigned *turns, struct fs_err *err)
{
    int (*const poll)(void *, int, struct fs_events *, struct fs_err *) = r->bops->progress;
    void *const be = r->be;
    const int block = r->block;
    unsigned n = *turns;
    /* Zeroed once: a backend adds its completions (sets idle) and the loop returns on any. */
    ev->tx_done = ev->rx_done = 0;
    ev->idle = 0;
    for (;;) {
        const unsigned left = FS_CLOCK_EVERY - n % FS_CLOCK_EVERY;
        ev->turns = 0;
        if (poll(be, block ? FS_BLOCK_SLICE_MS : -(int)left, ev, err)) {
            *turns = n;
            if (!err->code)
                err->code = FS_EXIT_MEASURE;
            return -1;
        }
        const unsigned used = 1 + (ev->turns < left ? ev->turns : left - 1);
        n += used;
        if (ev->tx_done | ev->rx_done) { /* a stream that completes every turn still looks */
            *turns = n;
            return used == left;
        }
        if (used == left || block) {
            *turns = n;
            return 1;
        }
        if (ev->idle) { /* the caller sleeps or spins on the control channel (wait_idle) */
            *turns = n;
            return 0;
        }
    }
}

static int announce_sent(struct fs_run *r, uint64_t n, struct fs_err *err)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "sent");
    cJSON_AddNumberToObject(m, "n", (double)n);
    int rc = fs_ctl_send(&r->ctl, m, (int)(r->timeout_ns / 1000000), err);
    cJSON_Delete(m);
    return rc;
}

static int bounds_reached(uint64_t done, uint64_t n_max, uint64_t now, uint64_t t_end)
{
    return done >= n_max || (t_end && now >= t_end);
}

/* ---- per-interval accounting (--interval) ---------------------------------------------- */

int fs_interval_resolve(struct fs_run *r, struct fs_err *err)
{
    double s = r->spec.interval;
    r->interval_ns = 0;
    if (s < 0) /* auto: only duration runs have a time axis worth cutting */
        s = r->pat != FS_PAT_LAT && r->spec.duration > 0 ? 1.0 : 0.0;
    if (s == 0)
        return 0;
    if (r->pat == FS_PAT_LAT)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--interval %g: per-interval bandwidth applies to --pattern bw or bibw, "
                       "not lat (a latency run keeps every sample already)",
                       r->spec.interval);
    if (s < 0.001)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--interval %g: the shortest interval is 0.001 s; use 0 to turn intervals "
                       "off",
                       r->spec.interval);
    if (r->spec.duration > 0 && r->spec.duration / s > FS_MAX_INTERVALS)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--interval %g with --duration %g makes %.0f intervals; at most %d are "
                       "kept: use --interval %g or more",
                       s, r->spec.duration, r->spec.duration / s, FS_MAX_INTERVALS,
                       r->spec.duration / FS_MAX_INTERVALS);
    r->interval_ns = (uint64_t)(s * 1e9);
    return 0;
}

/* Adds n events that happened `since_t0` ns into the phase to their interval. Runs once per
 * batch of completions, only while intervals are on. */
static int counts_add(struct fs_counts *c, uint64_t since_t0, uint64_t len_ns, uint64_t n,
                      struct fs_err *err)
{
    uint64_t k = since_t0 / len_ns;
    if (k >= FS_MAX_INTERVALS) {
        c->overflow = 1;
        return 0;
    }
    if (k >= c->cap) {
        size_t cap = c->cap ? c->cap : 64;
        while (cap <= k)
            cap *= 2;
        uint64_t *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return fs_fail(err, FS_EXIT_MEASURE, "out of memory for %zu intervals", cap);
        c->v = v;
        c->cap = cap;
    }
    while (c->n <= k)
        c->v[c->n++] = 0;
    c->v[k] += n;
    return 0;
}

static void counts_reset(struct fs_counts *c)
{
    c->n = 0;
    c->overflow = 0;
}

void fs_counts_json(const struct fs_counts *c, cJSON *m, const char *key)
{
    cJSON *a = cJSON_AddArrayToObject(m, key);
    for (size_t i = 0; i < c->n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)c->v[i]));
}

int fs_counts_from_json(struct fs_counts *c, const cJSON *m, const char *key,
                        struct fs_err *err)
{
    counts_reset(c);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(m, key);
    if (!a)
        return 0;
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) > FS_MAX_INTERVALS)
        return fs_fail(err, FS_EXIT_PEER, "protocol error: '%s' is not a list of at most %d "
                                          "counts", key, FS_MAX_INTERVALS);
    const cJSON *x;
    uint64_t k = 0;
    cJSON_ArrayForEach(x, a)
    {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0)
            return fs_fail(err, FS_EXIT_PEER, "protocol error: '%s' holds a bad count", key);
        if (counts_add(c, k * 1000, 1000, (uint64_t)x->valuedouble, err))
            return -1;
        k++;
    }
    return 0;
}

/* Ping-pong initiator. ACTIVE ops: the peer answers each message; one sample is half the round
 * trip. PASSIVE ops (read, atomics): one sample is the full completion time of the operation. */
static int pingpong_initiator(struct fs_run *r, uint64_t size, uint64_t n_max, uint64_t t_max_ns,
                              int record, struct fs_side_view *v, struct fs_err *err)
{
    const int active = fs_ops[r->op].lat_role == FS_ROLE_ACTIVE;
    const double scale = active ? 0.5 : 1.0;
    uint64_t start = fs_now_ns();
    uint64_t t_end = t_max_ns ? start + t_max_ns : 0;
    uint64_t i = 0, now = start;
    unsigned turns = 0;
    struct fs_events ev;
    /* One clock read per iteration, as ucx_perftest does: a completion's timestamp is also the
     * start of the next operation. At sub-microsecond latencies a second read (~25 ns here)
     * would be a visible part of every sample. */
    uint64_t t0 = start;
    uint64_t round_ns = 0; /* the last iteration's round trip (0: none yet) */
    while (!bounds_reached(i, n_max, now, t_end)) {
        /* Inside a sample, housekeeping would be measured: it waits for the gap between two
         * iterations unless this wait has itself lasted long enough to be a stall. */
        const uint64_t stalled_at = t0 + stall_after_ns(round_ns);
        uint64_t got = 0; /* the answer may land while a full queue makes us retry the post */
        int posted;
        while ((posted = r->bops->post(r->be, r->op, size, err)) == 0) {
            const int due = spin(r, &ev, &turns, err);
            if (due < 0)
                return -1;
            got += active ? ev.rx_done : ev.tx_done;
            if (due && tick(r, fs_now_ns(), i, stalled_at, 0, FS_QUIET_NS, err))
                return -1;
        }
        if (posted < 0)
            return err->code ? -1 : fs_fail(err, FS_EXIT_MEASURE, "post failed");
        while (!got) {
            const int due = spin(r, &ev, &turns, err);
            if (due < 0)
                return -1;
            got += active ? ev.rx_done : ev.tx_done;
            if (due && !got && tick(r, fs_now_ns(), i, stalled_at, 0, FS_QUIET_NS, err))
                return -1;
        }
        now = fs_now_ns();
        round_ns = now - t0;
        if (record && fs_samples_push(&r->samples, (double)round_ns * scale))
            return fs_fail(err, FS_EXIT_MEASURE, "out of memory storing sample %llu",
                           (unsigned long long)i);
        i++;
        r->last_activity_ns = now;
        t0 = now;
        if (housekeeping_due(r, now)) {
            if (housekeep(r, now, err))
                return -1;
            t0 = fs_now_ns(); /* housekeeping is not part of the next sample */
        }
    }
    v->tx_msgs = i;
    v->tx_span_ns = now - start;
    return announce_sent(r, i, err);
}

/* Answers each arriving message until the initiator says how many it sent.
 * The wait for a request is on the measured path (the initiator's clock runs), so it holds no
 * housekeeping unless it has lasted stall_after_ns of the last round (reply to reply): that is a
 * stall, or the initiator is done and its count waits on the control channel. Housekeeping that
 * falls due runs right after a reply is posted instead, where no request can come before the
 * reply has crossed. (Looking for the count after 50 us of quiet put a control-socket syscall
 * into nearly every wait of an emulated device's 200 us half round trips.) */
static int pingpong_responder(struct fs_run *r, uint64_t size, struct fs_side_view *v,
                              struct fs_err *err)
{
    uint64_t rx = 0;
    unsigned turns = 0;
    struct fs_events ev;
    uint64_t replied_at = fs_now_ns();
    uint64_t stall_ns = FS_QUIET_NS; /* of the wait for the next request */
    while (r->peer_sent < 0 || rx < (uint64_t)r->peer_sent) {
        const int due = spin(r, &ev, &turns, err);
        if (due < 0)
            return -1;
        for (uint64_t k = 0; k < ev.rx_done; k++) {
            int posted;
            while ((posted = r->bops->post(r->be, r->op, size, err)) == 0) {
                struct fs_events more;
                if (progress(r, &more, err))
                    return -1;
                ev.rx_done += more.rx_done;
            }
            if (posted < 0)
                return err->code ? -1 : fs_fail(err, FS_EXIT_MEASURE, "post failed");
        }
        rx += ev.rx_done;
        if (ev.rx_done) {
            const uint64_t previous = replied_at;
            replied_at = fs_now_ns();
            stall_ns = stall_after_ns(replied_at - previous);
            if (tick(r, replied_at, rx, 0, 0, FS_QUIET_NS, err))
                return -1;
        } else if (due && tick(r, fs_now_ns(), rx, replied_at + stall_ns, 1, stall_ns, err)) {
            return -1;
        }
    }
    v->rx_msgs = rx;
    return 0;
}

static int phase_over(const struct fs_run *r, int wait_peer, int do_recv, uint64_t rx)
{
    if (!wait_peer)
        return 1;
    return r->peer_sent >= 0 && (!do_recv || rx >= (uint64_t)r->peer_sent);
}

/* Windowed stream. Either side may send, receive, both (bibw) or neither (the passive target of
 * a read/atomic test, which only waits for the initiator's count). */
static int stream(struct fs_run *r, uint64_t size, int do_send, int do_recv, uint64_t n_max,
                  uint64_t t_max_ns, struct fs_side_view *v, struct fs_err *err)
{
    uint64_t sent = 0, outstanding = 0, completed = 0, rx = 0;
    uint64_t t_last_rx = 0;
    const uint64_t depth = (uint64_t)r->spec.tx_depth;
    uint64_t start = fs_now_ns(), now = start;
    v->start_unix_ns = unix_now_ns();
    uint64_t t_end = t_max_ns ? start + t_max_ns : 0;
    int send_done = !do_send;
    /* A receiver needs the peer's count to know when to stop; so does an idle target. In bibw
     * every side waits for the other's count while still progressing: one-sided operations
     * emulated in software (UCX and libfabric over TCP or shared memory) complete only while
     * the target keeps calling progress. */
    const int wait_peer = do_recv || !do_send || r->pat == FS_PAT_BIBW;
    r->idle_side = !do_send && !do_recv;
    r->idle_spin = r->idle_side && idle_may_spin(r);
    const int lossy = do_recv && r->bops->lossy && r->bops->lossy(r->be);
    uint64_t quiet_since = start;
    unsigned turns = 0;
    struct fs_events ev;
    for (;;) {
        if (!send_done) {
            while (outstanding < depth && !bounds_reached(sent, n_max, now, t_end)) {
                int posted = r->bops->post(r->be, r->op, size, err);
                if (posted < 0)
                    return err->code ? -1 : fs_fail(err, FS_EXIT_MEASURE, "post failed");
                if (posted == 0)
                    break;
                sent++;
                outstanding++;
                if (t_end && sent % 64 == 0)
                    now = fs_now_ns();
            }
        }
        const int due = spin(r, &ev, &turns, err);
        if (due < 0)
            return -1;
        if (ev.idle && wait_idle(r, err))
            return -1;
        if (ev.tx_done || ev.rx_done)
            now = fs_now_ns();
        if (r->iv_ns && ev.tx_done && counts_add(&r->iv_tx, now - start, r->iv_ns, ev.tx_done, err))
            return -1;
        if (r->iv_ns && ev.rx_done && counts_add(&r->iv_rx, now - start, r->iv_ns, ev.rx_done, err))
            return -1;
        completed += ev.tx_done;
        outstanding -= ev.tx_done < outstanding ? ev.tx_done : outstanding;
        if (ev.rx_done || r->peer_sent < 0)
            quiet_since = now;
        if (ev.rx_done) {
            t_last_rx = now;
            rx += ev.rx_done;
        }
        if (!send_done && outstanding == 0) {
            if (t_end)
                now = fs_now_ns();
            if (bounds_reached(sent, n_max, now, t_end)) {
                if (r->bops->flush && r->bops->flush(r->be, err))
                    return -1;
                now = fs_now_ns();
                v->tx_msgs = sent;
                v->tx_span_ns = now - start;
                send_done = 1;
                if (announce_sent(r, sent, err))
                    return -1;
            }
        }
        if (send_done && phase_over(r, wait_peer, do_recv, rx))
            break;
        if (due) {
            now = fs_now_ns();
            if (tick(r, now, completed + rx, 0, send_done && wait_peer, FS_QUIET_NS, err))
                return -1;
            if (send_done && phase_over(r, wait_peer, do_recv, rx))
                break;
            if (send_done && lossy && r->peer_sent >= 0 && now - quiet_since > FS_LOSS_GRACE_NS) {
                v->rx_lost = (uint64_t)r->peer_sent - rx;
                break;
            }
        }
    }
    if (do_recv && r->peer_sent >= 0 && rx > (uint64_t)r->peer_sent)
        return fs_fail(err, FS_EXIT_MEASURE,
                       "received %llu messages but the peer sent %lld: the backend miscounted",
                       (unsigned long long)rx, (long long)r->peer_sent);
    v->rx_msgs = rx;
    /* The receiver's time runs from its own start (its receives posted, the peer told to go) to
     * the last arrival, over every message. Not from the first arrival: when the transport moves
     * several messages at once (Open MPI ob1 pipelines its rendezvous fragments of all the
     * messages in flight, MPICH/UCX too), the first message completes only after most of the
     * others' bytes arrived, and "first to last arrival" reported 2.13 Gb/s through a 1 Gbit/s
     * shaped link (100 x 1 MiB). The start lies before the first byte by one control-message
     * latency, so the rate can only err low, by microseconds over the run. */
    v->rx_timed_msgs = rx;
    v->rx_span_ns = rx ? t_last_rx - start : 0;
    return 0;
}

int fs_phase_run(struct fs_run *r, enum fs_phase phase, uint64_t size, struct fs_side_view *v,
                 struct fs_err *err)
{
    memset(v, 0, sizeof *v);
    r->peer_sent = -1;
    r->last_activity_ns = r->last_heartbeat_ns = fs_now_ns();
    r->last_hk_ns = r->last_activity_ns;
    r->peer_heard_ns = 0; /* nothing heard in this phase yet */
    r->hk_passes = 0;
    r->ctl_failed = 0;
    r->events_seen = 0;
    uint64_t n_max, t_max;
    if (phase == FS_PHASE_WARMUP) {
        n_max = (uint64_t)r->spec.warmup;
        t_max = (uint64_t)(r->spec.warmup_time * 1e9);
    } else {
        n_max = r->spec.duration > 0 ? UINT64_MAX : (uint64_t)r->spec.iters;
        t_max = (uint64_t)(r->spec.duration * 1e9);
    }
    if (r->bops->phase_begin)
        r->bops->phase_begin(r->be);
    r->iv_ns = phase == FS_PHASE_MEASURE && r->pat != FS_PAT_LAT ? r->interval_ns : 0;
    counts_reset(&r->iv_tx);
    counts_reset(&r->iv_rx);
    const int client = !r->is_server;
    const int active = fs_ops[r->op].bw_role == FS_ROLE_ACTIVE;
    int rc;
    fs_cpu_mark(v, 0);
    if (r->pat == FS_PAT_LAT && client)
        rc = pingpong_initiator(r, size, n_max, t_max, phase == FS_PHASE_MEASURE, v, err);
    else if (r->pat == FS_PAT_LAT && fs_ops[r->op].lat_role == FS_ROLE_ACTIVE)
        rc = pingpong_responder(r, size, v, err);
    else if (r->pat == FS_PAT_LAT)
        rc = stream(r, size, 0, 0, 0, 0, v, err);
    else if (r->pat == FS_PAT_BW)
        rc = stream(r, size, client, !client && active, n_max, t_max, v, err);
    else
        rc = stream(r, size, 1, active, n_max, t_max, v, err);
    fs_cpu_mark(v, 1);
    v->control_polls = r->hk_passes;
    if (!rc && r->bops->settle)
        rc = r->bops->settle(r->be, err);
    if (rc && !r->ctl_failed)
        add_peer_reason(r, err);
    return rc;
}
