/* SPDX-License-Identifier: BSD-3-Clause */
/* The core option table. Backends add their own rows in their own file. */
#include "spec.h"

#include <stddef.h>

static const char *const pattern_values[] = {"lat",       "bw",       "bibw",  "allreduce",
                                             "reduce_scatter", "allgather", "alltoall", "bcast",
                                             "barrier",   NULL};
static const char *const poll_values[] = {"auto", "busy", "block", NULL};
static const char *const format_values[] = {"json", "text", NULL};
static const char *const clock_values[] = {"auto", "tsc", "monotonic", NULL};

#define F(f) FS_FIELD(struct fs_spec, f)
const struct fs_option fs_core_options[] = {
    {"backend", FS_OPT_STR, F(backend), 0, 0, "tcp", NULL,
     "transport backend (see --list-backends)", 0},
    {"op", FS_OPT_STR, F(op), 0, 0, NULL, NULL,
     "operation: send, write, write_imm, read, fadd, cswap, tag, am (default: the backend's first)",
     0},
    {"pattern", FS_OPT_ENUM, F(pattern), 0, 0, "lat", pattern_values,
     "lat = ping-pong latency, bw = one-way stream, bibw = both directions at once; the "
     "collectives allreduce, reduce_scatter, allgather, alltoall, bcast and barrier run across "
     "every rank of an MPI job (--backend mpi)",
     0},
    /* Strings, not enums: unset ("") must cross the control channel of a pair run; the collective
     * check (collective.c) owns the values. */
    {"datatype", FS_OPT_STR, F(datatype), 0, 0, NULL, NULL,
     "collectives: element type int32, float32 or float64 (default float32)", 0},
    {"reduce-op", FS_OPT_STR, F(reduce_op), 0, 0, NULL, NULL,
     "allreduce, reduce_scatter: the reduction (sum; the default)", 0},
    {"in-place", FS_OPT_BOOL, F(in_place), 0, 1, NULL, NULL,
     "allreduce, reduce_scatter, allgather, alltoall: MPI_IN_PLACE (one buffer)", 0},
    {"sizes", FS_OPT_SIZES, F(sizes), 1, 1ull << 32, NULL, NULL,
     "message sizes: LO:HI = every power of two from LO to HI (both powers of two, e.g. 2:8M), "
     "or a list 8,4K,1M; K/M/G = 2^10/2^20/2^30; 1 byte to 4G, at most 64 sizes (default: 8 "
     "for lat, 64K for bw/bibw)",
     0},
    {"iters", FS_OPT_INT, F(iters), 1, 1e9, "1000", NULL,
     "measured messages per size", 0},
    {"duration", FS_OPT_DOUBLE, F(duration), 0, 86400, "0", NULL,
     "seconds to measure each size; overrides --iters when > 0", 0},
    {"interval", FS_OPT_DOUBLE, F(interval), -1, 3600, "-1", NULL,
     "bw/bibw: also report the bandwidth of every S-second interval and the lowest and highest "
     "of them (bandwidth_min_gbps / bandwidth_peak_gbps: a link that stalls now and then shows); "
     "-1 = auto: 1 s with --duration, off otherwise; 0 = off; at most 4096 intervals",
     0},
    {"warmup", FS_OPT_INT, F(warmup), 0, 1e9, "100", NULL,
     "warmup messages per size (not measured); ends early at --warmup-time", 0},
    {"warmup-time", FS_OPT_DOUBLE, F(warmup_time), 0, 3600, "1", NULL,
     "upper bound on warmup seconds per size", 0},
    {"start-at", FS_OPT_DOUBLE, F(start_at), 0, 1e11, "0", NULL,
     "client: connected and set up, begin the first size (its warmup) at this wall-clock time "
     "(Unix seconds, CLOCK_REALTIME): many engines on many hosts then measure together "
     "(`fabscope load` sets it); 0 = at once; a time already past starts at once",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS},
    {"tx-depth", FS_OPT_INT, F(tx_depth), 1, 65536, "64", NULL,
     "operations in flight in bw/bibw", 0},
    {"poll", FS_OPT_ENUM, F(poll), 0, 0, "auto", poll_values,
     "completion waiting: busy spins, block sleeps in the kernel; auto = busy for lat, block for "
     "bw/bibw",
     0},
    {"timeout", FS_OPT_DOUBLE, F(timeout), 0.1, 3600, "10", NULL,
     "seconds without progress before a peer counts as gone", FS_OPTF_LOCAL},
    {"device", FS_OPT_STR, F(device), 0, 0, NULL, NULL,
     "device to use on this host (netdev for tcp; RDMA device for verbs, where A,B spreads the "
     "queue pairs over several; a UCX_NET_DEVICES list for ucx)",
     FS_OPTF_LOCAL},
    {"bind", FS_OPT_STR, F(bind), 0, 0, NULL, NULL,
     "local address for the data connection on this host", FS_OPTF_LOCAL | FS_OPTF_PROCESS},
    {"peer", FS_OPT_STR, F(peer), 0, 0, NULL, NULL,
     "client mode: the server's HOST[:PORT] (default port 18515)",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS | FS_OPTF_MODE},
    {"listen", FS_OPT_STR, F(listen), 0, 0, NULL, NULL,
     "server mode: ADDR[:PORT] to accept one client on (port 0 = any free port)",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS | FS_OPTF_MODE},
    {"control-fd", FS_OPT_INT, F(control_fd), -1, 1e6, "-1", NULL,
     "server mode on an accepted connection handed over by `fabscope serve`",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS | FS_OPTF_MODE},
    {"session-open", FS_OPT_INT, F(session_open), 0, 1, "0", NULL,
     "with --control-fd or --peer-fd: the hello (and authentication) was already done",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS | FS_OPTF_MODE},
    {"session-key-fd", FS_OPT_INT, F(session_key_fd), -1, 1e6, "-1", NULL,
     "with --session-open 1: read the session key (64 hex digits) from this descriptor; every "
     "control frame is then authenticated (HMAC-SHA256, sequence-numbered)",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {"peer-fd", FS_OPT_INT, F(peer_fd), -1, 1e6, "-1", NULL,
     "client mode on a connection to `fabscope serve` that the front end opened and "
     "authenticated (with --session-open 1)",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS | FS_OPTF_MODE},
    {"validate-only", FS_OPT_BOOL, F(validate_only), 0, 1, NULL, NULL,
     "check the options (device names included) and exit: 0 = valid, 2 = not (serve's start check)",
     FS_OPTF_LOCAL | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {"cpu", FS_OPT_STR, F(cpu), 0, 0, "auto", NULL,
     "where this engine runs: auto = on a CPU of its --device's NUMA node where the host has "
     "several (else where it is); near = that node, or fail; far = another node, or fail (to "
     "measure what remote placement costs); N = CPU N. The record says where and why "
     "(host.placement)",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS},
    {"cpu-slot", FS_OPT_INT, F(cpu_slot), -1, 4095, "-1", NULL,
     "with --cpu auto/near/far: take the Nth of the candidate CPUs, and let auto pin where NUMA "
     "gives no choice (the front end gives two engines of one host different slots)",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS},
    {"format", FS_OPT_ENUM, F(format), 0, 0, "json", format_values,
     "output: one JSON object per size, or a perftest-style table",
     FS_OPTF_LOCAL | FS_OPTF_PROCESS | FS_OPTF_MODE},
    {"hold-cpu-latency", FS_OPT_BOOL, F(hold_cpu_latency), 0, 1, "false",
     NULL, "hold /dev/cpu_dma_latency at 0 during the run (avoids deep C-state wake-up cost)",
     FS_OPTF_LOCAL},
    {"clock", FS_OPT_ENUM, F(clock), 0, 0, "auto", clock_values,
     "timing clock: tsc = the CPU's invariant time stamp counter, rate measured against "
     "CLOCK_MONOTONIC (~10 ns a read); monotonic = clock_gettime (~25 ns); auto = tsc where the "
     "kernel itself keeps time with it, else monotonic (the result says which and why)",
     FS_OPTF_LOCAL},
    {"options-json", FS_OPT_BOOL, F(options_json), 0, 1, NULL, NULL,
     "print the option table as JSON and exit", FS_OPTF_LOCAL | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {"counters-json", FS_OPT_BOOL, F(counters_json), 0, 1, NULL, NULL,
     "print one snapshot of every RDMA port and netdev counter (raw, with units) as JSON and exit",
     FS_OPTF_LOCAL | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {"counters-serve", FS_OPT_BOOL, F(counters_serve), 0, 1, NULL, NULL,
     "print the --counters-json snapshot as one line for each line read on stdin, until end of "
     "input (the exporter's long-lived engine: files stay open between snapshots)",
     FS_OPTF_LOCAL | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {"inventory-json", FS_OPT_BOOL, F(inventory_json), 0, 1, NULL, NULL,
     "print what libibverbs, UCX and libfabric offer on this host (devices, ports, GIDs, "
     "transports, providers: the names --device, --ucx-tls and --provider accept) as JSON and exit",
     FS_OPTF_LOCAL | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {"list-backends", FS_OPT_BOOL, F(list_backends), 0, 1, NULL, NULL,
     "print the built-in backends and exit", FS_OPTF_LOCAL | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {"help", FS_OPT_BOOL, F(help), 0, 1, NULL, NULL, "this help",
     FS_OPTF_LOCAL | FS_OPTF_NOECHO | FS_OPTF_MODE},
    {0},
};
#undef F

