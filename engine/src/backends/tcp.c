/* TCP backend: one socket, non-blocking, one send() per message and one recv() per message (as
 * qperf and sockperf do), so message rate means what an application would see. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/backend.h"
#include "../core/clock.h"

struct tcp_opts {
    int nodelay;
    uint64_t sndbuf;
    uint64_t rcvbuf;
    long busy_poll_us;
};

#define O(f) offsetof(struct tcp_opts, f)
#define S(f) sizeof(((struct tcp_opts *)0)->f)
static const struct fs_option tcp_options[] = {
    {"tcp-nodelay", FS_OPT_BOOL, O(nodelay), S(nodelay), 0, 1, "true", NULL,
     "disable Nagle (TCP_NODELAY)", 0},
    {"tcp-sndbuf", FS_OPT_SIZE, O(sndbuf), S(sndbuf), 0, 1ull << 31, "0", NULL,
     "SO_SNDBUF bytes; 0 = kernel autotuning", FS_OPTF_LOCAL},
    {"tcp-rcvbuf", FS_OPT_SIZE, O(rcvbuf), S(rcvbuf), 0, 1ull << 31, "0", NULL,
     "SO_RCVBUF bytes; 0 = kernel autotuning", FS_OPTF_LOCAL},
    {"tcp-busy-poll", FS_OPT_INT, O(busy_poll_us), S(busy_poll_us), 0, 1000000, "0", NULL,
     "SO_BUSY_POLL microseconds (kernel busy polling of the NIC queue; needs CAP_NET_ADMIN)",
     FS_OPTF_LOCAL},
    {0},
};
#undef O
#undef S

struct tcp {
    struct tcp_opts o;
    int is_server;
    char device[64];
    char bind_addr[128];
    char listen_addr[128];
    int listen_fd, fd;
    uint8_t *txbuf, *rxbuf;
    uint64_t size;
    uint64_t tx_pending, tx_off, tx_completed;
    uint64_t rx_partial;
    int sndbuf_eff, rcvbuf_eff;
};

static void list_netdevs(char *buf, size_t len)
{
    struct if_nameindex *ifs = if_nameindex();
    size_t used = 0;
    buf[0] = '\0';
    for (struct if_nameindex *i = ifs; i && i->if_index && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", i->if_name);
    if_freenameindex(ifs);
}

/* The netdev that owns a local address ("lo" for 127.0.0.1), or "" if none does. */
static void owner_of(const char *addr, char *dev, size_t len, char *all, size_t all_len)
{
    struct ifaddrs *ifa = NULL;
    size_t used = 0;
    dev[0] = '\0';
    if (all)
        all[0] = '\0';
    if (getifaddrs(&ifa))
        return;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
            continue;
        char h[INET6_ADDRSTRLEN];
        socklen_t sl = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                         : sizeof(struct sockaddr_in6);
        if (getnameinfo(i->ifa_addr, sl, h, sizeof h, NULL, 0, NI_NUMERICHOST))
            continue;
        char *pct = strchr(h, '%');
        if (pct)
            *pct = '\0';
        if (all && used < all_len)
            used += (size_t)snprintf(all + used, all_len - used, "%s%s (%s)", used ? ", " : "", h,
                                     i->ifa_name);
        if (!dev[0] && strcmp(h, addr) == 0)
            snprintf(dev, len, "%s", i->ifa_name);
    }
    freeifaddrs(ifa);
}

static int check_local_names(const char *device, const char *bind_addr, struct fs_err *err)
{
    char list[2048];
    if (device[0] && if_nametoindex(device) == 0) {
        list_netdevs(list, sizeof list);
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s: no such network device on this host; it has: %s", device,
                       list);
    }
    if (bind_addr[0]) {
        char dev[IF_NAMESIZE + 1];
        owner_of(bind_addr, dev, sizeof dev, list, sizeof list);
        if (!dev[0])
            return fs_fail(err, FS_EXIT_USAGE,
                           "--bind %s: no interface on this host has that address; addresses "
                           "here: %s",
                           bind_addr, list);
    }
    return 0;
}

static int tcp_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    (void)opts;
    return check_local_names(spec->device, spec->bind, err);
}

