/* SPDX-License-Identifier: BSD-3-Clause */
#include "clock.h"

#include <stdio.h>
#include <string.h>

struct fs_tsc fs_tsc;

const char *fs_tsc_unusable(const char *root)
{
#if !defined(__x86_64__)
    (void)root;
    return "the TSC is read only on x86_64";
#else
    static char why[200];
    char line[4096], path[512];
    int constant = 0, nonstop = 0;
    snprintf(path, sizeof path, "%s/proc/cpuinfo", root);
    FILE *f = fopen(path, "r");
    if (!f)
        return "/proc/cpuinfo is not readable";
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        constant = strstr(line, " constant_tsc") != NULL;
        nonstop = strstr(line, " nonstop_tsc") != NULL;
        break;
    }
    fclose(f);
    if (!constant || !nonstop)
        return "the CPU's TSC is not invariant (constant_tsc and nonstop_tsc flags missing)";
    char cs[64] = "";
    snprintf(path, sizeof path, "%s/sys/devices/system/clocksource/clocksource0/current_clocksource",
             root);
    f = fopen(path, "r");
    if (f) {
        if (!fgets(cs, sizeof cs, f))
            cs[0] = '\0';
        fclose(f);
    }
    cs[strcspn(cs, "\n")] = '\0';
    if (strcmp(cs, "tsc") != 0) {
        snprintf(why, sizeof why,
                 "the kernel keeps time with clocksource '%s', not tsc (it did not find the TSC "
                 "reliable and synchronised across CPUs)",
                 cs[0] ? cs : "unknown");
        return why;
    }
    return NULL;
#endif
}

#if defined(__x86_64__)
/* One (TSC, CLOCK_MONOTONIC) pair: the best of several tries, judged by how close together the
 * two TSC reads around clock_gettime were (an interrupt between them would skew the rate). */
static void read_pair(uint64_t *tick, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    /* Set before the loop: GCC at -O3 cannot see that the first pass always takes the branch
     * (-Werror=maybe-uninitialized broke a Release build). */
    *tick = __rdtsc();
    *ns = fs_monotonic_ns();
    for (int i = 0; i < 50; i++) {
        uint64_t a = __rdtsc();
        uint64_t n = fs_monotonic_ns();
        uint64_t b = __rdtsc();
        if (b - a < best) {
            best = b - a;
            *tick = a + (b - a) / 2;
            *ns = n;
        }
    }
}

/* The first pair of the rate's measurement, when fs_clock_begin took it. */
static struct {
    uint64_t tick, ns;
    int on;
} cal_begin;

/* The TSC rate against CLOCK_MONOTONIC over at least 20 ms: a pair is good to ~10 ns, so the rate
 * is good to ~1e-6, far below anything reported. A longer interval (set-up ran inside it) only
 * makes it better. */
static int tsc_calibrate(void)
{
    uint64_t t0, n0, t1, n1;
    if (cal_begin.on) {
        t0 = cal_begin.tick;
        n0 = cal_begin.ns;
        cal_begin.on = 0;
    } else {
        read_pair(&t0, &n0);
    }
    for (uint64_t now, until = n0 + 20000000; (now = fs_monotonic_ns()) < until;) {
        struct timespec nap = {0, (long)(until - now)};
        nanosleep(&nap, NULL);
    }
    read_pair(&t1, &n1);
    if (t1 <= t0 || n1 <= n0)
        return -1;
    double ns_per_tick = (double)(n1 - n0) / (double)(t1 - t0);
    if (ns_per_tick < 0.05 || ns_per_tick > 10) /* outside 0.1-20 GHz: not a usable counter */
        return -1;
    fs_tsc.base_tick = t1;
    fs_tsc.base_ns = n1;
    fs_tsc.ns_per_tick = ns_per_tick;
    fs_tsc.on = 1;
    return 0;
}
#endif

void fs_clock_begin(void)
{
#if defined(__x86_64__)
    read_pair(&cal_begin.tick, &cal_begin.ns);
    cal_begin.on = 1;
#endif
}

static int refuse_tsc(const char *why, struct fs_err *err)
{
    return fs_fail(err, FS_EXIT_USAGE,
                   "--clock tsc: %s. Use --clock monotonic (or auto, which falls back to it and "
                   "says so)",
                   why);
}

int fs_clock_check(const char *want, const char *root, struct fs_err *err)
{
    const char *why = strcmp(want, "tsc") == 0 ? fs_tsc_unusable(root) : NULL;
    return why ? refuse_tsc(why, err) : 0;
}

int fs_clock_setup(const char *want, const char *root, struct fs_clock_info *info,
                   struct fs_err *err)
{
    memset(info, 0, sizeof *info);
    fs_tsc.on = 0;
    const char *why = NULL;
    if (strcmp(want, "monotonic") != 0) {
        why = fs_tsc_unusable(root);
#if defined(__x86_64__)
        if (!why && tsc_calibrate())
            why = "the TSC did not advance steadily against CLOCK_MONOTONIC while measuring its rate";
#endif
        if (why && strcmp(want, "tsc") == 0)
            return refuse_tsc(why, err);
    }
    if (fs_tsc.on) {
        info->source = "tsc (invariant, kernel clocksource tsc; rate measured against "
                       "CLOCK_MONOTONIC)";
        info->tsc_ghz = 1.0 / fs_tsc.ns_per_tick;
        info->resolution_ns = fs_tsc.ns_per_tick;
    } else {
        info->source = "clock_gettime(CLOCK_MONOTONIC)";
        if (strcmp(want, "auto") == 0)
            snprintf(info->why_not_tsc, sizeof info->why_not_tsc, "%s", why);
        struct timespec res;
        clock_getres(CLOCK_MONOTONIC, &res);
        info->resolution_ns = (double)res.tv_sec * 1e9 + (double)res.tv_nsec;
    }
    enum { N = 20000 };
    uint64_t sink = 0;
    uint64_t t0 = fs_now_ns();
    for (int i = 0; i < N; i++)
        sink += fs_now_ns();
    uint64_t t1 = fs_now_ns();
    (void)sink;
    info->overhead_ns = (double)(t1 - t0) / N;
    return 0;
}
