/* SPDX-License-Identifier: BSD-3-Clause */
/* TCP backend: one socket, one send() per message and one recv() per message (as qperf and
 * sockperf do), so message rate means what an application would see. Every call passes
 * MSG_DONTWAIT, except that a --poll block wait for data sleeps in recv() (stream_io.c). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_dsack_dups (glibc's stops before it) */
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../core/backend.h"
#include "../core/clock.h"
#include "../core/ctl.h"
#include "../core/linkfacts.h"
#include "stream_io.h"

struct tcp_opts {
    int nodelay;
    uint64_t sndbuf;
    uint64_t rcvbuf;
    long busy_poll_us;
    uint64_t rcvlowat;
};

#define F(f) FS_FIELD(struct tcp_opts, f)
static const struct fs_option tcp_options[] = {
    {"tcp-nodelay", FS_OPT_BOOL, F(nodelay), 0, 1, "true", NULL,
     "disable Nagle (TCP_NODELAY)", 0},
    {"tcp-sndbuf", FS_OPT_SIZE, F(sndbuf), 0, 1ull << 31, "0", NULL,
     "SO_SNDBUF bytes; 0 = kernel autotuning", FS_OPTF_LOCAL},
    {"tcp-rcvbuf", FS_OPT_SIZE, F(rcvbuf), 0, 1ull << 31, "0", NULL,
     "SO_RCVBUF bytes; 0 = kernel autotuning", FS_OPTF_LOCAL},
    {"tcp-busy-poll", FS_OPT_INT, F(busy_poll_us), 0, 1000000, "0", NULL,
     "SO_BUSY_POLL microseconds (kernel busy polling of the NIC queue; needs CAP_NET_ADMIN)",
     FS_OPTF_LOCAL},
    /* Shared, not local: how the receiver waits is part of the method (the receiver is the
     * server in a bw run), so both ends take the client's value. */
    {"tcp-rcvlowat", FS_OPT_SIZE, F(rcvlowat), 1, 1ull << 30, "1M", NULL,
     "bw/bibw with --poll block: the receiver sleeps until this many bytes of the message it waits "
     "for are there, or the rest of it, at most a quarter of its receive buffer (SO_RCVLOWAT); "
     "1 = wake on every arrival, as qperf and iperf3 do",
     0},
    {0},
};
#undef F

struct tcp {
    /* The sockets, the waits and the data path; first: the shared hooks (FS_STREAM_BACKEND_OPS)
     * take a struct tcp * as a struct fs_stream *. */
    struct fs_stream s;
    struct tcp_opts o;
    char device[64];
    char bind_addr[128];
    char listen_addr[128];
    int sndbuf_eff, rcvbuf_eff;
    /* TCP_INFO tcpi_total_retrans and tcpi_dsack_dups when the last phase began (-1: not read):
     * describe() reports the segments this socket retransmitted since (the measured phase), and
     * how many of them the receiver reported as duplicates (spurious: a late ACK, not a loss).
     * tcpi_delivered_ce likewise: segments delivered that the fabric had marked CE (ECN, echoed
     * in the receiver's ACKs): congestion signalled without a drop. */
    long long retrans_base, dsack_base, ce_base;
};
_Static_assert(offsetof(struct tcp, s) == 0, "struct tcp starts with its struct fs_stream");

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
    char list[2048], sv[FS_SHOWN_LEN];
    if (device[0] && if_nametoindex(device) == 0) {
        fs_stream_netdevs(list, sizeof list);
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s: no such network device on this host; it has: %s",
                       fs_shown(device, sv, sizeof sv), list);
    }
    if (bind_addr[0]) {
        char dev[IF_NAMESIZE + 1];
        owner_of(bind_addr, dev, sizeof dev, list, sizeof list);
        if (!dev[0])
            return fs_fail(err, FS_EXIT_USAGE,
                           "--bind %s: no interface on this host has that address; addresses "
                           "here: %s",
                           fs_shown(bind_addr, sv, sizeof sv), list);
    }
    return 0;
}

static int tcp_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    (void)opts;
    return check_local_names(spec->device, spec->bind, err);
}

static int tcp_name(int fd, int local, struct sockaddr *sa, socklen_t *len)
{
    return local ? getsockname(fd, sa, len) : getpeername(fd, sa, len);
}

