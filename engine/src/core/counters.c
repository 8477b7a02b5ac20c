#define _GNU_SOURCE
#include "counters.h"
#include "clock.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* One counter of a per-run snapshot: the key in the record and the file it is read from (under
 * class/net/X/ or class/infiniband/D/ports/N/). Keys are only ever added, so older front ends
 * keep reading the records. */
struct cnt_key {
    const char *key;
    const char *file;
};

static const struct cnt_key net_keys[] = {
    {"tx_bytes", "statistics/tx_bytes"},     {"rx_bytes", "statistics/rx_bytes"},
    {"tx_packets", "statistics/tx_packets"}, {"rx_packets", "statistics/rx_packets"},
    {"rx_errors", "statistics/rx_errors"},   {"tx_errors", "statistics/tx_errors"},
    {"rx_dropped", "statistics/rx_dropped"}, {"tx_dropped", "statistics/tx_dropped"},
    {"rx_crc_errors", "statistics/rx_crc_errors"}, {"rx_missed_errors", "statistics/rx_missed_errors"},
    {"tx_carrier_errors", "statistics/tx_carrier_errors"},
    {NULL, NULL},
};
/* The error counters are what the fabric matrix reads a bad cable or port from. */
static const struct cnt_key rdma_keys[] = {
    {"port_xmit_data", "counters/port_xmit_data"},
    {"port_rcv_data", "counters/port_rcv_data"},
    {"port_xmit_packets", "counters/port_xmit_packets"},
    {"port_rcv_packets", "counters/port_rcv_packets"},
    {"hw_sent_pkts", "hw_counters/sent_pkts"},
    {"hw_rcvd_pkts", "hw_counters/rcvd_pkts"},
    {"symbol_error", "counters/symbol_error"},
    {"link_downed", "counters/link_downed"},
    {"link_error_recovery", "counters/link_error_recovery"},
    {"port_rcv_errors", "counters/port_rcv_errors"},
    {"port_xmit_discards", "counters/port_xmit_discards"},
    {"port_rcv_remote_physical_errors", "counters/port_rcv_remote_physical_errors"},
    {"port_rcv_switch_relay_errors", "counters/port_rcv_switch_relay_errors"},
    {"port_xmit_wait", "counters/port_xmit_wait"},
    {"port_xmit_constraint_errors", "counters/port_xmit_constraint_errors"},
    {"port_rcv_constraint_errors", "counters/port_rcv_constraint_errors"},
    {"local_link_integrity_errors", "counters/local_link_integrity_errors"},
    {"excessive_buffer_overrun_errors", "counters/excessive_buffer_overrun_errors"},
    {"VL15_dropped", "counters/VL15_dropped"},
    {NULL, NULL},
};
_Static_assert(sizeof net_keys / sizeof net_keys[0] - 1 <= FS_CNT_NVAL, "net_keys > FS_CNT_NVAL");
_Static_assert(sizeof rdma_keys / sizeof rdma_keys[0] - 1 <= FS_CNT_NVAL,
               "rdma_keys > FS_CNT_NVAL");

static const char *sysfs_root(void)
{
    const char *r = getenv("FABSCOPE_SYSFS_ROOT");
    return r && *r ? r : "/sys";
}

/* open/read relative to the directory, not stdio on a full path: a scrape of 64 ports reads
 * thousands of these files, and the path walk and FILE buffer were most of its time. Digits only
 * ("N/A (no PMA)" on iWARP ports is not a counter). */
static int read_u64_at(int dirfd, const char *name, uint64_t *out)
{
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0 || buf[0] < '0' || buf[0] > '9')
        return -1;
    buf[n] = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || (*end && *end != '\n'))
        return -1;
    *out = v;
    return 0;
}

static int read_u64(const char *path, uint64_t *out) { return read_u64_at(AT_FDCWD, path, out); }

