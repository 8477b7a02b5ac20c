/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
/* A side's view of one phase beyond the timing loop (loop.c): the CPU it used (its thread's
 * account at the phase's edges, the CPU's governor and NUMA node) and the exchange of both sides'
 * views with the peer at the end of the phase. Outside the measured path. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "run.h"
#include "sysfs.h"

static uint64_t tv_ns(struct timeval tv)
{
    return (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

/* The thread's CPU account at a phase edge; the difference of two is the phase's. Outside the
 * measured path: two system calls per phase. */
void fs_cpu_mark(struct fs_side_view *v, int end)
{
    struct rusage ru;
    uint64_t now = fs_now_ns();
    if (getrusage(RUSAGE_THREAD, &ru))
        memset(&ru, 0, sizeof ru);
    uint64_t user = tv_ns(ru.ru_utime), sys = tv_ns(ru.ru_stime);
    uint64_t vol = (uint64_t)ru.ru_nvcsw, invol = (uint64_t)ru.ru_nivcsw;
    if (!end) {
        v->wall_ns = now, v->user_ns = user, v->sys_ns = sys;
        v->vol_switches = vol, v->invol_switches = invol;
        return;
    }
    v->wall_ns = now - v->wall_ns, v->user_ns = user - v->user_ns, v->sys_ns = sys - v->sys_ns;
    v->vol_switches = vol - v->vol_switches, v->invol_switches = invol - v->invol_switches;
    int cpu = sched_getcpu();
    v->cpu = cpu >= 0 ? cpu : -1;
}

/* A small sysfs value of the CPU the engine ran on (its frequency governor), or "" */
static void cpu_sysfs(int64_t cpu, const char *leaf, char *buf, size_t len)
{
    char path[PATH_MAX];
    buf[0] = 0;
    FILE *f = fs_sysfs_path(path, sizeof path, "devices/system/cpu/cpu%lld/%s", (long long)cpu, leaf)
                  ? NULL
                  : fopen(path, "r");
    if (!f)
        return;
    if (fgets(buf, (int)len, f))
        buf[strcspn(buf, "\n")] = 0;
    else
        buf[0] = 0;
    fclose(f);
}

/* The NUMA node of a CPU: the nodeN link in its sysfs directory, or -1 (no NUMA information). */
static long cpu_numa_node(int64_t cpu)
{
    char path[PATH_MAX];
    DIR *d = fs_sysfs_path(path, sizeof path, "devices/system/cpu/cpu%lld", (long long)cpu)
                 ? NULL
                 : opendir(path);
    long node = -1;
    if (!d)
        return -1;
    for (struct dirent *e; node < 0 && (e = readdir(d));) {
        char *end;
        if (strncmp(e->d_name, "node", 4) == 0 && isdigit((unsigned char)e->d_name[4])) {
            long n = strtol(e->d_name + 4, &end, 10);
            if (*end == 0)
                node = n;
        }
    }
    closedir(d);
    return node;
}

/* The counts of a side's view under their keys in "phase_done": written from this side's view
 * (view_json, fs_cpu_use_json) and read back into the peer's (fs_phase_exchange). */
struct view_count {
    const char *key;
    size_t off; /* of a uint64_t in struct fs_side_view */
};
#define VIEW_COUNT(key, field) {key, offsetof(struct fs_side_view, field)}
static const struct view_count phase_counts[] = {
    VIEW_COUNT("tx_msgs", tx_msgs),       VIEW_COUNT("tx_span_ns", tx_span_ns),
    VIEW_COUNT("rx_msgs", rx_msgs),       VIEW_COUNT("rx_timed_msgs", rx_timed_msgs),
    VIEW_COUNT("rx_span_ns", rx_span_ns), VIEW_COUNT("rx_lost", rx_lost),
    VIEW_COUNT("control_polls", control_polls), VIEW_COUNT("start_unix_ns", start_unix_ns),
};
static const struct view_count cpu_use_counts[] = { /* in "cpu_use" */
    VIEW_COUNT("wall_ns", wall_ns), VIEW_COUNT("user_ns", user_ns), VIEW_COUNT("sys_ns", sys_ns),
    VIEW_COUNT("voluntary_switches", vol_switches),
    VIEW_COUNT("involuntary_switches", invol_switches),
};
#undef VIEW_COUNT
#define N_COUNTS(table) (sizeof(table) / sizeof(table)[0])

static void view_counts_json(const struct fs_side_view *v, const struct view_count *c, size_t n,
                             cJSON *o)
{
    for (size_t i = 0; i < n; i++) {
        const uint64_t *count = (const uint64_t *)(const void *)((const char *)v + c[i].off);
        cJSON_AddNumberToObject(o, c[i].key, (double)*count);
    }
}

