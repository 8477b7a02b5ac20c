/* SPDX-License-Identifier: BSD-3-Clause */
#include "output.h"

#include "route.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

static double r3(double x) { return round(x * 1000.0) / 1000.0; }
static double r6(double x) { return round(x * 1e6) / 1e6; }

static void print_line(struct fs_out *o, cJSON *obj)
{
    char *text = cJSON_PrintUnformatted(obj);
    if (text) {
        fputs(text, o->f);
        fputc('\n', o->f);
        fflush(o->f); /* each size is kept even if a later one dies */
    }
    cJSON_free(text);
}

void fs_out_event(struct fs_out *o, cJSON *event)
{
    print_line(o, event);
}

void fs_out_begin(struct fs_out *o, const struct fs_run *r)
{
    if (!o->text || o->header_done)
        return;
    o->header_done = 1;
    fprintf(o->f, "# fabscope %s | backend %s | op %s | pattern %s | poll %s | peer %s\n",
            FS_TOOL_VERSION, r->bops->name, fs_ops[r->op].name, fs_pattern_names[r->pat],
            r->block ? "block" : "busy", r->ctl.peer_desc);
    if (r->pat == FS_PAT_LAT)
        fprintf(o->f, "# latency: %s\n%-10s %10s %10s %10s %10s %10s %10s %10s %10s\n",
                fs_ops[r->op].lat_role == FS_ROLE_ACTIVE ? "half round trip (ping-pong)"
                                                         : "completion time of each operation",
                "#bytes", "#iters", "min[us]", "p50[us]", "mean[us]", "stdev[us]", "p99[us]",
                "p99.9[us]", "max[us]");
    else
        fprintf(o->f, "%-10s %10s %12s %12s %14s\n", "#bytes", "#iters", "BW[Gb/s]", "BW[MB/s]",
                "MsgRate[Mpps]");
    fflush(o->f);
}

/* The samples' log-linear histogram, sparse: [[bucket, count], ...] in ascending bucket order.
 * fs_summarize sorted the samples, so equal buckets are adjacent and one pass suffices. */
static void add_histogram(cJSON *lat, const double *sorted_ns, size_t n)
{
    cJSON *h = cJSON_AddObjectToObject(lat, "histogram");
    cJSON_AddStringToObject(h, "scheme", "log2-linear");
    cJSON_AddStringToObject(h, "unit", "ns");
    cJSON_AddNumberToObject(h, "sub_buckets", FS_HIST_SUB_BUCKETS);
    cJSON *buckets = cJSON_AddArrayToObject(h, "buckets");
    size_t i = 0;
    while (i < n) {
        long b = fs_hist_index(sorted_ns[i]);
        size_t j = i + 1;
        while (j < n && fs_hist_index(sorted_ns[j]) == b)
            j++;
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)b));
        cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)(j - i)));
        cJSON_AddItemToArray(buckets, pair);
        i = j;
    }
}

/* A rate, not a (bytes, span) pair: both directions of bibw are timed on their own receiver,
 * so they combine by adding rates. */
struct rate {
    double bytes_per_ns, msgs_per_ns;
    int valid;
};

static struct rate rate_of(uint64_t msgs, uint64_t size, uint64_t span_ns)
{
    struct rate x = {0, 0, msgs > 0 && span_ns > 0};
    if (x.valid) {
        x.bytes_per_ns = (double)msgs * (double)size / (double)span_ns;
        x.msgs_per_ns = (double)msgs / (double)span_ns;
    }
    return x;
}

static struct rate rx_rate(const struct fs_side_view *v, uint64_t size)
{
    return rate_of(v->rx_timed_msgs, size, v->rx_span_ns);
}

static struct rate tx_rate(const struct fs_side_view *v, uint64_t size)
{
    return rate_of(v->tx_msgs, size, v->tx_span_ns);
}

static void add_rate(cJSON *rec, const char *prefix, const struct rate *x, double row[3])
{
    static const char *const keys[3] = {"bandwidth_gbps", "bandwidth_MBps", "msg_rate_mpps"};
    /* bytes/ns * 8 = Gbit/s (10^9 bit/s); bytes/ns * 1000 = MB/s (10^6 B/s). */
    double vals[3] = {x->bytes_per_ns * 8.0, x->bytes_per_ns * 1e3, x->msgs_per_ns * 1e3};
    char key[64];
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof key, "%s%s", prefix, keys[i]);
        if (x->valid)
            cJSON_AddNumberToObject(rec, key, i == 1 ? r3(vals[i]) : r6(vals[i]));
        else
            cJSON_AddNullToObject(rec, key);
        if (row)
            row[i] = x->valid ? vals[i] : NAN;
    }
}