/* The first line of a small text file (an attribute), relative to a directory. */
static void read_str_at(int dirfd, const char *name, char *out, size_t len)
{
    out[0] = '\0';
    int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, out, len - 1);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

static void read_str(const char *path, char *out, size_t len) { read_str_at(AT_FDCWD, path, out, len); }

static int skip(const char *name) { return name[0] == '.'; }

/* The kernel serves a port's hw_counters from a cache for `lifespan` ms after each read (ib_core's
 * default is 10, counted in jiffies: up to lifespan + 2 jiffies, 30 ms at HZ=100): a snapshot
 * taken sooner than that after the previous one repeats the previous values. A ping-pong of 20
 * messages on an emulated rxe lasts less, and its after-snapshot said no packet had moved (the
 * path verdict: unverifiable). So a snapshot first waits until the previous one's values have
 * expired. Only ports with hw_counters wait (rxe; PMA counters/ are read fresh), and never inside
 * a measurement. */
#define FS_HW_EXPIRY_MARGIN_MS 20
static uint64_t hw_expire_ns; /* CLOCK_MONOTONIC: when the last hw_counters read has expired */

static void hw_counters_wait_fresh(void)
{
    uint64_t now = fs_monotonic_ns();
    if (now < hw_expire_ns)
        poll(NULL, 0, (int)((hw_expire_ns - now + 999999) / 1000000));
}

/* After a port's counters were read: when what the kernel cached for it expires. */
static void hw_counters_read(const char *port_dir)
{
    char path[1100];
    uint64_t lifespan_ms;
    snprintf(path, sizeof path, "%s/hw_counters/lifespan", port_dir);
    if (read_u64(path, &lifespan_ms))
        return; /* no hw_counters/ here */
    uint64_t until = fs_monotonic_ns() + (lifespan_ms + FS_HW_EXPIRY_MARGIN_MS) * 1000000ull;
    if (until > hw_expire_ns)
        hw_expire_ns = until;
}

void fs_counters_snap(struct fs_cnt_snap *s)
{
    const char *root = sysfs_root();
    char path[1024];
    s->n = 0;
    snprintf(path, sizeof path, "%s/class/net", root);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) && s->n < FS_CNT_MAX_DEV) {
        if (skip(e->d_name))
            continue;
        struct fs_cnt_dev *dev = &s->dev[s->n];
        memset(dev, 0, sizeof *dev);
        snprintf(dev->name, sizeof dev->name, "%s", e->d_name);
        int any = 0;
        for (int k = 0; net_keys[k].key; k++) {
            snprintf(path, sizeof path, "%s/class/net/%s/%s", root, e->d_name, net_keys[k].file);
            dev->have[k] = read_u64(path, &dev->v[k]) == 0;
            any |= dev->have[k];
        }
        if (any)
            s->n++;
    }
    if (d)
        closedir(d);
    snprintf(path, sizeof path, "%s/class/infiniband", root);
    hw_counters_wait_fresh();
    d = opendir(path);
    while (d && (e = readdir(d))) {
        if (skip(e->d_name))
            continue;
        char ports[1024];
        snprintf(ports, sizeof ports, "%s/class/infiniband/%s/ports", root, e->d_name);
        DIR *pd = opendir(ports);
        struct dirent *pe;
        while (pd && (pe = readdir(pd)) && s->n < FS_CNT_MAX_DEV) {
            if (skip(pe->d_name))
                continue;
            struct fs_cnt_dev *dev = &s->dev[s->n];
            memset(dev, 0, sizeof *dev);
            dev->is_rdma = 1;
            snprintf(dev->name, sizeof dev->name, "%.40s/%.40s", e->d_name, pe->d_name);
            snprintf(path, sizeof path, "%s/%s/link_layer", ports, pe->d_name);
            read_str(path, dev->link_layer, sizeof dev->link_layer);
            for (int k = 0; rdma_keys[k].key; k++) {
                snprintf(path, sizeof path, "%s/%s/%s", ports, pe->d_name, rdma_keys[k].file);
                dev->have[k] = read_u64(path, &dev->v[k]) == 0;
            }
            snprintf(path, sizeof path, "%s/%s", ports, pe->d_name);
            hw_counters_read(path);
            /* The first few GID slots name the netdev; reading all (up to 1024) costs minutes
             * under emulation and adds nothing. */
            int nn = 0;
            for (int g = 0; g < 8 && nn < FS_CNT_NDEVS; g++) {
                char nd[32];
                snprintf(path, sizeof path, "%s/%s/gid_attrs/ndevs/%d", ports, pe->d_name, g);
                read_str(path, nd, sizeof nd);
                int dup = !nd[0];
                for (int k = 0; k < nn && !dup; k++)
                    dup = strcmp(dev->ndevs[k], nd) == 0;
                if (!dup)
                    snprintf(dev->ndevs[nn++], sizeof dev->ndevs[0], "%s", nd);
            }
            s->n++;
        }
        if (pd)
            closedir(pd);
    }
    if (d)
        closedir(d);
}

