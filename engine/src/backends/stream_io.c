/* SPDX-License-Identifier: BSD-3-Clause */
/* See stream_io.h. */
#define _GNU_SOURCE
#include "stream_io.h"

#include "../core/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

void *fs_stream_new(size_t size, const struct fs_stream_calls *c, const struct fs_be_ctx *ctx,
                    void **out, struct fs_err *err)
{
    struct fs_stream *s = calloc(1, size);
    if (!s) {
        fs_fail(err, FS_EXIT_MEASURE, "out of memory");
        return NULL;
    }
    *out = s;
    s->c = c;
    s->is_server = ctx->is_server;
    s->listen_fd = s->fd = -1;
    s->pw.tfd = -1;
    if (ctx->session_key) {
        s->bound = 1;
        fs_data_token(ctx->session_key, c->backend, s->token);
    }
    return s;
}

int fs_stream_token_ok(struct fs_stream *s, int fd, int ms)
{
    if (!s->bound)
        return 1;
    uint8_t got[FS_DATA_TOKEN_LEN];
    size_t have = 0;
    uint64_t deadline = fs_now_ns() + (uint64_t)ms * 1000000ull;
    while (have < sizeof got) {
        int left = fs_ms_until(deadline);
        if (left == 0 || fs_stream_wait(s, fd, POLLIN, left) <= 0)
            break;
        ssize_t n = s->c->recv(fd, got + have, sizeof got - have, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            break;
        if (n > 0)
            have += (size_t)n;
    }
    uint8_t diff = have == sizeof got ? 0 : 1;
    for (size_t i = 0; i < have; i++)
        diff |= (uint8_t)(got[i] ^ s->token[i]);
    if (diff)
        s->strangers++;
    return diff == 0;
}

int fs_stream_accept(struct fs_stream *s, const char *listen_addr, int deadline_ms,
                     struct fs_err *err)
{
    uint64_t deadline = fs_now_ns() + (uint64_t)deadline_ms * 1000000ull;
    for (;;) {
        int left = fs_ms_until(deadline);
        if (left == 0 || fs_stream_wait(s, s->listen_fd, POLLIN, left) <= 0) {
            if (s->strangers)
                return fs_fail(err, FS_EXIT_PEER,
                               "%s: no %s with this session's token reached %s within %d ms; %u "
                               "connection(s) without it were closed (something else is "
                               "connecting to the data port)",
                               s->c->backend, s->c->conn, listen_addr, deadline_ms, s->strangers);
            return fs_fail(err, FS_EXIT_PEER, "%s: the client did not open the %s to %s within %d ms (%s)",
                           s->c->backend, s->c->conn, listen_addr, deadline_ms, s->c->no_client_hint);
        }
        int fd = s->c->accept(s->listen_fd, NULL, NULL);
        if (fd < 0) {
            char what[64];
            snprintf(what, sizeof what, "%saccept the %s", s->c->fn, s->c->conn);
            return fs_stream_fail_errno(s, err, FS_EXIT_PEER, what);
        }
        if (s->c->accepted(s, fd, err)) {
            s->c->close(fd);
            return -1;
        }
        int ms = fs_ms_until(deadline);
        if (fs_stream_token_ok(s, fd, ms < 2000 ? ms : 2000)) {
            s->fd = fd;
            break;
        }
        s->c->close(fd);
    }
    s->c->close(s->listen_fd);
    s->listen_fd = -1;
    return 0;
}

int fs_stream_send_token(struct fs_stream *s, int fd, int ms, struct fs_err *err)
{
    size_t off = 0;
    uint64_t deadline = fs_now_ns() + (uint64_t)ms * 1000000ull;
    while (s->bound && off < sizeof s->token) {
        ssize_t n = s->c->send(fd, s->token + off, sizeof s->token - off,
                               MSG_DONTWAIT | s->c->send_flags);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        int left = fs_ms_until(deadline);
        if ((n < 0 && errno != EAGAIN && errno != EINTR) || left == 0 ||
            fs_stream_wait(s, fd, POLLOUT, left) <= 0)
            return fs_fail(err, FS_EXIT_PEER, "%s: could not send the session token on the %s: %s",
                           s->c->backend, s->c->conn, n < 0 ? strerror(errno) : "timed out");
    }
    return 0;
}

void fs_stream_teardown(void *be)
{
    struct fs_stream *s = be;
    if (!s)
        return;
    if (s->fd >= 0)
        s->c->close(s->fd);
    if (s->listen_fd >= 0)
        s->c->close(s->listen_fd);
    fs_pollwait_close(&s->pw);
    free(s->txbuf);
    free(s->rxbuf);
    free(be);
}

int fs_stream_fail_errno(const struct fs_stream *s, struct fs_err *err, int code, const char *what)
{
    return fs_fail(err, code, "%s: %s: %s", s->c->backend, what, strerror(errno));
}

int fs_stream_buffers(struct fs_stream *s, uint64_t max_size, struct fs_err *err)
{
    size_t bufsize = max_size > 65536 ? max_size : 65536;
    s->txbuf = malloc(bufsize);
    s->rxbuf = malloc(bufsize);
    if (!s->txbuf || !s->rxbuf)
        return fs_fail(err, FS_EXIT_MEASURE, "%s: cannot allocate %zu-byte buffers", s->c->backend,
                       bufsize);
    memset(s->txbuf, 0xa5, bufsize);
    return 0;
}

int fs_stream_listen_info(const struct fs_stream *s, const struct fs_be_ctx *ctx, const char *bind,
                          char *out, size_t len, struct addrinfo **res, struct fs_err *err)
{
    snprintf(out, len, "%s",
             bind[0]                ? bind
             : ctx->data_local_addr ? ctx->data_local_addr
                                    : ctx->ctl_local_addr);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_PASSIVE};
    *res = NULL;
    int gai = getaddrinfo(out, "0", &hints, res);
    if (gai)
        return fs_fail(err, FS_EXIT_USAGE, "%s: cannot listen on '%s': %s", s->c->backend, out,
                       gai_strerror(gai));
    return 0;
}

