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

/* The names the reader handed over, in order, one a line. */
struct names {
    char text[65536];
    size_t len;
};

static void collect(const char *name, uint64_t value, void *arg)
{
    (void)value;
    struct names *n = arg;
    int w = snprintf(n->text + n->len, sizeof n->text - n->len, "%s\n", name);
    if (w > 0 && (size_t)w < sizeof n->text - n->len)
        n->len += (size_t)w;
}

/* What the ethtool tool (the other reader of the same ioctl) lists for ifname: its statistics'
 * names, one a line, and their number; 0 where it says the driver has none ("no stats
 * available"), -1 where it cannot read them, -2 where ethtool itself is missing. */
static int ethtool_lists(const char *ifname, struct names *out)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ethtool -S '%s' 2>&1; echo \"exit $?\"", ifname);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -2;
    char line[512];
    int n = 0, header = 0, none = 0, code = -1;
    out->len = 0;
    while (fgets(line, sizeof line, p)) {
        char *colon = strrchr(line, ':');
        if (sscanf(line, "exit %d", &code) == 1)
            continue;
        if (strstr(line, "NIC statistics:"))
            header = 1;
        else if (strstr(line, "no stats available"))
            none = 1;
        else if (header && colon) {
            char *name = line + strspn(line, " \t");
            *colon = '\0';
            int w = snprintf(out->text + out->len, sizeof out->text - out->len, "%s\n", name);
            if (w > 0 && (size_t)w < sizeof out->text - out->len)
                out->len += (size_t)w;
            n++;
        }
    }
    pclose(p);
    if (code == 127)
        return -2;
    return header && code == 0 ? n : none ? 0 : -1;
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

    /* Every netdev of this host against what `ethtool -S` lists for it (eth0: virtio_net's 20,
     * ifb: 4, lo: none here): the same number and the same names in the same order with the filter
     * that takes all, nothing with the one that takes none. At least one netdev lists some, or the
     * reading part would go unchecked. */
    DIR *d = opendir("/sys/class/net");
    CHECK(d != NULL);
    int with_stats = 0;
    static struct names mine, tools;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        int expected = ethtool_lists(e->d_name, &tools);
        if (expected == -2) {
            fprintf(stderr, "ethtool is not installed (deps/apt-packages.txt lists it): run `make setup`\n");
            return 1;
        }
        int all_seen = 0, none_seen = 0;
        mine.len = 0;
        int listed = fs_ethtool_stats(e->d_name, all, collect, &mine);
        int again = fs_ethtool_stats(e->d_name, all, count, &all_seen);
        int filtered = fs_ethtool_stats(e->d_name, none, count, &none_seen);
        printf("%s: %d driver statistics (ethtool -S: %d)\n", e->d_name, listed, expected);
        CHECK(listed == expected);
        CHECK(again == listed && filtered == listed);
        CHECK(none_seen == 0);
        CHECK(all_seen == (listed > 0 ? listed : 0));
        CHECK(mine.len == tools.len && memcmp(mine.text, tools.text, mine.len) == 0);
        with_stats += listed > 0;
    }
    if (d)
        closedir(d);
    if (!with_stats && !fs_check_failures) {
        printf("skipped: no netdev here lists driver statistics, the reading part was not exercised\n");
        return CHECK_SKIP;
    }
    return CHECK_DONE();
}
