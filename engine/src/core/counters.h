/* SPDX-License-Identifier: BSD-3-Clause */
/* Raw traffic counters of every netdev and RDMA port, read before and after each measured size.
 * Raw means raw: IB port_xmit_data stays in 4-byte words here; the front end owns units, wrap
 * handling and the verdict. */
#ifndef FS_COUNTERS_H
#define FS_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "tcp_sockets.h"

struct cJSON;

#define FS_CNT_MAX_DEV 128
/* netdevs: tx/rx bytes and packets, then errors and drops. RDMA ports: port_{xmit,rcv}_{data,
 * packets}, hw_counters sent_pkts/rcvd_pkts (all rxe (Soft-RoCE) has: packets, no bytes), then the
 * PMA error counters the fabric matrix judges links by. The tables are in counters.c; the
 * exporter's dump is counters_dump.c, and both read sysfs through sysfs.c. */
#define FS_CNT_NVAL 40
#define FS_CNT_NDEVS 4

struct fs_cnt_dev {
    char name[96];  /* "lo" or "rxe0/1" */
    int is_rdma;
    char link_layer[16];
    char ndevs[FS_CNT_NDEVS][32]; /* netdevs behind a RoCE/IPoIB port (gid_attrs/ndevs) */
    uint64_t v[FS_CNT_NVAL];
    int have[FS_CNT_NVAL];
    int eth_read; /* a netdev behind an RDMA port whose driver statistics were read (ethtool.h) */
};

/* One pause/PFC statistic of a netdev's driver (`ethtool -S`), for the netdevs behind RDMA ports. */
#define FS_CNT_MAX_ETH 256
struct fs_cnt_eth {
    char dev[32];
    char name[33]; /* ETH_GSTRING_LEN + 1 */
    uint64_t v;
};

struct fs_cnt_snap {
    size_t n;
    size_t not_read; /* netdevs and RDMA ports past FS_CNT_MAX_DEV: reported, not read */
    struct fs_cnt_dev dev[FS_CNT_MAX_DEV];
    /* The transport library's TCP sockets in this process (tcp_sockets.h). */
    struct fs_tcp_socks socks;
    size_t n_eth;
    struct fs_cnt_eth eth[FS_CNT_MAX_ETH];
};

/* sysfs root from FABSCOPE_SYSFS_ROOT (tests) or /sys; the process's TCP sockets but `ctl_fd`
 * (the control connection). */
void fs_counters_snap(struct fs_cnt_snap *s, int ctl_fd);
/* {"host":..., "net": {dev: {before, after}} (a netdev behind an RDMA port, on the live /sys:
 * before/after also hold "ethtool": {its driver's pause and PFC statistics}, empty when it lists
 * none), "rdma": {dev/port: {link_layer, before, after}},
 * "tcp_sockets": fs_tcp_socks_json}, plus "truncated": {"limit", "not_read"} when the host has
 * more devices than a snapshot holds. */
struct cJSON *fs_counters_json(const struct fs_cnt_snap *before, const struct fs_cnt_snap *after);
/* A warning for the record when a side's counters (fs_counters_json's object; who = "local" or
 * "peer") say devices were not read. */
void fs_counters_truncation_warning(const struct cJSON *side, const char *who,
                                    struct cJSON *warnings);

/* `fabscope-engine --counters-json`: one snapshot of EVERY counter of every RDMA port
 * (every file of counters/ and hw_counters/, port attributes; "rdma_devices": device-wide
 * hw_counters/ where a driver has them, e.g. hfi1) and every netdev (every file of
 * statistics/, plus the pause/PFC/ECN/CNP entries of the driver's ethtool statistics for the
 * netdevs behind RDMA ports when the sysfs root is the live /sys), raw, with a table of the units and widths the engine knows:
 * units[dir][driver][counter] (dir counters, hw_counters or statistics; driver "" for netdevs and
 * ports without one). Schema fabscope.counters/1. */
struct cJSON *fs_counters_dump_json(void);
/* `fabscope-engine --counters-serve`: the same snapshot, one JSON line on stdout per line read on
 * stdin, until end of input; files stay open between snapshots (see the file cache in sysfs.c).
 * The exporter keeps one such engine for its lifetime. Returns the exit status. */
int fs_counters_serve(void);

#endif
