/* SPDX-License-Identifier: BSD-3-Clause */
/* UCX backend (UCP): tag, active message, put, get and 64-bit atomics over whatever UCX selects,
 * and a report of what it did select (lanes, transports, devices, protocol for the size).
 *
 * Names the user gives (UCX_TLS, UCX_NET_DEVICES, from options or from the environment) are
 * checked against the transports and devices UCX itself reports on this host before UCX sees
 * them: UCX silently ignores a device list that matches nothing in some layers (UCX #10049), and
 * fabscope must not. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "../core/backend.h"
#include "../core/datapath.h"
#include "../core/hex.h"
#include "../core/inventory.h"
#include "../core/rx_slots.h"
#include "ucx_int.h"
#include "ucx_lanes.h"

struct ucx_opts {
    char tls[256];
    char mem[8];
};

static const char *const ucx_mem_values[] = {"ucx", "user", NULL};

#define F(f) FS_FIELD(struct ucx_opts, f)
static const struct fs_option ucx_options[] = {
    {"ucx-tls", FS_OPT_STR, F(tls), 0, 0, NULL, NULL,
     "UCX transports (sets UCX_TLS), e.g. tcp | sm,self | posix,self; every name is checked "
     "against what UCX reports on this host; empty = UCX_TLS from the environment or UCX's "
     "default. --device NAME[,NAME] sets UCX_NET_DEVICES the same way",
     0},
    {"ucx-mem", FS_OPT_ENUM, F(mem), 0, 0, "ucx", ucx_mem_values,
     "who allocates the buffers of put/get/atomics: ucx (ucp_mem_map allocates, so shared-memory "
     "transports map it and copy directly, as ucx_perftest does) or user (malloc'd and "
     "registered: what an application's own buffers get, often software-emulated over sm)",
     0},
    {0},
};
#undef F

#define UCX_TAG 0x66736370ull /* "fscp": one tag, full mask, for every message of a run */
#define UCX_AM_ID 7
#define UCX_MAX_RX_POSTED 1024

struct ucx {
    struct ucx_opts o;
    int is_server;
    int block;       /* the core asked for block mode and the worker has an event fd */
    int mem_polling; /* write in lat: arrivals are seen by polling memory, which cannot block */
    int ucx_owns_buffers; /* sbuf/rbuf came from ucp_mem_map(ALLOCATE): unmapping frees them */
    enum fs_op op;
    enum fs_pattern pat;
    uint64_t bufsize, size;
    long tx_depth;
    /* Receives an empty turn needs posted before it may end at once (ucx_progress): rx_want for
     * tag, 0 otherwise; set by ucx_prepare. Mem-polling runs never end a turn early (-1 posted
     * is never reached: LONG_MAX). */
    long rx_floor;
    double timeout_s;

    struct ucx_names names; /* UCX_TLS and UCX_NET_DEVICES in effect, and where from */
    char datapath_addr[64]; /* server: our address on the client's data-path network, or "" */

    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h ep;
    ucp_request_param_t send_param; /* for every post of the current op */
    int efd;
    uint8_t *sbuf, *rbuf;
    ucp_mem_h smemh, rmemh;
    ucp_rkey_h peer_rkey;
    uint64_t peer_addr;
    uint64_t *amo_reply; /* one reply slot per outstanding atomic */
    uint64_t amo_slot;

    uint64_t tx_completed, rx_completed, tx_outstanding;
    /* Posted tagged receives, so teardown can cancel them; each request's reserved space
     * (ucp_params.request_size) holds its slot number. */
    void *rx_reqs[UCX_MAX_RX_POSTED];
    struct fs_rx_slots rx;
    uint8_t tx_seq, rx_expect; /* write-lat: the last byte of each put carries a sequence */
    ucs_status_t failure;      /* first error seen in a completion callback */
    const char *failure_what;
    int flushing;
};

/* ---- small helpers ----------------------------------------------------------------------- */

