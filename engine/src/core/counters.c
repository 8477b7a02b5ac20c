/* SPDX-License-Identifier: BSD-3-Clause */
/* The measurement snapshot: the traffic and error counters of every netdev and RDMA port,
 * read before and after each measured size (counters.h). The exporter's full dump is
 * counters_dump.c; both read sysfs through sysfs.c. */
#define _GNU_SOURCE
#include "counters.h"
#include "clock.h"
#include "ethtool.h"
#include "sysfs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* One counter of a per-run snapshot: the key in the record and the file it is read from (under
 * class/net/X/ or class/infiniband/D/ports/N/). Keys are only ever added, so older front ends
 * keep reading the records. */
struct cnt_key {
    const char *key;
    const char *file;
};

static const struct cnt_key net_keys[] = {
    {"tx_bytes", "statistics/tx_bytes"},     {"rx_bytes", "statistics/rx_bytes"},
    {"tx_packets", "statistics/tx_packets"}, {"rx_packets", "statistics/rx_packets"},
    {"rx_errors", "statistics/rx_errors"},   {"tx_errors", "statistics/tx_errors"},
    {"rx_dropped", "statistics/rx_dropped"}, {"tx_dropped", "statistics/tx_dropped"},
    {"rx_crc_errors", "statistics/rx_crc_errors"}, {"rx_missed_errors", "statistics/rx_missed_errors"},
    {"tx_carrier_errors", "statistics/tx_carrier_errors"},
    /* Link events during the run (fabscope.results.explain, cause `link`). */
    {"carrier_changes", "carrier_changes"}, {"carrier_down_count", "carrier_down_count"},
    {NULL, NULL},
};
/* The error counters are what the fabric matrix reads a bad cable or port from. */
static const struct cnt_key rdma_keys[] = {
    {"port_xmit_data", "counters/port_xmit_data"},
    {"port_rcv_data", "counters/port_rcv_data"},
    {"port_xmit_packets", "counters/port_xmit_packets"},
    {"port_rcv_packets", "counters/port_rcv_packets"},
    {"hw_sent_pkts", "hw_counters/sent_pkts"},
    {"hw_rcvd_pkts", "hw_counters/rcvd_pkts"},
    {"symbol_error", "counters/symbol_error"},
    {"link_downed", "counters/link_downed"},
    {"link_error_recovery", "counters/link_error_recovery"},
    {"port_rcv_errors", "counters/port_rcv_errors"},
    {"port_xmit_discards", "counters/port_xmit_discards"},
    {"port_rcv_remote_physical_errors", "counters/port_rcv_remote_physical_errors"},
    {"port_rcv_switch_relay_errors", "counters/port_rcv_switch_relay_errors"},
    {"port_xmit_wait", "counters/port_xmit_wait"},
    {"port_xmit_constraint_errors", "counters/port_xmit_constraint_errors"},
    {"port_rcv_constraint_errors", "counters/port_rcv_constraint_errors"},
    {"local_link_integrity_errors", "counters/local_link_integrity_errors"},
    {"excessive_buffer_overrun_errors", "counters/excessive_buffer_overrun_errors"},
    {"VL15_dropped", "counters/VL15_dropped"},
    /* Loss and retransmission during the run (fabscope.results.explain, cause `retransmission`):
     * rxe's and mlx5's hw_counters. rxe under 3 % netem loss: rcvd_seq_err, duplicate_request and
     * completer_retry_err move; packets sent and received alone do not say a packet was resent. */
    {"rcvd_seq_err", "hw_counters/rcvd_seq_err"},
    {"out_of_seq_request", "hw_counters/out_of_seq_request"},
    {"duplicate_request", "hw_counters/duplicate_request"},
    {"retry_exceeded_err", "hw_counters/retry_exceeded_err"},
    {"completer_retry_err", "hw_counters/completer_retry_err"},
    {"rnr_nak_retry_err", "hw_counters/rnr_nak_retry_err"},
    {"out_of_sequence", "hw_counters/out_of_sequence"},
    {"packet_seq_err", "hw_counters/packet_seq_err"},
    {"local_ack_timeout_err", "hw_counters/local_ack_timeout_err"},
    {"implied_nak_seq_err", "hw_counters/implied_nak_seq_err"},
    /* Congestion signals where the driver has them (mlx5). */
    {"np_cnp_sent", "hw_counters/np_cnp_sent"},
    {"rp_cnp_handled", "hw_counters/rp_cnp_handled"},
    {"np_ecn_marked_roce_packets", "hw_counters/np_ecn_marked_roce_packets"},
    {NULL, NULL},
};
_Static_assert(sizeof net_keys / sizeof net_keys[0] - 1 <= FS_CNT_NVAL, "net_keys > FS_CNT_NVAL");
_Static_assert(sizeof rdma_keys / sizeof rdma_keys[0] - 1 <= FS_CNT_NVAL,
               "rdma_keys > FS_CNT_NVAL");