static int fail_errno(struct fs_err *err, int code, const char *what)
{
    return fs_fail(err, code, "tcp: %s: %s", what, strerror(errno));
}

/* Options that must be set before connect/listen (window scaling is negotiated at SYN). */
static int presocket(struct tcp *t, int fd, struct fs_err *err)
{
    if (t->device[0] &&
        setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, t->device, (socklen_t)strlen(t->device) + 1))
        return fs_fail(err, FS_EXIT_USAGE, "--device %s: SO_BINDTODEVICE failed: %s%s", t->device,
                       strerror(errno), errno == EPERM ? " (needs root or CAP_NET_RAW)" : "");
    int v;
    if (t->o.sndbuf) {
        v = (int)t->o.sndbuf;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v))
            return fail_errno(err, FS_EXIT_USAGE, "SO_SNDBUF");
    }
    if (t->o.rcvbuf) {
        v = (int)t->o.rcvbuf;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v))
            return fail_errno(err, FS_EXIT_USAGE, "SO_RCVBUF");
    }
    return 0;
}

static int postconnect(struct tcp *t, int fd, struct fs_err *err)
{
    int one = t->o.nodelay;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
        return fail_errno(err, FS_EXIT_MEASURE, "TCP_NODELAY");
    if (t->o.busy_poll_us) {
        int us = (int)t->o.busy_poll_us;
        if (setsockopt(fd, SOL_SOCKET, SO_BUSY_POLL, &us, sizeof us))
            return fs_fail(err, FS_EXIT_USAGE, "--tcp-busy-poll %ld: SO_BUSY_POLL failed: %s%s",
                           t->o.busy_poll_us, strerror(errno),
                           errno == EPERM ? " (needs CAP_NET_ADMIN)" : "");
    }
    socklen_t sl = sizeof t->sndbuf_eff;
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &t->sndbuf_eff, &sl);
    sl = sizeof t->rcvbuf_eff;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &t->rcvbuf_eff, &sl);
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return 0;
}

static int tcp_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    struct tcp *t = calloc(1, sizeof *t);
    if (!t)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = t;
    t->o = *(const struct tcp_opts *)ctx->opts;
    t->is_server = ctx->is_server;
    t->listen_fd = t->fd = -1;
    snprintf(t->device, sizeof t->device, "%s", ctx->spec->device);
    snprintf(t->bind_addr, sizeof t->bind_addr, "%s", ctx->spec->bind);
    if (check_local_names(t->device, t->bind_addr, err))
        return -1;
    size_t bufsize = ctx->max_size > 65536 ? ctx->max_size : 65536;
    t->txbuf = malloc(bufsize);
    t->rxbuf = malloc(bufsize);
    if (!t->txbuf || !t->rxbuf)
        return fs_fail(err, FS_EXIT_MEASURE, "tcp: cannot allocate %zu-byte buffers", bufsize);
    memset(t->txbuf, 0xa5, bufsize);
    if (!t->is_server)
        return 0;
    /* Listen on the network of the client's --device, else where the client reached us: data
     * then follows the same path as control; --bind on the server moves it. */
    snprintf(t->listen_addr, sizeof t->listen_addr, "%s",
             t->bind_addr[0]          ? t->bind_addr
             : ctx->data_local_addr ? ctx->data_local_addr
                                    : ctx->ctl_local_addr);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(t->listen_addr, "0", &hints, &res);
    if (gai)
        return fs_fail(err, FS_EXIT_USAGE, "tcp: cannot listen on '%s': %s", t->listen_addr,
                       gai_strerror(gai));
    t->listen_fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = t->listen_fd < 0 || presocket(t, t->listen_fd, err) ? -1 : 0;
    if (rc == 0 && (bind(t->listen_fd, res->ai_addr, res->ai_addrlen) || listen(t->listen_fd, 1)))
        rc = fail_errno(err, FS_EXIT_MEASURE, "listen for the data connection");
    freeaddrinfo(res);
    return rc;
}

static int tcp_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    struct tcp *t = be;
    int fd = t->is_server ? t->listen_fd : t->fd;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN], p[16];
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) ||
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV))
        return fail_errno(err, FS_EXIT_MEASURE, "getsockname");
    cJSON_AddStringToObject(obj, "addr", h);
    cJSON_AddNumberToObject(obj, "port", atoi(p));
    return 0;
}

