/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "sysinfo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <limits.h>
#include "sysfs.h"

static void read_line(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)len, f))
        out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

/* This process's CPU affinity as a list ("0,1"); returns how many CPUs it holds and the lowest. */
static int affinity(char *list, size_t len, long *first)
{
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    list[0] = '\0';
    *first = -1;
    if (sched_getaffinity(0, sizeof allowed, &allowed))
        return 0;
    size_t used = 0;
    for (int i = 0; i < CPU_SETSIZE && used < len - 8; i++)
        if (CPU_ISSET(i, &allowed)) {
            used += (size_t)snprintf(list + used, len - used, "%s%d", used ? "," : "", i);
            if (*first < 0)
                *first = i;
        }
    return CPU_COUNT(&allowed);
}

/* A launcher (mpirun --bind-to, srun --cpu-bind) may have bound us to one CPU already. */
static void note_affinity(struct fs_sysinfo *si)
{
    long first;
    si->cpus_allowed_n = affinity(si->cpus_allowed, sizeof si->cpus_allowed, &first);
    if (si->cpus_allowed_n == 1)
        si->cpu = first;
}

void fs_sysinfo_read(struct fs_sysinfo *si)
{
    memset(si, 0, sizeof *si);
    si->cpu_dma_latency_fd = -1;
    si->cpu = -1;
    gethostname(si->hostname, sizeof si->hostname - 1);
    char path[PATH_MAX];
    if (!fs_sysfs_path(path, sizeof path, "devices/system/cpu/cpuidle/current_driver"))
        read_line(path, si->cpuidle_driver, sizeof si->cpuidle_driver);
    if (!fs_sysfs_path(path, sizeof path, "devices/system/cpu/cpuidle/current_governor_ro"))
        read_line(path, si->cpuidle_governor, sizeof si->cpuidle_governor);
    if (!si->cpuidle_governor[0] &&
        !fs_sysfs_path(path, sizeof path, "devices/system/cpu/cpuidle/current_governor"))
        read_line(path, si->cpuidle_governor, sizeof si->cpuidle_governor);
    read_line("/proc/sys/kernel/random/boot_id", si->boot_id, sizeof si->boot_id);
    note_affinity(si);
}

int fs_hold_cpu_latency(struct fs_sysinfo *si, struct fs_err *err)
{
    int fd = open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--hold-cpu-latency: cannot open /dev/cpu_dma_latency: %s%s", strerror(errno),
                       errno == EACCES ? " (needs root; or drop --hold-cpu-latency)" : "");
    int32_t zero = 0;
    if (write(fd, &zero, sizeof zero) != (ssize_t)sizeof zero) {
        int e = errno;
        close(fd);
        return fs_fail(err, FS_EXIT_USAGE, "--hold-cpu-latency: write to /dev/cpu_dma_latency: %s",
                       strerror(e));
    }
    si->cpu_dma_latency_fd = fd;
    return 0;
}

int fs_pin_cpu(struct fs_sysinfo *si, long cpu, struct fs_err *err)
{
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof allowed, &allowed);
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET((int)cpu, &allowed))
        return fs_fail(err, FS_EXIT_USAGE, "--cpu %ld: this process may run only on CPUs %s", cpu,
                       si->cpus_allowed);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET((int)cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one))
        return fs_fail(err, FS_EXIT_USAGE, "--cpu %ld: sched_setaffinity: %s", cpu, strerror(errno));
    note_affinity(si);
    return 0;
}

void fs_sysinfo_json(const struct fs_sysinfo *si, cJSON *obj)
{
    cJSON_AddStringToObject(obj, "hostname", si->hostname);
    cJSON_AddStringToObject(obj, "cpuidle_driver", si->cpuidle_driver);
    cJSON_AddStringToObject(obj, "cpuidle_governor", si->cpuidle_governor);
    cJSON_AddBoolToObject(obj, "cpu_dma_latency_held", si->cpu_dma_latency_fd >= 0);
    if (si->cpu >= 0)
        cJSON_AddNumberToObject(obj, "cpu", (double)si->cpu);
    else
        cJSON_AddNullToObject(obj, "cpu");
    cJSON_AddStringToObject(obj, "cpus_allowed", si->cpus_allowed);
    /* Which kernel boot this is, so the front end can tell when two ranks bound to the same CPU
     * time each other's time slices. */
    if (si->boot_id[0])
        cJSON_AddStringToObject(obj, "boot_id", si->boot_id);
    else
        cJSON_AddNullToObject(obj, "boot_id");
}