/* Kernel sockets. Under librspreload (`--preload rsocket`) these calls are rsocket's, and poll()
 * is rpoll, which before librdmacm v63 stops timing out after its first timeout: fs_stream_wait
 * goes through fs_pollwait (see pollwait.h), for kernel sockets the same wait. */
/* accept() and fcntl(), not accept4(): librspreload intercepts accept4 only from librdmacm v63 on
 * (Debian 12 has v44), and the un-intercepted call on its socket reads "Socket operation on
 * non-socket". */
static int tcp_accepted(struct fs_stream *s, int fd, struct fs_err *err)
{
    (void)s;
    (void)err;
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    return 0;
}

static const struct fs_stream_calls tcp_calls = {
    .backend = "tcp",
    .conn = "data connection",
    .fn = "",
    .send_flags = MSG_NOSIGNAL,
    .send = send,
    .recv = recv,
    .poll = poll,
    .close = close,
    .name = tcp_name,
    .accept = accept,
    .accepted = tcp_accepted,
    .no_client_hint = "a firewall between the hosts?",
};

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
            return fs_stream_fail_errno(&t->s, err, FS_EXIT_USAGE, "SO_SNDBUF");
    }
    if (t->o.rcvbuf) {
        v = (int)t->o.rcvbuf;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v))
            return fs_stream_fail_errno(&t->s, err, FS_EXIT_USAGE, "SO_RCVBUF");
    }
    return 0;
}

static int postconnect(struct tcp *t, int fd, struct fs_err *err)
{
    int one = t->o.nodelay;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one))
        return fs_stream_fail_errno(&t->s, err, FS_EXIT_MEASURE, "TCP_NODELAY");
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
    struct tcp *t = fs_stream_new(sizeof *t, &tcp_calls, ctx, out, err);
    if (!t)
        return -1;
    t->o = *(const struct tcp_opts *)ctx->opts;
    /* A wait for data sleeps in recv() (SO_RCVTIMEO), not in poll(): on kernel sockets only.
     * Under librspreload these calls are rsocket's, and rrecv with SO_RCVTIMEO was not tried: the
     * rsocket backend and the preloaded tcp backend keep poll(). */
    const char *preload = getenv("LD_PRELOAD");
    t->s.wait_in_recv = !(preload && strstr(preload, "rspreload"));
    /* Streams only: in a ping-pong the copy of a large message overlaps its arrival when the
     * receiver wakes at the first piece, and a wake-up for the whole of it would lose that. */
    const char *pat = ctx->spec->pattern;
    t->s.rcvlowat = strcmp(pat, "bw") == 0 || strcmp(pat, "bibw") == 0 ? t->o.rcvlowat : 1;
    t->retrans_base = t->dsack_base = t->ce_base = -1;
    snprintf(t->device, sizeof t->device, "%s", ctx->spec->device);
    snprintf(t->bind_addr, sizeof t->bind_addr, "%s", ctx->spec->bind);
    if (check_local_names(t->device, t->bind_addr, err))
        return -1;
    if (fs_stream_buffers(&t->s, ctx->max_size, err))
        return -1;
    if (!t->s.is_server)
        return 0;
    struct addrinfo *res = NULL;
    if (fs_stream_listen_info(&t->s, ctx, t->bind_addr, t->listen_addr, sizeof t->listen_addr,
                              &res, err))
        return -1;
    /* Plain SOCK_STREAM, flags set after: librdmacm before v63 refuses SOCK_CLOEXEC/SOCK_NONBLOCK
     * in the type, so under librspreload (`--preload rsocket`) every socket fell back to TCP. */
    t->s.listen_fd = socket(res->ai_family, SOCK_STREAM, 0);
    if (t->s.listen_fd >= 0)
        fcntl(t->s.listen_fd, F_SETFD, FD_CLOEXEC);
    int rc = t->s.listen_fd < 0 || presocket(t, t->s.listen_fd, err) ? -1 : 0;
    /* A backlog of a few: a stranger's connection must not keep the client's out of the queue. */
    if (rc == 0 &&
        (bind(t->s.listen_fd, res->ai_addr, res->ai_addrlen) || listen(t->s.listen_fd, 8)))
        rc = fs_stream_fail_errno(&t->s, err, FS_EXIT_MEASURE, "listen for the data connection");
    freeaddrinfo(res);
    return rc;
}

