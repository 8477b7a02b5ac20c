/* SPDX-License-Identifier: BSD-3-Clause */
/* The driver-statistics reader (core/ethtool.c) against this host's real netdevs: what it hands
 * over is exactly what the driver lists and the filter accepts, a name that is no netdev is -1,
 * and the pause filter takes the names drivers give their pause and PFC counters. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../src/core/ethtool.h"
#include "check.h"

static int all(const char *name)
{
    (void)name;
    return 1;
}

static int none(const char *name)
{
    (void)name;
    return 0;
}

static void count(const char *name, uint64_t value, void *arg)
{
    (void)value;
    CHECK(name[0] != '\0');
    (*(int *)arg)++;
}

int main(void)
{
    int seen = 0;
    CHECK(fs_ethtool_stats("fsnosuchdev0", all, count, &seen) == -1);
    CHECK(seen == 0);

    /* mlx5, bnxt, ice and ixgbe names; none of the traffic counters, nor XON (resume). */
    CHECK(fs_ethtool_is_pause("rx_prio3_pause"));
    CHECK(fs_ethtool_is_pause("tx_pause_ctrl_phy"));
    CHECK(fs_ethtool_is_pause("rx_pfc_ena_frames_pri3"));
    CHECK(fs_ethtool_is_pause("tx_priority_3_xoff.nic"));
    CHECK(fs_ethtool_is_pause("link_xoff_rx"));
    CHECK(fs_ethtool_is_pause("rx_flow_control_xon") == 0);
    CHECK(fs_ethtool_is_pause("rx_prio3_bytes") == 0);
    CHECK(fs_ethtool_is_pause("rx_bytes") == 0);

    /* Every netdev of this host with a driver behind it (eth0 is virtio_net here): the callback
     * runs once per listed statistic with the filter that takes all, never with the one that
     * takes none. */
    DIR *d = opendir("/sys/class/net");
    int with_stats = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        int all_seen = 0, none_seen = 0;
        int listed = fs_ethtool_stats(e->d_name, all, count, &all_seen);
        int again = fs_ethtool_stats(e->d_name, none, count, &none_seen);
        CHECK(listed >= -1);
        CHECK(again == listed);
        CHECK(none_seen == 0);
        if (listed > 0) {
            CHECK(all_seen == listed);
            with_stats++;
            printf("%s: %d driver statistics\n", e->d_name, listed);
        }
    }
    if (d)
        closedir(d);
    if (!with_stats)
        printf("no netdev here lists driver statistics: the reading part was not exercised\n");
    return CHECK_DONE();
}
