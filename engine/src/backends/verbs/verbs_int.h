/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: libibverbs RC/UC/UD queue pairs (RoCE, InfiniBand, iWARP), connected either by
 * exchanging QPN/PSN/GID/rkey over the control channel or through rdma_cm (--cm).
 *
 * What the core sees: post() = one work request, progress() = reaped completions. Everything
 * else here exists to make the device, port and GID that carried the bytes explicit, and to turn
 * the usual verbs failures (status 12, memlock, wrong GID) into sentences that say what to do.
 *
 * Buffer layout (one MR, page aligned):
 *   [ tx region: max_size ][ rx region: GRH (40 B, UD only) + max_size ]
 * Sends and writes come from tx; receives, read destinations and atomic results land in rx.
 * Remote writes and atomics target the peer's rx region, reads read the peer's tx region, so a
 * read test never races with a write into the same bytes.
 *
 * This header is private to the backend; each file holds one job:
 *   options.c    the backend's options            names.c      enum names, GID text, JSON fields
 *   verify.c     --verify payload patterns        select.c     device, port, GID; memlock
 *   qp.c         resources, address exchange, QP INIT/RTR/RTS
 *   cm.c         rdma_cm (--cm; cm_none.c where librdmacm is missing)
 *   data.c       posting, completions, per-size preparation
 *   describe.c   the result's description, teardown
 *   multi.c      several devices (--device A,B) and the backend ops
 *   inventory.c  --inventory-json */
#ifndef FS_VERBS_INT_H
#define FS_VERBS_INT_H
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* librdmacm's types, used only through pointers outside cm.c (verbs builds without it). */
struct rdma_cm_id;
struct rdma_event_channel;

#include "../../core/backend.h"
#include "../../core/clock.h"
#include "../../core/ctl.h"
#include "../../core/datapath.h"
#include "../../core/inventory.h"

#define VB_MAX_QPS 64
#define VB_MAX_DEVS 8 /* --device A,B,...: one verbs engine per device, QPs on each */
#define VB_GRH 40          /* UD receives start with the 40-byte global route header */
#define VB_QKEY 0x11111111u
#define VB_MAX_GIDS 4096
/* Entries one ibv_query_gid_table call may ask for: the kernel's ioctl attribute length is 16
 * bits, so 4096 entries of 32 bytes fail with EINVAL and left us querying 1024 indexes one by one
 * (0.35 s of ioctls per engine start on an emulated rxe guest). Counts valid entries only: two
 * ports of 255 RoCE GIDs fit. */
#define VB_GID_QUERY_MAX (65535 / sizeof(struct ibv_gid_entry))
#define VB_POLL_BATCH 32
/* A CQ event is acknowledged in batches: ibv_ack_cq_events takes a mutex. */
#define VB_ACK_EVERY 64
#define VB_READ_SEED 0x5eedu

/* ---- options (options.c) ------------------------------------------------------------------ */

struct vb_opts {
    char qp_type[8];
    long inline_size;
    long cq_mod;
    long qps;
    long mtu;
    long ib_port;
    long gid_index;
    long rx_depth;
    long sl;
    int cm;
    int verify;
};

extern const struct fs_option vb_options[];

/* ---- state ---------------------------------------------------------------------------------- */

enum vb_svc { VB_RC, VB_UC, VB_UD };

struct vb_qp {
    struct ibv_qp *qp;
    struct rdma_cm_id *id; /* --cm: the connection this QP belongs to */
    uint32_t psn;
    uint32_t peer_qpn, peer_psn;
    uint64_t unsig_ops;    /* core operations posted unsignaled since the last signaled WR */
    uint64_t sig_inflight; /* signaled WRs not completed yet */
    uint64_t slots;        /* send queue entries in use */
    uint64_t posted_ops;   /* core operations ever posted on this QP */
    uint64_t completed_ops; /* core operations ever completed on this QP */
    /* posted_ops when this phase began. A send queue completes in order, so the first
     * completions after a phase begins may still be the previous phase's (a ping-pong ends a
     * sample when the answer arrives, not when its own request completes): the phase's count
     * starts past them. */
    uint64_t phase_first_op;
    uint64_t rx_msgs; /* this phase: messages received on this QP */
    uint32_t rx_owed; /* receives consumed and not posted again yet (see vb.defer_rx) */
};