static int ucs_fail(struct fs_err *err, int code, const char *what, ucs_status_t st)
{
    return fs_fail(err, code, "ucx: %s: %s", what, ucs_status_string(st));
}

/* Before any connection: a misspelt transport or device is a usage error even with no peer. */
static int ucx_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    struct ucx *u = calloc(1, sizeof *u);
    if (!u)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    u->o = *(const struct ucx_opts *)opts;
    int rc = ucx_resolve_names(u->o.tls, spec->device, "", &u->names, err);
    free(u);
    return rc;
}

/* ---- completion callbacks ----------------------------------------------------------------- */

static void note_failure(struct ucx *u, ucs_status_t st, const char *what)
{
    if (u->failure == UCS_OK) {
        u->failure = st;
        u->failure_what = what;
    }
}

static void send_done(void *req, ucs_status_t st, void *user)
{
    struct ucx *u = user;
    if (st != UCS_OK)
        note_failure(u, st, "send/put/get/atomic completion");
    u->tx_completed++;
    ucp_request_free(req);
}

static void tag_recv_done(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    struct ucx *u = user;
    (void)info;
    int slot = (int)*(unsigned *)req;
    u->rx_reqs[slot] = NULL;
    fs_rx_slots_done(&u->rx, slot);
    if (st == UCS_OK)
        u->rx_completed++;
    else if (st != UCS_ERR_CANCELED)
        note_failure(u, st, "tagged receive");
    ucp_request_free(req);
}

static void am_data_done(void *req, ucs_status_t st, size_t len, void *user)
{
    struct ucx *u = user;
    (void)len;
    if (st == UCS_OK)
        u->rx_completed++;
    else
        note_failure(u, st, "active-message rendezvous receive");
    ucp_request_free(req);
}

/* Eager data is complete when the handler runs; rendezvous data is fetched into our buffer
 * and counts when that receive completes. */
static ucs_status_t am_handler(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param)
{
    struct ucx *u = arg;
    (void)header;
    (void)header_len;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        u->rx_completed++;
        return UCS_OK;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = am_data_done,
                             .user_data = u};
    ucs_status_ptr_t sp = ucp_am_recv_data_nbx(u->worker, data, u->rbuf, len, &p);
    if (sp == NULL)
        u->rx_completed++;
    else if (UCS_PTR_IS_ERR(sp))
        note_failure(u, UCS_PTR_STATUS(sp), "active-message rendezvous receive");
    return UCS_INPROGRESS;
}

/* ---- setup -------------------------------------------------------------------------------- */

static uint64_t features_for(enum fs_op op)
{
    switch (op) {
    case FS_OP_TAG:
        return UCP_FEATURE_TAG;
    case FS_OP_AM:
        return UCP_FEATURE_AM;
    case FS_OP_WRITE:
    case FS_OP_READ:
        return UCP_FEATURE_RMA;
    default:
        return UCP_FEATURE_AMO64;
    }
}

static int needs_rkey(enum fs_op op)
{
    return op == FS_OP_WRITE || op == FS_OP_READ || op == FS_OP_FADD || op == FS_OP_CSWAP;
}

/* Registers *buf, or with --ucx-mem ucx lets UCX allocate it (then *buf is UCX's and must not
 * be freed by us): memory UCX allocates can be mapped by its shared-memory transports, so put
 * and get copy directly instead of being emulated with active messages. */
static int map_buffer(struct ucx *u, uint8_t **buf, ucp_mem_h *memh, struct fs_err *err)
{
    const int alloc = strcmp(u->o.mem, "ucx") == 0;
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                             UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                             UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                               .address = alloc ? NULL : *buf,
                               .length = u->bufsize,
                               .flags = alloc ? UCP_MEM_MAP_ALLOCATE : 0};
    ucs_status_t st = ucp_mem_map(u->context, &mp, memh);
    if (st != UCS_OK)
        return fs_fail(err, FS_EXIT_MEASURE,
                       "ucx: cannot %s %llu bytes (ucp_mem_map): %s; if this is ENOMEM, "
                       "raise the locked-memory limit (ulimit -l)",
                       alloc ? "allocate" : "register", (unsigned long long)u->bufsize,
                       ucs_status_string(st));
    if (alloc) {
        ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
        if ((st = ucp_mem_query(*memh, &attr)) != UCS_OK)
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_mem_query", st);
        free(*buf);
        *buf = attr.address;
        u->ucx_owns_buffers = 1;
    }
    return 0;
}