static int wait_fd(int fd, short events, int ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    return poll(&p, 1, ms);
}

static int tcp_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct tcp *t = be;
    if (t->is_server) {
        if (wait_fd(t->listen_fd, POLLIN, deadline_ms) <= 0)
            return fs_fail(err, FS_EXIT_PEER,
                           "tcp: the client did not open the data connection to %s within %d "
                           "ms (a firewall between the hosts?)",
                           t->listen_addr, deadline_ms);
        t->fd = accept4(t->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (t->fd < 0)
            return fail_errno(err, FS_EXIT_PEER, "accept the data connection");
        close(t->listen_fd);
        t->listen_fd = -1;
        return postconnect(t, t->fd, err);
    }
    const cJSON *addr = cJSON_GetObjectItemCaseSensitive(peer, "addr");
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(peer, "port");
    if (!cJSON_IsString(addr) || !cJSON_IsNumber(port))
        return fs_fail(err, FS_EXIT_PEER, "tcp: the server sent no data address");
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port->valueint);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    struct addrinfo *res = NULL;
    if (getaddrinfo(addr->valuestring, ps, &hints, &res))
        return fs_fail(err, FS_EXIT_PEER, "tcp: bad data address '%s' from the server",
                       addr->valuestring);
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    t->fd = fd;
    int rc = fd < 0 ? fail_errno(err, FS_EXIT_MEASURE, "socket") : presocket(t, fd, err);
    if (rc == 0 && t->bind_addr[0]) {
        struct addrinfo *la = NULL;
        if (getaddrinfo(t->bind_addr, "0", &hints, &la) || bind(fd, la->ai_addr, la->ai_addrlen))
            rc = fs_fail(err, FS_EXIT_USAGE, "--bind %s: %s", t->bind_addr,
                         la ? strerror(errno) : "not a numeric address of this family");
        if (la)
            freeaddrinfo(la);
    }
    if (rc == 0 && connect(fd, res->ai_addr, res->ai_addrlen) && errno != EINPROGRESS)
        rc = fail_errno(err, FS_EXIT_PEER, "data connection");
    if (rc == 0) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (wait_fd(fd, POLLOUT, deadline_ms) <= 0)
            rc = fs_fail(err, FS_EXIT_PEER,
                         "tcp: data connection to %s:%d not established within %d ms",
                         addr->valuestring, port->valueint, deadline_ms);
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            rc = fs_fail(err, FS_EXIT_PEER, "tcp: data connection to %s:%d: %s%s",
                         addr->valuestring, port->valueint, strerror(soerr),
                         t->device[0] ? " (is the peer reachable through --device?)" : "");
    }
    freeaddrinfo(res);
    return rc ? rc : postconnect(t, fd, err);
}

static int tcp_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct tcp *t = be;
    (void)op;
    if (t->tx_pending || t->rx_partial)
        return fs_fail(err, FS_EXIT_MEASURE, "tcp: bytes left over from the previous size");
    t->size = size;
    return 0;
}