/* A count the peer left out or sent negative reads 0. */
static void view_counts_from_peer(struct fs_side_view *v, const struct view_count *c,
                                  size_t n, const cJSON *o)
{
    for (size_t i = 0; i < n; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, c[i].key);
        uint64_t *count = (uint64_t *)(void *)((char *)v + c[i].off);
        *count = cJSON_IsNumber(x) && x->valuedouble >= 0 ? (uint64_t)x->valuedouble : 0;
    }
}

cJSON *fs_cpu_use_json(const struct fs_side_view *v)
{
    cJSON *c = cJSON_CreateObject();
    view_counts_json(v, cpu_use_counts, N_COUNTS(cpu_use_counts), c);
    if (v->cpu < 0) {
        cJSON_AddNullToObject(c, "cpu");
        return c;
    }
    cJSON_AddNumberToObject(c, "cpu", (double)v->cpu);
    char gov[64];
    cpu_sysfs(v->cpu, "cpufreq/scaling_governor", gov, sizeof gov);
    if (gov[0])
        cJSON_AddStringToObject(c, "governor", gov);
    else
        cJSON_AddNullToObject(c, "governor");
    long node = cpu_numa_node(v->cpu);
    if (node >= 0)
        cJSON_AddNumberToObject(c, "numa_node", (double)node);
    else
        cJSON_AddNullToObject(c, "numa_node");
    return c;
}

static void view_json(const struct fs_side_view *v, cJSON *o)
{
    view_counts_json(v, phase_counts, N_COUNTS(phase_counts), o);
    cJSON_AddItemToObject(o, "cpu_use", fs_cpu_use_json(v));
}

int fs_phase_exchange(struct fs_run *r, const struct fs_side_view *mine, cJSON *extra,
                      struct fs_side_view *theirs, cJSON **peer_msg, struct fs_err *err)
{
    cJSON *m = extra ? extra : cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "phase_done");
    view_json(mine, m);
    if (r->iv_ns) {
        fs_counts_json(&r->iv_tx, m, "tx_intervals");
        fs_counts_json(&r->iv_rx, m, "rx_intervals");
        cJSON_AddBoolToObject(m, "intervals_overflow", r->iv_tx.overflow || r->iv_rx.overflow);
    }
    int rc = fs_ctl_send(&r->ctl, m, (int)(r->timeout_ns / 1000000), err);
    cJSON_Delete(m);
    if (rc)
        return -1;
    cJSON *p = r->peer_done;
    r->peer_done = NULL;
    /* The peer may still be finishing (e.g. draining its receive queue): wait with the deadline,
     * skipping its heartbeats. */
    while (!p) {
        if (fs_ctl_recv(&r->ctl, (int)(r->timeout_ns / 1000000), &p, err))
            return -1;
        const char *t = fs_ctl_type(p);
        if (strcmp(t, "phase_done") == 0)
            break;
        int ignorable = strcmp(t, "heartbeat") == 0 || strcmp(t, "sent") == 0;
        if (!ignorable) {
            if (strcmp(t, "error") == 0) {
                const cJSON *msg = cJSON_GetObjectItemCaseSensitive(p, "message");
                fs_fail(err, FS_EXIT_PEER, "the peer %s reported: %s", r->ctl.peer_desc,
                        cJSON_IsString(msg) ? msg->valuestring : "(no message)");
            } else {
                fs_fail(err, FS_EXIT_PEER, "protocol error: expected 'phase_done', got '%s'", t);
            }
            cJSON_Delete(p);
            return -1;
        }
        cJSON_Delete(p);
        p = NULL;
    }
    view_counts_from_peer(theirs, phase_counts, N_COUNTS(phase_counts), p);
    /* An older peer sends no cpu_use: wall 0 says "not reported". */
    const cJSON *cu = cJSON_GetObjectItemCaseSensitive(p, "cpu_use");
    view_counts_from_peer(theirs, cpu_use_counts, N_COUNTS(cpu_use_counts), cu);
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(cu, "cpu");
    theirs->cpu = cJSON_IsNumber(cc) && cc->valuedouble >= 0 ? (int64_t)cc->valuedouble : -1;
    if (fs_counts_from_json(&r->peer_iv_tx, p, "tx_intervals", err) ||
        fs_counts_from_json(&r->peer_iv_rx, p, "rx_intervals", err)) {
        cJSON_Delete(p);
        return -1;
    }
    r->peer_iv_tx.overflow = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "intervals_overflow"));
    if (peer_msg)
        *peer_msg = p;
    else
        cJSON_Delete(p);
    return 0;
}
