/* SPDX-License-Identifier: BSD-3-Clause */
/* The only clock the engine reads: nanoseconds on CLOCK_MONOTONIC's time line.
 *
 * Where the CPU's time stamp counter is invariant and the kernel itself keeps time with it
 * (clocksource "tsc": the kernel has checked that it is synchronised across CPUs), the engine
 * reads the TSC directly, as ucx_perftest does: ~10 ns a read instead of ~25 ns for clock_gettime
 * through the vDSO, which at 0.15 us latencies is a visible share of every sample. Its rate is
 * measured against CLOCK_MONOTONIC when the engine starts, never taken from a CPU MHz figure
 * (perftest's "Conflicting CPU frequency values" cannot happen). Elsewhere, or with
 * --clock monotonic, it is clock_gettime(CLOCK_MONOTONIC). Which one ran, its rate and its
 * measured cost are reported with every result. */
#ifndef FS_CLOCK_H
#define FS_CLOCK_H

#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "fs.h"

struct fs_tsc {
    int on;
    uint64_t base_tick, base_ns; /* one (TSC, CLOCK_MONOTONIC) pair read together */
    double ns_per_tick;
};
extern struct fs_tsc fs_tsc;

static inline uint64_t fs_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t fs_now_ns(void)
{
#if defined(__x86_64__)
    if (fs_tsc.on)
        return fs_tsc.base_ns + (uint64_t)((double)(__rdtsc() - fs_tsc.base_tick) * fs_tsc.ns_per_tick);
#endif
    return fs_monotonic_ns();
}

/* Whole milliseconds from now until deadline_ns (fs_now_ns time), rounded up; 0 once it passed:
 * a wait's poll timeout. */
static inline int fs_ms_until(uint64_t deadline_ns)
{
    uint64_t now = fs_now_ns();
    return now >= deadline_ns ? 0 : (int)((deadline_ns - now + 999999) / 1000000);
}

struct fs_clock_info {
    const char *source;
    double overhead_ns;  /* mean cost of one read */
    double resolution_ns;
    double tsc_ghz;      /* measured TSC rate; 0 when the TSC is not used */
    char why_not_tsc[160]; /* --clock auto chose CLOCK_MONOTONIC: why */
};

/* Chooses the clock for `want` ("auto", "tsc" or "monotonic"), measures the TSC rate when it is
 * used, then the cost of one read. "tsc" on a host where it cannot be trusted is a usage error
 * naming the reason. `root` prefixes /proc and /sys ("" on a live system; tests pass a copy).
 * Call after pinning the CPU. */
int fs_clock_setup(const char *want, const char *root, struct fs_clock_info *info,
                   struct fs_err *err);
/* fs_clock_setup's usage error, early: "tsc" on a host whose TSC cannot be trusted (0: fine). */
int fs_clock_check(const char *want, const char *root, struct fs_err *err);
/* Starts the measurement of the TSC's rate now: its first (TSC, CLOCK_MONOTONIC) pair. A later
 * fs_clock_setup then waits only for what is left of the 20 ms interval, so the engine's set-up
 * (control connection, session, the peer's) runs inside it instead of after it: ~20 ms off each
 * run's start, which a fabric matrix pays once per pair. Call after pinning the CPU. */
void fs_clock_begin(void);
/* Why the TSC cannot be trusted on the system under `root`, or NULL when it can. */
const char *fs_tsc_unusable(const char *root);

#endif