struct vb {
    struct vb_opts o;
    int is_server;
    /* --cm in a keyed session (serve): the connection request carries the session's token
     * (fs_data_token) as its private data; the server rejects and counts requests without it. */
    int cm_bound;
    uint8_t cm_token[FS_DATA_TOKEN_LEN];
    unsigned cm_strangers;
    enum fs_op op;
    enum fs_pattern pat;
    enum vb_svc svc;
    uint64_t max_size;
    long tx_depth;
    long window; /* this device's share of the core's window (tx_depth over the devices) */
    int timeout_ms;

    /* device */
    struct ibv_context **cm_list; /* --cm: librdmacm's contexts (not ours to close) */
    struct ibv_context *ctx;
    int own_ctx;
    char dev_name[IBV_SYSFS_NAME_MAX];
    char dev_sel[256];
    struct ibv_device_attr dattr;
    int port;
    char port_sel[128];
    struct ibv_port_attr pattr;
    int transport; /* enum ibv_transport_type */

    /* addressing */
    int gid_index;
    int gid_type; /* enum ibv_gid_type, -1 unknown */
    union ibv_gid gid;
    int use_grh;
    char gid_str[INET6_ADDRSTRLEN];
    char gid_ip[INET6_ADDRSTRLEN]; /* IPv4 of an IPv4-mapped RoCE GID, "" otherwise */
    char gid_sel[256];
    char netdev[IF_NAMESIZE + 1];

    /* memory */
    uint8_t *buf;
    size_t buf_len, rx_off, rx_len;
    struct ibv_mr *mr;
    unsigned long long memlock_limit; /* bytes, ULLONG_MAX = unlimited */
    int cap_ipc_lock;

    /* queues */
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    int cq_armed;
    unsigned unacked;
    struct vb_qp qp[VB_MAX_QPS];
    int nqp;
    uint32_t sq_depth, rx_depth, cq_size;
    uint32_t inline_eff;
    uint64_t cq_mod; /* the moderation used: --cq-mod, or its auto value (qp.c) */
    int needs_recv;
    /* A ping-pong posts the receives it consumed after its next send, not before it: the
     * answer (or the next request) leaves one ibv_post_recv sooner on both sides (perftest
     * posts it first). Set with rx_depth >= 2 only (qp.c). */
    int defer_rx;
    uint32_t rx_owed; /* the sum of qp[].rx_owed */
    struct ibv_ah *ah;

    /* peer */
    int connected;
    uint64_t peer_rx_addr, peer_tx_addr;
    uint32_t peer_rkey;
    union ibv_gid peer_gid;
    uint16_t peer_lid;
    int peer_mtu;
    uint32_t peer_rd_atom;
    int mtu_used; /* bytes */
    char mtu_sel[128];
    uint32_t rd_atom;

    /* rdma_cm */
    struct rdma_event_channel *ech;
    struct rdma_cm_id *listen_id;
    int cm_pending; /* client: rdma_connect sent, ESTABLISHED not seen yet */
    char cm_local[INET6_ADDRSTRLEN + 8], cm_peer[INET6_ADDRSTRLEN + 8];

    /* per size */
    uint64_t size;
    uint64_t rr;
    uint64_t tx_seq, rx_seq;
    uint64_t unreported; /* posted core operations whose completion the core has not seen */
    uint64_t tail_flushes;
    int mem_poll; /* write lat: arrivals are seen by polling the last byte of the rx region */
    int passive_target; /* target of read/atomics/write-bw: no completion can ever arrive here */
};

/* The payload pattern of message `seq`: position-dependent so a shifted or truncated copy
 * fails too, sequence-dependent so a stale buffer fails. */
static inline uint8_t pat(uint64_t seq, uint64_t i)
{
    return (uint8_t)((seq + 1) * 167u ^ (i * 31u + (i >> 8) * 7u));
}

/* Last byte of a write in lat: never 0 (the cleared state) and never the previous value. */
static inline uint8_t marker(uint64_t seq) { return (uint8_t)(seq % 255u + 1u); }


/* wr_id layout: bit 63 = receive, bit 62 = tail flush, bits 32..39 = QP index, low 32 = number
 * of core operations this completion accounts for. */
#define WR_RECV (1ull << 63)
#define WR_FLUSH (1ull << 62)
#define WR_QP(i) ((uint64_t)(i) << 32)
#define WR_QPI(id) ((int)(((id) >> 32) & 0xff))
#define WR_OPS(id) ((id) & 0xffffffffull)


