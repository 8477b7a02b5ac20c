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
#include "../core/datapath.h"
#include "../core/pollwait.h"

struct rs_opts {
    uint64_t sqsize;
    uint64_t rqsize;
    uint64_t inline_size;
    uint64_t iomap_size;
    uint64_t sndbuf;
    uint64_t rcvbuf;
};

#define O(f) offsetof(struct rs_opts, f)
#define S(f) sizeof(((struct rs_opts *)0)->f)
/* 0 keeps librdmacm's default (its built-in value, or the files in /etc/rdma/rsocket); the record
 * reports what the connection actually got (rsocket clamps to the device's limits). */
static const struct fs_option rs_options[] = {
    {"rsocket-sqsize", FS_OPT_SIZE, O(sqsize), S(sqsize), 0, 65536, "0", NULL,
     "send queue entries (rsetsockopt SOL_RDMA RDMA_SQSIZE); 0 = librdmacm default", FS_OPTF_LOCAL},
    {"rsocket-rqsize", FS_OPT_SIZE, O(rqsize), S(rqsize), 0, 65536, "0", NULL,
     "receive queue entries (RDMA_RQSIZE); 0 = librdmacm default", FS_OPTF_LOCAL},
    {"rsocket-inline", FS_OPT_SIZE, O(inline_size), S(inline_size), 0, 65536, "0", NULL,
     "bytes sent inline in the work request (RDMA_INLINE); 0 = librdmacm default", FS_OPTF_LOCAL},
    {"rsocket-iomap", FS_OPT_SIZE, O(iomap_size), S(iomap_size), 0, 65536, "0", NULL,
     "entries of the remote I/O map for riomap (RDMA_IOMAPSIZE); 0 = none", FS_OPTF_LOCAL},
    {"rsocket-sndbuf", FS_OPT_SIZE, O(sndbuf), S(sndbuf), 0, 1ull << 30, "0", NULL,
     "send buffer bytes (SO_SNDBUF on the rsocket); 0 = librdmacm default", FS_OPTF_LOCAL},
    {"rsocket-rcvbuf", FS_OPT_SIZE, O(rcvbuf), S(rcvbuf), 0, 1ull << 30, "0", NULL,
     "receive buffer bytes (SO_RCVBUF on the rsocket); 0 = librdmacm default", FS_OPTF_LOCAL},
    {0},
};
#undef O
#undef S

struct rs {
    struct rs_opts o;
    int is_server;
    char device[64];  /* --device: an RDMA device */
    char netdev[IF_NAMESIZE + 1]; /* the netdev its port sends through */
    char bind_addr[128];
    char listen_addr[128];
    int listen_fd, fd;
    struct fs_pollwait pw; /* every rpoll with a deadline goes through it: see rwait */
    uint8_t *txbuf, *rxbuf;
    uint64_t size;
    uint64_t tx_pending, tx_off, tx_completed;
    uint64_t rx_partial;
};

/* "rxe0 (netdev eth0), mlx5_0 (netdev ens1f0)" from sysfs; returns how many there are. */
static int rdma_devices(char *buf, size_t len)
{
    DIR *d = opendir("/sys/class/infiniband");
    size_t used = 0;
    int n = 0;
    buf[0] = '\0';
    if (!d)
        return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char nd[IF_NAMESIZE + 1] = "";
        fs_datapath_rdma_netdev("/sys", e->d_name, nd, sizeof nd);
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s (netdev %s)", n ? ", " : "",
                                     e->d_name, nd[0] ? nd : "none");
        n++;
    }
    closedir(d);
    return n;
}

