/* SPDX-License-Identifier: BSD-3-Clause */
/* The data path of the stream-socket backends (tcp: kernel sockets; rsocket: librdmacm's sockets
 * over RDMA), written once: one send per message, one whole message handed to the core per
 * arrival, the deadline-bounded waits of pollwait.h, the addresses the records report. A backend
 * differs only in the calls it names in a struct fs_stream_calls. */
#ifndef FS_STREAM_IO_H
#define FS_STREAM_IO_H

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "../core/backend.h"
#include "../core/ctl.h"
#include "../core/pollwait.h"

struct fs_stream;
struct fs_stream_calls {
    const char *backend; /* "tcp": the first word of every message */
    const char *conn;    /* what messages call the connection: "data connection" */
    const char *fn;      /* prefix of the call names in messages: "r" for rsend, rpoll, ... */
    int send_flags;      /* with MSG_DONTWAIT, which every send has */
    ssize_t (*send)(int fd, const void *buf, size_t len, int flags);
    ssize_t (*recv)(int fd, void *buf, size_t len, int flags);
    fs_poll_fn poll; /* through fs_pollwait only: see pollwait.h */
    int (*close)(int fd);
    /* getsockname (local) or getpeername */
    int (*name)(int fd, int local, struct sockaddr *sa, socklen_t *len);
    int (*accept)(int fd, struct sockaddr *sa, socklen_t *len);
    /* Made ready for the data path once accepted (close-on-exec, non-blocking): 0, or -1 with err. */
    int (*accepted)(struct fs_stream *s, int fd, struct fs_err *err);
    const char *no_client_hint; /* why a client may never connect: "a firewall between the hosts?" */
};

/* The first member of a stream backend's private struct (a static assertion there says so): the
 * hooks below take the backend's pointer as a pointer to it. */
struct fs_stream {
    const struct fs_stream_calls *c;
    int is_server;
    int listen_fd, fd;
    struct fs_pollwait pw; /* every wait with a deadline; opened on first use, or by the backend */
    uint8_t *txbuf, *rxbuf;
    uint64_t size;
    uint64_t tx_pending, tx_off, tx_completed;
    uint64_t rx_partial;
    /* Set by the backend at setup: a wait for data may sleep in recv() itself, bounded by
     * SO_RCVTIMEO, instead of in poll() (see recv_may_wait in stream_io.c). 0 from fs_stream_new. */
    int wait_in_recv;
    /* The descriptor is blocking with SO_RCVTIMEO = this many ms (0: non-blocking, as set up). */
    int recv_wait_ms;
    /* Set by the backend at setup: a receiver that sleeps in recv() asks the kernel to wake it
     * only when this many bytes of the message it waits for are there, or the rest of the message,
     * or a quarter of the receive buffer, whichever is least (SO_RCVLOWAT; set_rcvlowat in
     * stream_io.c). 0 or 1: every arrival wakes it, the kernel's default. rcvlowat_now: the value
     * last set on the socket (0: none); rcvlowat_most: the largest set, what a whole message waited
     * for (the record's, 0: none); rcvbuf_seen: SO_RCVBUF when last read (0: not yet). */
    uint64_t rcvlowat;
    int rcvlowat_now;
    int rcvlowat_most;
    int rcvbuf_seen;
    /* In a session `fabscope serve` authenticated: the data connection's first bytes are this
     * token (fs_data_token of the session key and the backend's name), sent by the client and
     * checked by the server before it takes the connection. */
    int bound;
    uint8_t token[FS_DATA_TOKEN_LEN];
    unsigned strangers; /* connections the server closed for want of the token */
};

/* The setup hook's first step: a zeroed backend struct of `size` bytes (it starts with its
 * struct fs_stream) in *out, the stream with no descriptor, timer or buffer yet (the teardown
 * hook accepts that state). NULL when out of memory (err says so). */
void *fs_stream_new(size_t size, const struct fs_stream_calls *c, const struct fs_be_ctx *ctx,
                    void **out, struct fs_err *err);
/* The server's data connection: the first one on s->listen_fd within deadline_ms that carries the
 * session's token (fs_stream_token_ok; strangers are closed and the wait goes on), made ready by
 * c->accepted, into s->fd; the listening socket is then closed. listen_addr is for messages. */
int fs_stream_accept(struct fs_stream *s, const char *listen_addr, int deadline_ms,
                     struct fs_err *err);
/* The data connection's binding to the session (nothing to do outside one). Server: whether the
 * fresh connection fd starts with the token (read within ms; a stranger is counted and the caller
 * closes it and waits on). Client: sends the token on its fresh connection (0, or -1 with err). */
int fs_stream_token_ok(struct fs_stream *s, int fd, int ms);
int fs_stream_send_token(struct fs_stream *s, int fd, int ms, struct fs_err *err);
/* "<backend>: <what>: strerror(errno)"; returns -1. */
int fs_stream_fail_errno(const struct fs_stream *s, struct fs_err *err, int code, const char *what);
/* Buffers for messages up to max_size (64 KiB at least), the send side filled. */
int fs_stream_buffers(struct fs_stream *s, uint64_t max_size, struct fs_err *err);

/* The server's listen address (--bind, else the network of the client's --device, else where
 * the client reached us: data follows the control path) into out, and its addrinfo. */
int fs_stream_listen_info(const struct fs_stream *s, const struct fs_be_ctx *ctx, const char *bind,
                          char *out, size_t len, struct addrinfo **res, struct fs_err *err);
/* The server's data address from its local_address (the client side); *addr and *port point
 * into peer. */
int fs_stream_peer_info(const struct fs_stream *s, const struct cJSON *peer, struct addrinfo **res,
                        const char **addr, int *port, struct fs_err *err);
/* "addr:port" ("[v6]:port") of the connection's local or peer end; the bare address into ip. */
void fs_stream_name(const struct fs_stream *s, int local, char *out, size_t len, char *ip,
                    size_t ip_len);
/* The description's first fields: kind (c->backend), whether the data connection is bound to the
 * session, the strangers the server rejected. Returns whether there is a connection to describe. */
int fs_stream_describe_start(const struct fs_stream *s, struct cJSON *o);
/* fs_pollwait on fd through c->poll: revents, 0 at the deadline, -1 on an error. */
int fs_stream_wait(struct fs_stream *s, int fd, short events, int ms);

/* The hooks every stream backend shares (see backend.h), on the connection s->fd.
 * local_address: the listening socket's address on the server, the connection's on the client
 * (nothing before it connects). teardown: closes what is open (c->close), frees the buffers and
 * the backend's struct. */
int fs_stream_local_address(void *be, struct cJSON *obj, struct fs_err *err);
int fs_stream_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err);
int fs_stream_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err);
int fs_stream_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err);
void fs_stream_teardown(void *be);

/* The fields of a struct fs_backend_ops that the stream data path fills: what it can measure
 * (send/receive; latency, bandwidth, bidirectional bandwidth) and the hooks above. */
#define FS_STREAM_BACKEND_OPS                                                                      \
    .abi = FS_BACKEND_ABI, .ops = FS_BIT(FS_OP_SEND),                                              \
    .patterns = FS_PATTERNS_ALL,                                                                   \
    .local_address = fs_stream_local_address, .prepare = fs_stream_prepare,                        \
    .post = fs_stream_post, .progress = fs_stream_progress, .teardown = fs_stream_teardown

/* "eth0, lo, ..." for messages: the network devices of this host. */
void fs_stream_netdevs(char *buf, size_t len);

#endif