/* ---- names.c -------------------------------------------------------------------------------- */

const char *vb_svc_name(enum vb_svc s);
int vb_mtu_bytes(enum ibv_mtu m);
enum ibv_mtu vb_mtu_enum(int bytes);
const char *vb_gid_type_name(int t);
/* The port's active width x speed in Gb/s (0 when unknown), its lanes and speed name ("EDR"). */
double vb_port_rate(const struct ibv_port_attr *pa, int *lanes, const char **speed);
const char *vb_link_layer_name(int ll);
const char *vb_port_state_name(enum ibv_port_state st);
int vb_gid_is_zero(const union ibv_gid *g);
int vb_gid_is_ipv4(const union ibv_gid *g, char *ip, size_t len);
void vb_gid_text(const union ibv_gid *g, char *out, size_t len);
void vb_hex_u64(char *out, size_t len, uint64_t x);
int vb_parse_hex_u64(const cJSON *o, const char *key, uint64_t *out);
int vb_get_num(const cJSON *o, const char *key, double *out);

/* ---- verify.c ------------------------------------------------------------------------------- */

void vb_fill_pat(uint8_t *p, uint64_t n, uint64_t seq);
int vb_check_pat(const uint8_t *p, uint64_t n, uint64_t seq, const char *what,
                 struct fs_err *err);

/* ---- select.c ------------------------------------------------------------------------------- */

void vb_port_netdev(struct ibv_context *c, int port, char *out, size_t len);
void vb_netdev_by_gid_mac(const union ibv_gid *gid, char *nd, size_t len);
void vb_device_ipv4(struct vb *v, char *ip, size_t len);
void vb_list_devices(char *buf, size_t len);
int vb_no_devices(struct fs_err *err, int why);
int vb_select_device(struct vb *v, const char *want, struct fs_err *err);
int vb_select_port(struct vb *v, struct fs_err *err);
ssize_t vb_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *all, size_t max);
int vb_select_gid(struct vb *v, struct fs_err *err);
int vb_check_memlock(struct vb *v, size_t need, struct fs_err *err);
int vb_check_name(const char *want, struct fs_err *err);

/* ---- qp.c ----------------------------------------------------------------------------------- */

int vb_create_qps(struct vb *v, struct fs_err *err);
int vb_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err);
int vb_local_address(void *be, cJSON *o, struct fs_err *err);
int vb_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err);

/* ---- cm.c (cm_none.c without librdmacm) ------------------------------------------------------ */

/* The --cm half of select_device: 0 = picked, 1 = no such device (*n = how many there are), -1 =
 * error set. */
int vb_cm_select_device(struct vb *v, const char *want, int *n, struct fs_err *err);
/* rdma_create_qp for QP i: 0 or an errno. */
int vb_cm_create_qp(struct vb *v, int i, struct ibv_qp_init_attr *a);
/* setup(): the event channel, and on the server the listening id on the device's address. */
int vb_cm_setup(struct vb *v, const char *bind, struct fs_err *err);
/* local_address(): the server's rdma_cm address and port. */
void vb_cm_local_address(struct vb *v, cJSON *o);
/* connect(): the client resolves and connects, the server accepts. */
int vb_cm_connect(struct vb *v, const cJSON *peer, int deadline_ms, struct fs_err *err);
/* prepare(): the ESTABLISHED event both sides wait for after the core's handshake. */
int vb_cm_established(struct vb *v, struct fs_err *err);
/* teardown(): QP i's connection; the listening id and the event channel; librdmacm's devices. */
void vb_cm_close_qp(struct vb *v, int i);
void vb_cm_close(struct vb *v);
void vb_cm_free_devices(struct vb *v);

/* ---- data.c --------------------------------------------------------------------------------- */

int vb_post_recvs(struct vb *v, struct vb_qp *q, int qi, uint32_t n, struct fs_err *err);
int vb_repost_owed(struct vb *v, struct fs_err *err);
int vb_progress_now(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err);
int vb_arm_cq(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err);
int vb_take_cq_event(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err);
int vb_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err);
int vb_settle(void *be, struct fs_err *err);
int vb_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err);
int vb_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err);

/* ---- describe.c ----------------------------------------------------------------------------- */

int vb_lossy(void *be);
void vb_describe(void *be, cJSON *o);
void vb_teardown(void *be);
void vb_phase_begin(void *be);

#endif