static void netdevs(char *buf, size_t len)
{
    struct if_nameindex *ifs = if_nameindex();
    size_t used = 0;
    buf[0] = '\0';
    for (struct if_nameindex *i = ifs; i && i->if_index && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", i->if_name);
    if_freenameindex(ifs);
}

static int rs_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    (void)opts;
    char have[1024], nets[1024];
    if (rdma_devices(have, sizeof have) == 0) {
        netdevs(nets, sizeof nets);
        return fs_fail(err, FS_EXIT_USAGE,
                       "--backend rsocket needs an RDMA device and this host has none "
                       "(/sys/class/infiniband %s); its network devices are: %s. rsocket never "
                       "falls back to kernel TCP: for TCP use --backend tcp; for RDMA load the "
                       "NIC's RDMA driver, or create a Soft-RoCE device (`modprobe rdma_rxe && "
                       "rdma link add rxe0 type rxe netdev eth0`), or boot a guest that has one "
                       "(`fabscope testbed softroce run -- ...`)",
                       access("/sys/class/infiniband", F_OK) ? "does not exist" : "is empty",
                       nets[0] ? nets : "none");
    }
    if (spec->device[0]) {
        char path[256];
        snprintf(path, sizeof path, "/sys/class/infiniband/%s", spec->device);
        if (strchr(spec->device, '/') || strchr(spec->device, ',') || access(path, F_OK))
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

static int fail_errno(struct fs_err *err, int code, const char *what)
{
    return fs_fail(err, code, "rsocket: %s: %s", what, strerror(errno));
}

/* SOL_RDMA and buffer settings: rsocket takes them only before rconnect/rlisten. */
static int presocket(struct rs *r, int fd, struct fs_err *err)
{
    static const struct {
        int level, name;
        size_t off;
        const char *opt;
    } set[] = {
        {SOL_RDMA, RDMA_SQSIZE, offsetof(struct rs_opts, sqsize), "--rsocket-sqsize"},
        {SOL_RDMA, RDMA_RQSIZE, offsetof(struct rs_opts, rqsize), "--rsocket-rqsize"},
        {SOL_RDMA, RDMA_INLINE, offsetof(struct rs_opts, inline_size), "--rsocket-inline"},
        {SOL_RDMA, RDMA_IOMAPSIZE, offsetof(struct rs_opts, iomap_size), "--rsocket-iomap"},
        {SOL_SOCKET, SO_SNDBUF, offsetof(struct rs_opts, sndbuf), "--rsocket-sndbuf"},
        {SOL_SOCKET, SO_RCVBUF, offsetof(struct rs_opts, rcvbuf), "--rsocket-rcvbuf"},
    };
    for (size_t i = 0; i < sizeof set / sizeof set[0]; i++) {
        uint64_t v = *(const uint64_t *)((const char *)&r->o + set[i].off);
        if (!v)
            continue;
        int iv = (int)v;
        if (rsetsockopt(fd, set[i].level, set[i].name, &iv, sizeof iv))
            return fs_fail(err, FS_EXIT_USAGE, "%s %d: rsetsockopt refused it: %s", set[i].opt,
                           iv, strerror(errno));
    }
    return 0;
}

static int nonblock(int fd, struct fs_err *err)
{
    int fl = rfcntl(fd, F_GETFL);
    if (fl < 0 || rfcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return fail_errno(err, FS_EXIT_MEASURE, "rfcntl O_NONBLOCK");
    return 0;
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
    struct rs *r = calloc(1, sizeof *r);
    if (!r)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = r;
    r->o = *(const struct rs_opts *)ctx->opts;
    r->is_server = ctx->is_server;
    r->listen_fd = r->fd = -1;
    r->pw.tfd = -1;
    if (rs_check(ctx->spec, ctx->opts, err))
        return -1;
    if (fs_pollwait_open(&r->pw))
        return fail_errno(err, FS_EXIT_MEASURE, "timerfd_create (the deadline of every wait)");
    snprintf(r->device, sizeof r->device, "%s", ctx->spec->device);
    snprintf(r->bind_addr, sizeof r->bind_addr, "%s", ctx->spec->bind);
    if (r->device[0] && fs_datapath_rdma_netdev("/sys", r->device, r->netdev, sizeof r->netdev))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s: the device has no netdev (no IP address rsocket could "
                       "connect from); rsocket needs RoCE or IPoIB with an address",
                       r->device);
    if (r->device[0] && !r->bind_addr[0] && local_address_of(r->netdev, r->bind_addr, sizeof r->bind_addr))
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s: its netdev %s has no IP address, and rsocket connects by "
                       "address: give %s one (`ip addr add ... dev %s`)",
                       r->device, r->netdev, r->netdev, r->netdev);
    size_t bufsize = ctx->max_size > 65536 ? ctx->max_size : 65536;
    r->txbuf = malloc(bufsize);
    r->rxbuf = malloc(bufsize);
    if (!r->txbuf || !r->rxbuf)
        return fs_fail(err, FS_EXIT_MEASURE, "rsocket: cannot allocate %zu-byte buffers", bufsize);
    memset(r->txbuf, 0xa5, bufsize);
    if (!r->is_server)
        return 0;
    snprintf(r->listen_addr, sizeof r->listen_addr, "%s",
             r->bind_addr[0]          ? r->bind_addr
             : ctx->data_local_addr ? ctx->data_local_addr
                                    : ctx->ctl_local_addr);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(r->listen_addr, "0", &hints, &res);
    if (gai)
        return fs_fail(err, FS_EXIT_USAGE, "rsocket: cannot listen on '%s': %s", r->listen_addr,
                       gai_strerror(gai));
    r->listen_fd = rsocket(res->ai_family, SOCK_STREAM, 0);
    int rc = 0;
    if (r->listen_fd < 0)
        rc = fs_fail(err, FS_EXIT_USAGE, "rsocket() failed: %s (librdmacm found no usable RDMA device)",
                     strerror(errno));
    if (rc == 0)
        rc = presocket(r, r->listen_fd, err);
    if (rc == 0 && rbind(r->listen_fd, res->ai_addr, res->ai_addrlen))
        rc = fs_fail(err, FS_EXIT_USAGE,
                     "rsocket: cannot listen on %s: %s (rsocket binds through rdma_cm: the address "
                     "must belong to a netdev with an RDMA device)",
                     r->listen_addr, strerror(errno));
    if (rc == 0 && rlisten(r->listen_fd, 1))
        rc = fail_errno(err, FS_EXIT_MEASURE, "rlisten");
    if (rc == 0)
        rc = nonblock(r->listen_fd, err);
    freeaddrinfo(res);
    return rc;
}

static int rs_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    struct rs *r = be;
    int fd = r->is_server ? r->listen_fd : r->fd;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN], p[16];
    if (fd >= 0 && (rgetsockname(fd, (struct sockaddr *)&ss, &sl) ||
                    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                                NI_NUMERICHOST | NI_NUMERICSERV)))
        return fail_errno(err, FS_EXIT_MEASURE, "rgetsockname");
    if (fd < 0)
        return 0; /* the client says nothing before it connects */
    cJSON_AddStringToObject(obj, "addr", h);
    cJSON_AddNumberToObject(obj, "port", atoi(p));
    return 0;
}