int fs_stream_peer_info(const struct fs_stream *s, const cJSON *peer, struct addrinfo **res,
                        const char **addr, int *port, struct fs_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(peer, "addr");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(peer, "port");
    if (!cJSON_IsString(a) || !cJSON_IsNumber(p))
        return fs_fail(err, FS_EXIT_PEER, "%s: the server sent no data address", s->c->backend);
    *addr = a->valuestring;
    *port = p->valueint;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", p->valueint);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST};
    *res = NULL;
    if (getaddrinfo(a->valuestring, ps, &hints, res))
        return fs_fail(err, FS_EXIT_PEER, "%s: bad data address '%s' from the server",
                       s->c->backend, a->valuestring);
    return 0;
}

int fs_stream_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    const struct fs_stream *s = be;
    int fd = s->is_server ? s->listen_fd : s->fd;
    if (fd < 0)
        return 0; /* a client says nothing before it connects */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN], p[16];
    if (s->c->name(fd, 1, (struct sockaddr *)&ss, &sl) ||
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV)) {
        char what[32];
        snprintf(what, sizeof what, "%sgetsockname", s->c->fn);
        return fs_stream_fail_errno(s, err, FS_EXIT_MEASURE, what);
    }
    cJSON_AddStringToObject(obj, "addr", h);
    cJSON_AddNumberToObject(obj, "port", atoi(p));
    return 0;
}

int fs_stream_describe_start(const struct fs_stream *s, cJSON *o)
{
    cJSON_AddStringToObject(o, "kind", s->c->backend);
    cJSON_AddBoolToObject(o, "session_bound", s->bound); /* its token checked (serve's runs) */
    if (s->is_server)
        cJSON_AddNumberToObject(o, "strangers_rejected", s->strangers);
    return s->fd >= 0;
}

void fs_stream_name(const struct fs_stream *s, int local, char *out, size_t len, char *ip,
                    size_t ip_len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN] = "", p[16] = "";
    if (s->c->name(s->fd, local, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, len, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    if (ip)
        snprintf(ip, ip_len, "%s", h);
}

int fs_stream_wait(struct fs_stream *s, int fd, short events, int ms)
{
    if (ms > 0 && s->pw.tfd < 0 && fs_pollwait_open(&s->pw))
        return -1;
    return fs_pollwait(&s->pw, s->c->poll, fd, events, ms);
}

int fs_stream_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct fs_stream *s = be;
    (void)op;
    if (s->tx_pending || s->rx_partial)
        return fs_fail(err, FS_EXIT_MEASURE, "%s: bytes left over from the previous size",
                       s->c->backend);
    s->size = size;
    return 0;
}

