/* SPDX-License-Identifier: BSD-3-Clause */
/* rsocket backend: librdmacm's sockets over RDMA (rsocket/rbind/rlisten/raccept/rconnect/rsend/
 * rrecv/rpoll), with the tcp backend's message discipline (one rsend() per message, one whole
 * message handed to the core per arrival), so "tcp" and "rsocket" rows compare like with like.
 * rsocket needs an RDMA device: without one this backend refuses (exit 2) and names what the host
 * has; it never falls back to kernel TCP (librspreload does that silently; this backend does not
 * use the preload at all). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/backend.h"
#include "../core/clock.h"
#include "../core/datapath.h"
#include "stream_io.h"
#include <limits.h>
#include "sysfs.h"

struct rs_opts {
    uint64_t sqsize;
    uint64_t rqsize;
    uint64_t inline_size;
    uint64_t iomap_size;
    uint64_t sndbuf;
    uint64_t rcvbuf;
};

#define F(f) FS_FIELD(struct rs_opts, f)
/* 0 keeps librdmacm's default (its built-in value, or the files in /etc/rdma/rsocket); the record
 * reports what the connection actually got (rsocket clamps to the device's limits). */
static const struct fs_option rs_options[] = {
    {"rsocket-sqsize", FS_OPT_SIZE, F(sqsize), 0, 65536, "0", NULL,
     "send queue entries (rsetsockopt SOL_RDMA RDMA_SQSIZE); 0 = librdmacm default", FS_OPTF_LOCAL},
    {"rsocket-rqsize", FS_OPT_SIZE, F(rqsize), 0, 65536, "0", NULL,
     "receive queue entries (RDMA_RQSIZE); 0 = librdmacm default", FS_OPTF_LOCAL},
    {"rsocket-inline", FS_OPT_SIZE, F(inline_size), 0, 65536, "0", NULL,
     "bytes sent inline in the work request (RDMA_INLINE); 0 = librdmacm default", FS_OPTF_LOCAL},
    {"rsocket-iomap", FS_OPT_SIZE, F(iomap_size), 0, 65536, "0", NULL,
     "entries of the remote I/O map for riomap (RDMA_IOMAPSIZE); 0 = none", FS_OPTF_LOCAL},
    {"rsocket-sndbuf", FS_OPT_SIZE, F(sndbuf), 0, 1ull << 30, "0", NULL,
     "send buffer bytes (SO_SNDBUF on the rsocket, both ends); 0 = librdmacm default", 0},
    {"rsocket-rcvbuf", FS_OPT_SIZE, F(rcvbuf), 0, 1ull << 30, "0", NULL,
     "receive buffer bytes (SO_RCVBUF on the rsocket, both ends); 0 = librdmacm default", 0},
    {0},
};
#undef F

struct rs {
    /* The rsockets, the waits (rpoll) and the data path; first: the shared hooks (FS_STREAM_BACKEND_OPS)
     * take a struct rs * as a struct fs_stream *. */
    struct fs_stream s;
    struct rs_opts o;
    char device[64];  /* --device: an RDMA device */
    char netdev[IF_NAMESIZE + 1]; /* the netdev its port sends through */
    char bind_addr[128];
    char listen_addr[128];
};
_Static_assert(offsetof(struct rs, s) == 0, "struct rs starts with its struct fs_stream");

/* "rxe0 (netdev eth0), mlx5_0 (netdev ens1f0)" from sysfs; returns how many there are. */
static int rdma_devices(char *buf, size_t len)
{
    char dir[PATH_MAX];
    DIR *d = fs_sysfs_path(dir, sizeof dir, "class/infiniband") ? NULL : opendir(dir);
    size_t used = 0;
    int n = 0;
    buf[0] = '\0';
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char nd[IF_NAMESIZE + 1] = "";
        fs_datapath_rdma_netdev(fs_sysfs_root(), e->d_name, nd, sizeof nd);
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s (netdev %s)", n ? ", " : "",
                                     e->d_name, nd[0] ? nd : "none");
        n++;
    }
    closedir(d);
    return n;
}