static int ucx_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    struct ucx *u = calloc(1, sizeof *u);
    if (!u)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = u;
    u->o = *(const struct ucx_opts *)ctx->opts;
    u->is_server = ctx->is_server;
    u->efd = -1;
    u->failure = UCS_OK;
    if (fs_rx_slots_init(&u->rx, UCX_MAX_RX_POSTED))
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    int op = fs_op_by_name(ctx->spec->op), pat = fs_pattern_by_name(ctx->spec->pattern);
    u->op = op < 0 ? FS_OP_TAG : (enum fs_op)op;
    u->pat = pat < 0 ? FS_PAT_LAT : (enum fs_pattern)pat;
    u->tx_depth = ctx->spec->tx_depth;
    u->timeout_s = ctx->spec->timeout;
    u->mem_polling = u->op == FS_OP_WRITE && u->pat == FS_PAT_LAT;
    u->block = ctx->block && !u->mem_polling;
    if (ctx->is_server && ctx->data_local_addr)
        snprintf(u->datapath_addr, sizeof u->datapath_addr, "%s", ctx->data_local_addr);
    if (ucx_resolve_names(u->o.tls, ctx->spec->device, u->datapath_addr, &u->names, err))
        return -1;

    ucp_config_t *cfg = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        return ucs_fail(err, FS_EXIT_USAGE, "reading the UCX configuration (UCX_* variables)", st);
    if (strcmp(u->names.tls_source, "option") == 0 && (st = ucp_config_modify(cfg, "TLS", u->names.tls)) != UCS_OK) {
        ucp_config_release(cfg);
        return fs_fail(err, FS_EXIT_USAGE, "--ucx-tls %s: UCX refused it: %s", u->names.tls,
                       ucs_status_string(st));
    }
    if ((strcmp(u->names.net_devices_source, "option") == 0 ||
         strcmp(u->names.net_devices_source, "data path") == 0) &&
        (st = ucp_config_modify(cfg, "NET_DEVICES", u->names.net_devices)) != UCS_OK) {
        ucp_config_release(cfg);
        return fs_fail(err, FS_EXIT_USAGE, "--device %s: UCX refused it: %s", u->names.net_devices,
                       ucs_status_string(st));
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                                         UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                                         UCP_PARAM_FIELD_REQUEST_SIZE,
                           .features = features_for(u->op) | (u->block ? UCP_FEATURE_WAKEUP : 0),
                           .request_size = sizeof(unsigned),
                           .mt_workers_shared = 0,
                           .estimated_num_eps = 1};
    st = ucp_init(&params, cfg, &u->context);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ucx: ucp_init failed with UCX_TLS=%s UCX_NET_DEVICES=%s: %s",
                       u->names.tls, u->names.net_devices, ucs_status_string(st));
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((st = ucp_worker_create(u->context, &wp, &u->worker)) != UCS_OK)
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_create", st);
    if (u->block && (st = ucp_worker_get_efd(u->worker, &u->efd)) != UCS_OK)
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_get_efd (block mode)", st);
    if (u->op == FS_OP_AM) {
        ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                                                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                                                   UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                     .id = UCX_AM_ID,
                                     .flags = UCP_AM_FLAG_WHOLE_MSG,
                                     .cb = am_handler,
                                     .arg = u};
        if ((st = ucp_worker_set_am_recv_handler(u->worker, &hp)) != UCS_OK)
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_set_am_recv_handler", st);
    }
    /* Page-aligned so 8-byte atomics on the first word are aligned and registration is clean. */
    u->bufsize = ctx->max_size > 4096 ? ctx->max_size : 4096;
    if (posix_memalign((void **)&u->sbuf, 4096, u->bufsize) ||
        posix_memalign((void **)&u->rbuf, 4096, u->bufsize))
        return fs_fail(err, FS_EXIT_MEASURE, "ucx: cannot allocate %llu-byte buffers",
                       (unsigned long long)u->bufsize);
    if (needs_rkey(u->op) &&
        (map_buffer(u, &u->sbuf, &u->smemh, err) || map_buffer(u, &u->rbuf, &u->rmemh, err)))
        return -1;
    memset(u->sbuf, 0xa5, u->bufsize);
    memset(u->rbuf, 0, u->bufsize);
    if (u->op == FS_OP_FADD || u->op == FS_OP_CSWAP) {
        u->amo_reply = calloc((size_t)u->tx_depth, sizeof *u->amo_reply);
        if (!u->amo_reply)
            return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    }
    return 0;
}