/* Hand queued messages to the socket until it pushes back. */
static int push_tx(struct fs_stream *s, struct fs_err *err)
{
    while (s->tx_pending) {
        ssize_t n = s->c->send(s->fd, s->txbuf + s->tx_off, s->size - s->tx_off,
                               MSG_DONTWAIT | s->c->send_flags);
        if (n > 0) {
            s->tx_off += (uint64_t)n;
            if (s->tx_off == s->size) {
                s->tx_off = 0;
                s->tx_pending--;
                s->tx_completed++;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        char why[32];
        snprintf(why, sizeof why, "%ssend returned 0", s->c->fn);
        return fs_fail(err, FS_EXIT_PEER, "%s: the peer dropped the %s (%s)", s->c->backend,
                       s->c->conn, n < 0 ? strerror(errno) : why);
    }
    return 0;
}

int fs_stream_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct fs_stream *s = be;
    (void)op;
    (void)size;
    if (s->tx_pending >= 65536)
        return 0;
    s->tx_pending++;
    return push_tx(s, err) ? -1 : 1;
}

/* Takes what has arrived, up to `calls` recv()s; flags 0 on a descriptor made blocking by
 * recv_may_wait sleeps in the first call until data comes or its SO_RCVTIMEO passes. */
static int pull_rx(struct fs_stream *s, uint64_t *rx, int flags, int calls, struct fs_err *err)
{
    for (int i = 0; i < calls; i++) {
        ssize_t n = s->c->recv(s->fd, s->rxbuf, s->size - s->rx_partial, flags);
        if (n > 0) {
            s->rx_partial += (uint64_t)n;
            if (s->rx_partial == s->size) {
                s->rx_partial = 0;
                (*rx)++;
                /* Hand a whole message over at once: one more recv() would only return EAGAIN,
                 * and in a ping-pong that call sits inside the timed round trip. */
                return 0;
            }
            continue;
        }
        if (n == 0)
            return fs_fail(err, FS_EXIT_PEER, "%s: the peer closed the %s (peer process ended)",
                           s->c->backend, s->c->conn);
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return 0;
        return fs_fail(err, FS_EXIT_PEER, "%s: %s lost: %s", s->c->backend, s->c->conn,
                       strerror(errno));
    }
    return 0;
}

/* Whether a wait for data sleeps in recv(): where the backend said so at setup (s->wait_in_recv:
 * the tcp backend on kernel sockets). The descriptor is then made blocking with the wait's
 * deadline as SO_RCVTIMEO (every send and every other recv passes MSG_DONTWAIT). Why: the data
 * that wakes the sleeper is copied in the same call, where a wake-up from poll() costs a return,
 * a second call and the timer's re-arming first. A loopback receiver of 1 MiB messages that slept
 * in poll() got 0.93 of qperf's rate (qperf sleeps in read); sleeping in recv() it got 1.08-1.09x
 * its earlier rate (10 pairs alternated, the two CPUs sharing a cache; unchanged when they do
 * not; bench/RESULTS.md). */
static int recv_may_wait(struct fs_stream *s, int wait_ms)
{
    if (!s->wait_in_recv)
        return 0;
    if (s->recv_wait_ms == wait_ms)
        return 1;
    struct timeval tv = {.tv_sec = wait_ms / 1000, .tv_usec = (wait_ms % 1000) * 1000};
    int fl = fcntl(s->fd, F_GETFL);
    if (fl < 0 || setsockopt(s->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
        fcntl(s->fd, F_SETFL, fl & ~O_NONBLOCK))
        return 0; /* poll() then, as before */
    s->recv_wait_ms = wait_ms;
    return 1;
}

/* Before a sleep in recv(): SO_RCVLOWAT = s->rcvlowat, or what is left of the message, or a
 * quarter of the socket's receive buffer as it is now, whichever is least; set only when it
 * changes. Why wait at all: a receiver woken by every arrival takes the stream in small pieces,
 * and each wake-up and window update costs the sending side too. Loopback TCP, 1 MiB messages,
 * --poll block, /dev/cpu_dma_latency held (which wakes a sleeper fastest): 4,400-4,800 MB/s woken
 * on every arrival (3.0 sleeps a MiB; qperf's receiver: 4,750 MB/s, 4.5 sleeps a MiB), 7,200-8,200
 * woken for 1 MiB (0.27 sleeps a MiB); 8 MiB messages did best with 1 MiB (5,960-6,260 MB/s
 * against 4,340-4,790 with 2 MiB and 3,760-4,090 with none): a bigger wake-up copies more than the
 * caches hold (bench/RESULTS.md). Why the rest of the message: a wait for more than the sender
 * will send lasts until the timeout. Why a quarter of the buffer: a wait for half of it (the
 * kernel's own cap) is a wait until the advertised window is shut, the sender stalled until the
 * kernel gives up and wakes the receiver anyway: a fixed --tcp-rcvbuf 256K (512 KiB) gave
 * 2,670-2,740 MB/s at 256 KiB against 3,230-3,320 woken on every arrival and 3,250-3,300 at a
 * quarter. An autotuned buffer gets the same cap, read before each sleep as autotuning grows it:
 * asked for more, the kernel would grow the buffer to just twice the value, that same half
 * (the cap measured neutral there: loopback 1 MiB and 64 KiB over 200 Mbit/s). A failed call
 * leaves the kernel's default: nothing but speed depends on it. */
#define RCVLOWAT_SLICE_MS 5

static void set_rcvlowat(struct fs_stream *s)
{
    if (s->rcvlowat <= 1)
        return;
    uint64_t left = s->size - s->rx_partial;
    uint64_t want = s->rcvlowat < left ? s->rcvlowat : left;
    /* The buffer only grows (autotuning), so it is read again only while it is what binds. */
    if (want > (uint64_t)s->rcvbuf_seen / 4) {
        socklen_t len = sizeof s->rcvbuf_seen;
        if (getsockopt(s->fd, SOL_SOCKET, SO_RCVBUF, &s->rcvbuf_seen, &len) != 0 || s->rcvbuf_seen <= 0) {
            s->rcvbuf_seen = 0;
            return;
        }
        if (want > (uint64_t)s->rcvbuf_seen / 4)
            want = (uint64_t)s->rcvbuf_seen / 4;
    }
    int v = want < 1 ? 1 : (int)want;
    if (v != s->rcvlowat_now && setsockopt(s->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof v) == 0) {
        s->rcvlowat_now = v;
        if (v > s->rcvlowat_most)
            s->rcvlowat_most = v;
    }
}

/* The empty busy turn, repeated here up to the `turns` the core allows (its negative wait_ms):
 * nothing to send, and one recv() that finds nothing. Returns what the last recv() returned, its
 * errno kept: bytes for the general path to account, or the end of the allowance (-1, EAGAIN).
 * (Counted with bench/instr.py: the general path's empty turn was ~100 instructions around the
 * recv(), sockperf's ~30.) */
static ssize_t recv_spin(struct fs_stream *s, unsigned turns, struct fs_events *ev)
{
    ssize_t (*const rcv)(int, void *, size_t, int) = s->c->recv;
    const int fd = s->fd;
    void *const buf = s->rxbuf;
    const size_t want = s->size - s->rx_partial;
    unsigned spun = 0;
    ssize_t n;
    while ((n = rcv(fd, buf, want, MSG_DONTWAIT)) < 0 && errno == EAGAIN && ++spun < turns)
        ;
    ev->turns += spun < turns ? spun : turns - 1;
    return n;
}

int fs_stream_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct fs_stream *s = be;
    uint64_t rx = 0;
    if (wait_ms < 0 && !s->tx_pending && !s->tx_completed && s->size) {
        ssize_t n = recv_spin(s, (unsigned)-wait_ms, ev);
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n > 0) { /* as pull_rx takes it */
            s->rx_partial += (uint64_t)n;
            if (s->rx_partial == s->size) {
                s->rx_partial = 0;
                ev->rx_done++;
                return 0;
            }
        } else if (n == 0) {
            return fs_fail(err, FS_EXIT_PEER, "%s: the peer closed the %s (peer process ended)",
                           s->c->backend, s->c->conn);
        }
        /* a part of a message, or an error pull_rx reports below */
    }
    for (int round = 0; round < 2; round++) {
        if (push_tx(s, err) || pull_rx(s, &rx, MSG_DONTWAIT, 64, err))
            return -1;
        if (rx || s->tx_completed || wait_ms <= 0 || round)
            break;
        /* A receiver that waits for whole messages (set_rcvlowat) is not woken by the pieces of
         * one, so its sleeps are where the core would otherwise have looked at the control channel
         * for the sender's final count, between pieces: after the last message it slept a whole
         * slice before it looked (+50 ms a phase: 64 KiB messages over a 200 Mbit/s link, 3.17
         * against 3.11 s a run). Its sleeps are cut to RCVLOWAT_SLICE_MS: a phase ends that late
         * at most, and a slow link costs 200 empty wake-ups a second, where every arrival woke
         * the receiver before. */
        int slice = s->rcvlowat > 1 && wait_ms > RCVLOWAT_SLICE_MS ? RCVLOWAT_SLICE_MS : wait_ms;
        if (!s->tx_pending && recv_may_wait(s, slice)) {
            set_rcvlowat(s);
            if (pull_rx(s, &rx, 0, 1, err))
                return -1;
            continue;
        }
        if (fs_stream_wait(s, s->fd, (short)(POLLIN | (s->tx_pending ? POLLOUT : 0)), wait_ms) <
            0) {
            char what[32];
            snprintf(what, sizeof what, "%spoll", s->c->fn);
            return fs_stream_fail_errno(s, err, FS_EXIT_MEASURE, what);
        }
    }
    ev->rx_done += rx;
    ev->tx_done += s->tx_completed;
    s->tx_completed = 0;
    return 0;
}

void fs_stream_netdevs(char *buf, size_t len)
{
    struct if_nameindex *ifs = if_nameindex();
    size_t used = 0;
    buf[0] = '\0';
    for (struct if_nameindex *i = ifs; i && i->if_index && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", i->if_name);
    if_freenameindex(ifs);
}
