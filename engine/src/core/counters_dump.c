/* SPDX-License-Identifier: BSD-3-Clause */
/* The exporter's counters: `--counters-json` (every counter of every RDMA port and netdev, raw,
 * once, with the unit table) and `--counters-serve` (the same, one snapshot per line read, files
 * kept open through sysfs.c's cache). The per-run snapshot is counters.c. */
#define _GNU_SOURCE
#include "counters.h"
#include "ethtool.h"
#include "sysfs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* What the engine knows about a counter's unit and width. bits 0 = not known (the exporter then
 * treats a decrease as a reset unless the value was near 2^32). overflow: "saturate" = the IBA
 * PMA PortCounters stop at their maximum (cleared only by perfquery -R); "wrap" = the counter
 * wraps round at 2^bits; "none" = 64 bits, never wraps in practice. driver NULL = any driver. */
struct cnt_unit {
    const char *dir; /* "counters", "hw_counters", "statistics" */
    const char *name;
    const char *driver; /* prefix of the driver name, e.g. "mlx5" */
    const char *unit;
    int bits;
    const char *overflow;
};

static const struct cnt_unit unit_table[] = {
    /* IBA PortCounters / PortCountersExtended. The kernel shows the 64-bit extended counter
     * when the HCA has it, else the 32-bit one, which saturates: no file says which. */
    {"counters", "port_xmit_data", NULL, "4-byte words", 0, "saturate"},
    {"counters", "port_rcv_data", NULL, "4-byte words", 0, "saturate"},
    {"counters", "port_xmit_packets", NULL, "packets", 0, "saturate"},
    {"counters", "port_rcv_packets", NULL, "packets", 0, "saturate"},
    {"counters", "unicast_xmit_packets", NULL, "packets", 64, "none"},
    {"counters", "unicast_rcv_packets", NULL, "packets", 64, "none"},
    {"counters", "multicast_xmit_packets", NULL, "packets", 64, "none"},
    {"counters", "multicast_rcv_packets", NULL, "packets", 64, "none"},
    {"counters", "symbol_error", NULL, "errors", 16, "saturate"},
    {"counters", "link_error_recovery", NULL, "events", 8, "saturate"},
    {"counters", "link_downed", NULL, "events", 8, "saturate"},
    {"counters", "port_rcv_errors", NULL, "packets", 16, "saturate"},
    {"counters", "port_rcv_remote_physical_errors", NULL, "packets", 16, "saturate"},
    {"counters", "port_rcv_switch_relay_errors", NULL, "packets", 16, "saturate"},
    {"counters", "port_xmit_discards", NULL, "packets", 16, "saturate"},
    {"counters", "port_xmit_constraint_errors", NULL, "packets", 8, "saturate"},
    {"counters", "port_rcv_constraint_errors", NULL, "packets", 8, "saturate"},
    {"counters", "local_link_integrity_errors", NULL, "events", 4, "saturate"},
    {"counters", "excessive_buffer_overrun_errors", NULL, "events", 4, "saturate"},
    {"counters", "VL15_dropped", NULL, "packets", 16, "saturate"},
    {"counters", "port_xmit_wait", NULL, "ticks", 32, "saturate"},
    /* mlx5: congestion counters are 64-bit, the Q counters are 32-bit firmware counters that wrap
     * (mlx5_ib reads them with MLX5_GET, the congestion ones with MLX5_GET64). */
    {"hw_counters", "np_cnp_sent", "mlx5", "packets", 64, "none"},
    {"hw_counters", "np_ecn_marked_roce_packets", "mlx5", "packets", 64, "none"},
    {"hw_counters", "rp_cnp_handled", "mlx5", "packets", 64, "none"},
    {"hw_counters", "rp_cnp_ignored", "mlx5", "packets", 64, "none"},
    {"hw_counters", "*", "mlx5", "events", 32, "wrap"},
    /* rxe keeps every hw counter in an atomic64_t. */
    {"hw_counters", "lifespan", "rdma_rxe", "ms", 64, "none"},
    {"hw_counters", "*", "rdma_rxe", "events", 64, "none"},
    /* netdev statistics are struct rtnl_link_stats64. */
    {"statistics", "rx_bytes", NULL, "bytes", 64, "none"},
    {"statistics", "tx_bytes", NULL, "bytes", 64, "none"},
    {"statistics", "*", NULL, "packets", 64, "none"},
    {NULL, NULL, NULL, NULL, 0, NULL},
};