/* Exact integers: a double loses bytes above 2^53 (9 PB, two days of a 400G port). */
static void add_u64(cJSON *o, const char *key, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    cJSON_AddRawToObject(o, key, num);
}

static cJSON *values(const struct fs_cnt_dev *dev)
{
    const struct cnt_key *keys = dev->is_rdma ? rdma_keys : net_keys;
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; keys[k].key; k++)
        if (dev->have[k])
            add_u64(o, keys[k].key, dev->v[k]);
    return o;
}

cJSON *fs_counters_json(const struct fs_cnt_snap *before, const struct fs_cnt_snap *after)
{
    cJSON *o = cJSON_CreateObject();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(o, "host", host);
    cJSON *net = cJSON_AddObjectToObject(o, "net");
    cJSON *rdma = cJSON_AddObjectToObject(o, "rdma");
    for (size_t i = 0; i < after->n; i++) {
        const struct fs_cnt_dev *a = &after->dev[i];
        const struct fs_cnt_dev *b = NULL;
        for (size_t j = 0; j < before->n && !b; j++)
            if (before->dev[j].is_rdma == a->is_rdma && strcmp(before->dev[j].name, a->name) == 0)
                b = &before->dev[j];
        if (!b)
            continue; /* appeared during the run: no baseline to compare */
        cJSON *d = cJSON_AddObjectToObject(a->is_rdma ? rdma : net, a->name);
        if (a->is_rdma) {
            cJSON_AddStringToObject(d, "link_layer", a->link_layer);
            cJSON *nd = cJSON_AddArrayToObject(d, "ndevs");
            for (int k = 0; k < FS_CNT_NDEVS && a->ndevs[k][0]; k++)
                cJSON_AddItemToArray(nd, cJSON_CreateString(a->ndevs[k]));
        }
        cJSON_AddItemToObject(d, "before", values(b));
        cJSON_AddItemToObject(d, "after", values(a));
    }
    return o;
}

/* ---- --counters-json: every counter, raw, once ---------------------------------------------- */

/* The file cache of --counters-serve. Opening a sysfs file costs several times its read (path
 * lookup, file allocation, close): a snapshot of 64 ports opened ~5600 files and spent most of its
 * 40 ms in the kernel doing so. A long-lived engine keeps each file open and re-reads it with
 * pread at offset 0, which makes sysfs (kernfs) call the attribute's show() again, i.e. a fresh
 * value. Directories are still listed at every snapshot, so counters that appear are found and
 * ones that vanish are gone. A cache belongs to one port or netdev directory (its "owner"), and is
 * dropped when that directory's inode changes (a device re-created under the same name) or it is
 * not seen in a snapshot; a read error (ENODEV from a removed kernfs node) drops the one file.
 * Names that did not exist are remembered as absent (fd -1): the fixed attribute and GID-slot
 * names of a port do not come and go while the port exists. One-shot --counters-json runs with
 * the cache off: open, read, close, as before. */