static int ucx_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    struct ucx *u = be;
    ucp_address_t *addr = NULL;
    size_t len = 0;
    ucs_status_t st = ucp_worker_get_address(u->worker, &addr, &len);
    if (st != UCS_OK)
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_get_address", st);
    int rc = fs_json_add_hex(obj, "worker", addr, len);
    ucp_worker_release_address(u->worker, addr);
    if (rc == 0 && u->rmemh) {
        void *rk = NULL;
        size_t rklen = 0;
        if ((st = ucp_rkey_pack(u->context, u->rmemh, &rk, &rklen)) != UCS_OK)
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_rkey_pack", st);
        rc = fs_json_add_hex(obj, "rkey", rk, rklen);
        ucp_rkey_buffer_release(rk);
        uint64_t a = (uint64_t)(uintptr_t)u->rbuf;
        char h[24];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)a);
        cJSON_AddStringToObject(obj, "addr", h);
    }
    return rc ? fs_fail(err, FS_EXIT_MEASURE, "out of memory") : 0;
}

static int ucx_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct ucx *u = be;
    (void)deadline_ms; /* address-based endpoints connect lazily; the warmup completes wireup */
    size_t alen = 0;
    void *addr = fs_json_get_hex(peer, "worker", &alen);
    if (!addr)
        return fs_fail(err, FS_EXIT_PEER, "ucx: the peer sent no UCX worker address");
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                          .address = addr};
    ucs_status_t st = ucp_ep_create(u->worker, &ep, &u->ep);
    free(addr);
    if (st != UCS_OK && strstr(u->names.tls, "rc_") && !strstr(u->names.tls, "ud"))
        /* UCX says "no auxiliary transport" in its log: rc cannot wire itself up by address. */
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ucx: no usable path to the peer with UCX_TLS=%s UCX_NET_DEVICES=%s: %s "
                       "(a connected RDMA transport sets its connections up over a datagram one, "
                       "which UCX_TLS leaves out: use --ucx-tls %s,ud_verbs:aux, as UCX's own "
                       "\"rc\" alias does; ucx_perftest fails the same way)",
                       u->names.tls, u->names.net_devices, ucs_status_string(st), u->names.tls);
    if (st != UCS_OK)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ucx: no usable path to the peer with UCX_TLS=%s UCX_NET_DEVICES=%s: %s "
                       "(UCX needs a transport for active messages on both sides: e.g. "
                       "cma alone has none; add self and posix/sysv or tcp)",
                       u->names.tls, u->names.net_devices, ucs_status_string(st));
    if (needs_rkey(u->op)) {
        size_t rklen = 0;
        void *rk = fs_json_get_hex(peer, "rkey", &rklen);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(peer, "addr");
        if (!rk || !cJSON_IsString(a)) {
            free(rk);
            return fs_fail(err, FS_EXIT_PEER, "ucx: the peer sent no memory key for op %s",
                           fs_ops[u->op].name);
        }
        u->peer_addr = strtoull(a->valuestring, NULL, 16);
        st = ucp_ep_rkey_unpack(u->ep, rk, &u->peer_rkey);
        free(rk);
        if (st != UCS_OK)
            return ucs_fail(err, FS_EXIT_PEER, "unpacking the peer's memory key", st);
    }
    return 0;
}

