/* SPDX-License-Identifier: BSD-3-Clause */
/* --cpu auto | near | far | N: the engine's CPU against its device's NUMA node (placement.c). */
#ifndef FS_PLACEMENT_H
#define FS_PLACEMENT_H

#include "fs.h"

#include <sched.h>

struct cJSON;
struct fs_sysinfo;

struct fs_placement {
    char asked[16];         /* auto, near, far or a CPU number */
    char device[96];        /* the device whose node counted ("rxe0 (on eth0)"), "" without --device */
    long device_node;       /* its NUMA node, -1 when unknown (why_no_node says why) */
    int host_nodes;         /* NUMA nodes of this host with CPUs (0: no NUMA information) */
    char why_no_node[224];
    char how[320];          /* one sentence: where the engine runs and why */
};

/* --cpu's value: 0 when it is auto, near, far or a CPU number (then in *cpu, else -1). */
int fs_cpu_asked_check(const char *asked, long *cpu, struct fs_err *err);
/* Places this process for --cpu `asked` against --device `device` (its first device), pinning it
 * where a CPU is chosen; `slot` >= 0 takes that CPU of the candidates (two engines of one host get
 * different ones) and lets auto pin where NUMA gives no choice. Fills si->place. Usage errors:
 * near or far where the device's node is unknown, far on a one-node host, no allowed CPU. */
int fs_place(const char *asked, long slot, const char *device, struct fs_sysinfo *si, struct fs_err *err);
void fs_placement_json(const struct fs_placement *p, const struct fs_sysinfo *si, struct cJSON *o);
/* The host's facts (sysinfo.c) and, when --cpu was given, where the engine was placed: the record's
 * "host" object. Here, not in sysinfo.c, so that placement calls sysinfo and never the reverse. */
void fs_host_json(const struct fs_sysinfo *si, struct cJSON *obj);

int fs_cpulist_parse(const char *list, cpu_set_t *set);
void fs_cpulist_format(const cpu_set_t *set, char *out, size_t len);

#endif
