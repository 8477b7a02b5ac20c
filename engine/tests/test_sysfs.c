/* SPDX-License-Identifier: BSD-3-Clause */
/* sysfs.c, the reader the measurement snapshot and the exporter's dump share: numbers and lines
 * relative to a directory, the netdevs of an RDMA port (tests/fixtures/sysfs), hidden entries
 * passed over, and the --counters-serve file cache re-reading a file it keeps open. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "sysfs.h"

static void put(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w"); /* in place: the same inode, as a sysfs attribute */
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* This process's open file descriptors (the listing's own excepted). */
static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - 1;
}

static int ndevs(const char *port, char out[][FS_SYSFS_NDEV_LEN])
{
    int fd = open(port, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int n = fd < 0 ? -1 : fs_sysfs_port_ndevs(NULL, fd, out, 4);
    if (fd >= 0)
        close(fd);
    return n;
}

int main(void)
{
    /* The netdev of a RoCE port, each once: six GID slots name ens1f0; in a pod the first four
     * are empty. */
    char nd[4][FS_SYSFS_NDEV_LEN];
    CHECK(ndevs(FS_FIXTURES "/mlx5-roce-gids/class/infiniband/mlx5_0/ports/1", nd) == 1);
    CHECK(strcmp(nd[0], "ens1f0") == 0);
    CHECK(ndevs(FS_FIXTURES "/mlx5-roce-pod-gids/class/infiniband/mlx5_1/ports/1", nd) == 1);
    CHECK(strcmp(nd[0], "net2") == 0);

    char dir[] = "/tmp/fs-test-sysfs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    put(dir, "port_xmit_data", "123456789012\n");
    put(dir, "no_pma", "N/A (no PMA)\n");
    put(dir, "state", "4: ACTIVE\n");
    put(dir, ".hidden", "1\n");
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    uint64_t v = 0;
    CHECK(fs_sysfs_u64(NULL, dfd, "port_xmit_data", &v) == 0 && v == 123456789012ull);
    CHECK(fs_sysfs_u64(NULL, dfd, "no_pma", &v) == -1); /* not a counter */
    CHECK(fs_sysfs_u64(NULL, dfd, "state", &v) == -1);
    CHECK(fs_sysfs_u64(NULL, dfd, "missing", &v) == -1);
    char s[32];
    fs_sysfs_str(NULL, dfd, "state", s, sizeof s);
    CHECK(strcmp(s, "4: ACTIVE") == 0);
    fs_sysfs_str(NULL, dfd, "missing", s, sizeof s);
    CHECK(s[0] == '\0');

    /* A listing passes over "." , ".." and hidden entries; a directory that is not there lists
     * nothing. */
    DIR *d = opendir(dir);
    int seen = 0, hidden = 0;
    struct dirent *e;
    while ((e = fs_sysfs_next(d))) {
        seen++;
        hidden |= e->d_name[0] == '.';
    }
    closedir(d);
    CHECK(seen == 3 && !hidden);
    CHECK(fs_sysfs_next(NULL) == NULL);

    /* The cache keeps the file open and reads it again at offset 0: a new value is seen, and
     * a name that did not exist stays absent. */
    int fds_before_cache = open_fds();
    fs_fcache_enable(64);
    struct fs_fcache *c = fs_fcache_owner(dfd, dir);
    CHECK(c != NULL);
    CHECK(fs_sysfs_u64(c, dfd, "port_xmit_data", &v) == 0 && v == 123456789012ull);
    put(dir, "port_xmit_data", "7\n");
    CHECK(fs_sysfs_u64(c, dfd, "port_xmit_data", &v) == 0 && v == 7);
    CHECK(fs_sysfs_u64(c, dfd, "later", &v) == -1);
    fs_fcache_sweep(); /* seen in this snapshot: kept */
    CHECK(fs_fcache_owner(dfd, dir) == c);
    CHECK(open_fds() > fds_before_cache); /* it keeps the file open (and the count sees it) */
    put(dir, "port_xmit_data", "8\n");
    CHECK(fs_sysfs_u64(c, dfd, "port_xmit_data", &v) == 0 && v == 8);
    fs_fcache_sweep();
    fs_fcache_sweep(); /* not seen in the last snapshot: its files are closed */
    CHECK(open_fds() == fds_before_cache);
    close(dfd);

    const char *names[] = {"port_xmit_data", "no_pma", "state", ".hidden"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
    return CHECK_DONE();
}
