/* SPDX-License-Identifier: BSD-3-Clause */
/* The link facts of the device that carried a run, for the ceiling of a bandwidth result (issue
 * 20: fabscope.results.explain decides the expected rate from them): the netdev's speed and the
 * PCIe link of the device's PCI function, read from sysfs (fs_sysfs_root(), so tests use
 * fixtures). The verbs and tcp backends' describe call these; the port rate of an InfiniBand port
 * comes from the verbs backend (its width x speed table) and is written with fs_link_add_rate. */
#ifndef FS_LINKFACTS_H
#define FS_LINKFACTS_H

#include <stddef.h>

struct cJSON;

/* The PCIe link of a PCI function, as sysfs shows it (current_link_speed, current_link_width). */
struct fs_pcie {
    char address[32];   /* the function's directory name: "0000:41:00.0" */
    double gts;         /* GT/s per lane */
    int width;          /* lanes */
    double usable_gbps; /* gts x width after the line encoding (fs_pcie_usable_gbps) */
    const char *encoding; /* "8b/10b", "128b/130b", "242/256 (FLIT)" */
};

/* GT/s x lanes after the line encoding only; *encoding names it. 0 for an unknown speed. */
double fs_pcie_usable_gbps(double gts, int width, const char **encoding);

/* The speed of netdev nd (/sys/class/net/nd/speed, Mb/s) in Gb/s: 0 and *gbps set, with the
 * source in src; -1 when there is none to use (src says why: unreadable, -1 = unknown, or a
 * virtual netdev with no lower device, whose speed is nominal or absent). */
int fs_link_netdev_rate(const char *nd, double *gbps, char *src, size_t len);

/* The PCIe link of the device behind /sys/class/<cls>/<name> ("net", "infiniband"): its device
 * link, walked up to the first directory with current_link_speed. 0 and *out set, with where it
 * was found in src; -1 when there is no PCI function (src says why). */
int fs_link_pcie(const char *cls, const char *name, struct fs_pcie *out, char *src, size_t len);

/* rate_gbps (null when gbps <= 0) and rate_source into o. */
void fs_link_add_rate(struct cJSON *o, double gbps, const char *source);
/* rate_gbps/rate_source from netdev nd's speed. */
void fs_link_add_netdev_rate(struct cJSON *o, const char *nd);
/* pcie {address, gts, width, usable_gbps, encoding} (or null) and pcie_source into o: the first
 * of the (cls, name) pairs that has a PCI function (a software RDMA device has none: its netdev's
 * is next). names[i] may be NULL or "" (skipped). */
void fs_link_add_pcie(struct cJSON *o, const char *const cls[], const char *const names[], int n);

#endif