/* Per-interval bandwidth (--interval), from the side that measures the rate: the receiver for
 * two-sided operations, the initiator for one-sided ones; bibw adds both sides per interval.
 * Only whole intervals count for the lowest and the peak (the last one is usually cut short).
 * Fills iv_min/iv_peak (NAN when there is no whole interval) for the text line. */
static void add_intervals(cJSON *rec, const struct fs_run *r, uint64_t size,
                          const struct fs_side_view *mine, const struct fs_side_view *theirs,
                          cJSON *warnings, double *iv_min, double *iv_peak, size_t *iv_whole)
{
    *iv_min = *iv_peak = NAN;
    *iv_whole = 0;
    const int active = fs_ops[r->op].bw_role == FS_ROLE_ACTIVE;
    const struct fs_counts *src[2];
    uint64_t span[2];
    int sides = 1;
    if (r->pat == FS_PAT_BW) {
        src[0] = active ? &r->peer_iv_rx : &r->iv_tx;
        span[0] = active ? theirs->rx_span_ns : mine->tx_span_ns;
    } else {
        sides = 2;
        src[0] = active ? &r->iv_rx : &r->iv_tx;
        span[0] = active ? mine->rx_span_ns : mine->tx_span_ns;
        src[1] = active ? &r->peer_iv_rx : &r->peer_iv_tx;
        span[1] = active ? theirs->rx_span_ns : theirs->tx_span_ns;
    }
    const uint64_t len = r->interval_ns;
    size_t n = 0;
    for (int s = 0; s < sides; s++)
        if (src[s]->n > n)
            n = src[s]->n;
    cJSON *iv = cJSON_AddObjectToObject(rec, "intervals");
    cJSON_AddNumberToObject(iv, "length_s", r6((double)len / 1e9));
    cJSON_AddStringToObject(iv, "measured_at", active ? "receiver (from its start)"
                                                      : "initiator (from its first post)");
    /* Where interval 0 began on the wall clock (Unix seconds; null from a peer that does not say):
     * a load's flows measured by engines on many hosts are summed on common boundaries with it. */
    const uint64_t origin = r->pat == FS_PAT_BW && active ? theirs->start_unix_ns : mine->start_unix_ns;
    if (origin)
        cJSON_AddNumberToObject(iv, "started_unix_s", (double)origin / 1e9);
    else
        cJSON_AddNullToObject(iv, "started_unix_s");
    cJSON *msgs = cJSON_AddArrayToObject(iv, "messages");
    cJSON *secs = cJSON_AddArrayToObject(iv, "seconds");
    cJSON *gbps = cJSON_AddArrayToObject(iv, "bandwidth_gbps");
    long min_at = -1;
    for (size_t k = 0; k < n; k++) {
        uint64_t m = 0, dur = 0;
        int whole = 1;
        for (int s = 0; s < sides; s++) {
            const struct fs_counts *c = src[s];
            if (k < c->n)
                m += c->v[k];
            /* a side's last interval ends at its last event; before that they are whole */
            uint64_t d = len;
            if (k + 1 >= c->n) {
                whole = 0;
                d = k + 1 == c->n && span[s] > k * len ? span[s] - k * len : 0;
                if (d > len)
                    d = len;
            }
            if (d > dur)
                dur = d;
        }
        double g = dur ? (double)m * (double)size * 8.0 / (double)dur : 0.0;
        cJSON_AddItemToArray(msgs, cJSON_CreateNumber((double)m));
        cJSON_AddItemToArray(secs, cJSON_CreateNumber(r6((double)dur / 1e9)));
        cJSON_AddItemToArray(gbps, cJSON_CreateNumber(r6(g)));
        if (whole) {
            (*iv_whole)++;
            if (isnan(*iv_min) || g < *iv_min) {
                *iv_min = g;
                min_at = (long)k;
            }
            if (isnan(*iv_peak) || g > *iv_peak)
                *iv_peak = g;
        }
    }
    cJSON_AddNumberToObject(iv, "whole", (double)*iv_whole);
    if (min_at >= 0)
        cJSON_AddNumberToObject(iv, "min_index", (double)min_at);
    else
        cJSON_AddNullToObject(iv, "min_index");
    if (isnan(*iv_min)) {
        cJSON_AddNullToObject(rec, "bandwidth_min_gbps");
        cJSON_AddNullToObject(rec, "bandwidth_peak_gbps");
        char w[200];
        snprintf(w, sizeof w,
                 "no whole %.3g s interval in this measurement: bandwidth_min_gbps and "
                 "bandwidth_peak_gbps are null; raise --iters or --duration, or shorten --interval",
                 (double)len / 1e9);
        cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
    } else {
        cJSON_AddNumberToObject(rec, "bandwidth_min_gbps", r6(*iv_min));
        cJSON_AddNumberToObject(rec, "bandwidth_peak_gbps", r6(*iv_peak));
    }
    int dropped = 0;
    for (int s = 0; s < sides; s++)
        dropped |= src[s]->overflow;
    dropped |= r->peer_iv_tx.overflow;
    if (dropped)
        cJSON_AddItemToArray(warnings,
                             cJSON_CreateString("more than 4096 intervals: the later ones were not "
                                                "kept; use a longer --interval"));
}