/* Hand queued messages to the kernel until it pushes back. */
static int push_tx(struct tcp *t, struct fs_err *err)
{
    while (t->tx_pending) {
        ssize_t n = send(t->fd, t->txbuf + t->tx_off, t->size - t->tx_off,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            t->tx_off += (uint64_t)n;
            if (t->tx_off == t->size) {
                t->tx_off = 0;
                t->tx_pending--;
                t->tx_completed++;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;
        return fs_fail(err, FS_EXIT_PEER, "tcp: the peer dropped the data connection (%s)",
                       strerror(errno));
    }
    return 0;
}

static int tcp_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct tcp *t = be;
    (void)op;
    (void)size;
    if (t->tx_pending >= 65536)
        return 0;
    t->tx_pending++;
    return push_tx(t, err) ? -1 : 1;
}

static int pull_rx(struct tcp *t, uint64_t *rx, struct fs_err *err)
{
    for (int i = 0; i < 64; i++) {
        ssize_t n = recv(t->fd, t->rxbuf, t->size - t->rx_partial, MSG_DONTWAIT);
        if (n > 0) {
            t->rx_partial += (uint64_t)n;
            if (t->rx_partial == t->size) {
                t->rx_partial = 0;
                (*rx)++;
                /* Hand a whole message over at once: one more recv() would only return EAGAIN,
                 * and in a ping-pong that call sits inside the timed round trip. */
                return 0;
            }
            continue;
        }
        if (n == 0)
            return fs_fail(err, FS_EXIT_PEER,
                           "tcp: the peer closed the data connection (peer process ended)");
        if (errno == EAGAIN || errno == EINTR)
            return 0;
        return fs_fail(err, FS_EXIT_PEER, "tcp: data connection lost: %s", strerror(errno));
    }
    return 0;
}

static int tcp_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct tcp *t = be;
    uint64_t rx = 0;
    for (int round = 0; round < 2; round++) {
        if (push_tx(t, err) || pull_rx(t, &rx, err))
            return -1;
        if (rx || t->tx_completed || wait_ms <= 0 || round)
            break;
        short events = POLLIN | (t->tx_pending ? POLLOUT : 0);
        wait_fd(t->fd, events, wait_ms);
    }
    ev->rx_done += rx;
    ev->tx_done += t->tx_completed;
    t->tx_completed = 0;
    return 0;
}

static void addr_pair(int fd, int local, char *out, size_t len, char *ip, size_t ip_len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN] = "", p[16] = "";
    int rc = local ? getsockname(fd, (struct sockaddr *)&ss, &sl)
                   : getpeername(fd, (struct sockaddr *)&ss, &sl);
    if (rc == 0)
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    if (ip)
        snprintf(ip, ip_len, "%s", h);
}

static void tcp_describe(void *be, cJSON *o)
{
    struct tcp *t = be;
    char buf[128], ip[INET6_ADDRSTRLEN], dev[IF_NAMESIZE + 1];
    cJSON_AddStringToObject(o, "kind", "tcp");
    if (t->fd < 0)
        return;
    addr_pair(t->fd, 1, buf, sizeof buf, ip, sizeof ip);
    cJSON_AddStringToObject(o, "local_address", buf);
    owner_of(ip, dev, sizeof dev, NULL, 0);
    /* Which netdev owns the source address. The route may still send elsewhere: the counter
     * snapshot in the result is the proof of the path. */
    cJSON_AddStringToObject(o, "address_owner", dev);
    addr_pair(t->fd, 0, buf, sizeof buf, NULL, 0);
    cJSON_AddStringToObject(o, "peer_address", buf);
    if (t->device[0])
        cJSON_AddStringToObject(o, "bound_device", t->device);
    else
        cJSON_AddNullToObject(o, "bound_device");
    cJSON_AddBoolToObject(o, "tcp_nodelay", t->o.nodelay);
    cJSON_AddNumberToObject(o, "sndbuf_bytes", t->sndbuf_eff);
    cJSON_AddNumberToObject(o, "rcvbuf_bytes", t->rcvbuf_eff);
    int mss = 0;
    socklen_t sl = sizeof mss;
    if (getsockopt(t->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &sl) == 0)
        cJSON_AddNumberToObject(o, "mss", mss);
}

static void tcp_teardown(void *be)
{
    struct tcp *t = be;
    if (!t)
        return;
    if (t->fd >= 0)
        close(t->fd);
    if (t->listen_fd >= 0)
        close(t->listen_fd);
    free(t->txbuf);
    free(t->rxbuf);
    free(t);
}

const struct fs_backend_ops fs_backend_tcp = {
    .abi = FS_BACKEND_ABI,
    .name = "tcp",
    .summary = "TCP sockets (the baseline every fabric is compared with)",
    .ops = FS_BIT(FS_OP_SEND),
    .patterns = FS_BIT(FS_PAT_LAT) | FS_BIT(FS_PAT_BW) | FS_BIT(FS_PAT_BIBW),
    .options = tcp_options,
    .options_size = sizeof(struct tcp_opts),
    .check = tcp_check,
    .setup = tcp_setup,
    .local_address = tcp_local_address,
    .connect = tcp_connect,
    .prepare = tcp_prepare,
    .post = tcp_post,
    .progress = tcp_progress,
    .describe = tcp_describe,
    .teardown = tcp_teardown,
};