struct fc_ent {
    char name[80]; /* relative to the owner directory: "rate", "counters/port_xmit_data" */
    int fd;        /* -1: the name did not exist */
};

struct fc_dir {
    char path[256];
    dev_t dev;
    ino_t ino;
    int used;
    size_t n, cap, hint;
    struct fc_ent *e;
};

static struct fc_dir *fc_dirs;
static size_t fc_ndirs, fc_cap;
static int fc_on;
static size_t fc_nfds, fc_max_fds; /* files held open, and how many may be (below RLIMIT_NOFILE) */

static void fc_reset(struct fc_dir *o)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->e[i].fd >= 0) {
            close(o->e[i].fd);
            fc_nfds--;
        }
    o->n = o->hint = 0;
}

/* The cache of the directory open as dirfd (whose path is key), or NULL when caching is off. */
static struct fc_dir *fc_owner(int dirfd, const char *key)
{
    struct stat st;
    if (!fc_on || strlen(key) >= sizeof fc_dirs[0].path || fstat(dirfd, &st) != 0)
        return NULL;
    struct fc_dir *o = NULL;
    for (size_t i = 0; i < fc_ndirs && !o; i++)
        if (strcmp(fc_dirs[i].path, key) == 0)
            o = &fc_dirs[i];
    if (!o) {
        if (fc_ndirs == fc_cap) {
            size_t cap = fc_cap ? 2 * fc_cap : 64;
            struct fc_dir *grown = realloc(fc_dirs, cap * sizeof *grown);
            if (!grown)
                return NULL;
            fc_dirs = grown;
            fc_cap = cap;
        }
        o = &fc_dirs[fc_ndirs++];
        memset(o, 0, sizeof *o);
        snprintf(o->path, sizeof o->path, "%s", key);
    } else if (o->dev != st.st_dev || o->ino != st.st_ino) {
        fc_reset(o); /* re-created since the last snapshot: every open file is stale */
    }
    o->dev = st.st_dev;
    o->ino = st.st_ino;
    o->used = 1;
    return o;
}

static struct fc_ent *fc_find(struct fc_dir *o, const char *rel)
{
    /* Directories list in the same order every time: the entry after the last hit is the next. */
    if (o->hint < o->n && strcmp(o->e[o->hint].name, rel) == 0)
        return &o->e[o->hint++];
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->e[i].name, rel) == 0) {
            o->hint = i + 1;
            return &o->e[i];
        }
    return NULL;
}

static struct fc_ent *fc_add(struct fc_dir *o, const char *rel, int fd)
{
    if (strlen(rel) >= sizeof o->e[0].name)
        return NULL;
    if (o->n == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 64;
        struct fc_ent *grown = realloc(o->e, cap * sizeof *grown);
        if (!grown)
            return NULL;
        o->e = grown;
        o->cap = cap;
    }
    struct fc_ent *e = &o->e[o->n++];
    snprintf(e->name, sizeof e->name, "%s", rel);
    e->fd = fd;
    o->hint = o->n;
    return e;
}

/* Read up to len bytes of the file rel (relative to dirfd, the owner's directory when o is set):
 * the byte count, or -1 when it does not exist or cannot be read. */
