/* SPDX-License-Identifier: BSD-3-Clause */
/* The effective configuration of one engine run: filled from the option table only. */
#ifndef FS_SPEC_H
#define FS_SPEC_H

#include "options.h"

struct fs_spec {
    char backend[32];
    char op[32];
    char pattern[16];
    char datatype[16];  /* collectives; "" = not given */
    char reduce_op[8];  /* collectives that reduce; "" = not given */
    int in_place;
    struct fs_size_list sizes;
    long iters;
    double duration;
    double interval; /* --interval: seconds per bandwidth interval; -1 = auto, 0 = off */
    long warmup;
    double warmup_time;
    double start_at; /* client: begin the first size no earlier than this CLOCK_REALTIME second; 0 = at once */
    long tx_depth;
    char poll[8];
    double timeout;
    char device[64];
    char bind[128];
    char peer[256];
    char listen[256];
    long control_fd;
    long session_open; /* the session hello was already done by `fabscope serve` */
    long peer_fd;      /* client mode on a connected, authenticated socket from the front end */
    long session_key_fd; /* the session key's descriptor (a pipe from the front end), or -1 */
    int validate_only; /* parse and check the options, then exit (serve checks them at start) */
    char cpu[16];  /* --cpu: auto, near, far or a CPU number */
    long cpu_slot;
    char format[8];
    int hold_cpu_latency;
    char clock[16];
    int options_json;
    int counters_json;
    int counters_serve;
    int inventory_json;
    int help;
    int list_backends;
};

extern const struct fs_option fs_core_options[];

/* Pattern-dependent defaults, documented in the option help. */
#define FS_DEFAULT_LAT_SIZE 8u
#define FS_DEFAULT_BW_SIZE 65536u

#endif
