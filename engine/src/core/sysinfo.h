/* SPDX-License-Identifier: BSD-3-Clause */
/* Host facts recorded with every result because they change what a latency means. */
#ifndef FS_SYSINFO_H
#define FS_SYSINFO_H

#include "fs.h"
#include "placement.h"

struct cJSON;

struct fs_sysinfo {
    char hostname[256];
    char cpuidle_driver[64];
    char cpuidle_governor[64];
    int cpu_dma_latency_fd; /* held open at 0 us while >= 0 */
    long cpu;               /* the one CPU this engine may run on (pinned by --cpu or by its
                             * launcher: mpirun/srun binding), or -1 */
    char cpus_allowed[256]; /* its affinity list, e.g. "1" or "0,1" */
    int cpus_allowed_n;     /* how many CPUs that list has (0: unknown) */
    /* /proc/sys/kernel/random/boot_id: two engines with the same one share one machine (its CPUs,
     * its scheduler) even when their host names differ (containers, network namespaces). */
    char boot_id[64];
    struct fs_placement place; /* --cpu: what was asked, the device's NUMA node, why this CPU */
};

void fs_sysinfo_read(struct fs_sysinfo *si);
/* Hold /dev/cpu_dma_latency at 0 for the life of the process, as tuned's latency profiles do:
 * keeps CPUs out of deep idle states whose wake-up cost lands on every blocking message. */
int fs_hold_cpu_latency(struct fs_sysinfo *si, struct fs_err *err);
int fs_pin_cpu(struct fs_sysinfo *si, long cpu, struct fs_err *err);
void fs_sysinfo_json(const struct fs_sysinfo *si, struct cJSON *obj);

#endif
