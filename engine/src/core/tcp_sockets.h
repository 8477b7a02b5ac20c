/* SPDX-License-Identifier: BSD-3-Clause */
/* The TCP sockets of this process that the transport library opened (UCX's tcp transport,
 * libfabric's tcp/sockets/net providers, MPI's tcp btl): fabscope does not own them, so it has no
 * TCP_INFO of them through its backend, yet they are file descriptors of this very process. A
 * snapshot walks /proc/self/fd and reads TCP_INFO of each TCP socket but the control connection:
 * the segments each sent and sent again, matched by inode between two snapshots, so the loss of
 * the run's own sockets is told apart from every other socket of the host. */
#ifndef FS_TCP_SOCKETS_H
#define FS_TCP_SOCKETS_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define FS_TCP_SOCKS_MAX 64

struct fs_tcp_sock {
    uint64_t ino;           /* the socket's inode: the same socket in both snapshots */
    uint64_t data_segs_out;    /* tcpi_data_segs_out: data segments, no pure ACKs */
    uint64_t total_retrans; /* tcpi_total_retrans */
    uint64_t dsack_dups;    /* tcpi_dsack_dups: retransmissions the receiver already had */
};

struct fs_tcp_socks {
    int read;         /* 1: /proc/self/fd was walked */
    size_t n;
    size_t not_read;  /* TCP sockets past FS_TCP_SOCKS_MAX */
    struct fs_tcp_sock s[FS_TCP_SOCKS_MAX];
};

/* Snapshot every TCP socket of this process except `skip_fd` (the control connection; -1: none). */
void fs_tcp_socks_snap(struct fs_tcp_socks *snap, int skip_fd);
/* What the sockets of `after` did since `before` (a socket new in `after` counts from zero):
 * {"sockets": N, "data_segs_out": D, "total_retrans": D, "dsack_dups": D} plus "not_read" when some
 * were past the limit; NULL when either snapshot could not be taken. */
struct cJSON *fs_tcp_socks_json(const struct fs_tcp_socks *before, const struct fs_tcp_socks *after);

#endif
