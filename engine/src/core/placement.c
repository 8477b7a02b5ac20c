/* SPDX-License-Identifier: BSD-3-Clause */
/* --cpu: where this engine runs, chosen against the NUMA node of its device. A process on the
 * other socket than its adapter pays for every completion and every DMA crossing the
 * inter-socket link (1.9 us that became 1.4 us in the field reports once the processes ran next
 * to the adapter), so auto, the default, puts the engine on its device's node where the host has
 * more than one. What was asked, where the engine ran and why are in the record
 * (host.placement), for the explanation's "placement" cause. */
#define _GNU_SOURCE
#include "placement.h"

#include "sysfs.h"
#include "sysinfo.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_NODES 64

static int read_small(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(out, (int)len, f) != NULL;
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
    return ok ? 0 : -1;
}

/* "0-3,8-11" into set (what sysfs cpulist files hold); -1 when it is not a list. */
int fs_cpulist_parse(const char *list, cpu_set_t *set)
{
    CPU_ZERO(set);
    const char *p = list;
    while (*p && !isspace((unsigned char)*p)) {
        char *end;
        errno = 0;
        long lo = strtol(p, &end, 10), hi = lo;
        if (end == p || errno || lo < 0)
            return -1;
        p = end;
        if (*p == '-') {
            hi = strtol(p + 1, &end, 10);
            if (end == p + 1 || hi < lo)
                return -1;
            p = end;
        }
        for (long c = lo; c <= hi && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, set);
        if (*p == ',')
            p++;
        else if (*p && !isspace((unsigned char)*p))
            return -1;
    }
    return 0;
}

/* set as a cpulist ("0-3,8"), the way the kernel prints them. */
void fs_cpulist_format(const cpu_set_t *set, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && used + 24 < len; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, set))
            last++;
        used += (size_t)(last > c ? snprintf(out + used, len - used, "%s%d-%d", used ? "," : "", c, last)
                                  : snprintf(out + used, len - used, "%s%d", used ? "," : "", c));
        c = last;
    }
}

/* The nodes of this host that have CPUs (a memory-only node, CXL or HBM, is no place to run). */
static int host_nodes(const char *root, cpu_set_t nodes[MAX_NODES], long ids[MAX_NODES])
{
    char path[PATH_MAX], list[4096];
    int n = 0;
    for (long id = 0; id < 1024 && n < MAX_NODES; id++) {
        snprintf(path, sizeof path, "%s/devices/system/node/node%ld/cpulist", root, id);
        if (read_small(path, list, sizeof list))
            continue;
        if (fs_cpulist_parse(list, &nodes[n]) || CPU_COUNT(&nodes[n]) == 0)
            continue;
        ids[n++] = id;
    }
    return n;
}

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The NUMA node of the device dir `dev` (a class/infiniband or class/net entry): its bus
 * device's numa_node, or -1 with the reason in why. */
static long bus_node(const char *dev, const char *name, char *why, size_t wlen)
{
    char path[PATH_MAX], val[32];
    snprintf(path, sizeof path, "%s/device", dev);
    if (!is_dir(path)) {
        snprintf(why, wlen, "%s is a virtual device (no bus device under it): it has no NUMA node", name);
        return -1;
    }
    /* The bus device, or the PCI function above it: a virtio NIC's netdev hangs off virtioN,
     * whose parent is the PCI device that has the node. */
    char real[PATH_MAX];
    int found = -1;
    if (realpath(path, real))
        for (int up = 0; up < 3 && found; up++) {
            snprintf(path, sizeof path, "%s/numa_node", real);
            found = read_small(path, val, sizeof val);
            char *slash = strrchr(real, '/');
            if (!slash || slash == real)
                break;
            *slash = '\0';
        }
    if (found) {
        snprintf(why, wlen, "%s's bus device has no numa_node attribute", name);
        return -1;
    }
    long node = strtol(val, NULL, 10);
    if (node < 0)
        snprintf(why, wlen, "the firmware gives %s no NUMA node (numa_node %s, usual on a host with one node)",
                 name, val);
    return node < 0 ? -1 : node;
}

/* The node of --device's first device: an RDMA device's bus device, or (rxe, siw: software
 * devices) that of the netdev it runs on, or a netdev's. dir gets the sysfs dir whose bus device
 * decided (for its interrupts). */
