/* SPDX-License-Identifier: BSD-3-Clause */
/* A netdev driver's own statistics (`ethtool -S`, the SIOCETHTOOL ioctl): the one reader for the
 * exporter's dump (counters_dump.c) and the per-run snapshot (counters.c). Pause and PFC
 * counters, which lossless RoCE depends on, exist nowhere in sysfs. */
#ifndef FS_ETHTOOL_H
#define FS_ETHTOOL_H

#include <stdint.h>

/* Calls `fn(name, value, arg)` for each statistic of `ifname`'s driver whose name `want` accepts.
 * Returns how many statistics the driver lists (0: it lists none), or -1 when they cannot be read
 * (no such netdev, a driver without ethtool statistics, memory). */
int fs_ethtool_stats(const char *ifname, int (*want)(const char *name),
                     void (*fn)(const char *name, uint64_t value, void *arg), void *arg);

/* Whether a statistic's name says it counts pause frames (802.3x or per-priority PFC; XOFF). */
int fs_ethtool_is_pause(const char *name);

#endif
