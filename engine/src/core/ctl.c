/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "ctl.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "clock.h"

/* ---- frame authentication: HMAC-SHA256 with the session key (RFC 2104), from libcrypto ------- */

/* MAC of one frame: HMAC-SHA256(session key, "fabscope-frame/1" 0 direction 0 seq(8, BE) body).
 * The direction ('c': client to server, 's': back) keeps a frame from being reflected; the
 * sequence number, counted by both ends and never sent, makes a replayed, dropped or reordered
 * frame fail. python/fabscope/auth.py frame_mac computes the same (hmac, hashlib). */
int fs_ctl_frame_mac(const uint8_t key[32], char direction, uint64_t seq, const uint8_t *body,
                     size_t n, uint8_t out[32])
{
    uint8_t head[27];
    memcpy(head, "fabscope-frame/1", 16);
    head[16] = 0;
    head[17] = (uint8_t)direction;
    head[18] = 0;
    for (int i = 0; i < 8; i++)
        head[19 + i] = (uint8_t)(seq >> (56 - 8 * i));
    /* Fetched for each frame: control frames are a few per message size, and nothing is shared
     * between the threads of the loop's tests. */
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    EVP_MAC_CTX *ctx = mac ? EVP_MAC_CTX_new(mac) : NULL;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                           OSSL_PARAM_construct_end()};
    size_t len = 0;
    int ok = ctx && EVP_MAC_init(ctx, key, 32, params) && EVP_MAC_update(ctx, head, sizeof head) &&
             EVP_MAC_update(ctx, body, n) && EVP_MAC_final(ctx, out, &len, 32) && len == 32;
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
    return ok ? 0 : -1;
}

void fs_data_token(const uint8_t key[32], const char *backend, uint8_t out[FS_DATA_TOKEN_LEN])
{
    char label[96];
    int n = snprintf(label, sizeof label, "fabscope-data/1 %s", backend);
    if (fs_ctl_frame_mac(key, 'd', 0, (const uint8_t *)label, (size_t)n, out) == 0)
        return;
    /* Fail closed: a token nobody can know, so the data connection is refused (and says so)
     * rather than taken without its proof. */
    fprintf(stderr, "fabscope-engine: libcrypto could not compute the %s data token "
                    "(HMAC-SHA256): its data connection will be refused\n", backend);
    if (RAND_bytes(out, FS_DATA_TOKEN_LEN) != 1)
        memset(out, 0xa5, FS_DATA_TOKEN_LEN); /* the client's token is then wrong, never forged */
}

void fs_ctl_set_session_key(struct fs_ctl *c, const uint8_t key[32], int is_client)
{
    memcpy(c->mac_key, key, 32);
    c->mac_on = 1;
    c->tx_dir = is_client ? 'c' : 's';
    c->rx_dir = is_client ? 's' : 'c';
    c->tx_seq = c->rx_seq = 0;
}

