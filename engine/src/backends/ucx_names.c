/* SPDX-License-Identifier: BSD-3-Clause */
/* The ucx backend's transports and devices: UCX_TLS and UCX_NET_DEVICES decided from the option,
 * the environment or the data path, each name checked against what UCX has on this host
 * (ucx_resources.c) before anything connects. */
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/datapath.h"
#include "sysfs.h"
#include "ucx_int.h"

/* A server without a device of its own: the client's data-path hint chose our address on the
 * client's network (`addr`, datapath.h). UCX's tcp transport would offer every interface, and a
 * client bound to fabric0 reached our mgmt0 address over the management link (misrouted). Keep
 * the interface holding that address, the RDMA ports that send through it, and RDMA ports whose
 * netdev is unknown (InfiniBand: no Ethernet netdev behind its GIDs). Empty when the address is
 * not ours or nothing matches (then UCX's default stays). */
static void devices_on_datapath(const struct ucx_reslist *l, const char *addr, char *out, size_t len)
{
    out[0] = '\0';
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa))
        return;
    const char *owner = fs_datapath_owner(ifa, addr);
    char netdev[64] = "";
    if (owner)
        snprintf(netdev, sizeof netdev, "%s", owner);
    freeifaddrs(ifa);
    if (!netdev[0])
        return;
    size_t used = 0;
    for (size_t i = 0; i < l->n; i++) {
        const char *dev = l->v[i].dev;
        if (l->v[i].type != UCT_DEVICE_TYPE_NET)
            continue;
        int keep = strcmp(dev, netdev) == 0;
        const char *colon = strchr(dev, ':');
        if (!keep && colon) { /* "rxe0:1": an RDMA port */
            char rdma[UCT_DEVICE_NAME_MAX], through[64];
            snprintf(rdma, sizeof rdma, "%.*s", (int)(colon - dev), dev);
            keep = fs_datapath_rdma_netdev(fs_sysfs_root(), rdma, through, sizeof through) != 0 ||
                   strcmp(through, netdev) == 0;
        }
        char token[UCT_DEVICE_NAME_MAX + 2];
        snprintf(token, sizeof token, ",%s,", dev);
        char listed[sizeof(((struct ucx_names *)0)->net_devices) + 2];
        snprintf(listed, sizeof listed, ",%s,", out);
        if (!keep || strstr(listed, token))
            continue;
        int n = snprintf(out + used, len - used, "%s%s", used ? "," : "", dev);
        if (n < 0 || (size_t)n >= len - used) {
            out[used] = '\0';
            break;
        }
        used += (size_t)n;
    }
}

int ucx_resolve_names(const char *opt_tls, const char *device, const char *datapath_addr,
                      struct ucx_names *u, struct fs_err *err)
{
    struct ucx_reslist l = {0};
    if (ucx_query_resources(&l, err))
        return -1;
    const char *env_tls = getenv("UCX_TLS"), *env_dev = getenv("UCX_NET_DEVICES");
    int rc = 0;
    if (opt_tls[0]) {
        snprintf(u->tls, sizeof u->tls, "%s", opt_tls);
        snprintf(u->tls_source, sizeof u->tls_source, "option");
        rc = ucx_check_list(&l, u->tls, 0, "--ucx-tls", err);
    } else if (env_tls && *env_tls) {
        snprintf(u->tls, sizeof u->tls, "%s", env_tls);
        snprintf(u->tls_source, sizeof u->tls_source, "environment");
        rc = ucx_check_list(&l, u->tls, 0, "UCX_TLS (from the environment)", err);
    } else {
        snprintf(u->tls, sizeof u->tls, "all");
        snprintf(u->tls_source, sizeof u->tls_source, "default");
    }
    if (rc == 0 && device[0]) {
        snprintf(u->net_devices, sizeof u->net_devices, "%s", device);
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "option");
        rc = ucx_check_list(&l, u->net_devices, 1, "--device", err);
    } else if (rc == 0 && env_dev && *env_dev) {
        snprintf(u->net_devices, sizeof u->net_devices, "%s", env_dev);
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "environment");
        rc = ucx_check_list(&l, u->net_devices, 1, "UCX_NET_DEVICES (from the environment)", err);
    } else if (rc == 0 && datapath_addr[0] &&
               (devices_on_datapath(&l, datapath_addr, u->net_devices, sizeof u->net_devices),
                u->net_devices[0])) {
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "data path");
    } else if (rc == 0) {
        snprintf(u->net_devices, sizeof u->net_devices, "all");
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "default");
    }
    free(l.v);
    return rc;
}