/* ---- data path ---------------------------------------------------------------------------- */

/* Tagged receives kept posted: one per message in flight, at least 2. */
static long rx_want(const struct ucx *u)
{
    long want = u->tx_depth < UCX_MAX_RX_POSTED ? u->tx_depth : UCX_MAX_RX_POSTED;
    return want < 2 ? 2 : want;
}

static int post_receives(struct ucx *u, struct fs_err *err)
{
    const long want = rx_want(u);
    while (u->rx.posted < want) {
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                 UCP_OP_ATTR_FIELD_USER_DATA,
                                 .cb.recv = tag_recv_done,
                                 .user_data = u};
        /* Every receive takes the whole buffer: a message of any size of the run fits, so
         * receives posted for one size stay valid for the next. */
        ucs_status_ptr_t sp = ucp_tag_recv_nbx(u->worker, u->rbuf, u->bufsize, UCX_TAG,
                                               (ucp_tag_t)-1, &p);
        if (UCS_PTR_IS_ERR(sp))
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_tag_recv_nbx", UCS_PTR_STATUS(sp));
        if (sp == NULL) {
            u->rx_completed++;
            continue;
        }
        int slot = fs_rx_slots_next(&u->rx);
        *(unsigned *)sp = (unsigned)slot;
        u->rx_reqs[slot] = sp;
        fs_rx_slots_posted(&u->rx);
    }
    return 0;
}

static int ucx_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct ucx *u = be;
    u->op = op;
    u->size = size;
    u->rx_floor = u->mem_polling ? LONG_MAX : op == FS_OP_TAG ? rx_want(u) : 0;
    /* Built once, not on every post. */
    u->send_param = (ucp_request_param_t){.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                          UCP_OP_ATTR_FIELD_USER_DATA,
                                          .cb.send = send_done,
                                          .user_data = u};
    switch (op) {
    case FS_OP_WRITE:
    case FS_OP_READ:
        u->send_param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        u->send_param.memh = u->smemh;
        break;
    case FS_OP_FADD:
    case FS_OP_CSWAP: /* each post sets its own reply slot */
        u->send_param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        u->send_param.datatype = ucp_dt_make_contig(8);
        break;
    default:
        break;
    }
    if (size > u->bufsize)
        return fs_fail(err, FS_EXIT_MEASURE, "ucx: size %llu beyond the allocated buffer",
                       (unsigned long long)size);
    if (u->mem_polling) {
        /* The previous size's messages are all answered, so nothing is still landing here. */
        u->rbuf[size - 1] = 0;
        u->tx_seq = 0;
        u->rx_expect = 1;
    }
    if (op == FS_OP_TAG)
        return post_receives(u, err);
    return 0;
}

static uint8_t next_seq(uint8_t s) { return (uint8_t)(s % 255 + 1); }