int fs_ctl_parse_frame(const uint8_t *buf, size_t len, size_t *consumed, cJSON **msg,
                       struct fs_err *err)
{
    *msg = NULL;
    if (len < 4)
        return 0;
    uint32_t n = (uint32_t)buf[0] << 24 | (uint32_t)buf[1] << 16 | (uint32_t)buf[2] << 8 | buf[3];
    if (n == 0 || n > FS_CTL_MAX_FRAME)
        return fs_fail(err, FS_EXIT_PEER,
                       "control frame of %u bytes (allowed 1 to %u): the peer is not a fabscope "
                       "engine of this protocol, or the stream is corrupt",
                       n, FS_CTL_MAX_FRAME);
    if (len - 4 < n)
        return 0;
    const char *end = NULL;
    cJSON *m = cJSON_ParseWithLengthOpts((const char *)buf + 4, n, &end, 0);
    if (!m)
        return fs_fail(err, FS_EXIT_PEER, "control frame is not valid JSON");
    if (end != (const char *)buf + 4 + n) {
        /* Trailing garbage inside the frame would hide a framing bug; refuse it. */
        cJSON_Delete(m);
        return fs_fail(err, FS_EXIT_PEER, "control frame has bytes after its JSON value");
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    if (!cJSON_IsObject(m) || !cJSON_IsString(type) || !type->valuestring[0]) {
        cJSON_Delete(m);
        return fs_fail(err, FS_EXIT_PEER, "control frame is not an object with a string \"type\"");
    }
    *consumed = 4 + (size_t)n;
    *msg = m;
    return 1;
}

const char *fs_ctl_type(const cJSON *msg)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(msg, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

int fs_ctl_init(struct fs_ctl *c, int fd, const char *peer_desc)
{
    memset(c, 0, sizeof *c);
    c->fd = fd;
    snprintf(c->peer_desc, sizeof c->peer_desc, "%s", peer_desc);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

void fs_ctl_close(struct fs_ctl *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    free(c->in);
    c->in = NULL;
    c->in_len = c->in_cap = 0;
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = fs_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 1000000 ? 1000000 : (int)ms;
}

int fs_ctl_send(struct fs_ctl *c, const cJSON *msg, int timeout_ms, struct fs_err *err)
{
    char *text = cJSON_PrintUnformatted(msg);
    if (!text)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory formatting a control message");
    size_t n = strlen(text);
    if (n > FS_CTL_MAX_FRAME) {
        free(text);
        return fs_fail(err, FS_EXIT_MEASURE, "control message of %zu bytes exceeds the %u cap", n,
                       FS_CTL_MAX_FRAME);
    }
    size_t mac_len = c->mac_on ? FS_CTL_MAC_LEN : 0;
    uint8_t *frame = malloc(n + 4 + mac_len);
    if (!frame) {
        free(text);
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    }
    frame[0] = (uint8_t)(n >> 24);
    frame[1] = (uint8_t)(n >> 16);
    frame[2] = (uint8_t)(n >> 8);
    frame[3] = (uint8_t)n;
    memcpy(frame + 4, text, n);
    free(text);
    if (c->mac_on &&
        fs_ctl_frame_mac(c->mac_key, c->tx_dir, c->tx_seq++, frame + 4, n, frame + 4 + n)) {
        free(frame);
        return fs_fail(err, FS_EXIT_MEASURE,
                       "libcrypto could not compute the control frame's HMAC-SHA256: session ended");
    }
    size_t total = n + 4 + mac_len;
    uint64_t deadline = fs_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    size_t off = 0;
    int rc = 0;
    while (off < total) {
        ssize_t w = send(c->fd, frame + off, total - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            struct pollfd p = {.fd = c->fd, .events = POLLOUT};
            int ms = remaining_ms(deadline);
            if (ms == 0 || poll(&p, 1, ms) == 0) {
                rc = fs_fail(err, FS_EXIT_PEER,
                             "the peer %s did not accept control data within %d ms "
                             "(peer stalled or link cut)",
                             c->peer_desc, timeout_ms);
                break;
            }
            continue;
        }
        rc = fs_fail(err, FS_EXIT_PEER, "lost the control connection to %s: %s", c->peer_desc,
                     strerror(errno));
        break;
    }
    free(frame);
    return rc;
}

/* Pull whatever bytes are ready; 1 = got some, 0 = none, -1 = closed/error. */
static int fill(struct fs_ctl *c, struct fs_err *err)
{
    if (c->in_cap - c->in_len < 65536) {
        size_t cap = c->in_cap ? c->in_cap * 2 : 65536 * 2;
        if (cap > 2 * (FS_CTL_MAX_FRAME + 4) + 65536)
            cap = 2 * (FS_CTL_MAX_FRAME + 4) + 65536;
        if (cap > c->in_cap) {
            uint8_t *in = realloc(c->in, cap);
            if (!in)
                return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
            c->in = in;
            c->in_cap = cap;
        }
    }
    ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
    if (r > 0) {
        c->in_len += (size_t)r;
        return 1;
    }
    if (r == 0)
        return fs_fail(err, FS_EXIT_PEER,
                       "the peer %s closed the control connection (peer process ended or was "
                       "killed)",
                       c->peer_desc);
    if (errno == EAGAIN || errno == EINTR)
        return 0;
    return fs_fail(err, FS_EXIT_PEER, "lost the control connection to %s: %s", c->peer_desc,
                   strerror(errno));
}

static int take_frame(struct fs_ctl *c, cJSON **msg, struct fs_err *err)
{
    size_t used = 0;
    if (c->mac_on && c->in_len >= 4) {
        /* The MAC is checked before the JSON is parsed: nothing unauthenticated is interpreted. */
        uint32_t n = (uint32_t)c->in[0] << 24 | (uint32_t)c->in[1] << 16 |
                     (uint32_t)c->in[2] << 8 | c->in[3];
        if (n == 0 || n > FS_CTL_MAX_FRAME)
            return fs_ctl_parse_frame(c->in, c->in_len, &used, msg, err); /* says why */
        if (c->in_len < 4 + (size_t)n + FS_CTL_MAC_LEN)
            return 0;
        uint8_t want[32];
        if (fs_ctl_frame_mac(c->mac_key, c->rx_dir, c->rx_seq, c->in + 4, n, want))
            return fs_fail(err, FS_EXIT_MEASURE,
                           "libcrypto could not compute the control frame's HMAC-SHA256: "
                           "session ended");
        uint8_t diff = 0;
        for (int i = 0; i < 32; i++)
            diff |= (uint8_t)(want[i] ^ c->in[4 + n + (size_t)i]);
        if (diff)
            return fs_fail(err, FS_EXIT_PEER,
                           "control frame %llu from %s failed its authentication (changed, "
                           "replayed, dropped or reordered on the way, or not from the holder of "
                           "the session key): session ended",
                           (unsigned long long)c->rx_seq, c->peer_desc);
        int rc = fs_ctl_parse_frame(c->in, 4 + (size_t)n, &used, msg, err);
        if (rc == 1) {
            c->rx_seq++;
            used += FS_CTL_MAC_LEN;
            memmove(c->in, c->in + used, c->in_len - used);
            c->in_len -= used;
        }
        return rc;
    }
    int rc = fs_ctl_parse_frame(c->in, c->in_len, &used, msg, err);
    if (rc == 1) {
        memmove(c->in, c->in + used, c->in_len - used);
        c->in_len -= used;
    }
    return rc;
}

void fs_ctl_wait_readable(const struct fs_ctl *c, int timeout_ms)
{
    struct pollfd p = {.fd = c->fd, .events = POLLIN};
    (void)poll(&p, 1, timeout_ms); /* readable, closed or an error: the next fs_ctl_poll says */
}

int fs_ctl_poll(struct fs_ctl *c, cJSON **msg, struct fs_err *err)
{
    int rc = take_frame(c, msg, err);
    if (rc != 0)
        return rc;
    rc = fill(c, err);
    if (rc <= 0)
        return rc;
    return take_frame(c, msg, err);
}

int fs_ctl_recv(struct fs_ctl *c, int timeout_ms, cJSON **msg, struct fs_err *err)
{
    uint64_t deadline = fs_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    for (;;) {
        int rc = fs_ctl_poll(c, msg, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        if (ms == 0 || poll(&p, 1, ms) == 0)
            return fs_fail(err, FS_EXIT_PEER,
                           "no answer from the peer %s within %d ms (peer stalled, killed "
                           "without closing, or the link is cut); raise --timeout if the peer is "
                           "just slow",
                           c->peer_desc, timeout_ms);
    }
}

int fs_ctl_expect(struct fs_ctl *c, const char *type, int timeout_ms, cJSON **msg,
                  struct fs_err *err)
{
    if (fs_ctl_recv(c, timeout_ms, msg, err))
        return -1;
    const char *got = fs_ctl_type(*msg);
    if (strcmp(got, type) == 0)
        return 0;
    int rc;
    if (strcmp(got, "error") == 0) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(*msg, "message");
        const cJSON *code = cJSON_GetObjectItemCaseSensitive(*msg, "code");
        int ec = cJSON_IsNumber(code) ? code->valueint : FS_EXIT_PEER;
        if (ec != FS_EXIT_USAGE && ec != FS_EXIT_MEASURE && ec != FS_EXIT_UNSUPPORTED)
            ec = FS_EXIT_PEER;
        rc = fs_fail(err, ec, "the peer %s reported: %s", c->peer_desc,
                     cJSON_IsString(m) ? m->valuestring : "(no message)");
    } else {
        rc = fs_fail(err, FS_EXIT_PEER,
                     "protocol error: expected a '%s' message from %s, got '%s'", type,
                     c->peer_desc, got);
    }
    cJSON_Delete(*msg);
    *msg = NULL;
    return rc;
}

int fs_split_hostport(const char *text, char *host, size_t host_len, int *port, int def_port)
{
    const char *colon;
    *port = def_port;
    if (text[0] == '[') { /* [v6]:port */
        const char *close = strchr(text, ']');
        if (!close || (size_t)(close - text - 1) >= host_len)
            return -1;
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        colon = close[1] == ':' ? close + 1 : NULL;
        if (!colon && close[1])
            return -1;
    } else {
        colon = strrchr(text, ':');
        if (colon && strchr(text, ':') != colon)
            colon = NULL; /* bare IPv6 address without a port */
        size_t hl = colon ? (size_t)(colon - text) : strlen(text);
        if (hl >= host_len)
            return -1;
        memcpy(host, text, hl);
        host[hl] = '\0';
    }
    if (colon) {
        char *end = NULL;
        long p = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || p < 0 || p > 65535)
            return -1;
        *port = (int)p;
    }
    return host[0] ? 0 : -1;
}

void fs_sock_addrs(int fd, char *local, size_t llen, char *peer, size_t plen)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN];
    local[0] = peer[0] = '\0';
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, NULL, 0, NI_NUMERICHOST) == 0)
        snprintf(local, llen, "%s", h);
    sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 &&
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, NULL, 0, NI_NUMERICHOST) == 0)
        snprintf(peer, plen, "%s", h);
}