static const struct cnt_unit *unit_of(const char *dir, const char *name, const char *driver)
{
    for (const struct cnt_unit *u = unit_table; u->dir; u++) {
        if (strcmp(u->dir, dir) != 0)
            continue;
        if (u->driver && strncmp(driver, u->driver, strlen(u->driver)) != 0)
            continue;
        if (strcmp(u->name, "*") == 0 || strcmp(u->name, name) == 0)
            return u;
    }
    return NULL;
}

/* Every numeric file of one directory into obj; files that vanish or do not parse are listed in
 * skipped (mlx5 refuses some counters in some modes; a device can go away mid-read). */
static int dump_dir(struct fs_fcache *o, int parent, const char *name, cJSON *obj, cJSON *skipped)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = fs_sysfs_next(d))) {
        uint64_t v;
        char rel[80];
        int got;
        if (o && (size_t)snprintf(rel, sizeof rel, "%s/%s", name, e->d_name) < sizeof rel)
            got = fs_sysfs_u64(o, parent, rel, &v); /* cached: relative to the owner, by a name it keeps */
        else
            got = fs_sysfs_u64(NULL, dirfd(d), e->d_name, &v);
        if (got == 0)
            fs_json_add_u64(obj, e->d_name, v);
        else if (skipped)
            cJSON_AddItemToArray(skipped, cJSON_CreateString(e->d_name));
    }
    closedir(d);
    return 0;
}

static void add_str_file(cJSON *o, const char *key, struct fs_fcache *cache, int dirfd, const char *name)
{
    char v[128];
    fs_sysfs_str(cache, dirfd, name, v, sizeof v);
    if (v[0])
        cJSON_AddStringToObject(o, key, v);
}

/* The driver bound to a device: basename of its device/driver link ("mlx5_core"). Software
 * devices have no device link; rxe is the one with a "parent" file (its netdev). */
static void driver_of(const char *devdir, char *out, size_t len)
{
    char path[1200], link[512];
    out[0] = '\0';
    snprintf(path, sizeof path, "%s/device/driver", devdir);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0) {
        link[n] = '\0';
        const char *base = strrchr(link, '/');
        snprintf(out, len, "%s", base ? base + 1 : link);
        return;
    }
    snprintf(path, sizeof path, "%s/parent", devdir);
    if (access(path, F_OK) == 0)
        snprintf(out, len, "rdma_rxe");
}

static cJSON *unit_json(const struct cnt_unit *u)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "unit", u->unit);
    if (u->bits)
        cJSON_AddNumberToObject(o, "bits", u->bits);
    cJSON_AddStringToObject(o, "overflow", u->overflow);
    return o;
}

/* units[dir][driver][name] = {unit, bits, overflow} for the names in obj not listed yet: one table
 * for the whole snapshot, not one per port (64 ports would repeat it 64 times). */
static void add_units(cJSON *units, const char *dir, const char *driver, const cJSON *obj)
{
    cJSON *by_dir = cJSON_GetObjectItemCaseSensitive(units, dir);
    if (!by_dir)
        by_dir = cJSON_AddObjectToObject(units, dir);
    cJSON *table = cJSON_GetObjectItemCaseSensitive(by_dir, driver);
    if (!table)
        table = cJSON_AddObjectToObject(by_dir, driver);
    const cJSON *c;
    cJSON_ArrayForEach(c, obj)
    {
        if (cJSON_GetObjectItemCaseSensitive(table, c->string))
            continue;
        const struct cnt_unit *u = unit_of(dir, c->string, driver);
        if (u)
            cJSON_AddItemToObject(table, c->string, unit_json(u));
    }
}