static long device_node(const char *root, const char *device, char *name, size_t nlen, char *dir,
                        size_t dlen, char *why, size_t wlen)
{
    size_t len = strcspn(device, ",:");
    snprintf(name, nlen, "%.*s", (int)(len < 63 ? len : 63), device);
    dir[0] = '\0';
    if (!name[0]) {
        snprintf(why, wlen, "no --device: the route picks the device after the engine is placed; name "
                            "--device to place the engine next to it");
        return -1;
    }
    char path[PATH_MAX], parent[64];
    snprintf(path, sizeof path, "%s/class/infiniband/%s", root, name);
    if (is_dir(path)) {
        char sub[PATH_MAX];
        snprintf(sub, sizeof sub, "%s/device", path);
        snprintf(dir, dlen, "%s", path);
        if (is_dir(sub))
            return bus_node(path, name, why, wlen);
        snprintf(sub, sizeof sub, "%s/parent", path);
        if (read_small(sub, parent, sizeof parent) || !parent[0])
            return bus_node(path, name, why, wlen);
        /* A software RDMA device: the adapter that carries it is its netdev's. */
        snprintf(path, sizeof path, "%s/class/net/%s", root, parent);
        snprintf(dir, dlen, "%s", path);
        char via[64];
        snprintf(via, sizeof via, "%s (on %s)", name, parent);
        snprintf(name, nlen, "%s", via);
        return bus_node(path, name, why, wlen);
    }
    snprintf(path, sizeof path, "%s/class/net/%s", root, name);
    if (is_dir(path)) {
        snprintf(dir, dlen, "%s", path);
        return bus_node(path, name, why, wlen);
    }
    snprintf(why, wlen, "no RDMA device or netdev %s under %s/class", name, root);
    return -1;
}

/* The CPUs that serve the device's interrupts (its MSI vectors' effective affinity), where the
 * kernel tells: an engine spinning there would take turns with the interrupt work. */
static void irq_cpus(const char *root, const char *dir, cpu_set_t *out)
{
    CPU_ZERO(out);
    if (!dir[0] || strcmp(root, "/sys") != 0) /* /proc/irq is this host's, not a fixture's */
        return;
    char path[PATH_MAX], list[1024];
    snprintf(path, sizeof path, "%s/device/msi_irqs", dir);
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = fs_sysfs_next(d));) {
        snprintf(path, sizeof path, "/proc/irq/%s/effective_affinity_list", e->d_name);
        cpu_set_t one;
        if (read_small(path, list, sizeof list) == 0 && fs_cpulist_parse(list, &one) == 0)
            CPU_OR(out, out, &one);
    }
    if (d)
        closedir(d);
}

int fs_cpu_asked_check(const char *asked, long *cpu, struct fs_err *err)
{
    *cpu = -1;
    if (!strcmp(asked, "auto") || !strcmp(asked, "near") || !strcmp(asked, "far"))
        return 0;
    char *end;
    errno = 0;
    long n = strtol(asked, &end, 10);
    if (!asked[0] || *end || errno || n < 0 || n >= CPU_SETSIZE)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cpu %s: say auto (a CPU of the device's NUMA node where the host has several), "
                       "near (the device's node, or fail), far (another node, or fail) or a CPU number "
                       "0-%d",
                       asked, CPU_SETSIZE - 1);
    *cpu = n;
    return 0;
}

/* The slot-th CPU of set (the first when slot < 0). */
static long nth_cpu(const cpu_set_t *set, long slot)
{
    int count = CPU_COUNT(set);
    if (count == 0)
        return -1;
    long want = slot < 0 ? 0 : slot % count;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, set) && want-- == 0)
            return c;
    return -1;
}

