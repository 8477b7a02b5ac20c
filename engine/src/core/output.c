#include "output.h"

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
                                active ? "receiver (first to last arrival)"
                                       : "initiator (completions; remote-acknowledged)");
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
    }

    cJSON *cfg = cJSON_AddObjectToObject(rec, "config");
    fs_opt_echo_json(&r->core_set, cfg);
    cJSON_ReplaceItemInObject(cfg, "op", cJSON_CreateString(fs_ops[r->op].name));
    cJSON *bcfg = cJSON_AddObjectToObject(cfg, "backend_options");
    fs_opt_echo_json(&r->be_set, bcfg);

    cJSON *tr = cJSON_AddObjectToObject(rec, "transport");
    cJSON_AddStringToObject(tr, "poll", r->block ? "block" : "busy");
    cJSON_AddStringToObject(tr, "control", r->ctl.peer_desc);
    cJSON *local = cJSON_AddObjectToObject(tr, "local");
    r->bops->describe(r->be, local);
    cJSON_AddItemToObject(tr, "peer",
                          peer_transport ? cJSON_Duplicate(peer_transport, 1) : cJSON_CreateNull());

    cJSON *clk = cJSON_AddObjectToObject(rec, "clock");
    cJSON_AddStringToObject(clk, "source", r->clock.source);
    cJSON_AddNumberToObject(clk, "overhead_ns", r3(r->clock.overhead_ns));
    cJSON_AddNumberToObject(clk, "resolution_ns", r3(r->clock.resolution_ns));
    if (r->clock.tsc_ghz > 0)
        cJSON_AddNumberToObject(clk, "tsc_ghz", round(r->clock.tsc_ghz * 1e6) / 1e6);
    if (r->clock.why_not_tsc[0])
        cJSON_AddStringToObject(clk, "why_not_tsc", r->clock.why_not_tsc);

    cJSON *host = cJSON_AddObjectToObject(rec, "host");
    fs_sysinfo_json(&r->si, host);
    const cJSON *ph = peer_msg ? cJSON_GetObjectItemCaseSensitive(peer_msg, "host") : NULL;
    cJSON_AddItemToObject(rec, "peer_host", ph ? cJSON_Duplicate(ph, 1) : cJSON_CreateNull());

    cJSON *cnt = cJSON_AddObjectToObject(rec, "counters");
    cJSON_AddItemToObject(cnt, "local", fs_counters_json(&r->cnt_before, &r->cnt_after));
    const cJSON *pc = peer_msg ? cJSON_GetObjectItemCaseSensitive(peer_msg, "counters") : NULL;
    cJSON_AddItemToObject(cnt, "peer", pc ? cJSON_Duplicate(pc, 1) : cJSON_CreateNull());
    cJSON_AddItemToObject(rec, "warnings", warnings);

    if (o->text) {
        if (r->pat == FS_PAT_LAT)
            fprintf(o->f, "%-10llu %10llu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n",
                    (unsigned long long)size, (unsigned long long)mine->tx_msgs, row[0], row[1],
                    row[2], row[3], row[4], row[5], row[6]);
        else
            fprintf(o->f, "%-10llu %10llu %12.3f %12.2f %14.4f\n", (unsigned long long)size,
                    (unsigned long long)mine->tx_msgs, row[0], row[1], row[2]);
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