int fs_sock_peer_desc(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[INET6_ADDRSTRLEN], port[16];
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) ||
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV))
        return -1;
    snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, port);
    return 0;
}

/* The control connection's address as the user gave it (--peer, or --listen for a listener) and
 * its resolution for a stream socket. */
struct ctl_address {
    char host[256];
    int port;
    struct addrinfo *res; /* the caller's to free */
};

/* Splits hostport (FS_CTL_DEFAULT_PORT when it has none) and resolves it: any name for a client,
 * a numeric address for a listener. 0, or -1 saying which option is wrong and why. */
static int resolve_ctl_address(const char *hostport, int listener, struct ctl_address *a,
                               struct fs_err *err)
{
    if (fs_split_hostport(hostport, a->host, sizeof a->host, &a->port, FS_CTL_DEFAULT_PORT))
        return fs_fail(err, FS_EXIT_USAGE,
                       listener ? "--listen '%s' is not ADDR, ADDR:PORT or [IPv6]:PORT"
                                : "--peer '%s' is not HOST, HOST:PORT or [IPv6]:PORT",
                       hostport);
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", a->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = listener ? AI_PASSIVE | AI_NUMERICHOST : 0};
    a->res = NULL;
    int gai = getaddrinfo(a->host, portstr, &hints, &a->res);
    if (gai && listener)
        return fs_fail(err, FS_EXIT_USAGE, "--listen: '%s' is not a numeric address: %s", a->host,
                       gai_strerror(gai));
    if (gai)
        return fs_fail(err, FS_EXIT_PEER, "cannot resolve peer host '%s': %s", a->host,
                       gai_strerror(gai));
    return 0;
}

