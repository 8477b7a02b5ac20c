/* SPDX-License-Identifier: BSD-3-Clause */
/* See ethtool.h. */
#define _GNU_SOURCE
#include "ethtool.h"

#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

int fs_ethtool_is_pause(const char *name)
{
    /* mlx5/bnxt say pause or pfc; Intel's drivers count the pause frames as XOFF (ice
     * link_xoff_rx, tx_priority_3_xoff.nic; ixgbe rx_flow_control_xoff). */
    return strcasestr(name, "pause") || strcasestr(name, "pfc") || strcasestr(name, "xoff");
}

int fs_ethtool_stats(const char *ifname, int (*want)(const char *name),
                     void (*fn)(const char *name, uint64_t value, void *arg), void *arg)
{
    /* SOCK_CLOEXEC also keeps librspreload (`--preload rsocket`) off this socket: it would make
     * it a datagram rsocket (a UD QP per snapshot) that no ioctl can reach. */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
    /* ethtool_sset_info ends in a flexible array: one u32 follows for the one set asked. */
    uint64_t sset_buf[(sizeof(struct ethtool_sset_info) + sizeof(uint32_t) + 7) / 8] = {0};
    struct ethtool_sset_info *sset = (struct ethtool_sset_info *)sset_buf;
    sset->cmd = ETHTOOL_GSSET_INFO;
    sset->sset_mask = 1ull << ETH_SS_STATS;
    ifr.ifr_data = (void *)sset;
    if (ioctl(fd, SIOCETHTOOL, &ifr) != 0 || sset->data[0] > 65536) {
        close(fd);
        return -1;
    }
    if (!sset->sset_mask || sset->data[0] == 0) {
        close(fd);
        return 0;
    }
    uint32_t n = sset->data[0];
    int listed = -1;
    struct ethtool_gstrings *names = calloc(1, sizeof *names + (size_t)n * ETH_GSTRING_LEN);
    struct ethtool_stats *vals = calloc(1, sizeof *vals + (size_t)n * sizeof(uint64_t));
    if (!names || !vals)
        goto out;
    names->cmd = ETHTOOL_GSTRINGS;
    names->string_set = ETH_SS_STATS;
    names->len = n;
    ifr.ifr_data = (void *)names;
    if (ioctl(fd, SIOCETHTOOL, &ifr) != 0)
        goto out;
    vals->cmd = ETHTOOL_GSTATS;
    vals->n_stats = n;
    ifr.ifr_data = (void *)vals;
    if (ioctl(fd, SIOCETHTOOL, &ifr) != 0)
        goto out;
    for (uint32_t i = 0; i < n && i < vals->n_stats; i++) {
        char name[ETH_GSTRING_LEN + 1];
        memcpy(name, names->data + (size_t)i * ETH_GSTRING_LEN, ETH_GSTRING_LEN);
        name[ETH_GSTRING_LEN] = '\0';
        if (want(name))
            fn(name, vals->data[i], arg);
    }
    listed = (int)n;
out:
    free(names);
    free(vals);
    close(fd);
    return listed;
}