static void dump_port(const char *devdir, const char *dev, const char *port, const char *driver,
                      const char *node_guid, cJSON *ports, cJSON *units)
{
    char pdir[1100];
    snprintf(pdir, sizeof pdir, "%s/ports/%s", devdir, port);
    /* Everything below is read relative to the port's directory: one path walk, not fifty. */
    int pfd = open(pdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return; /* the device went away since its directory was listed */
    struct fs_fcache *cache = fs_fcache_owner(pfd, pdir);
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "device", dev);
    cJSON_AddStringToObject(p, "port", port);
    if (driver[0])
        cJSON_AddStringToObject(p, "driver", driver);
    if (node_guid[0])
        cJSON_AddStringToObject(p, "node_guid", node_guid);
    static const char *const attrs[] = {"link_layer", "state", "phys_state", "rate", "active_mtu",
                                        "lid", "sm_lid", NULL};
    for (int i = 0; attrs[i]; i++)
        add_str_file(p, attrs[i], cache, pfd, attrs[i]);
    cJSON *nd = cJSON_AddArrayToObject(p, "ndevs");
    char ndevs[FS_CNT_NDEVS][FS_SYSFS_NDEV_LEN];
    int nn = fs_sysfs_port_ndevs(cache, pfd, ndevs, FS_CNT_NDEVS);
    for (int k = 0; k < nn; k++)
        cJSON_AddItemToArray(nd, cJSON_CreateString(ndevs[k]));
    cJSON *skipped = cJSON_CreateArray();
    static const char *const dirs[] = {"counters", "hw_counters", NULL};
    for (int i = 0; dirs[i]; i++) {
        cJSON *obj = cJSON_CreateObject();
        if (dump_dir(cache, pfd, dirs[i], obj, skipped) == 0) {
            add_units(units, dirs[i], driver, obj);
            cJSON_AddItemToObject(p, dirs[i], obj);
        } else {
            cJSON_Delete(obj);
        }
    }
    close(pfd);
    if (cJSON_GetArraySize(skipped))
        cJSON_AddItemToObject(p, "unreadable", skipped);
    else
        cJSON_Delete(skipped);
    cJSON_AddItemToArray(ports, p);
}

/* Device-wide hw_counters (hfi1 keeps most of its counters there, not per port). */
static void dump_device_hw(const char *devdir, const char *dev, const char *driver, cJSON *devices,
                           cJSON *units)
{
    int fd = open(devdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    cJSON *hw = cJSON_CreateObject();
    if (dump_dir(NULL, fd, "hw_counters", hw, NULL) == 0 && cJSON_GetArraySize(hw)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "device", dev);
        if (driver[0])
            cJSON_AddStringToObject(o, "driver", driver);
        add_units(units, "hw_counters", driver, hw);
        cJSON_AddItemToObject(o, "hw_counters", hw);
        cJSON_AddItemToArray(devices, o);
    } else {
        cJSON_Delete(hw);
    }
    close(fd);
}

static void dump_rdma(const char *root, cJSON *ports, cJSON *devices, cJSON *units)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/class/infiniband", root);
    DIR *d = opendir(path);
    struct dirent *e;
    while ((e = fs_sysfs_next(d))) {
        char devdir[1100], driver[64], guid[64], pdir[1200];
        snprintf(devdir, sizeof devdir, "%s/%s", path, e->d_name);
        driver_of(devdir, driver, sizeof driver);
        snprintf(pdir, sizeof pdir, "%s/node_guid", devdir);
        fs_sysfs_str(NULL, AT_FDCWD, pdir, guid, sizeof guid);
        dump_device_hw(devdir, e->d_name, driver, devices, units);
        snprintf(pdir, sizeof pdir, "%s/ports", devdir);
        DIR *pd = opendir(pdir);
        struct dirent *pe;
        while ((pe = fs_sysfs_next(pd)))
            dump_port(devdir, e->d_name, pe->d_name, driver, guid, ports, units);
        if (pd)
            closedir(pd);
    }
    if (d)
        closedir(d);
}

/* The driver's own statistics (`ethtool -S`), kept only where the name says pause (PFC, XOFF),
 * priority, ECN or CNP: the per-priority pause counters lossless RoCE depends on exist nowhere in
 * sysfs. */
static int ethtool_wanted(const char *name)
{
    static const char *const words[] = {"prio", "ecn", "cnp", NULL};
    for (int i = 0; words[i]; i++)
        if (strcasestr(name, words[i]))
            return 1;
    return fs_ethtool_is_pause(name);
}

struct ethtool_into {
    cJSON *net;
    cJSON *o; /* "ethtool", made at the first statistic kept */
};

