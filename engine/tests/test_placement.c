/* SPDX-License-Identifier: BSD-3-Clause */
/* placement.c, --cpu auto | near | far | N against real sysfs layouts (tests/fixtures/sysfs):
 * rxe-qemu-numa is a guest with two NUMA nodes (node0: CPU 0, node1: CPUs 1-2) whose NIC, and so
 * rxe0 on it, sits on node 1; host-no-rdma is a one-node host. The process pins itself for real,
 * so this needs CPUs 0 and 1. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "placement.h"
#include "sysinfo.h"

static cpu_set_t all;

/* --cpu asked against device under fixture; the CPU pinned (-1: none), the exit code (0: placed). */
static int place(const char *fixture, const char *asked, long slot, const char *device, struct fs_sysinfo *si,
                 long *cpu, struct fs_err *err)
{
    char root[512];
    snprintf(root, sizeof root, "%s/%s", FS_FIXTURES, fixture);
    setenv("FABSCOPE_SYSFS_ROOT", root, 1);
    sched_setaffinity(0, sizeof all, &all); /* each case starts free to run anywhere */
    memset(err, 0, sizeof *err);
    fs_sysinfo_read(si);
    int rc = fs_place(asked, slot, device, si, err) ? err->code : 0;
    *cpu = si->cpu;
    return rc;
}

int main(void)
{
    sched_getaffinity(0, sizeof all, &all);
    if (!CPU_ISSET(0, &all) || !CPU_ISSET(1, &all)) {
        printf("skipped: needs CPUs 0 and 1\n");
        return CHECK_SKIP;
    }
    /* Only CPUs 0 and 1, as on a two-CPU host: node1's CPU here is 1, node0's is 0. */
    CPU_ZERO(&all);
    CPU_SET(0, &all);
    CPU_SET(1, &all);
    struct fs_sysinfo si;
    struct fs_err err;
    long cpu;

    cpu_set_t set;
    char list[64];
    CHECK(fs_cpulist_parse("0-3,8,10-11", &set) == 0 && CPU_COUNT(&set) == 7 && CPU_ISSET(10, &set));
    fs_cpulist_format(&set, list, sizeof list);
    CHECK(strcmp(list, "0-3,8,10-11") == 0);
    CHECK(fs_cpulist_parse("0-x", &set) != 0 && fs_cpulist_parse("3-1", &set) != 0);

    /* auto and near: rxe0's node is its netdev's (a software device has no bus device). */
    CHECK(place("rxe-qemu-numa", "auto", -1, "rxe0", &si, &cpu, &err) == 0);
    CHECK(cpu == 1 && si.place.device_node == 1 && si.place.host_nodes == 2);
    CHECK(strstr(si.place.device, "rxe0 (on eth0)") && strstr(si.place.how, "on NUMA node 1"));
    CHECK(place("rxe-qemu-numa", "near", 1, "rxe0:1", &si, &cpu, &err) == 0 && cpu == 1);
    CHECK(place("rxe-qemu-numa", "auto", -1, "eth0", &si, &cpu, &err) == 0 && cpu == 1);
    /* far: another node. */
    CHECK(place("rxe-qemu-numa", "far", -1, "rxe0", &si, &cpu, &err) == 0 && cpu == 0);
    CHECK(strstr(si.place.how, "away from NUMA node 1"));
    /* A CPU number is taken as asked; the device's node is still recorded. */
    CHECK(place("rxe-qemu-numa", "0", -1, "rxe0", &si, &cpu, &err) == 0 && cpu == 0 && si.place.device_node == 1);
    /* Without a device auto leaves the engine where it is, and says why; near and far refuse. */
    CHECK(place("rxe-qemu-numa", "auto", -1, "", &si, &cpu, &err) == 0 && cpu == -1);
    CHECK(strstr(si.place.how, "not pinned: no --device"));
    CHECK(place("rxe-qemu-numa", "near", -1, "", &si, &cpu, &err) == FS_EXIT_USAGE);
    CHECK(strstr(err.msg, "--cpu near: no --device"));
    CHECK(place("rxe-qemu-numa", "far", -1, "mlx5_9", &si, &cpu, &err) == FS_EXIT_USAGE);
    CHECK(strstr(err.msg, "no RDMA device or netdev mlx5_9"));
    /* The launcher's binding wins over auto's choice of node... and near cannot be met inside it. */
    cpu_set_t zero;
    CPU_ZERO(&zero);
    CPU_SET(0, &zero);
    char root[512];
    snprintf(root, sizeof root, "%s/rxe-qemu-numa", FS_FIXTURES);
    setenv("FABSCOPE_SYSFS_ROOT", root, 1);
    sched_setaffinity(0, sizeof zero, &zero);
    fs_sysinfo_read(&si);
    memset(&err, 0, sizeof err);
    CHECK(fs_place("near", -1, "rxe0", &si, &err) != 0 && err.code == FS_EXIT_USAGE);
    CHECK(strstr(err.msg, "may run only on CPUs 0"));

    /* One node: near is any CPU, far has nowhere to go. */
    CHECK(place("host-no-rdma", "near", 1, "", &si, &cpu, &err) == 0 && cpu == 1);
    CHECK(strstr(si.place.how, "one NUMA node"));
    CHECK(place("host-no-rdma", "far", -1, "", &si, &cpu, &err) == FS_EXIT_USAGE);
    CHECK(strstr(err.msg, "one NUMA node"));
    CHECK(place("host-no-rdma", "auto", -1, "", &si, &cpu, &err) == 0 && cpu == -1);
    /* Bad values are usage errors that say what is accepted. */
    CHECK(fs_cpu_asked_check("nearest", &cpu, &err) != 0 && strstr(err.msg, "auto") && strstr(err.msg, "far"));
    CHECK(fs_cpu_asked_check("-1", &cpu, &err) != 0);
    return CHECK_DONE();
}
