/* SPDX-License-Identifier: BSD-3-Clause */
/* core_to_core CPU_A CPU_B MS: the round trip of one cache line between two CPUs, bounced by two
 * spinning threads for MS milliseconds; prints {"cpus": [A, B], "rtt_ns": median, "batches": n}.
 *
 * Why a bench needs it: on a VM the hypervisor may move the guest's vCPUs between physical cores.
 * Two vCPUs that share a cache bounce a line in ~100 ns; on different sockets or core complexes
 * it takes ~500 ns. This machine goes from one placement to the other every few seconds to
 * minutes, invisibly from inside, and everything that crosses between the two CPUs (loopback
 * TCP, shared memory, the two Soft-RoCE guests' packets) changes speed with it. A comparison of
 * two tools is only fair between runs made on the same placement (bench/placement.py). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_cpu.h"

#define ROUNDS_PER_BATCH 2000
#define MAX_BATCHES 100000

static _Alignas(64) _Atomic uint64_t ping;
static _Alignas(64) _Atomic uint64_t pong;
static _Atomic int stop;
static _Atomic int responder_failed; /* it could not run on its CPU: nobody answers */


static void *responder(void *arg)
{
    if (pin(*(const int *)arg)) {
        atomic_store(&responder_failed, 1);
        return NULL;
    }
    uint64_t seen = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        uint64_t v = atomic_load_explicit(&ping, memory_order_acquire);
        if (v != seen) {
            seen = v;
            atomic_store_explicit(&pong, v, memory_order_release);
        }
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    long a, b, ms;
    if (argc != 4 || parse_int(argv[1], 0, CPU_SETSIZE - 1, &a) ||
        parse_int(argv[2], 0, CPU_SETSIZE - 1, &b) || parse_int(argv[3], 1, 10000, &ms) || a == b) {
        fprintf(stderr, "usage: core_to_core CPU_A CPU_B MS (two different CPUs, 1-10000 ms)\n");
        return 2;
    }
    int cpu_b = (int)b;
    if (pin((int)a)) {
        fprintf(stderr, "core_to_core: cannot run on CPU %ld\n", a);
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, responder, &cpu_b)) {
        fprintf(stderr, "core_to_core: cannot start the second thread\n");
        return 1;
    }
    static uint64_t batch_ns[MAX_BATCHES];
    size_t n = 0;
    uint64_t i = 0, end = now_ns() + (uint64_t)ms * 1000000ull;
    for (uint64_t t0 = now_ns(); t0 < end && n < MAX_BATCHES;) {
        for (int k = 0; k < ROUNDS_PER_BATCH; k++) {
            atomic_store_explicit(&ping, ++i, memory_order_release);
            while (atomic_load_explicit(&pong, memory_order_acquire) != i)
                if (atomic_load_explicit(&responder_failed, memory_order_relaxed))
                    goto joined;
        }
        uint64_t t1 = now_ns();
        batch_ns[n++] = (t1 - t0) / ROUNDS_PER_BATCH;
        t0 = t1;
    }
joined:
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    if (atomic_load(&responder_failed)) {
        fprintf(stderr, "core_to_core: cannot run on CPU %ld\n", b);
        return 2;
    }
    qsort(batch_ns, n, sizeof batch_ns[0], cmp_u64);
    printf("{\"cpus\": [%ld, %ld], \"rtt_ns\": %llu, \"batches\": %zu}\n", a, b,
           (unsigned long long)batch_ns[n / 2], n);
    return 0;
}