int fs_ctl_connect(const char *hostport, int timeout_ms, struct fs_ctl *c, struct fs_err *err)
{
    struct ctl_address a;
    if (resolve_ctl_address(hostport, 0, &a, err))
        return -1;
    uint64_t deadline = fs_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int last_errno = 0;
    int fd = -1;
    for (struct addrinfo *ai = a.res; ai && fd < 0; ai = ai->ai_next) {
        /* A refused connection may just be a peer that is still starting: retry until the
         * deadline, as a human would, then name the address. */
        while (fd < 0) {
            int s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (s < 0) {
                last_errno = errno;
                break;
            }
            int rc = connect(s, ai->ai_addr, ai->ai_addrlen);
            if (rc < 0 && errno == EINPROGRESS) {
                struct pollfd p = {.fd = s, .events = POLLOUT};
                int ms = remaining_ms(deadline);
                if (ms > 0 && poll(&p, 1, ms) == 1) {
                    int soerr = 0;
                    socklen_t sl = sizeof soerr;
                    getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                    rc = soerr ? -1 : 0;
                    errno = soerr;
                } else {
                    rc = -1;
                    errno = ETIMEDOUT;
                }
            }
            if (rc == 0) {
                fd = s;
                break;
            }
            last_errno = errno;
            close(s);
            if (remaining_ms(deadline) == 0 || last_errno == ETIMEDOUT)
                break;
            struct timespec pause = {0, 100 * 1000000};
            nanosleep(&pause, NULL);
        }
    }
    freeaddrinfo(a.res);
    if (fd < 0) {
        if (last_errno == ECONNREFUSED)
            return fs_fail(err, FS_EXIT_PEER,
                           "nothing is listening at %s:%d (connection refused for %d ms). Start "
                           "the server there first: `fabscope serve --bind ADDR --port %d`, or use "
                           "`fabscope run --loopback` to test this host alone",
                           a.host, a.port, timeout_ms, a.port);
        return fs_fail(err, FS_EXIT_PEER,
                       "could not reach %s:%d within %d ms: %s. Check the address, that "
                       "`fabscope serve` runs there, and that no firewall drops TCP port %d",
                       a.host, a.port, timeout_ms, strerror(last_errno ? last_errno : ETIMEDOUT),
                       a.port);
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    char desc[300];
    snprintf(desc, sizeof desc, "%s:%d", a.host, a.port);
    return fs_ctl_init(c, fd, desc);
}

int fs_ctl_listen(const char *hostport, int *bound_port, struct fs_err *err)
{
    struct ctl_address a;
    if (resolve_ctl_address(hostport, 1, &a, err))
        return -1;
    int s = socket(a.res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (s >= 0)
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (s < 0 || bind(s, a.res->ai_addr, a.res->ai_addrlen) || listen(s, 4)) {
        int e = errno;
        freeaddrinfo(a.res);
        if (s >= 0)
            close(s);
        return fs_fail(err, e == EADDRNOTAVAIL ? FS_EXIT_USAGE : FS_EXIT_PEER,
                       "cannot listen on %s:%d: %s%s", a.host, a.port, strerror(e),
                       e == EADDRINUSE ? " (another fabscope serve or program holds the port; "
                                         "pick another with --port)"
                       : e == EADDRNOTAVAIL ? " (no local interface has that address; see "
                                              "`ip -brief addr`)"
                                            : "");
    }
    freeaddrinfo(a.res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(s, (struct sockaddr *)&ss, &sl);
    *bound_port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                                : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return s;
}

int fs_ctl_accept(int listen_fd, int timeout_ms, struct fs_ctl *c, struct fs_err *err)
{
    struct pollfd p = {.fd = listen_fd, .events = POLLIN};
    int r = poll(&p, 1, timeout_ms);
    if (r <= 0)
        return fs_fail(err, FS_EXIT_PEER,
                       "no client connected within %d ms; start the client with `fabscope run "
                       "--peer THIS_HOST` (or raise --timeout)",
                       timeout_ms);
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return fs_fail(err, FS_EXIT_PEER, "accept failed: %s", strerror(errno));
    char local[64], peer[64], desc[300];
    fs_sock_addrs(fd, local, sizeof local, peer, sizeof peer);
    snprintf(desc, sizeof desc, "client %s", peer);
    return fs_ctl_init(c, fd, desc);
}

static int check_proto(const cJSON *m, const char *who, struct fs_err *err)
{
    const cJSON *proto = cJSON_GetObjectItemCaseSensitive(m, "proto");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "version");
    const char *v = cJSON_IsString(ver) ? ver->valuestring : "unknown";
    if (!cJSON_IsNumber(proto) || proto->valueint != FS_PROTO_VERSION)
        return fs_fail(err, FS_EXIT_PEER,
                       "version mismatch: this host runs fabscope %s (control protocol %d), %s "
                       "runs fabscope %s (control protocol %d). Install the same fabscope version "
                       "on both hosts",
                       FS_TOOL_VERSION, FS_PROTO_VERSION, who, v,
                       cJSON_IsNumber(proto) ? proto->valueint : -1);
    return 0;
}

static cJSON *hello(const char *role)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "hello");
    cJSON_AddNumberToObject(m, "proto", FS_PROTO_VERSION);
    cJSON_AddStringToObject(m, "tool", "fabscope");
    cJSON_AddStringToObject(m, "version", FS_TOOL_VERSION);
    cJSON_AddStringToObject(m, "role", role);
    if (strcmp(role, "client") == 0)
        cJSON_AddStringToObject(m, "service", "engine");
    else
        cJSON_AddItemToObject(m, "services", cJSON_CreateStringArray((const char *[]){"engine"}, 1));
    return m;
}