static int rs_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    (void)opts;
    char have[1024], nets[1024], dir[PATH_MAX];
    if (rdma_devices(have, sizeof have) == 0) {
        fs_sysfs_path(dir, sizeof dir, "class/infiniband");
        fs_stream_netdevs(nets, sizeof nets);
        return fs_fail(err, FS_EXIT_USAGE,
                       "--backend rsocket needs an RDMA device and this host has none "
                       "(%s %s); its network devices are: %s. rsocket never "
                       "falls back to kernel TCP: for TCP use --backend tcp; for RDMA load the "
                       "NIC's RDMA driver, or create a Soft-RoCE device (`modprobe rdma_rxe && "
                       "rdma link add rxe0 type rxe netdev eth0`), or boot a guest that has one "
                       "(`fabscope testbed softroce run -- ...`)",
                       dir, access(dir, F_OK) ? "does not exist" : "is empty",
                       nets[0] ? nets : "none");
    }
    if (spec->device[0]) {
        char path[PATH_MAX];
        if (strchr(spec->device, '/') || strchr(spec->device, ',') ||
            fs_sysfs_path(path, sizeof path, "class/infiniband/%s", spec->device) ||
            access(path, F_OK))
            return fs_fail(err, FS_EXIT_USAGE,
                           "--device %s: no such RDMA device on this host (rsocket takes the "
                           "RDMA device, not its netdev); it has: %s",
                           spec->device, have);
    }
    if (spec->bind[0]) {
        struct ifaddrs *ifa = NULL;
        int ok = getifaddrs(&ifa) == 0 && fs_datapath_owner(ifa, spec->bind) != NULL;
        if (ifa)
            freeifaddrs(ifa);
        if (!ok)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--bind %s: no interface on this host has that address", spec->bind);
    }
    return 0;
}

static int rs_name(int fd, int local, struct sockaddr *sa, socklen_t *len)
{
    return local ? rgetsockname(fd, sa, len) : rgetpeername(fd, sa, len);
}

/* rpoll() only through fs_stream_wait, never rpoll(fd, ms): librdmacm before v63 (Debian 12 has
 * v44) leaks its poll count when rpoll returns on its timeout, and every later rpoll then spins
 * until the rsocket is ready, whatever its timeout. A bandwidth receiver that had all its
 * messages and waited for the peer's count never came back (block mode hung after the warmup).
 * Upstream fix: rdma-core a1747742e. fs_pollwait puts a timerfd in the set and waits without a
 * timeout, which rpoll ends on the path that keeps its count right. */
static int rs_accepted(struct fs_stream *s, int fd, struct fs_err *err);

static const struct fs_stream_calls rs_calls = {
    .backend = "rsocket",
    .conn = "connection",
    .fn = "r",
    .send_flags = 0,
    .send = rsend,
    .recv = rrecv,
    .poll = rpoll,
    .close = rclose,
    .name = rs_name,
    .accept = raccept,
    .accepted = rs_accepted,
    .no_client_hint = "is its RDMA device on the same network?",
};

/* The SOL_RDMA and buffer settings of the options: rsocket takes them only before
 * rconnect/rlisten, and describe reports what the connection got under `key`. */
static const struct rs_setting {
    const char *key, *opt;
    int level, name;
    size_t off; /* of the uint64_t in struct rs_opts; 0 there = librdmacm's default */
} rs_settings[] = {
    {"sqsize", "--rsocket-sqsize", SOL_RDMA, RDMA_SQSIZE, offsetof(struct rs_opts, sqsize)},
    {"rqsize", "--rsocket-rqsize", SOL_RDMA, RDMA_RQSIZE, offsetof(struct rs_opts, rqsize)},
    {"inline", "--rsocket-inline", SOL_RDMA, RDMA_INLINE, offsetof(struct rs_opts, inline_size)},
    {"iomap", "--rsocket-iomap", SOL_RDMA, RDMA_IOMAPSIZE, offsetof(struct rs_opts, iomap_size)},
    {"sndbuf", "--rsocket-sndbuf", SOL_SOCKET, SO_SNDBUF, offsetof(struct rs_opts, sndbuf)},
    {"rcvbuf", "--rsocket-rcvbuf", SOL_SOCKET, SO_RCVBUF, offsetof(struct rs_opts, rcvbuf)},
};
#define RS_N_SETTINGS (sizeof rs_settings / sizeof rs_settings[0])

static uint64_t setting_asked(const struct rs *r, const struct rs_setting *set)
{
    return *(const uint64_t *)((const char *)&r->o + set->off);
}

static int presocket(struct rs *r, int fd, struct fs_err *err)
{
    for (const struct rs_setting *set = rs_settings; set < rs_settings + RS_N_SETTINGS; set++) {
        uint64_t v = setting_asked(r, set);
        if (!v)
            continue;
        int iv = (int)v;
        if (rsetsockopt(fd, set->level, set->name, &iv, sizeof iv))
            return fs_fail(err, FS_EXIT_USAGE, "%s %d: rsetsockopt refused it: %s", set->opt, iv,
                           strerror(errno));
    }
    return 0;
}