static int tcp_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct tcp *t = be;
    if (t->s.is_server)
        return fs_stream_accept(&t->s, t->listen_addr, deadline_ms, err) ? -1
                                                                       : postconnect(t, t->s.fd, err);
    const char *addr;
    int port;
    struct addrinfo *res = NULL;
    if (fs_stream_peer_info(&t->s, peer, &res, &addr, &port, err))
        return -1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    int fd = socket(res->ai_family, SOCK_STREAM, 0); /* flags after: see tcp_setup */
    if (fd >= 0) {
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    }
    t->s.fd = fd;
    int rc = fd < 0 ? fs_stream_fail_errno(&t->s, err, FS_EXIT_MEASURE, "socket")
                    : presocket(t, fd, err);
    if (rc == 0 && t->bind_addr[0]) {
        struct addrinfo *la = NULL;
        if (getaddrinfo(t->bind_addr, "0", &hints, &la) || bind(fd, la->ai_addr, la->ai_addrlen))
            rc = fs_fail(err, FS_EXIT_USAGE, "--bind %s: %s", t->bind_addr,
                         la ? strerror(errno) : "not a numeric address of this family");
        if (la)
            freeaddrinfo(la);
    }
    if (rc == 0 && connect(fd, res->ai_addr, res->ai_addrlen) && errno != EINPROGRESS)
        rc = fs_stream_fail_errno(&t->s, err, FS_EXIT_PEER, "data connection");
    if (rc == 0) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (fs_stream_wait(&t->s, fd, POLLOUT, deadline_ms) <= 0)
            rc = fs_fail(err, FS_EXIT_PEER,
                         "tcp: data connection to %s:%d not established within %d ms",
                         addr, port, deadline_ms);
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
            rc = fs_fail(err, FS_EXIT_PEER, "tcp: data connection to %s:%d: %s%s",
                         addr, port, strerror(soerr),
                         t->device[0] ? " (is the peer reachable through --device?)" : "");
    }
    freeaddrinfo(res);
    if (rc == 0)
        rc = fs_stream_send_token(&t->s, fd, deadline_ms, err);
    return rc ? rc : postconnect(t, fd, err);
}