/* A backend that moves data over several flows (verbs QPs) lists them in its description as
 * "flows": [{"completed": N, ...}], N = operations completed at this initiator in the measured
 * phase. Each gets its rate over the initiator's span, so the flows add up to the sender's view
 * (for RC one-sided operations, a completion is the target's acknowledgement). */
static void add_rates(cJSON *list, uint64_t size, const struct fs_side_view *mine)
{
    cJSON *f;
    if (!cJSON_IsArray(list) || !mine->tx_span_ns)
        return;
    cJSON_ArrayForEach(f, list)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(f, "completed");
        if (cJSON_IsNumber(n))
            cJSON_AddNumberToObject(f, "bandwidth_gbps",
                                    r6(n->valuedouble * (double)size * 8.0 / (double)mine->tx_span_ns));
    }
}

/* ... and a backend running several devices (verbs --device A,B) lists them as "devices", each
 * with the operations its flows completed: each device's share of the bandwidth. */
static void add_flow_rates(cJSON *local, uint64_t size, const struct fs_side_view *mine)
{
    add_rates(cJSON_GetObjectItemCaseSensitive(local, "flows"), size, mine);
    add_rates(cJSON_GetObjectItemCaseSensitive(local, "devices"), size, mine);
}

int fs_out_record(struct fs_out *o, struct fs_run *r, uint64_t size, const struct fs_side_view *mine,
                  const struct fs_side_view *theirs, const struct fs_side_view *warm,
                  const cJSON *peer_msg, const cJSON *peer_transport, struct fs_err *err)
{
    (void)err;
    cJSON *rec = cJSON_CreateObject();
    cJSON *warnings = cJSON_CreateArray();
    cJSON_AddStringToObject(rec, "schema", FS_RESULT_SCHEMA);
    cJSON_AddStringToObject(rec, "version", FS_TOOL_VERSION);
    cJSON_AddStringToObject(rec, "status", "ok");
    cJSON_AddStringToObject(rec, "backend", r->bops->name);
    cJSON_AddStringToObject(rec, "op", fs_ops[r->op].name);
    cJSON_AddStringToObject(rec, "pattern", fs_pattern_names[r->pat]);
    cJSON_AddNumberToObject(rec, "size", (double)size);
    cJSON_AddNumberToObject(rec, "iterations", (double)mine->tx_msgs);
    cJSON_AddNumberToObject(rec, "warmup", (double)warm->tx_msgs);
    if (r->pat == FS_PAT_BIBW)
        cJSON_AddNumberToObject(rec, "peer_iterations", (double)theirs->tx_msgs);
    cJSON_AddNumberToObject(rec, "duration_s", r6((double)mine->tx_span_ns / 1e9));

    double row[7] = {0};
    double iv_min = NAN, iv_peak = NAN; /* --interval: lowest and highest whole interval */
    size_t iv_whole = 0;
    if (r->pat == FS_PAT_LAT) {
        struct fs_summary s;
        fs_summarize(r->samples.v, r->samples.n, &s);
        cJSON *lat = cJSON_AddObjectToObject(rec, "latency_us");
        double vals[7] = {s.min, s.p50, s.mean, s.stdev, s.p99, s.p999, s.max};
        static const char *const keys[7] = {"min", "p50", "mean", "stdev", "p99", "p999", "max"};
        for (int i = 0; i < 7; i++) {
            row[i] = vals[i] / 1e3;
            if (i == 3 && !s.stdev_valid)
                cJSON_AddNullToObject(lat, keys[i]);
            else
                cJSON_AddNumberToObject(lat, keys[i], r3(row[i]));
        }
        cJSON_AddNumberToObject(lat, "samples", (double)s.n);
        cJSON_AddNumberToObject(lat, "outliers", (double)s.outliers);
        cJSON_AddNumberToObject(lat, "mad", r3(s.mad / 1e3));
        add_histogram(lat, r->samples.v, r->samples.n);
        if (s.n < 100) {
            char w[200];
            snprintf(w, sizeof w,
                     "only %zu samples: p99 and p99.9 are the maximum of a few values; raise "
                     "--iters or --duration",
                     s.n);
            cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
        }
        cJSON_AddStringToObject(rec, "latency_definition",
                                fs_ops[r->op].lat_role == FS_ROLE_ACTIVE
                                    ? "half round trip (ping-pong), as perftest and OSU report"
                                    : "completion time of each operation (full round trip)");
    } else {
        const int active = fs_ops[r->op].bw_role == FS_ROLE_ACTIVE;
        struct rate total;
        if (r->pat == FS_PAT_BW) {
            total = active ? rx_rate(theirs, size) : tx_rate(mine, size);
        } else {
            struct rate a = active ? rx_rate(mine, size) : tx_rate(mine, size);
            struct rate b = active ? rx_rate(theirs, size) : tx_rate(theirs, size);
            total.valid = a.valid && b.valid;
            total.bytes_per_ns = a.bytes_per_ns + b.bytes_per_ns;
            total.msgs_per_ns = a.msgs_per_ns + b.msgs_per_ns;
        }
        cJSON_AddStringToObject(rec, "bandwidth_measured_at",
                                active ? "receiver (its start to the last arrival)"
                                       : "initiator (completions; remote-acknowledged)");
        if (active) {
            /* The span the bandwidth is computed over, which duration_s (the sender's, up to its
             * last send) falls short of by what was still in flight: the measured phase's length. */
            uint64_t span = theirs->rx_span_ns;
            if (r->pat == FS_PAT_BIBW && mine->rx_span_ns > span)
                span = mine->rx_span_ns;
            cJSON_AddNumberToObject(rec, "rx_duration_s", r6((double)span / 1e9));
        }
        add_rate(rec, "", &total, row);
        if (!total.valid)
            cJSON_AddItemToArray(
                warnings,
                cJSON_CreateString("the receiver saw all messages in one receive event, so it "
                                   "cannot time them: bandwidth is null; raise --iters or use "
                                   "--duration"));
        uint64_t lost = mine->rx_lost + theirs->rx_lost;
        uint64_t sent = mine->tx_msgs + theirs->tx_msgs;
        cJSON_AddNumberToObject(rec, "lost_messages", (double)lost);
        if (lost) {
            char w[256];
            snprintf(w, sizeof w,
                     "%llu of %llu messages were lost (this service does not retransmit); "
                     "bandwidth counts delivered messages only",
                     (unsigned long long)lost, (unsigned long long)sent);
            cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
        }
        struct rate sender = tx_rate(mine, size);
        add_rate(rec, "sender_", &sender, NULL);
        if (r->interval_ns)
            add_intervals(rec, r, size, mine, theirs, warnings, &iv_min, &iv_peak, &iv_whole);
    }

    cJSON *cfg = cJSON_AddObjectToObject(rec, "config");
    fs_opt_echo_json(&r->core_set, cfg);
    cJSON_ReplaceItemInObject(cfg, "op", cJSON_CreateString(fs_ops[r->op].name));
    cJSON *bcfg = cJSON_AddObjectToObject(cfg, "backend_options");
    fs_opt_echo_json(&r->be_set, bcfg);

    cJSON *tr = cJSON_AddObjectToObject(rec, "transport");
    cJSON_AddStringToObject(tr, "poll", r->block ? "block" : "busy");
    cJSON_AddStringToObject(tr, "control", r->ctl.peer_desc);
    /* How often each side read its control channel during the measurement: the engine's own
     * work beside the measured path (every 100 ms while data flows; a side waiting for the
     * peer's count also every 1 ms of quiet; the idle target of reads and atomics only when the
     * peer speaks or once a second). */
    cJSON *polls = cJSON_AddObjectToObject(tr, "control_polls");
    cJSON_AddNumberToObject(polls, "local", (double)mine->control_polls);
    cJSON_AddNumberToObject(polls, "peer", (double)theirs->control_polls);
    /* Where each engine ran and what share of its CPU it had during the measured phase (the
     * explanation's "cpu" and "placement" causes read it). */
    cJSON *cpu_use = cJSON_AddObjectToObject(rec, "cpu_use");
    cJSON_AddItemToObject(cpu_use, "local", fs_cpu_use_json(mine));
    const cJSON *pcu = peer_msg ? cJSON_GetObjectItemCaseSensitive(peer_msg, "cpu_use") : NULL;
    cJSON_AddItemToObject(cpu_use, "peer", cJSON_IsObject(pcu) ? cJSON_Duplicate(pcu, 1) : cJSON_CreateNull());
    cJSON *local = cJSON_AddObjectToObject(tr, "local");
    r->bops->describe(r->be, local);
    /* The kernel's route to the peer: the data connection's address where the backend names it
     * (tcp, rsocket), else the control connection's peer. */
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(local, "peer_address");
    fs_route_describe(cJSON_IsString(pa) && pa->valuestring[0] ? pa->valuestring
                      : r->spec.peer[0]                            ? r->spec.peer
                                                                   : r->ctl.peer_desc,
                      local);
    if (r->pat != FS_PAT_LAT)
        add_flow_rates(local, size, mine);
    /* The peer's transport after this size (engine.c size_phases), else as it connected. */
    const cJSON *ptr = peer_msg ? cJSON_GetObjectItemCaseSensitive(peer_msg, "transport") : NULL;
    if (!cJSON_IsObject(ptr))
        ptr = peer_transport;
    cJSON_AddItemToObject(tr, "peer", ptr ? cJSON_Duplicate(ptr, 1) : cJSON_CreateNull());

    cJSON *clk = cJSON_AddObjectToObject(rec, "clock");
    cJSON_AddStringToObject(clk, "source", r->clock.source);
    cJSON_AddNumberToObject(clk, "overhead_ns", r3(r->clock.overhead_ns));
    cJSON_AddNumberToObject(clk, "resolution_ns", r3(r->clock.resolution_ns));
    if (r->clock.tsc_ghz > 0)
        cJSON_AddNumberToObject(clk, "tsc_ghz", round(r->clock.tsc_ghz * 1e6) / 1e6);
    if (r->clock.why_not_tsc[0])
        cJSON_AddStringToObject(clk, "why_not_tsc", r->clock.why_not_tsc);

    cJSON *host = cJSON_AddObjectToObject(rec, "host");
    fs_host_json(&r->si, host);
    const cJSON *ph = peer_msg ? cJSON_GetObjectItemCaseSensitive(peer_msg, "host") : NULL;
    cJSON_AddItemToObject(rec, "peer_host", ph ? cJSON_Duplicate(ph, 1) : cJSON_CreateNull());

    cJSON *cnt = cJSON_AddObjectToObject(rec, "counters");
    cJSON_AddItemToObject(cnt, "local", fs_counters_json(&r->cnt_before, &r->cnt_after));
    const cJSON *pc = peer_msg ? cJSON_GetObjectItemCaseSensitive(peer_msg, "counters") : NULL;
    cJSON_AddItemToObject(cnt, "peer", pc ? cJSON_Duplicate(pc, 1) : cJSON_CreateNull());
    fs_counters_truncation_warning(cJSON_GetObjectItemCaseSensitive(cnt, "local"), "this host",
                                   warnings);
    fs_counters_truncation_warning(pc, "peer", warnings);
    cJSON_AddItemToObject(rec, "warnings", warnings);

    if (o->text) {
        if (r->pat == FS_PAT_LAT)
            fprintf(o->f, "%-10llu %10llu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n",
                    (unsigned long long)size, (unsigned long long)mine->tx_msgs, row[0], row[1],
                    row[2], row[3], row[4], row[5], row[6]);
        else
            fprintf(o->f, "%-10llu %10llu %12.3f %12.2f %14.4f\n", (unsigned long long)size,
                    (unsigned long long)mine->tx_msgs, row[0], row[1], row[2]);
        if (r->pat != FS_PAT_LAT && r->interval_ns && iv_whole)
            fprintf(o->f, "# %zu whole intervals of %g s: lowest %.3f Gb/s, peak %.3f Gb/s\n",
                    iv_whole, (double)r->interval_ns / 1e9, iv_min, iv_peak);
        const cJSON *w;
        cJSON_ArrayForEach(w, warnings) fprintf(o->f, "# warning: %s\n", w->valuestring);
        fflush(o->f);
    } else {
        print_line(o, rec);
    }
    cJSON_Delete(rec);
    return 0;
}

void fs_out_error(struct fs_out *o, const struct fs_err *err)
{
    if (o->text)
        return;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "schema", "fabscope.error/1");
    cJSON_AddNumberToObject(e, "exit_code", err->code);
    cJSON_AddStringToObject(e, "message", err->msg);
    print_line(o, e);
    cJSON_Delete(e);
}