static ssize_t fc_read(struct fc_dir *o, int dirfd, const char *rel, char *buf, size_t len)
{
    struct fc_ent *e = o ? fc_find(o, rel) : NULL;
    if (!e) {
        int fd = openat(dirfd, rel, O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno != ENOENT && errno != ENOTDIR)
            return -1; /* EMFILE, EACCES...: not a fact worth remembering */
        /* Keep a margin of descriptors for directories and stdio: past it, read uncached. */
        e = o && (fd < 0 || fc_nfds < fc_max_fds) ? fc_add(o, rel, fd) : NULL;
        if (e && fd >= 0)
            fc_nfds++;
        if (!e) {
            if (fd < 0)
                return -1;
            ssize_t n = read(fd, buf, len);
            close(fd);
            return n;
        }
    }
    if (e->fd < 0)
        return -1;
    ssize_t n = pread(e->fd, buf, len, 0);
    if (n < 0) { /* removed under us: forget the file, find it afresh next time */
        close(e->fd);
        fc_nfds--;
        e->fd = -1;
        e->name[0] = '\0';
    }
    return n;
}

/* End of a snapshot: close what belongs to directories it did not see (devices that went away). */
static void fc_sweep(void)
{
    size_t kept = 0;
    for (size_t i = 0; i < fc_ndirs; i++) {
        if (!fc_dirs[i].used) {
            fc_reset(&fc_dirs[i]);
            free(fc_dirs[i].e);
            continue;
        }
        fc_dirs[i].used = 0;
        fc_dirs[kept++] = fc_dirs[i];
    }
    fc_ndirs = kept;
}

static int parse_u64(const char *buf, ssize_t n, uint64_t *out)
{
    if (n <= 0 || buf[0] < '0' || buf[0] > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || (*end && *end != '\n'))
        return -1;
    *out = v;
    return 0;
}

static int fc_u64(struct fc_dir *o, int dirfd, const char *rel, uint64_t *out)
{
    char buf[32];
    ssize_t n = fc_read(o, dirfd, rel, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    return parse_u64(buf, n, out);
}

static void fc_str(struct fc_dir *o, int dirfd, const char *rel, char *out, size_t len)
{
    ssize_t n = fc_read(o, dirfd, rel, out, len - 1);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

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
static int dump_dir(struct fc_dir *o, int parent, const char *name, cJSON *obj, cJSON *skipped)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (!d) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (skip(e->d_name))
            continue;
        uint64_t v;
        char rel[80];
        int got;
        if (o && (size_t)snprintf(rel, sizeof rel, "%s/%s", name, e->d_name) < sizeof rel)
            got = fc_u64(o, parent, rel, &v); /* cached: relative to the owner, by a name it keeps */
        else
            got = read_u64_at(dirfd(d), e->d_name, &v);
        if (got == 0)
            add_u64(obj, e->d_name, v);
        else if (skipped)
            cJSON_AddItemToArray(skipped, cJSON_CreateString(e->d_name));
    }
    closedir(d);
    return 0;
}

static void add_str_file(cJSON *o, const char *key, struct fc_dir *cache, int dirfd, const char *name)
{
    char v[128];
    fc_str(cache, dirfd, name, v, sizeof v);
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
    char pdir[1100], path[64];
    snprintf(pdir, sizeof pdir, "%s/ports/%s", devdir, port);
    /* Everything below is read relative to the port's directory: one path walk, not fifty. */
    int pfd = open(pdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0)
        return; /* the device went away since its directory was listed */
    struct fc_dir *cache = fc_owner(pfd, pdir);
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
    char seen[FS_CNT_NDEVS][32];
    int nn = 0;
    for (int g = 0; g < 8 && nn < FS_CNT_NDEVS; g++) {
        char name[32];
        snprintf(path, sizeof path, "gid_attrs/ndevs/%d", g);
        fc_str(cache, pfd, path, name, sizeof name);
        int dup = !name[0];
        for (int k = 0; k < nn && !dup; k++)
            dup = strcmp(seen[k], name) == 0;
        if (!dup) {
            snprintf(seen[nn++], sizeof seen[0], "%s", name);
            cJSON_AddItemToArray(nd, cJSON_CreateString(name));
        }
    }
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
    while (d && (e = readdir(d))) {
        if (skip(e->d_name))
            continue;
        char devdir[1100], driver[64], guid[64], pdir[1200];
        snprintf(devdir, sizeof devdir, "%s/%s", path, e->d_name);
        driver_of(devdir, driver, sizeof driver);
        snprintf(pdir, sizeof pdir, "%s/node_guid", devdir);
        read_str(pdir, guid, sizeof guid);
        dump_device_hw(devdir, e->d_name, driver, devices, units);
        snprintf(pdir, sizeof pdir, "%s/ports", devdir);
        DIR *pd = opendir(pdir);
        struct dirent *pe;
        while (pd && (pe = readdir(pd)))
            if (!skip(pe->d_name))
                dump_port(devdir, e->d_name, pe->d_name, driver, guid, ports, units);
        if (pd)
            closedir(pd);
    }
    if (d)
        closedir(d);
}