static int ucx_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct ucx *u = be;
    if (u->tx_outstanding >= 65536)
        return 0;
    ucp_request_param_t *p = &u->send_param;
    ucs_status_ptr_t sp;
    const char *what;
    switch (op) {
    case FS_OP_TAG:
        what = "ucp_tag_send_nbx";
        sp = ucp_tag_send_nbx(u->ep, u->sbuf, size, UCX_TAG, p);
        break;
    case FS_OP_AM:
        what = "ucp_am_send_nbx";
        sp = ucp_am_send_nbx(u->ep, UCX_AM_ID, NULL, 0, u->sbuf, size, p);
        break;
    case FS_OP_WRITE:
        what = "ucp_put_nbx";
        if (u->mem_polling)
            u->sbuf[size - 1] = u->tx_seq = next_seq(u->tx_seq);
        sp = ucp_put_nbx(u->ep, u->sbuf, size, u->peer_addr, u->peer_rkey, p);
        break;
    case FS_OP_READ:
        what = "ucp_get_nbx";
        sp = ucp_get_nbx(u->ep, u->sbuf, size, u->peer_addr, u->peer_rkey, p);
        break;
    case FS_OP_FADD:
    case FS_OP_CSWAP: {
        what = "ucp_atomic_op_nbx";
        uint64_t *reply = &u->amo_reply[u->amo_slot++ % (uint64_t)u->tx_depth];
        static const uint64_t one = 1;
        /* cswap: compare with the value in the reply slot (0 here, so the first swap succeeds
         * and later ones fail: both cost the same round trip). */
        *reply = 0;
        p->reply_buffer = reply;
        sp = ucp_atomic_op_nbx(u->ep, op == FS_OP_FADD ? UCP_ATOMIC_OP_ADD : UCP_ATOMIC_OP_CSWAP,
                               &one, 1, u->peer_addr, u->peer_rkey, p);
        break;
    }
    default:
        return fs_fail(err, FS_EXIT_USAGE, "ucx: op %s is not supported", fs_ops[op].name);
    }
    if (UCS_PTR_IS_ERR(sp))
        return fs_fail(err, FS_EXIT_MEASURE, "ucx: %s (%llu bytes) failed: %s", what,
                       (unsigned long long)size, ucs_status_string(UCS_PTR_STATUS(sp)));
    if (sp == NULL)
        u->tx_completed++;
    else
        u->tx_outstanding++;
    /* The message is on its way: now is the time to post receives again. */
    if (op == FS_OP_TAG && u->rx.posted < rx_want(u) && post_receives(u, err))
        return -1;
    return 1;
}

static int report_failure(struct ucx *u, struct fs_err *err)
{
    int code = u->failure == UCS_ERR_CONNECTION_RESET || u->failure == UCS_ERR_ENDPOINT_TIMEOUT ||
                       u->failure == UCS_ERR_UNREACHABLE
                   ? FS_EXIT_PEER
                   : FS_EXIT_MEASURE;
    return fs_fail(err, code, "ucx: %s failed: %s", u->failure_what,
                   ucs_status_string(u->failure));
}

/* Inline test, out-of-line report: this runs on every polling turn. */
static inline int check_failure(struct ucx *u, struct fs_err *err)
{
    return u->failure == UCS_OK ? 0 : report_failure(u, err);
}

/* What a progress pass did beyond ucp_worker_progress's count `did`: memory arrivals, and the
 * failure a callback noted. Returns the total, or -1. */
static int progress_seen(struct ucx *u, unsigned did, struct fs_err *err)
{
    if (u->mem_polling && u->size) {
        volatile uint8_t *last = &u->rbuf[u->size - 1];
        if (*last == u->rx_expect) {
            u->rx_completed++;
            u->rx_expect = next_seq(u->rx_expect);
            did++;
        }
    }
    return check_failure(u, err) ? -1 : (int)did;
}

/* One pass: progress the worker and see memory arrivals. Returns what ucp_worker_progress did
 * (0 = nothing: the worker may be armed), or -1. */
static int progress_once(struct ucx *u, struct fs_err *err)
{
    return progress_seen(u, ucp_worker_progress(u->worker), err);
}

