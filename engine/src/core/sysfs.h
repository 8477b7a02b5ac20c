/* SPDX-License-Identifier: BSD-3-Clause */
/* Reading sysfs attributes, shared by the measurement snapshot (counters.c) and the exporter's
 * dump (counters_dump.c): the root, a number or a line relative to an open directory, the netdevs
 * of an RDMA port, and the file cache --counters-serve keeps between snapshots. */
#ifndef FS_SYSFS_H
#define FS_SYSFS_H

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>

struct cJSON;

/* FABSCOPE_SYSFS_ROOT (tests) or /sys. Every sysfs read of the engine starts here, so the tests'
 * fixtures (copies of real layouts, tests/fixtures/sysfs) reach all of them. */
const char *fs_sysfs_root(void);
/* fs_sysfs_root() + "/" + the formatted path below it ("class/infiniband/%s") into out: 0, or -1
 * when it does not fit. */
int fs_sysfs_path(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The next entry of a listing, passing over ".", ".." and hidden ones; NULL at the end (or when
 * d is NULL: a directory that could not be opened lists nothing). */
struct dirent *fs_sysfs_next(DIR *d);

/* The cache of one port or netdev directory (counters_dump.c says when it is on); NULL = read
 * uncached: open, read, close. */
struct fs_fcache;
/* Turns caching on, holding at most max_fds files open (below RLIMIT_NOFILE). */
void fs_fcache_enable(size_t max_fds);
/* The cache of the directory open as dirfd (whose path is key), or NULL when caching is off. */
struct fs_fcache *fs_fcache_owner(int dirfd, const char *key);
/* End of a snapshot: close what belongs to directories it did not see. */
void fs_fcache_sweep(void);

/* A counter file relative to dirfd (through the cache when c is set): digits only ("N/A (no
 * PMA)" on iWARP ports is not a counter). 0, or -1 when absent or not a number. */
int fs_sysfs_u64(struct fs_fcache *c, int dirfd, const char *rel, uint64_t *out);
/* The first line of a small text file (an attribute), "" when absent. */
void fs_sysfs_str(struct fs_fcache *c, int dirfd, const char *rel, char *out, size_t len);

#define FS_SYSFS_NDEV_LEN 32
/* The netdevs behind an RDMA port (open as pfd), from its first GID slots (gid_attrs/ndevs/N),
 * each once: at most max into out; returns how many. */
int fs_sysfs_port_ndevs(struct fs_fcache *c, int pfd, char out[][FS_SYSFS_NDEV_LEN], int max);

/* Exact integers into JSON: a double loses bytes above 2^53 (9 PB, two days of a 400G port). */
void fs_json_add_u64(struct cJSON *o, const char *key, uint64_t v);

#endif
