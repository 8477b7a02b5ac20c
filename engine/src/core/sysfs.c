/* SPDX-License-Identifier: BSD-3-Clause */
/* sysfs reading shared by the measurement snapshot and the exporter's dump (sysfs.h). */
#define _GNU_SOURCE
#include "sysfs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *fs_sysfs_root(void)
{
    const char *r = getenv("FABSCOPE_SYSFS_ROOT");
    return r && *r ? r : "/sys";
}

int fs_sysfs_path(char *out, size_t len, const char *fmt, ...)
{
    int root = snprintf(out, len, "%s/", fs_sysfs_root());
    if (root < 0 || (size_t)root >= len)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int rest = vsnprintf(out + root, len - (size_t)root, fmt, ap);
    va_end(ap);
    return rest < 0 || (size_t)rest >= len - (size_t)root ? -1 : 0;
}

struct dirent *fs_sysfs_next(DIR *d)
{
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            return e;
    return NULL;
}


/* The file cache of --counters-serve. Opening a sysfs file costs several times its read (path
 * lookup, file allocation, close): a snapshot of 64 ports opened ~5600 files and spent most of its
 * 40 ms in the kernel doing so. A long-lived engine keeps each file open and re-reads it with
 * pread at offset 0, which makes sysfs (kernfs) call the attribute's show() again, i.e. a fresh
 * value. Directories are still listed at every snapshot, so counters that appear are found and
 * ones that vanish are gone. A cache belongs to one port or netdev directory (its "owner"), and is
 * dropped when that directory's inode changes (a device re-created under the same name) or it is
 * not seen in a snapshot; a read error (ENODEV from a removed kernfs node) drops the one file.
 * Names that did not exist are remembered as absent (fd -1): the fixed attribute and GID-slot
 * names of a port do not come and go while the port exists. One-shot --counters-json and the
 * measurement snapshot run with the cache off: open, read, close. */
struct fc_ent {
    char name[80]; /* relative to the owner directory: "rate", "counters/port_xmit_data" */
    int fd;        /* -1: the name did not exist */
};

struct fs_fcache {
    char path[256];
    dev_t dev;
    ino_t ino;
    int used;
    size_t n, cap, hint;
    struct fc_ent *e;
};

static struct fs_fcache *fc_dirs;
static size_t fc_ndirs, fc_cap;
static int fc_on;
static size_t fc_nfds, fc_max_fds; /* files held open, and how many may be (below RLIMIT_NOFILE) */

static void fc_reset(struct fs_fcache *o)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->e[i].fd >= 0) {
            close(o->e[i].fd);
            fc_nfds--;
        }
    o->n = o->hint = 0;
}

struct fs_fcache *fs_fcache_owner(int dirfd, const char *key)
{
    struct stat st;
    if (!fc_on || strlen(key) >= sizeof fc_dirs[0].path || fstat(dirfd, &st) != 0)
        return NULL;
    struct fs_fcache *o = NULL;
    for (size_t i = 0; i < fc_ndirs && !o; i++)
        if (strcmp(fc_dirs[i].path, key) == 0)
            o = &fc_dirs[i];
    if (!o) {
        if (fc_ndirs == fc_cap) {
            size_t cap = fc_cap ? 2 * fc_cap : 64;
            struct fs_fcache *grown = realloc(fc_dirs, cap * sizeof *grown);
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

static struct fc_ent *fc_find(struct fs_fcache *o, const char *rel)
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

static struct fc_ent *fc_add(struct fs_fcache *o, const char *rel, int fd)
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
static ssize_t fc_read(struct fs_fcache *o, int dirfd, const char *rel, char *buf, size_t len)
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

/* Devices that went away: their directories were not seen in this snapshot. */
void fs_fcache_sweep(void)
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

int fs_sysfs_u64(struct fs_fcache *o, int dirfd, const char *rel, uint64_t *out)
{
    char buf[32];
    ssize_t n = fc_read(o, dirfd, rel, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = '\0';
    return parse_u64(buf, n, out);
}

void fs_sysfs_str(struct fs_fcache *o, int dirfd, const char *rel, char *out, size_t len)
{
    ssize_t n = fc_read(o, dirfd, rel, out, len - 1);
    out[n > 0 ? n : 0] = '\0';
    out[strcspn(out, "\n")] = '\0';
}

void fs_fcache_enable(size_t max_fds)
{
    fc_max_fds = max_fds;
    fc_on = 1;
}

int fs_sysfs_port_ndevs(struct fs_fcache *c, int pfd, char out[][FS_SYSFS_NDEV_LEN], int max)
{
    /* The first few GID slots name the netdev; reading all (up to 1024) costs minutes under
     * emulation and adds nothing. */
    char path[64];
    int nn = 0;
    for (int g = 0; g < 8 && nn < max; g++) {
        char name[FS_SYSFS_NDEV_LEN];
        snprintf(path, sizeof path, "gid_attrs/ndevs/%d", g);
        fs_sysfs_str(c, pfd, path, name, sizeof name);
        int dup = !name[0];
        for (int k = 0; k < nn && !dup; k++)
            dup = strcmp(out[k], name) == 0;
        if (!dup)
            snprintf(out[nn++], FS_SYSFS_NDEV_LEN, "%s", name);
    }
    return nn;
}

void fs_json_add_u64(cJSON *o, const char *key, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%llu", (unsigned long long)v);
    cJSON_AddRawToObject(o, key, num);
}