static void tcp_describe(void *be, cJSON *o)
{
    struct tcp *t = be;
    char buf[128], ip[INET6_ADDRSTRLEN], dev[IF_NAMESIZE + 1];
    if (!fs_stream_describe_start(&t->s, o))
        return;
    fs_stream_name(&t->s, 1, buf, sizeof buf, ip, sizeof ip);
    cJSON_AddStringToObject(o, "local_address", buf);
    owner_of(ip, dev, sizeof dev, NULL, 0);
    /* Which netdev owns the source address. The route may still send elsewhere: the counter
     * snapshot in the result is the proof of the path. */
    cJSON_AddStringToObject(o, "address_owner", dev);
    fs_stream_name(&t->s, 0, buf, sizeof buf, NULL, 0);
    cJSON_AddStringToObject(o, "peer_address", buf);
    if (t->device[0])
        cJSON_AddStringToObject(o, "bound_device", t->device);
    else
        cJSON_AddNullToObject(o, "bound_device");
    cJSON_AddBoolToObject(o, "tcp_nodelay", t->o.nodelay);
    cJSON_AddNumberToObject(o, "sndbuf_bytes", t->sndbuf_eff);
    cJSON_AddNumberToObject(o, "rcvbuf_bytes", t->rcvbuf_eff);
    /* What a whole message waited for: the largest SO_RCVLOWAT a bw/bibw receiver under --poll
     * block set before it slept (--tcp-rcvlowat, set_rcvlowat), not the last one, which is often
     * the rest of a message and so depends on where the last sleep fell; the kernel's value (1)
     * on a socket that never set it. */
    int lowat = t->s.rcvlowat_most;
    socklen_t ll = sizeof lowat;
    if (lowat > 0 || getsockopt(t->s.fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &ll) == 0)
        cJSON_AddNumberToObject(o, "rcvlowat_bytes", lowat);
    int mss = 0;
    socklen_t sl = sizeof mss;
    if (getsockopt(t->s.fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &sl) == 0)
        cJSON_AddNumberToObject(o, "mss", mss);
    /* Facts for the explanation of the number (fabscope.results.explain): the path MTU, the
     * MTU of the netdev that owns our address, and the segments retransmitted in the phase. */
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(t->s.fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0) {
        cJSON_AddNumberToObject(o, "path_mtu", ti.tcpi_pmtu);
        /* The smoothed round trip at the end of the phase: the buffers' bandwidth-delay product. */
        cJSON_AddNumberToObject(o, "rtt_us", ti.tcpi_rtt);
        /* The lowest round trip the connection has seen (the handshake's, or a quiet moment's): the
         * path without queues. A smoothed round trip far above it is queueing delay (the "delay"
         * cause). tcpi_min_rtt arrived in Linux 4.10; an older kernel returns a shorter struct. */
        if (tl >= offsetof(struct tcp_info, tcpi_min_rtt) + 4 && ti.tcpi_min_rtt && ti.tcpi_min_rtt != ~0U)
            cJSON_AddNumberToObject(o, "min_rtt_us", ti.tcpi_min_rtt);
        if (t->retrans_base >= 0 && (long long)ti.tcpi_total_retrans >= t->retrans_base)
            cJSON_AddNumberToObject(o, "phase_retransmitted_segments",
                                    (double)((long long)ti.tcpi_total_retrans - t->retrans_base));
        /* tcpi_dsack_dups arrived in Linux 5.3: an older kernel returns a shorter struct. */
        if (t->dsack_base >= 0 && tl >= offsetof(struct tcp_info, tcpi_dsack_dups) + 4 &&
            (long long)ti.tcpi_dsack_dups >= t->dsack_base)
            cJSON_AddNumberToObject(o, "phase_spurious_retransmissions",
                                    (double)((long long)ti.tcpi_dsack_dups - t->dsack_base));
        /* tcpi_delivered_ce arrived in Linux 4.18. */
        if (t->ce_base >= 0 && tl >= offsetof(struct tcp_info, tcpi_delivered_ce) + 4 &&
            (long long)ti.tcpi_delivered_ce >= t->ce_base)
            cJSON_AddNumberToObject(o, "phase_delivered_ce",
                                    (double)((long long)ti.tcpi_delivered_ce - t->ce_base));
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", dev);
    if (dev[0] && ioctl(t->s.fd, SIOCGIFMTU, &ifr) == 0)
        cJSON_AddNumberToObject(o, "netdev_mtu", ifr.ifr_mtu);
    /* The ceiling's facts (issue 20; linkfacts.h): the netdev bound to (--device), else the one
     * that owns our address (its MTU above). */
    const char *carrier = t->device[0] ? t->device : dev;
    fs_link_add_netdev_rate(o, carrier);
    const char *const cls[] = {"net"};
    const char *const names[] = {carrier};
    fs_link_add_pcie(o, cls, names, 1);
}

static void tcp_phase_begin(void *be)
{
    struct tcp *t = be;
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    memset(&ti, 0, sizeof ti);
    int ok = t->s.fd >= 0 && getsockopt(t->s.fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0;
    t->retrans_base = ok ? (long long)ti.tcpi_total_retrans : -1;
    t->dsack_base = ok && tl >= offsetof(struct tcp_info, tcpi_dsack_dups) + 4
                        ? (long long)ti.tcpi_dsack_dups
                        : -1;
    t->ce_base = ok && tl >= offsetof(struct tcp_info, tcpi_delivered_ce) + 4
                     ? (long long)ti.tcpi_delivered_ce
                     : -1;
    /* The record's rcvlowat_bytes is this phase's: from what is in force now. */
    t->s.rcvlowat_most = t->s.rcvlowat_now;
}

const struct fs_backend_ops fs_backend_tcp = {
    FS_STREAM_BACKEND_OPS,
    .name = "tcp",
    .summary = "TCP sockets (the baseline every fabric is compared with)",
    .options = tcp_options,
    .options_size = sizeof(struct tcp_opts),
    .check = tcp_check,
    .setup = tcp_setup,
    .connect = tcp_connect,
    .describe = tcp_describe,
    .phase_begin = tcp_phase_begin,
};
