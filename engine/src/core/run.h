/* SPDX-License-Identifier: BSD-3-Clause */
/* State of one engine run, shared by the timing loops, the client/server flows and the output. */
#ifndef FS_RUN_H
#define FS_RUN_H

#include "backend.h"
#include "clock.h"
#include "counters.h"
#include "ctl.h"
#include "spec.h"
#include "stats.h"
#include "sysinfo.h"

struct cJSON;

/* What one side saw in one phase; exchanged in "phase_done" so the client can report the
 * receiver's view of a bandwidth test (a sender only sees local completion). */
struct fs_side_view {
    uint64_t tx_msgs;
    uint64_t tx_span_ns;  /* first post to last completion (after flush) */
    uint64_t rx_msgs;
    uint64_t rx_timed_msgs; /* arrivals after the first receive event */
    uint64_t rx_span_ns;    /* first to last receive event */
    uint64_t rx_lost;       /* lossy services: sent by the peer, never arrived */
    uint64_t control_polls; /* times this side read its control channel during the phase */
    /* CLOCK_REALTIME at the phase's start (the origin of its --interval counts): engines on
     * several hosts (a load's flows) put their intervals on one time line with it. */
    uint64_t start_unix_ns;
    /* The engine thread's share of a CPU during the phase (getrusage RUSAGE_THREAD around it):
     * a busy-polling engine that got much less than its wall time, with the scheduler taking the
     * CPU away (involuntary switches), shared its CPU with another process. */
    uint64_t wall_ns, user_ns, sys_ns, vol_switches, invol_switches;
    int64_t cpu; /* the CPU it was on at the end of the phase, or -1 */
};

/* Message counts per --interval of a measured bw/bibw phase: v[k] counts what completed (tx)
 * or arrived (rx) in [t0 + k*len, t0 + (k+1)*len), t0 being the first post (tx) or the first
 * arrival (rx, whose batch is left out as in the receiver's bandwidth). */
#define FS_MAX_INTERVALS 4096
struct fs_counts {
    uint64_t *v;
    size_t n, cap;
    int overflow; /* counts past FS_MAX_INTERVALS were dropped */
};

struct fs_run {
    struct fs_spec spec;
    const struct fs_backend_ops *bops;
    void *bopts;
    void *be;
    struct fs_opt_set core_set, be_set;
    struct fs_ctl ctl;
    int is_server;
    /* A server before the client's config: the backend is not chosen yet, so its names
     * (--device) are checked once it is (serve checks them against every backend at start). */
    int backend_by_peer;
    enum fs_op op;
    enum fs_pattern pat;
    int block; /* effective poll mode */
    struct fs_clock_info clock;
    struct fs_sysinfo si;
    uint64_t timeout_ns;
    struct fs_samples samples;

    /* in-loop control state */
    uint64_t last_activity_ns;
    /* Set while this side expects no data (the passive target of a read): only then do the
     * peer's heartbeats count as progress. Elsewhere a heartbeat proves the peer process is
     * alive, not that the data path works, and must not hide a stuck run. */
    int idle_side;
    /* The idle side spins instead of sleeping on the control channel (see wait_idle in loop.c):
     * in busy poll mode, when the peer engine cannot need this CPU. */
    int idle_spin;
    /* The peer's kernel boot id (sent in config / ready) differs from ours: it runs on another
     * machine. 0 when the same or not known. */
    int peer_elsewhere;
    uint64_t last_heartbeat_ns;
    /* When the peer last said anything on the control channel (a heartbeat too): past the
     * no-progress deadline, a peer heard from lately is alive and its data path stalled. */
    uint64_t peer_heard_ns;
    uint64_t last_hk_ns;  /* when housekeeping last ran (it is due FS_HOUSEKEEP_PERIOD_NS on) */
    uint64_t hk_passes;   /* housekeeping passes in this phase */
    int ctl_failed;       /* this phase failed on the control channel (not the data path) */
    uint64_t events_seen; /* completions counted at the last look at the clock */
    int64_t peer_sent; /* -1 until the peer's "sent" arrives */
    struct cJSON *peer_done; /* a "phase_done" that arrived while we were still looping */

    uint64_t interval_ns; /* effective --interval (0 = off), resolved by fs_run_validate */
    uint64_t iv_ns;       /* interval_ns while a measured bw/bibw phase runs, else 0 */
    struct fs_counts iv_tx, iv_rx, peer_iv_tx, peer_iv_rx;

    struct fs_cnt_snap cnt_before, cnt_after;
    char ctl_local[64], ctl_peer[64];
    /* Server: our address on the network of the client's --device (see datapath.h), or "". */
    char data_local[64];
};

enum fs_phase { FS_PHASE_WARMUP, FS_PHASE_MEASURE };

/* Runs one phase (warmup or measure) for one size on this side; fills `mine`. */
/* The side's CPU use in a phase, with its CPU's governor and NUMA node (record field "cpu_use"). */
struct cJSON *fs_cpu_use_json(const struct fs_side_view *v);
int fs_phase_run(struct fs_run *r, enum fs_phase phase, uint64_t size, struct fs_side_view *mine,
                 struct fs_err *err);
/* Resolves --interval for this run (auto, off, or checked against the pattern and duration). */
int fs_interval_resolve(struct fs_run *r, struct fs_err *err);

/* The thread's CPU account at a phase's start (end 0) and its use since then (end 1) (sideview.c). */
void fs_cpu_mark(struct fs_side_view *v, int end);
/* A phase's per-interval counts as a JSON list under `key`, and back from the peer's message. */
void fs_counts_json(const struct fs_counts *c, struct cJSON *m, const char *key);
int fs_counts_from_json(struct fs_counts *c, const struct cJSON *m, const char *key,
                        struct fs_err *err);

/* Sends our view and waits for the peer's (sideview.c). */
int fs_phase_exchange(struct fs_run *r, const struct fs_side_view *mine,
                      struct cJSON *extra, struct fs_side_view *theirs, struct cJSON **peer_msg,
                      struct fs_err *err);

#endif