/* Everything but the empty busy turn (ucx_progress); out of line so that turn saves no registers. */
static __attribute__((noinline)) int progress_rest(struct ucx *u, unsigned worker_did, int wait_ms,
                                                   struct fs_events *ev, struct fs_err *err)
{
    int did = progress_seen(u, worker_did, err);
    if (did < 0)
        return -1;
    /* Block mode: UCX's rule is to arm the worker only after a progress pass that found
     * nothing. A pass that did something goes back to the core first, to be counted: draining
     * the worker here made a whole bibw phase one receive event (no bandwidth could be
     * timed). BUSY from the arm means events raced in: go round. */
    if (!did && !u->tx_completed && !u->rx_completed && wait_ms > 0 && u->block) {
        ucs_status_t st = ucp_worker_arm(u->worker);
        if (st == UCS_OK) {
            struct pollfd pfd = {.fd = u->efd, .events = POLLIN};
            poll(&pfd, 1, wait_ms);
        } else if (st != UCS_ERR_BUSY) {
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_arm", st);
        }
        if (progress_once(u, err) < 0)
            return -1;
    }
    /* Receives are topped up on turns that completed nothing, or when half are used: after a
     * completion the core is about to time it or answer it, and a ucp_tag_recv_nbx there would
     * sit inside every round trip (ucx_perftest too posts its receive after the send). */
    if (u->op == FS_OP_TAG && (!u->rx_completed || u->rx.posted < rx_want(u) / 2) &&
        u->rx.posted < rx_want(u) && post_receives(u, err))
        return -1;
    ev->tx_done += u->tx_completed;
    ev->rx_done += u->rx_completed;
    u->tx_outstanding -= u->tx_completed < u->tx_outstanding ? u->tx_completed : u->tx_outstanding;
    u->tx_completed = u->rx_completed = 0;
    return 0;
}

/* The empty busy-poll turn, the one a waiting side repeats, is a tight loop here: the worker did
 * nothing, no sleep is asked for, no completion or failure waits, every receive is posted.
 * (Counted with bench/instr.py: with the rest of the turn inline it cost ~56 instructions on top
 * of ucp_worker_progress's own ~95, ucx_perftest's loop ~13.) */
static int ucx_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct ucx *u = be;
    ucp_worker_h const worker = u->worker;
    unsigned did = ucp_worker_progress(worker);
    if (wait_ms > 0)
        return progress_rest(u, did, wait_ms, ev, err);
    /* Busy: repeat the empty pass here, up to the -wait_ms passes the core allows. */
    unsigned more = wait_ms < 0 ? (unsigned)-wait_ms - 1 : 0, spun = 0;
    while (!did && !(u->tx_completed | u->rx_completed) && u->failure == UCS_OK &&
           u->rx.posted >= u->rx_floor) {
        if (spun == more) {
            ev->turns += spun;
            return 0;
        }
        spun++;
        did = ucp_worker_progress(worker);
    }
    ev->turns += spun;
    return progress_rest(u, did, wait_ms, ev, err);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void flush_done(void *req, ucs_status_t st, void *user)
{
    struct ucx *u = user;
    if (st != UCS_OK)
        note_failure(u, st, "endpoint flush");
    u->flushing = 0;
    ucp_request_free(req);
}

/* Remote completion of every put/get/atomic before the core stops the clock: a completed put
 * only means the source buffer may be reused. */
static int ucx_flush(void *be, struct fs_err *err)
{
    struct ucx *u = be;
    if (!needs_rkey(u->op))
        return 0;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = flush_done,
                             .user_data = u};
    u->flushing = 1;
    ucs_status_ptr_t sp = ucp_ep_flush_nbx(u->ep, &p);
    if (UCS_PTR_IS_ERR(sp))
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_ep_flush_nbx", UCS_PTR_STATUS(sp));
    if (sp == NULL)
        u->flushing = 0;
    /* A deadline, not a measurement: the flush waits on the peer's progress. */
    double end = now_s() + u->timeout_s;
    unsigned turns = 0;
    while (u->flushing) {
        ucp_worker_progress(u->worker);
        if (check_failure(u, err))
            return -1;
        if (++turns % 4096 == 0 && now_s() > end)
            return fs_fail(err, FS_EXIT_PEER,
                           "ucx: flushing puts/gets to the peer did not finish within %.1f s "
                           "(peer gone or not progressing)",
                           u->timeout_s);
    }
    return 0;
}

/* ---- what UCX selected -------------------------------------------------------------------- */