/* A new rsocket of `family` in *fd (teardown closes it) with the settings it takes only now. */
static int open_rsocket(struct rs *r, int family, int *fd, struct fs_err *err)
{
    *fd = rsocket(family, SOCK_STREAM, 0);
    if (*fd < 0)
        return fs_fail(err, FS_EXIT_USAGE,
                       "rsocket() failed: %s (librdmacm found no usable RDMA device)",
                       strerror(errno));
    return presocket(r, *fd, err);
}

static int nonblock(struct rs *r, int fd, struct fs_err *err)
{
    int fl = rfcntl(fd, F_GETFL);
    if (fl < 0 || rfcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return fs_stream_fail_errno(&r->s, err, FS_EXIT_MEASURE, "rfcntl O_NONBLOCK");
    return 0;
}

static int rs_accepted(struct fs_stream *s, int fd, struct fs_err *err)
{
    return nonblock((struct rs *)s, fd, err);
}

/* The address --device's netdev gives the data path (IPv4 first); 0 when it has one. */
static int local_address_of(const char *netdev, char *out, size_t len)
{
    struct ifaddrs *ifa = NULL;
    int rc = getifaddrs(&ifa) == 0 ? fs_datapath_addr_of(ifa, netdev, out, len) : -1;
    if (ifa)
        freeifaddrs(ifa);
    return rc;
}

static int rs_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    struct rs *r = fs_stream_new(sizeof *r, &rs_calls, ctx, out, err);
    if (!r)
        return -1;
    r->o = *(const struct rs_opts *)ctx->opts;
    if (rs_check(ctx->spec, ctx->opts, err))
        return -1;
    if (fs_pollwait_open(&r->s.pw))
        return fs_stream_fail_errno(&r->s, err, FS_EXIT_MEASURE,
                                    "timerfd_create (the deadline of every wait)");
    snprintf(r->device, sizeof r->device, "%s", ctx->spec->device);
    snprintf(r->bind_addr, sizeof r->bind_addr, "%s", ctx->spec->bind);
    if (r->device[0] && fs_datapath_rdma_netdev(fs_sysfs_root(), r->device, r->netdev, sizeof r->netdev))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s: the device has no netdev (no IP address rsocket could "
                       "connect from); rsocket needs RoCE or IPoIB with an address",
                       r->device);
    if (r->device[0] && !r->bind_addr[0] && local_address_of(r->netdev, r->bind_addr, sizeof r->bind_addr))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s: its netdev %s has no IP address, and rsocket connects by "
                       "address: give %s one (`ip addr add ... dev %s`)",
                       r->device, r->netdev, r->netdev, r->netdev);
    if (fs_stream_buffers(&r->s, ctx->max_size, err))
        return -1;
    if (!r->s.is_server)
        return 0;
    struct addrinfo *res = NULL;
    if (fs_stream_listen_info(&r->s, ctx, r->bind_addr, r->listen_addr, sizeof r->listen_addr,
                              &res, err))
        return -1;
    int rc = open_rsocket(r, res->ai_family, &r->s.listen_fd, err);
    if (rc == 0 && rbind(r->s.listen_fd, res->ai_addr, res->ai_addrlen))
        rc = fs_fail(err, FS_EXIT_USAGE,
                     "rsocket: cannot listen on %s: %s (rsocket binds through rdma_cm: the address "
                     "must belong to a netdev with an RDMA device)",
                     r->listen_addr, strerror(errno));
    if (rc == 0 && rlisten(r->s.listen_fd, 1))
        rc = fs_stream_fail_errno(&r->s, err, FS_EXIT_MEASURE, "rlisten");
    if (rc == 0)
        rc = nonblock(r, r->s.listen_fd, err);
    freeaddrinfo(res);
    return rc;
}

