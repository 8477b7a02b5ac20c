/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP sockets of this process opened by the transport library: see tcp_sockets.h. */
#define _GNU_SOURCE
#include "tcp_sockets.h"
#include "sysfs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_data_segs_out and tcpi_dsack_dups */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* tcpi_state of a listening socket (the kernel's TCP_LISTEN, net/tcp_states.h; glibc's name for it
 * is in netinet/tcp.h, which cannot be included next to linux/tcp.h). */
#define FS_TCP_STATE_LISTEN 10

void fs_tcp_socks_snap(struct fs_tcp_socks *snap, int skip_fd)
{
    snap->read = 0;
    snap->n = 0;
    snap->not_read = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    const int dir_fd = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd < 0 || fd == skip_fd || fd == dir_fd)
            continue;
        struct stat st;
        if (fstat((int)fd, &st) || !S_ISSOCK(st.st_mode))
            continue;
        int proto = 0, type = 0;
        socklen_t len = sizeof proto;
        if (getsockopt((int)fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) || proto != IPPROTO_TCP)
            continue;
        len = sizeof type;
        if (getsockopt((int)fd, SOL_SOCKET, SO_TYPE, &type, &len) || type != SOCK_STREAM)
            continue;
        struct tcp_info ti;
        memset(&ti, 0, sizeof ti);
        len = sizeof ti;
        /* A listening socket has sent nothing: it adds nothing and is skipped. */
        if (getsockopt((int)fd, IPPROTO_TCP, TCP_INFO, &ti, &len) || ti.tcpi_state == FS_TCP_STATE_LISTEN)
            continue;
        if (snap->n == FS_TCP_SOCKS_MAX) {
            snap->not_read++;
            continue;
        }
        struct fs_tcp_sock *s = &snap->s[snap->n++];
        s->ino = (uint64_t)st.st_ino;
        s->data_segs_out = ti.tcpi_data_segs_out;
        s->total_retrans = ti.tcpi_total_retrans;
        /* Kernels before 5.5 fill less of the struct: what they leave out stays zero. */
        s->dsack_dups = len > offsetof(struct tcp_info, tcpi_dsack_dups) ? ti.tcpi_dsack_dups : 0;
    }
    closedir(d);
    snap->read = 1;
}

static uint64_t since(uint64_t now, uint64_t then)
{
    return now >= then ? now - then : 0;
}

cJSON *fs_tcp_socks_json(const struct fs_tcp_socks *before, const struct fs_tcp_socks *after)
{
    if (!before->read || !after->read)
        return NULL;
    uint64_t segs = 0, retrans = 0, dsack = 0;
    for (size_t i = 0; i < after->n; i++) {
        const struct fs_tcp_sock *a = &after->s[i];
        const struct fs_tcp_sock *b = NULL;
        for (size_t j = 0; j < before->n && !b; j++)
            if (before->s[j].ino == a->ino)
                b = &before->s[j];
        segs += since(a->data_segs_out, b ? b->data_segs_out : 0);
        retrans += since(a->total_retrans, b ? b->total_retrans : 0);
        dsack += since(a->dsack_dups, b ? b->dsack_dups : 0);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "sockets", (double)after->n);
    fs_json_add_u64(o, "data_segs_out", segs);
    fs_json_add_u64(o, "total_retrans", retrans);
    fs_json_add_u64(o, "dsack_dups", dsack);
    size_t lost = before->not_read > after->not_read ? before->not_read : after->not_read;
    if (lost)
        cJSON_AddNumberToObject(o, "not_read", (double)lost);
    return o;
}