/* The driver's own statistics (`ethtool -S`), kept only where the name says pause, PFC, ECN or
 * CNP: the per-priority pause counters lossless RoCE depends on exist nowhere in sysfs. */
static int ethtool_wanted(const char *name)
{
    static const char *const words[] = {"pause", "pfc", "prio", "ecn", "cnp", NULL};
    for (int i = 0; words[i]; i++)
        if (strcasestr(name, words[i]))
            return 1;
    return 0;
}

static void dump_ethtool(const char *ifname, cJSON *net)
{
    /* SOCK_CLOEXEC also keeps librspreload (`--preload rsocket`) off this socket: it would make
     * it a datagram rsocket (a UD QP per snapshot) that no ioctl can reach. */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", ifname);
    /* ethtool_sset_info ends in a flexible array: one u32 follows for the one set asked. */
    uint64_t sset_buf[(sizeof(struct ethtool_sset_info) + sizeof(uint32_t) + 7) / 8] = {0};
    struct ethtool_sset_info *sset = (struct ethtool_sset_info *)sset_buf;
    sset->cmd = ETHTOOL_GSSET_INFO;
    sset->sset_mask = 1ull << ETH_SS_STATS;
    ifr.ifr_data = (void *)sset;
    if (ioctl(fd, SIOCETHTOOL, &ifr) != 0 || !sset->sset_mask || sset->data[0] == 0 ||
        sset->data[0] > 65536) {
        close(fd);
        return;
    }
    uint32_t n = sset->data[0];
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
    cJSON *o = NULL;
    for (uint32_t i = 0; i < n && i < vals->n_stats; i++) {
        char name[ETH_GSTRING_LEN + 1];
        memcpy(name, names->data + (size_t)i * ETH_GSTRING_LEN, ETH_GSTRING_LEN);
        name[ETH_GSTRING_LEN] = '\0';
        if (!ethtool_wanted(name))
            continue;
        if (!o)
            o = cJSON_AddObjectToObject(net, "ethtool");
        add_u64(o, name, vals->data[i]);
    }
out:
    free(names);
    free(vals);
    close(fd);
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
    while (d && (e = readdir(d))) {
        if (skip(e->d_name))
            continue;
        int nfd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (nfd < 0)
            continue; /* gone since the listing */
        char key[1100];
        snprintf(key, sizeof key, "%s/%s", path, e->d_name);
        struct fc_dir *cache = fc_owner(nfd, key);
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
    const char *root = sysfs_root();
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
        fc_max_fds = rl.rlim_cur > 256 ? (size_t)rl.rlim_cur - 256 : 0;
    else
        fc_max_fds = 1u << 20;
    fc_on = 1;
    char line[64];
    /* One request per line on stdin; end of input (the exporter went away) ends the engine. */
    while (fgets(line, sizeof line, stdin)) {
        cJSON *snap = fs_counters_dump_json();
        char *text = cJSON_PrintUnformatted(snap);
        cJSON_Delete(snap);
        fc_sweep();
        if (!text || puts(text) == EOF || fflush(stdout) != 0) {
            cJSON_free(text);
            return 1;
        }
        cJSON_free(text);
    }
    return 0;
}