int fs_session_server(struct fs_ctl *c, int timeout_ms, struct fs_err *err)
{
    cJSON *m = hello("server");
    int rc = fs_ctl_send(c, m, timeout_ms, err);
    cJSON_Delete(m);
    if (rc)
        return -1;
    if (fs_ctl_expect(c, "hello", timeout_ms, &m, err))
        return -1;
    rc = check_proto(m, c->peer_desc, err);
    cJSON_Delete(m);
    if (rc) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "type", "error");
        cJSON_AddNumberToObject(e, "code", FS_EXIT_PEER);
        cJSON_AddStringToObject(e, "message", err->msg);
        struct fs_err ignore;
        fs_ctl_send(c, e, 1000, &ignore);
        cJSON_Delete(e);
    }
    return rc;
}

int fs_session_client(struct fs_ctl *c, int timeout_ms, struct fs_err *err)
{
    cJSON *m = NULL;
    if (fs_ctl_recv(c, timeout_ms, &m, err))
        return -1;
    const char *type = fs_ctl_type(m);
    int rc = 0;
    if (strcmp(type, "busy") == 0) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(m, "message");
        rc = fs_fail(err, FS_EXIT_PEER, "the peer %s is busy: %s. Wait for it or use another host",
                     c->peer_desc, cJSON_IsString(d) ? d->valuestring : "another run is in progress");
    } else if (strcmp(type, "hello") != 0) {
        rc = fs_fail(err, FS_EXIT_PEER,
                     "%s does not speak the fabscope protocol (first message '%s'); is it a "
                     "`fabscope serve`?",
                     c->peer_desc, type);
    } else {
        rc = check_proto(m, c->peer_desc, err);
    }
    cJSON_Delete(m);
    if (rc)
        return -1;
    m = hello("client");
    rc = fs_ctl_send(c, m, timeout_ms, err);
    cJSON_Delete(m);
    return rc;
}
