/* SPDX-License-Identifier: BSD-3-Clause */
/* The two helpers every bench program here needs: a monotonic clock in nanoseconds and pinning
 * the calling thread to one CPU (the benches compare tools across this VM's two CPUs, so where
 * each thread runs is part of the measurement). Header-only: each program is one cc command. */
#ifndef FABSCOPE_BENCH_CPU_H
#define FABSCOPE_BENCH_CPU_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* 0, or the error number of pthread_setaffinity_np. */
static inline int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

#endif
