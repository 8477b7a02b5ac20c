/* SPDX-License-Identifier: BSD-3-Clause */
/* Control channel between two engines (and `fabscope serve`): TCP, length-prefixed JSON frames
 * (4-byte big-endian length, then a JSON object with a string "type"), a size cap, and a
 * deadline on every read. */
#ifndef FS_CTL_H
#define FS_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "fs.h"

struct cJSON;

#define FS_CTL_MAX_FRAME (256u * 1024u)
#define FS_CTL_DEFAULT_PORT 18515

#define FS_CTL_MAC_LEN 32

struct fs_ctl {
    int fd;
    uint8_t *in;
    size_t in_len, in_cap;
    char peer_desc[300]; /* "HOST:PORT" for messages */
    /* A session opened by `fabscope serve` with a key: after the welcome every frame carries
     * HMAC-SHA256(session key, direction, sequence number, body) after its body. */
    int mac_on;
    uint8_t mac_key[32];
    char tx_dir, rx_dir;
    uint64_t tx_seq, rx_seq;
};

/* Every frame from now on is authenticated with `key` (32 bytes, derived by the front end from
 * the shared key and both nonces: auth.py session_key); is_client: this end sent the hello. */
void fs_ctl_set_session_key(struct fs_ctl *c, const uint8_t key[32], int is_client);
/* HMAC-SHA256 of one frame into out: 0, or -1 when libcrypto fails (no MAC: fail closed). */
int fs_ctl_frame_mac(const uint8_t key[32], char direction, uint64_t seq, const uint8_t *body,
                     size_t n, uint8_t out[32]);
/* The token that binds a data connection of `backend` to the session (its first bytes, sent by
 * the client, checked by the server before it takes the connection): HMAC(session key, 'd', 0,
 * "fabscope-data/1 " backend). Nobody without the session key can make it. */
#define FS_DATA_TOKEN_LEN 32
void fs_data_token(const uint8_t key[32], const char *backend, uint8_t out[FS_DATA_TOKEN_LEN]);

/* The network-input parser (fuzzed). Returns 1 and *msg when a whole valid frame sits at the
 * start of buf (*consumed = its length), 0 when more bytes are needed, -1 on a bad frame. */
int fs_ctl_parse_frame(const uint8_t *buf, size_t len, size_t *consumed, struct cJSON **msg,
                       struct fs_err *err);

int fs_ctl_init(struct fs_ctl *c, int fd, const char *peer_desc);
void fs_ctl_close(struct fs_ctl *c);
int fs_ctl_send(struct fs_ctl *c, const struct cJSON *msg, int timeout_ms, struct fs_err *err);
/* Waits up to timeout_ms for one frame. */
int fs_ctl_recv(struct fs_ctl *c, int timeout_ms, struct cJSON **msg, struct fs_err *err);
/* Sleeps until control bytes can be read or timeout_ms passed; takes nothing. Call it after
 * fs_ctl_poll returned 0 (no whole frame is buffered then). */
void fs_ctl_wait_readable(const struct fs_ctl *c, int timeout_ms);
/* Non-blocking: 1 = a frame was ready, 0 = none yet, -1 = error (peer gone, bad frame). */
int fs_ctl_poll(struct fs_ctl *c, struct cJSON **msg, struct fs_err *err);
/* Receive and require `type`; a peer "error" frame becomes our error with the peer's words. */
int fs_ctl_expect(struct fs_ctl *c, const char *type, int timeout_ms, struct cJSON **msg,
                  struct fs_err *err);
const char *fs_ctl_type(const struct cJSON *msg);

int fs_split_hostport(const char *text, char *host, size_t host_len, int *port, int def_port);
int fs_ctl_connect(const char *hostport, int timeout_ms, struct fs_ctl *c, struct fs_err *err);
int fs_ctl_listen(const char *hostport, int *bound_port, struct fs_err *err);
int fs_ctl_accept(int listen_fd, int timeout_ms, struct fs_ctl *c, struct fs_err *err);

/* Session layer: the server greets (or says busy), the client answers; protocol versions must
 * match exactly and a mismatch names both. */
int fs_session_server(struct fs_ctl *c, int timeout_ms, struct fs_err *err);
int fs_session_client(struct fs_ctl *c, int timeout_ms, struct fs_err *err);

/* Numeric addresses of both ends of a connected socket. */
void fs_sock_addrs(int fd, char *local, size_t llen, char *peer, size_t plen);
/* "HOST:PORT" (numeric; "[v6]:PORT") of the far end of a connected socket; -1 if it is none. */
int fs_sock_peer_desc(int fd, char *buf, size_t len);

#endif
