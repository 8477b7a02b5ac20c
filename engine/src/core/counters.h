/* Raw traffic counters of every netdev and RDMA port, read before and after each measured size.
 * Raw means raw: IB port_xmit_data stays in 4-byte words here; the front end owns units, wrap
 * handling and the verdict. */
#ifndef FS_COUNTERS_H
#define FS_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define FS_CNT_MAX_DEV 128
/* netdevs: tx/rx bytes and packets. RDMA ports: port_{xmit,rcv}_{data,packets}, then
 * hw_counters sent_pkts/rcvd_pkts, which is all rxe (Soft-RoCE) has: packets, no bytes. */
#define FS_CNT_NVAL 6
#define FS_CNT_NDEVS 4

struct fs_cnt_dev {
    char name[96];  /* "lo" or "rxe0/1" */
    int is_rdma;
    char link_layer[16];
    char ndevs[FS_CNT_NDEVS][32]; /* netdevs behind a RoCE/IPoIB port (gid_attrs/ndevs) */
    uint64_t v[FS_CNT_NVAL];
    int have[FS_CNT_NVAL];
};

struct fs_cnt_snap {
    size_t n;
    struct fs_cnt_dev dev[FS_CNT_MAX_DEV];
};

/* sysfs root from FABSCOPE_SYSFS_ROOT (tests) or /sys. */
void fs_counters_snap(struct fs_cnt_snap *s);
/* {"host":..., "net": {dev: {before, after}}, "rdma": {dev/port: {link_layer, before, after}}} */
struct cJSON *fs_counters_json(const struct fs_cnt_snap *before, const struct fs_cnt_snap *after);

#endif