/* rpoll() with a deadline. Never rpoll(fd, ms): librdmacm before v63 (Debian 12 has v44) leaks
 * its poll count when rpoll returns on its timeout, and every later rpoll then spins until the
 * rsocket is ready, whatever its timeout. A bandwidth receiver that had all its messages and
 * waited for the peer's count never came back (block mode hung after the warmup). Upstream fix:
 * rdma-core a1747742e. fs_pollwait puts a timerfd in the set and waits without a timeout, which
 * rpoll ends on the path that keeps its count right. Returns the rsocket's revents, 0 at the
 * deadline, -1 on an error. */
static int rwait(struct rs *r, int fd, short events, int ms)
{
    return fs_pollwait(&r->pw, rpoll, fd, events, ms);
}

static int rs_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct rs *r = be;
    if (r->is_server) {
        if (rwait(r, r->listen_fd, POLLIN, deadline_ms) <= 0)
            return fs_fail(err, FS_EXIT_PEER,
                           "rsocket: the client did not connect to %s within %d ms (is its RDMA "
                           "device on the same network?)",
                           r->listen_addr, deadline_ms);
        r->fd = raccept(r->listen_fd, NULL, NULL);
        if (r->fd < 0)
            return fail_errno(err, FS_EXIT_PEER, "raccept the data connection");
        rclose(r->listen_fd);
        r->listen_fd = -1;
        return nonblock(r->fd, err);
    }
    const cJSON *addr = cJSON_GetObjectItemCaseSensitive(peer, "addr");
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(peer, "port");
    if (!cJSON_IsString(addr) || !cJSON_IsNumber(port))
        return fs_fail(err, FS_EXIT_PEER, "rsocket: the server sent no data address");
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port->valueint);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    struct addrinfo *res = NULL;
    if (getaddrinfo(addr->valuestring, ps, &hints, &res))
        return fs_fail(err, FS_EXIT_PEER, "rsocket: bad data address '%s' from the server",
                       addr->valuestring);
    r->fd = rsocket(res->ai_family, SOCK_STREAM, 0);
    int rc = 0;
    if (r->fd < 0)
        rc = fs_fail(err, FS_EXIT_USAGE, "rsocket() failed: %s (librdmacm found no usable RDMA device)",
                     strerror(errno));
    if (rc == 0)
        rc = presocket(r, r->fd, err);
    if (rc == 0 && r->bind_addr[0]) {
        struct addrinfo *la = NULL;
        if (getaddrinfo(r->bind_addr, "0", &hints, &la) || rbind(r->fd, la->ai_addr, la->ai_addrlen))
            rc = fs_fail(err, FS_EXIT_USAGE, "rsocket: cannot bind to %s%s%s: %s", r->bind_addr,
                         r->device[0] ? ", the address of --device " : "", r->device,
                         la ? strerror(errno) : "not a numeric address of this family");
        if (la)
            freeaddrinfo(la);
    }
    if (rc == 0)
        rc = nonblock(r->fd, err);
    if (rc == 0 && rconnect(r->fd, res->ai_addr, res->ai_addrlen) && errno != EINPROGRESS)
        rc = fs_fail(err, FS_EXIT_PEER, "rsocket: rconnect to %s:%d: %s", addr->valuestring,
                     port->valueint, strerror(errno));
    if (rc == 0) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (rwait(r, r->fd, POLLOUT, deadline_ms) <= 0)
            rc = fs_fail(err, FS_EXIT_PEER,
                         "rsocket: connection to %s:%d not established within %d ms (no RDMA "
                         "route to it from this host?)",
                         addr->valuestring, port->valueint, deadline_ms);
        else if (rgetsockopt(r->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            rc = fs_fail(err, FS_EXIT_PEER, "rsocket: connection to %s:%d: %s",
                         addr->valuestring, port->valueint, strerror(soerr));
    }
    freeaddrinfo(res);
    return rc;
}