/* The kernel serves a port's hw_counters from a cache for `lifespan` ms after each read (ib_core's
 * default is 10, counted in jiffies: up to lifespan + 2 jiffies, 30 ms at HZ=100): a snapshot
 * taken sooner than that after the previous one repeats the previous values. A ping-pong of 20
 * messages on an emulated rxe lasts less, and its after-snapshot said no packet had moved (the
 * path verdict: unverifiable). So a snapshot first waits until the previous one's values have
 * expired. Only ports with hw_counters wait (rxe; PMA counters/ are read fresh), and never inside
 * a measurement. */
#define FS_HW_EXPIRY_MARGIN_MS 20
static uint64_t hw_expire_ns; /* CLOCK_MONOTONIC: when the last hw_counters read has expired */

static void hw_counters_wait_fresh(void)
{
    uint64_t now = fs_monotonic_ns();
    if (now < hw_expire_ns)
        poll(NULL, 0, (int)((hw_expire_ns - now + 999999) / 1000000));
}

/* After a port's counters were read (pfd: its directory): when what the kernel cached for it
 * expires. */
static void hw_counters_read(int pfd)
{
    uint64_t lifespan_ms;
    if (fs_sysfs_u64(NULL, pfd, "hw_counters/lifespan", &lifespan_ms))
        return; /* no hw_counters/ here */
    uint64_t until = fs_monotonic_ns() + (lifespan_ms + FS_HW_EXPIRY_MARGIN_MS) * 1000000ull;
    if (until > hw_expire_ns)
        hw_expire_ns = until;
}

/* One netdev's statistics into dev; whether it has any (an entry without them is left out). */
static int read_netdev(const char *root, const char *name, struct fs_cnt_dev *dev)
{
    char path[1024];
    memset(dev, 0, sizeof *dev);
    snprintf(dev->name, sizeof dev->name, "%s", name);
    int any = 0;
    for (int k = 0; net_keys[k].key; k++) {
        snprintf(path, sizeof path, "%s/class/net/%s/%s", root, name, net_keys[k].file);
        dev->have[k] = fs_sysfs_u64(NULL, AT_FDCWD, path, &dev->v[k]) == 0;
        any |= dev->have[k];
    }
    return any;
}

/* One RDMA port into dev. */
static void read_port(const char *ports, const char *dev_name, const char *port,
                     struct fs_cnt_dev *dev)
{
    char path[1100];
    memset(dev, 0, sizeof *dev);
    dev->is_rdma = 1;
    snprintf(dev->name, sizeof dev->name, "%.40s/%.40s", dev_name, port);
    snprintf(path, sizeof path, "%s/%s", ports, port);
    int pfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return; /* gone since the listing: listed, with no values */
    fs_sysfs_str(NULL, pfd, "link_layer", dev->link_layer, sizeof dev->link_layer);
    for (int k = 0; rdma_keys[k].key; k++)
        dev->have[k] = fs_sysfs_u64(NULL, pfd, rdma_keys[k].file, &dev->v[k]) == 0;
    hw_counters_read(pfd);
    fs_sysfs_port_ndevs(NULL, pfd, dev->ndevs, FS_CNT_NDEVS);
    close(pfd);
}

/* The next free entry of s, or NULL (counted in not_read) when it is full. */
static struct fs_cnt_dev *next_slot(struct fs_cnt_snap *s)
{
    if (s->n < FS_CNT_MAX_DEV)
        return &s->dev[s->n];
    s->not_read++;
    return NULL;
}

struct eth_into {
    struct fs_cnt_snap *s;
    const char *dev;
};

static void keep_eth(const char *name, uint64_t value, void *arg)
{
    struct eth_into *into = arg;
    if (into->s->n_eth >= FS_CNT_MAX_ETH)
        return;
    struct fs_cnt_eth *e = &into->s->eth[into->s->n_eth++];
    snprintf(e->dev, sizeof e->dev, "%s", into->dev);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->v = value;
}

/* The pause and PFC statistics of the netdevs behind the RDMA ports (lossless RoCE pauses them,
 * and no sysfs file counts it). Only on the live /sys: a fixture tree has no driver to ask. */
static void read_pause(struct fs_cnt_snap *s)
{
    s->n_eth = 0;
    if (strcmp(fs_sysfs_root(), "/sys") != 0)
        return;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->dev[i].is_rdma)
            continue;
        for (int k = 0; k < FS_CNT_NDEVS && s->dev[i].ndevs[k][0]; k++) {
            for (size_t j = 0; j < s->n; j++) {
                struct fs_cnt_dev *nd = &s->dev[j];
                if (nd->is_rdma || nd->eth_read || strcmp(nd->name, s->dev[i].ndevs[k]) != 0)
                    continue;
                struct eth_into into = {s, nd->name};
                nd->eth_read = fs_ethtool_stats(nd->name, fs_ethtool_is_pause, keep_eth, &into) >= 0;
            }
        }
    }
}