static void ucx_describe(void *be, cJSON *o)
{
    struct ucx *u = be;
    cJSON_AddStringToObject(o, "kind", "ucx");
    if (needs_rkey(u->op))
        cJSON_AddStringToObject(o, "rma_memory",
                                u->ucx_owns_buffers ? "allocated by UCX (ucp_mem_map ALLOCATE)"
                                                    : "user memory, registered with ucp_mem_map");
    cJSON_AddStringToObject(o, "ucx_version", ucp_get_version_string());
    cJSON_AddStringToObject(o, "api", u->op == FS_OP_WRITE ? "put (ucp_put_nbx)"
                                      : u->op == FS_OP_READ ? "get (ucp_get_nbx)"
                                      : u->op == FS_OP_TAG  ? "tag (ucp_tag_send_nbx)"
                                      : u->op == FS_OP_AM   ? "am (ucp_am_send_nbx)"
                                                            : "atomic (ucp_atomic_op_nbx)");
    cJSON *req = cJSON_AddObjectToObject(o, "requested");
    cJSON_AddStringToObject(req, "UCX_TLS", u->names.tls);
    cJSON_AddStringToObject(req, "UCX_TLS_source", u->names.tls_source);
    cJSON_AddStringToObject(req, "UCX_NET_DEVICES", u->names.net_devices);
    cJSON_AddStringToObject(req, "UCX_NET_DEVICES_source", u->names.net_devices_source);
    cJSON_AddStringToObject(o, "progress",
                            u->block       ? "block (ucp_worker_arm + event fd)"
                            : u->mem_polling ? "busy (write latency polls memory, which cannot block)"
                                           : "busy (ucp_worker_progress)");
    if (!u->ep) {
        cJSON_AddNullToObject(o, "lanes");
        return;
    }
    fs_ucx_describe_ep_op(u->ep, u->size, u->op, o);
}

static void ucx_teardown(void *be)
{
    struct ucx *u = be;
    if (!u)
        return;
    if (u->peer_rkey)
        ucp_rkey_destroy(u->peer_rkey);
    if (u->ep) {
        /* Force close: the peer may already be gone, and a graceful close would wait for it. */
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t sp = ucp_ep_close_nbx(u->ep, &p);
        double end = now_s() + 1.0;
        if (sp && !UCS_PTR_IS_ERR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS && now_s() < end)
                ucp_worker_progress(u->worker);
            ucp_request_free(sp);
        }
    }
    if (u->worker && u->rx.posted > 0) {
        /* Cancelled receives complete (with UCS_ERR_CANCELED) in the next progress calls. */
        for (unsigned i = 0; i < UCX_MAX_RX_POSTED; i++)
            if (u->rx_reqs[i])
                ucp_request_cancel(u->worker, u->rx_reqs[i]);
        for (int i = 0; i < 1000 && u->rx.posted > 0; i++)
            ucp_worker_progress(u->worker);
    }
    if (u->smemh)
        ucp_mem_unmap(u->context, u->smemh);
    if (u->rmemh)
        ucp_mem_unmap(u->context, u->rmemh);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->context)
        ucp_cleanup(u->context);
    if (!u->ucx_owns_buffers) {
        free(u->sbuf);
        free(u->rbuf);
    }
    free(u->amo_reply);
    fs_rx_slots_release(&u->rx);
    free(u);
}

const struct fs_backend_ops fs_backend_ucx = {
    .abi = FS_BACKEND_ABI,
    .name = "ucx",
    .summary = "UCX (UCP): tag, active message, put, get, atomics; reports the selected lanes",
    .ops = FS_BIT(FS_OP_TAG) | FS_BIT(FS_OP_AM) | FS_BIT(FS_OP_WRITE) | FS_BIT(FS_OP_READ) |
           FS_BIT(FS_OP_FADD) | FS_BIT(FS_OP_CSWAP),
    .patterns = FS_PATTERNS_ALL,
    .options = ucx_options,
    .options_size = sizeof(struct ucx_opts),
    .device_list = 1,
    FS_BACKEND_HOOKS(ucx),
    .flush = ucx_flush,
};