static void add_ethtool(const char *name, uint64_t value, void *arg)
{
    struct ethtool_into *into = arg;
    if (!into->o)
        into->o = cJSON_AddObjectToObject(into->net, "ethtool");
    fs_json_add_u64(into->o, name, value);
}

static void dump_ethtool(const char *ifname, cJSON *net)
{
    struct ethtool_into into = {net, NULL};
    fs_ethtool_stats(ifname, ethtool_wanted, add_ethtool, &into);
}

/* Whether a netdev is behind one of the RDMA ports already dumped (their "ndevs"). */
static int backs_rdma(const cJSON *rdma, const char *netdev)
{
    const cJSON *p, *n;
    cJSON_ArrayForEach(p, rdma)
    {
        cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(p, "ndevs"))
        {
            if (cJSON_IsString(n) && strcmp(n->valuestring, netdev) == 0)
                return 1;
        }
    }
    return 0;
}

/* Every netdev's statistics; the driver's ethtool pause/PFC/ECN entries only for the netdevs behind
 * RDMA ports (where lossless RoCE needs them) and only on the live /sys: mlx5 lists over a
 * thousand ethtool statistics per netdev, too many to fetch for every veth of a container host. */
static void dump_net(const char *root, int live, const cJSON *rdma, cJSON *nets, cJSON *units)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/class/net", root);
    DIR *d = opendir(path);
    struct dirent *e;
    while ((e = fs_sysfs_next(d))) {
        int nfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (nfd < 0)
            continue; /* gone since the listing */
        char key[1100];
        snprintf(key, sizeof key, "%s/%s", path, e->d_name);
        struct fs_fcache *cache = fs_fcache_owner(nfd, key);
        cJSON *n = cJSON_CreateObject();
        cJSON_AddStringToObject(n, "name", e->d_name);
        static const char *const attrs[] = {"operstate", "mtu", "speed", NULL};
        for (int i = 0; attrs[i]; i++)
            add_str_file(n, attrs[i], cache, nfd, attrs[i]);
        cJSON *st = cJSON_CreateObject();
        int got = dump_dir(cache, nfd, "statistics", st, NULL);
        close(nfd);
        if (got != 0 || !cJSON_GetArraySize(st)) {
            cJSON_Delete(st);
            cJSON_Delete(n); /* gone mid-read, or no statistics: nothing to export */
            continue;
        }
        add_units(units, "statistics", "", st);
        cJSON_AddItemToObject(n, "statistics", st);
        if (live && backs_rdma(rdma, e->d_name))
            dump_ethtool(e->d_name, n);
        cJSON_AddItemToArray(nets, n);
    }
    if (d)
        closedir(d);
}

cJSON *fs_counters_dump_json(void)
{
    const char *root = fs_sysfs_root();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schema", "fabscope.counters/1");
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(o, "host", host);
    cJSON_AddStringToObject(o, "sysfs_root", root);
    cJSON *rdma = cJSON_AddArrayToObject(o, "rdma");
    cJSON *devices = cJSON_AddArrayToObject(o, "rdma_devices");
    cJSON *net = cJSON_AddArrayToObject(o, "net");
    cJSON *units = cJSON_AddObjectToObject(o, "units");
    dump_rdma(root, rdma, devices, units);
    dump_net(root, strcmp(root, "/sys") == 0, rdma, net, units);
    return o;
}

int fs_counters_serve(void)
{
    /* The cache holds ~75 files per port plus its netdev: lift the soft limit to the hard one.
     * Past it, files are read uncached (open, read, close), never skipped. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        fs_fcache_enable(rl.rlim_cur > 256 ? (size_t)rl.rlim_cur - 256 : 0);
    else
        fs_fcache_enable(1u << 20);
    char line[64];
    /* One request per line on stdin; end of input (the exporter went away) ends the engine. */
    while (fgets(line, sizeof line, stdin)) {
        cJSON *snap = fs_counters_dump_json();
        char *text = cJSON_PrintUnformatted(snap);
        cJSON_Delete(snap);
        fs_fcache_sweep();
        if (!text || puts(text) == EOF || fflush(stdout) != 0) {
            cJSON_free(text);
            return 1;
        }
        cJSON_free(text);
    }
    return 0;
}