static int rs_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct rs *r = be;
    if (r->s.is_server)
        return fs_stream_accept(&r->s, r->listen_addr, deadline_ms, err);
    const char *addr;
    int port;
    struct addrinfo *res = NULL;
    if (fs_stream_peer_info(&r->s, peer, &res, &addr, &port, err))
        return -1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    int rc = open_rsocket(r, res->ai_family, &r->s.fd, err);
    if (rc == 0 && r->bind_addr[0]) {
        struct addrinfo *la = NULL;
        if (getaddrinfo(r->bind_addr, "0", &hints, &la) ||
            rbind(r->s.fd, la->ai_addr, la->ai_addrlen))
            rc = fs_fail(err, FS_EXIT_USAGE, "rsocket: cannot bind to %s%s%s: %s", r->bind_addr,
                         r->device[0] ? ", the address of --device " : "", r->device,
                         la ? strerror(errno) : "not a numeric address of this family");
        if (la)
            freeaddrinfo(la);
    }
    if (rc == 0)
        rc = nonblock(r, r->s.fd, err);
    if (rc == 0 && rconnect(r->s.fd, res->ai_addr, res->ai_addrlen) && errno != EINPROGRESS)
        rc = fs_fail(err, FS_EXIT_PEER, "rsocket: rconnect to %s:%d: %s", addr, port,
                     strerror(errno));
    if (rc == 0) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (fs_stream_wait(&r->s, r->s.fd, POLLOUT, deadline_ms) <= 0)
            rc = fs_fail(err, FS_EXIT_PEER,
                         "rsocket: connection to %s:%d not established within %d ms (no RDMA "
                         "route to it from this host?)",
                         addr, port, deadline_ms);
        else if (rgetsockopt(r->s.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            rc = fs_fail(err, FS_EXIT_PEER, "rsocket: connection to %s:%d: %s",
                         addr, port, strerror(soerr));
    }
    freeaddrinfo(res);
    if (rc == 0)
        rc = fs_stream_send_token(&r->s, r->s.fd, deadline_ms, err);
    return rc;
}

/* The RDMA device whose port sends through `netdev`, or "". */
static void rdma_of_netdev(const char *netdev, char *out, size_t len)
{
    char dir[PATH_MAX];
    DIR *d = fs_sysfs_path(dir, sizeof dir, "class/infiniband") ? NULL : opendir(dir);
    out[0] = '\0';
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) && !out[0];) {
        char nd[IF_NAMESIZE + 1] = "";
        if (e->d_name[0] != '.' && fs_datapath_rdma_netdev(fs_sysfs_root(), e->d_name, nd, sizeof nd) == 0 &&
            strcmp(nd, netdev) == 0)
            snprintf(out, len, "%s", e->d_name);
    }
    closedir(d);
}

static void rs_describe(void *be, cJSON *o)
{
    struct rs *r = be;
    if (!fs_stream_describe_start(&r->s, o))
        return;
    char buf[128], ip[INET6_ADDRSTRLEN], dev[64] = "";
    fs_stream_name(&r->s, 1, buf, sizeof buf, ip, sizeof ip);
    cJSON_AddStringToObject(o, "local_address", buf);
    struct ifaddrs *ifa = NULL;
    const char *owner = getifaddrs(&ifa) == 0 ? fs_datapath_owner(ifa, ip) : NULL;
    cJSON_AddStringToObject(o, "address_owner", owner ? owner : "");
    if (owner)
        rdma_of_netdev(owner, dev, sizeof dev);
    if (ifa)
        freeifaddrs(ifa);
    /* rdma_cm picks the device that owns the source address; the counters prove it. */
    cJSON_AddStringToObject(o, "device", dev);
    cJSON_AddStringToObject(o, "device_selection",
                            r->device[0] ? "--device (bound to its netdev's address)"
                                         : "rdma_cm's route to the peer address");
    fs_stream_name(&r->s, 0, buf, sizeof buf, NULL, 0);
    cJSON_AddStringToObject(o, "peer_address", buf);
    cJSON *rd = cJSON_AddObjectToObject(o, "rsocket");
    for (const struct rs_setting *set = rs_settings; set < rs_settings + RS_N_SETTINGS; set++) {
        cJSON *e = cJSON_AddObjectToObject(rd, set->key);
        uint64_t asked = setting_asked(r, set);
        if (asked)
            cJSON_AddNumberToObject(e, "requested", (double)asked);
        else
            cJSON_AddStringToObject(e, "requested", "default");
        uint32_t v = 0;
        socklen_t sl = sizeof v;
        if (rgetsockopt(r->s.fd, set->level, set->name, &v, &sl) == 0)
            cJSON_AddNumberToObject(e, "effective", v);
        else
            cJSON_AddNullToObject(e, "effective");
    }
}

const struct fs_backend_ops fs_backend_rsocket = {
    FS_STREAM_BACKEND_OPS,
    .name = "rsocket",
    .summary = "librdmacm rsocket: the sockets API over RDMA (needs an RDMA device)",
    .options = rs_options,
    .options_size = sizeof(struct rs_opts),
    .check = rs_check,
    .setup = rs_setup,
    .connect = rs_connect,
    .describe = rs_describe,
};