int fs_place(const char *asked, long slot, const char *device, struct fs_sysinfo *si, struct fs_err *err)
{
    struct fs_placement *p = &si->place;
    memset(p, 0, sizeof *p);
    snprintf(p->asked, sizeof p->asked, "%s", asked);
    p->device_node = -1;
    long number;
    if (fs_cpu_asked_check(asked, &number, err))
        return -1;
    if (number >= 0) {
        snprintf(p->how, sizeof p->how, "--cpu %ld", number);
        if (fs_pin_cpu(si, number, err))
            return -1;
    }
    const char *root = fs_sysfs_root();
    cpu_set_t nodes[MAX_NODES], allowed, chosen, irqs;
    long ids[MAX_NODES];
    p->host_nodes = host_nodes(root, nodes, ids);
    char dir[PATH_MAX];
    p->device_node = device_node(root, device, p->device, sizeof p->device, dir, sizeof dir,
                                 p->why_no_node, sizeof p->why_no_node);
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof allowed, &allowed))
        return fs_fail(err, FS_EXIT_MEASURE, "--cpu %s: sched_getaffinity: %s", asked, strerror(errno));
    char may[256];
    fs_cpulist_format(&allowed, may, sizeof may);
    if (number >= 0)
        return 0;
    int is_auto = !strcmp(asked, "auto"), far = !strcmp(asked, "far");
    int node_choice = p->device_node >= 0 && p->host_nodes > 1;
    if (!node_choice && far && p->host_nodes <= 1)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cpu far: this host has %s (CPUs %s): no CPU is far from %s; use --cpu auto or a "
                       "CPU number",
                       p->host_nodes ? "one NUMA node" : "no NUMA information", may,
                       p->device[0] ? p->device : "the device");
    /* On a one-node host every CPU is near; on several, near and far need the device's node. */
    if (!node_choice && !is_auto && p->host_nodes > 1)
        return fs_fail(err, FS_EXIT_USAGE, "--cpu %s: %s; use --cpu auto or a CPU number (--cpu N)", asked,
                       p->why_no_node);
    if (!node_choice) {
        const char *why = p->host_nodes <= 1 ? "this host has one NUMA node: every CPU is as near"
                                             : p->why_no_node;
        if (CPU_COUNT(&allowed) == 1) {
            snprintf(p->how, sizeof p->how, "left on CPU %ld, the one its launcher allows (%s)",
                     nth_cpu(&allowed, 0), why);
            return 0;
        }
        if (slot < 0) {
            snprintf(p->how, sizeof p->how, "not pinned: %s", why);
            return 0;
        }
        long cpu = nth_cpu(&allowed, slot);
        snprintf(p->how, sizeof p->how, "CPU %ld, number %ld of the CPUs it may use (%s): %s", cpu, slot, may,
                 why);
        return fs_pin_cpu(si, cpu, err);
    }
    /* The device's node (near, auto) or every other node (far), among the CPUs allowed. */
    int at = 0;
    while (ids[at] != p->device_node && at + 1 < p->host_nodes)
        at++;
    char node_cpus[256];
    fs_cpulist_format(&nodes[at], node_cpus, sizeof node_cpus);
    if (ids[at] != p->device_node)
        return fs_fail(err, FS_EXIT_MEASURE, "--cpu %s: %s is on NUMA node %ld, which has no CPUs here",
                       asked, p->device, p->device_node);
    if (far) {
        CPU_XOR(&chosen, &allowed, &nodes[at]);
        CPU_AND(&chosen, &chosen, &allowed);
    } else {
        CPU_AND(&chosen, &allowed, &nodes[at]);
    }
    if (CPU_COUNT(&chosen) == 0)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cpu %s: %s is on NUMA node %ld (CPUs %s), and this process may run only on CPUs "
                       "%s (its launcher's binding?): widen the binding or name a CPU (--cpu N)",
                       asked, p->device, p->device_node, node_cpus, may);
    /* Not a CPU that serves the device's interrupts, while others are left. */
    irq_cpus(root, dir, &irqs);
    cpu_set_t quiet;
    CPU_XOR(&quiet, &chosen, &irqs);
    CPU_AND(&quiet, &quiet, &chosen);
    int avoided = CPU_COUNT(&quiet) > 0 && CPU_COUNT(&quiet) < CPU_COUNT(&chosen);
    if (CPU_COUNT(&quiet) > 0)
        chosen = quiet;
    long cpu = nth_cpu(&chosen, slot);
    char irq_list[256];
    fs_cpulist_format(&irqs, irq_list, sizeof irq_list);
    snprintf(p->how, sizeof p->how, "--cpu %s: CPU %ld, %s NUMA node %ld of %s (node %ld: CPUs %s)%s%s", asked,
             cpu, far ? "away from" : "on", p->device_node, p->device, p->device_node, node_cpus,
             avoided ? "; not a CPU of its interrupts: " : "", avoided ? irq_list : "");
    return fs_pin_cpu(si, cpu, err);
}

void fs_placement_json(const struct fs_placement *p, const struct fs_sysinfo *si, cJSON *o)
{
    cJSON_AddStringToObject(o, "asked", p->asked);
    if (si->cpu >= 0)
        cJSON_AddNumberToObject(o, "cpu", (double)si->cpu);
    else
        cJSON_AddNullToObject(o, "cpu");
    cJSON_AddStringToObject(o, "device", p->device);
    if (p->device_node >= 0)
        cJSON_AddNumberToObject(o, "device_numa_node", (double)p->device_node);
    else {
        cJSON_AddNullToObject(o, "device_numa_node");
        cJSON_AddStringToObject(o, "why_no_node", p->why_no_node);
    }
    cJSON_AddNumberToObject(o, "host_numa_nodes", p->host_nodes);
    cJSON_AddStringToObject(o, "how", p->how);
}

void fs_host_json(const struct fs_sysinfo *si, cJSON *obj)
{
    fs_sysinfo_json(si, obj);
    if (si->place.asked[0])
        fs_placement_json(&si->place, si, cJSON_AddObjectToObject(obj, "placement"));
}