void fs_counters_snap(struct fs_cnt_snap *s, int ctl_fd)
{
    fs_tcp_socks_snap(&s->socks, ctl_fd);
    const char *root = fs_sysfs_root();
    char path[1024];
    s->n = 0;
    s->not_read = 0;
    snprintf(path, sizeof path, "%s/class/net", root);
    DIR *d = opendir(path);
    struct dirent *e;
    while ((e = fs_sysfs_next(d))) {
        struct fs_cnt_dev *dev = next_slot(s);
        if (dev && read_netdev(root, e->d_name, dev))
            s->n++;
    }
    if (d)
        closedir(d);
    snprintf(path, sizeof path, "%s/class/infiniband", root);
    hw_counters_wait_fresh();
    d = opendir(path);
    while ((e = fs_sysfs_next(d))) {
        char ports[1024];
        snprintf(ports, sizeof ports, "%s/class/infiniband/%s/ports", root, e->d_name);
        DIR *pd = opendir(ports);
        struct dirent *pe;
        while ((pe = fs_sysfs_next(pd))) {
            struct fs_cnt_dev *dev = next_slot(s);
            if (!dev)
                continue;
            read_port(ports, e->d_name, pe->d_name, dev);
            s->n++;
        }
        if (pd)
            closedir(pd);
    }
    if (d)
        closedir(d);
    read_pause(s);
}

static cJSON *values(const struct fs_cnt_snap *s, const struct fs_cnt_dev *dev)
{
    const struct cnt_key *keys = dev->is_rdma ? rdma_keys : net_keys;
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; keys[k].key; k++)
        if (dev->have[k])
            fs_json_add_u64(o, keys[k].key, dev->v[k]);
    if (dev->eth_read) {
        cJSON *eth = cJSON_AddObjectToObject(o, "ethtool");
        for (size_t i = 0; i < s->n_eth; i++)
            if (strcmp(s->eth[i].dev, dev->name) == 0)
                fs_json_add_u64(eth, s->eth[i].name, s->eth[i].v);
    }
    return o;
}

cJSON *fs_counters_json(const struct fs_cnt_snap *before, const struct fs_cnt_snap *after)
{
    cJSON *o = cJSON_CreateObject();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(o, "host", host);
    cJSON *net = cJSON_AddObjectToObject(o, "net");
    cJSON *rdma = cJSON_AddObjectToObject(o, "rdma");
    for (size_t i = 0; i < after->n; i++) {
        const struct fs_cnt_dev *a = &after->dev[i];
        const struct fs_cnt_dev *b = NULL;
        for (size_t j = 0; j < before->n && !b; j++)
            if (before->dev[j].is_rdma == a->is_rdma && strcmp(before->dev[j].name, a->name) == 0)
                b = &before->dev[j];
        if (!b)
            continue; /* appeared during the run: no baseline to compare */
        cJSON *d = cJSON_AddObjectToObject(a->is_rdma ? rdma : net, a->name);
        if (a->is_rdma) {
            cJSON_AddStringToObject(d, "link_layer", a->link_layer);
            cJSON *nd = cJSON_AddArrayToObject(d, "ndevs");
            for (int k = 0; k < FS_CNT_NDEVS && a->ndevs[k][0]; k++)
                cJSON_AddItemToArray(nd, cJSON_CreateString(a->ndevs[k]));
        }
        cJSON_AddItemToObject(d, "before", values(before, b));
        cJSON_AddItemToObject(d, "after", values(after, a));
    }
    cJSON *socks = fs_tcp_socks_json(&before->socks, &after->socks);
    if (socks)
        cJSON_AddItemToObject(o, "tcp_sockets", socks);
    size_t lost = before->not_read > after->not_read ? before->not_read : after->not_read;
    if (lost) {
        /* More netdevs and RDMA ports than a snapshot holds: say so rather than stop silently. */
        cJSON *t = cJSON_AddObjectToObject(o, "truncated");
        cJSON_AddNumberToObject(t, "limit", FS_CNT_MAX_DEV);
        cJSON_AddNumberToObject(t, "not_read", (double)lost);
    }
    return o;
}

void fs_counters_truncation_warning(const cJSON *side, const char *who, cJSON *warnings)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(side, "truncated");
    const cJSON *lost = cJSON_GetObjectItemCaseSensitive(t, "not_read");
    const cJSON *limit = cJSON_GetObjectItemCaseSensitive(t, "limit");
    if (!cJSON_IsNumber(lost) || !cJSON_IsNumber(limit))
        return;
    char w[320];
    snprintf(w, sizeof w,
             "counters (%s): the host has more netdevs and RDMA ports than the %d a snapshot "
             "holds; %d were not read, so the path verdict may not see the device that carried "
             "the traffic",
             who, limit->valueint, lost->valueint);
    cJSON_AddItemToArray(warnings, cJSON_CreateString(w));
}