static int rs_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct rs *r = be;
    (void)op;
    if (r->tx_pending || r->rx_partial)
        return fs_fail(err, FS_EXIT_MEASURE, "rsocket: bytes left over from the previous size");
    r->size = size;
    return 0;
}

static int push_tx(struct rs *r, struct fs_err *err)
{
    while (r->tx_pending) {
        ssize_t n = rsend(r->fd, r->txbuf + r->tx_off, r->size - r->tx_off, MSG_DONTWAIT);
        if (n > 0) {
            r->tx_off += (uint64_t)n;
            if (r->tx_off == r->size) {
                r->tx_off = 0;
                r->tx_pending--;
                r->tx_completed++;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        return fs_fail(err, FS_EXIT_PEER, "rsocket: the peer dropped the connection (%s)",
                       n < 0 ? strerror(errno) : "rsend returned 0");
    }
    return 0;
}

static int rs_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct rs *r = be;
    (void)op;
    (void)size;
    if (r->tx_pending >= 65536)
        return 0;
    r->tx_pending++;
    return push_tx(r, err) ? -1 : 1;
}

static int pull_rx(struct rs *r, uint64_t *rx, struct fs_err *err)
{
    for (int i = 0; i < 64; i++) {
        ssize_t n = rrecv(r->fd, r->rxbuf, r->size - r->rx_partial, MSG_DONTWAIT);
        if (n > 0) {
            r->rx_partial += (uint64_t)n;
            if (r->rx_partial == r->size) {
                r->rx_partial = 0;
                (*rx)++;
                return 0; /* one whole message per call, as the tcp backend does */
            }
            continue;
        }
        if (n == 0)
            return fs_fail(err, FS_EXIT_PEER,
                           "rsocket: the peer closed the connection (peer process ended)");
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        return fs_fail(err, FS_EXIT_PEER, "rsocket: connection lost: %s", strerror(errno));
    }
    return 0;
}

static int rs_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct rs *r = be;
    uint64_t rx = 0;
    for (int round = 0; round < 2; round++) {
        if (push_tx(r, err) || pull_rx(r, &rx, err))
            return -1;
        if (rx || r->tx_completed || wait_ms <= 0 || round)
            break;
        if (rwait(r, r->fd, (short)(POLLIN | (r->tx_pending ? POLLOUT : 0)), wait_ms) < 0)
            return fail_errno(err, FS_EXIT_MEASURE, "rpoll");
    }
    ev->rx_done += rx;
    ev->tx_done += r->tx_completed;
    r->tx_completed = 0;
    return 0;
}

static void sock_name(int fd, int local, char *out, size_t len, char *ip, size_t ip_len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN] = "", p[16] = "";
    int rc = local ? rgetsockname(fd, (struct sockaddr *)&ss, &sl)
                   : rgetpeername(fd, (struct sockaddr *)&ss, &sl);
    if (rc == 0)
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    if (ip)
        snprintf(ip, ip_len, "%s", h);
}

/* The RDMA device whose port sends through `netdev`, or "". */
static void rdma_of_netdev(const char *netdev, char *out, size_t len)
{
    DIR *d = opendir("/sys/class/infiniband");
    out[0] = '\0';
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d)) && !out[0];) {
        char nd[IF_NAMESIZE + 1] = "";
        if (e->d_name[0] != '.' && fs_datapath_rdma_netdev("/sys", e->d_name, nd, sizeof nd) == 0 &&
            strcmp(nd, netdev) == 0)
            snprintf(out, len, "%s", e->d_name);
    }
    closedir(d);
}

static void rs_describe(void *be, cJSON *o)
{
    struct rs *r = be;
    cJSON_AddStringToObject(o, "kind", "rsocket");
    if (r->fd < 0)
        return;
    char buf[128], ip[INET6_ADDRSTRLEN], dev[64] = "";
    sock_name(r->fd, 1, buf, sizeof buf, ip, sizeof ip);
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
    sock_name(r->fd, 0, buf, sizeof buf, NULL, 0);
    cJSON_AddStringToObject(o, "peer_address", buf);
    cJSON *rd = cJSON_AddObjectToObject(o, "rsocket");
    static const struct {
        const char *key;
        int level, name;
        size_t off;
    } get[] = {
        {"sqsize", SOL_RDMA, RDMA_SQSIZE, offsetof(struct rs_opts, sqsize)},
        {"rqsize", SOL_RDMA, RDMA_RQSIZE, offsetof(struct rs_opts, rqsize)},
        {"inline", SOL_RDMA, RDMA_INLINE, offsetof(struct rs_opts, inline_size)},
        {"iomap", SOL_RDMA, RDMA_IOMAPSIZE, offsetof(struct rs_opts, iomap_size)},
        {"sndbuf", SOL_SOCKET, SO_SNDBUF, offsetof(struct rs_opts, sndbuf)},
        {"rcvbuf", SOL_SOCKET, SO_RCVBUF, offsetof(struct rs_opts, rcvbuf)},
    };
    for (size_t i = 0; i < sizeof get / sizeof get[0]; i++) {
        cJSON *e = cJSON_AddObjectToObject(rd, get[i].key);
        uint64_t asked = *(const uint64_t *)((const char *)&r->o + get[i].off);
        if (asked)
            cJSON_AddNumberToObject(e, "requested", (double)asked);
        else
            cJSON_AddStringToObject(e, "requested", "default");
        uint32_t v = 0;
        socklen_t sl = sizeof v;
        if (rgetsockopt(r->fd, get[i].level, get[i].name, &v, &sl) == 0)
            cJSON_AddNumberToObject(e, "effective", v);
        else
            cJSON_AddNullToObject(e, "effective");
    }
}

static void rs_teardown(void *be)
{
    struct rs *r = be;
    if (!r)
        return;
    if (r->fd >= 0)
        rclose(r->fd);
    if (r->listen_fd >= 0)
        rclose(r->listen_fd);
    fs_pollwait_close(&r->pw);
    free(r->txbuf);
    free(r->rxbuf);
    free(r);
}

const struct fs_backend_ops fs_backend_rsocket = {
    .abi = FS_BACKEND_ABI,
    .name = "rsocket",
    .summary = "librdmacm rsocket: the sockets API over RDMA (needs an RDMA device)",
    .ops = FS_BIT(FS_OP_SEND),
    .patterns = FS_BIT(FS_PAT_LAT) | FS_BIT(FS_PAT_BW) | FS_BIT(FS_PAT_BIBW),
    .options = rs_options,
    .options_size = sizeof(struct rs_opts),
    .check = rs_check,
    .setup = rs_setup,
    .local_address = rs_local_address,
    .connect = rs_connect,
    .prepare = rs_prepare,
    .post = rs_post,
    .progress = rs_progress,
    .describe = rs_describe,
    .teardown = rs_teardown,
};
