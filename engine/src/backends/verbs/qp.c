/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: queue pairs: setup of the device resources, the address exchange and
 * the INIT/RTR/RTS transitions. */
#define _GNU_SOURCE
#include "verbs_int.h"

#include "hex.h"

/* ---- setup ---------------------------------------------------------------------------------- */

static int check_service(struct vb *v, struct fs_err *err)
{
    const char *op = fs_ops[v->op].name;
    if (v->svc == VB_UD && v->op != FS_OP_SEND)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by service UD: --op %s (UD carries only send/receive; RDMA "
                       "write, write-with-immediate, read and atomics need --qp-type rc%s)",
                       op, v->op == FS_OP_WRITE || v->op == FS_OP_WRITE_IMM ? " or uc" : "");
    if (v->svc == VB_UC &&
        (v->op == FS_OP_READ || v->op == FS_OP_FADD || v->op == FS_OP_CSWAP))
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by service UC: --op %s (UC has send, write and write_imm; "
                       "reads and atomics need --qp-type rc)",
                       op);
    if ((v->op == FS_OP_FADD || v->op == FS_OP_CSWAP) && v->dattr.atomic_cap == IBV_ATOMIC_NONE)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by device %s: --op %s (it reports atomic_cap NONE; siw, for "
                       "one, has no atomics)",
                       v->dev_name, op);
    if (v->transport == IBV_TRANSPORT_IWARP && v->op == FS_OP_WRITE_IMM)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by device %s: --op write_imm (iWARP has no immediate data)",
                       v->dev_name);
    if (v->transport == IBV_TRANSPORT_IWARP && v->svc != VB_RC)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by device %s: --qp-type %s (iWARP is RC only)", v->dev_name,
                       v->o.qp_type);
    if (v->transport == IBV_TRANSPORT_IWARP && !v->o.cm)
        return fs_fail(err, FS_EXIT_USAGE,
                       "device %s is iWARP: its connections are set up by rdma_cm only; add --cm",
                       v->dev_name);
    if (v->max_size > v->pattr.max_msg_sz)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by device %s: %" PRIu64 "-byte messages (port %d max_msg_sz "
                       "is %u)",
                       v->dev_name, v->max_size, v->port, v->pattr.max_msg_sz);
    if (v->o.mtu) {
        int ok = v->o.mtu == 256 || v->o.mtu == 512 || v->o.mtu == 1024 || v->o.mtu == 2048 ||
                 v->o.mtu == 4096;
        if (!ok)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--mtu %ld: path MTUs are 256, 512, 1024, 2048 or 4096", v->o.mtu);
        if (v->o.mtu > vb_mtu_bytes(v->pattr.active_mtu))
            return fs_fail(err, FS_EXIT_USAGE,
                           "--mtu %ld is larger than the active MTU of %s port %d (%d bytes%s); "
                           "use --mtu %d or less, or leave it out",
                           v->o.mtu, v->dev_name, v->port, vb_mtu_bytes(v->pattr.active_mtu),
                           v->pattr.link_layer == IBV_LINK_LAYER_ETHERNET
                               ? ": on RoCE it follows the netdev MTU minus headers; raise it "
                                 "with `ip link set IFACE mtu 9000`"
                               : "",
                           vb_mtu_bytes(v->pattr.active_mtu));
        if (v->o.cm)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--mtu with --cm: rdma_cm takes the path MTU from the resolved route; "
                           "leave --mtu out (the MTU used is in the result)");
    }
    if (v->o.cm && v->svc != VB_RC)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cm connects RC queue pairs only in fabscope; use --qp-type rc, or drop "
                       "--cm for %s",
                       vb_svc_name(v->svc));
    if (v->o.cm && v->o.qps > 1)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cm with --qps %ld: fabscope's rdma_cm path opens one connection; drop "
                       "--qps or --cm",
                       v->o.qps);
    if (v->o.cq_mod > v->tx_depth)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cq-mod %ld is larger than --tx-depth %ld: the sender would stop before "
                       "asking for a completion",
                       v->o.cq_mod, v->tx_depth);
    if (v->o.inline_size > 0 && v->op != FS_OP_SEND && v->op != FS_OP_WRITE &&
        v->op != FS_OP_WRITE_IMM)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--inline applies to send, write and write_imm, not --op %s", op);
    if (v->o.verify) {
        if (v->pat != FS_PAT_LAT)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--verify checks each message of a ping-pong: use --pattern lat");
        if (v->op == FS_OP_FADD || v->op == FS_OP_CSWAP)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--verify covers send, write, write_imm and read, not atomics");
    }
    return 0;
}

int vb_create_qps(struct vb *v, struct fs_err *err)
{
    const int lat_inline = v->pat == FS_PAT_LAT &&
                           (v->op == FS_OP_SEND || v->op == FS_OP_WRITE || v->op == FS_OP_WRITE_IMM);
    uint32_t want_inline = v->o.inline_size >= 0 ? (uint32_t)v->o.inline_size
                           : lat_inline          ? 220u
                                                 : 0u;
    enum ibv_qp_type t = v->svc == VB_RC ? IBV_QPT_RC : v->svc == VB_UC ? IBV_QPT_UC : IBV_QPT_UD;
    for (int i = 0; i < v->nqp; i++) {
        struct ibv_qp_init_attr a = {
            .send_cq = v->cq,
            .recv_cq = v->cq,
            .cap = {.max_send_wr = v->sq_depth,
                    .max_recv_wr = v->needs_recv ? v->rx_depth : 1,
                    .max_send_sge = 1,
                    .max_recv_sge = 1,
                    .max_inline_data = want_inline},
            .qp_type = t,
            .sq_sig_all = 0,
        };
        struct ibv_qp_init_attr first = a;
        int rc = 0;
        if (v->o.cm) {
            rc = vb_cm_create_qp(v, i, &a);
        } else {
            v->qp[i].qp = ibv_create_qp(v->pd, &a);
            rc = v->qp[i].qp ? 0 : errno;
        }
        if (rc && want_inline && v->o.inline_size < 0) {
            /* auto inline: the device takes less; measure without and say so in the result */
            want_inline = 0;
            i--;
            continue;
        }
        if (rc)
            return fs_fail(err, rc == EINVAL && want_inline ? FS_EXIT_UNSUPPORTED : FS_EXIT_MEASURE,
                           "verbs: cannot create a %s QP on %s (send %u, recv %u entries, inline "
                           "%u): %s%s",
                           vb_svc_name(v->svc), v->dev_name, first.cap.max_send_wr,
                           first.cap.max_recv_wr, want_inline, strerror(rc),
                           want_inline ? " (the device may not allow this much --inline)" : "");
        if (v->o.inline_size > 0 && a.cap.max_inline_data < (uint32_t)v->o.inline_size)
            return fs_fail(err, FS_EXIT_UNSUPPORTED,
                           "unsupported by device %s: --inline %ld (it allows %u)", v->dev_name,
                           v->o.inline_size, a.cap.max_inline_data);
        v->inline_eff = want_inline;
        uint32_t r;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r)
            r = (uint32_t)getpid() * 2654435761u;
        v->qp[i].psn = r & 0xffffff;
    }
    return 0;
}

static int qp_to_init(struct vb *v, struct vb_qp *q, struct fs_err *err)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)v->port};
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (v->svc == VB_UD) {
        a.qkey = VB_QKEY;
        mask |= IBV_QP_QKEY;
    } else {
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
                            (v->svc == VB_RC ? IBV_ACCESS_REMOTE_READ : 0) |
                            (v->svc == VB_RC && v->dattr.atomic_cap != IBV_ATOMIC_NONE
                                 ? IBV_ACCESS_REMOTE_ATOMIC
                                 : 0);
        mask |= IBV_QP_ACCESS_FLAGS;
    }
    int rc = ibv_modify_qp(q->qp, &a, mask);
    if (rc)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: QPN %u to INIT: %s", q->qp->qp_num,
                       strerror(rc));
    return 0;
}

int vb_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    struct vb *v = calloc(1, sizeof *v);
    if (!v)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = v;
    v->o = *(const struct vb_opts *)ctx->opts;
    v->is_server = ctx->is_server;
    if (ctx->session_key && v->o.cm) {
        v->cm_bound = 1;
        fs_data_token(ctx->session_key, "verbs", v->cm_token);
    }
    v->op = (enum fs_op)fs_op_by_name(ctx->spec->op);
    v->pat = (enum fs_pattern)fs_pattern_by_name(ctx->spec->pattern);
    v->svc = strcmp(v->o.qp_type, "uc") == 0 ? VB_UC : strcmp(v->o.qp_type, "ud") == 0 ? VB_UD
                                                                                    : VB_RC;
    v->max_size = ctx->max_size ? ctx->max_size : 1;
    v->tx_depth = ctx->spec->tx_depth;
    v->window = v->tx_depth;
    /* A ping-pong's answer shows its request arrived: a completion per send is only kernel and
     * device work on the measured path (a UC send ping-pong between two Soft-RoCE guests was
     * 2 % faster with one every 64: 30 alternated pairs, 21 lower). perftest's latency tests ask
     * for every one (tx depth 1). Half the depth keeps the next completion back before the
     * queue fills, so a post never waits for one. */
    v->cq_mod = v->o.cq_mod                             ? (uint64_t)v->o.cq_mod
                : v->pat == FS_PAT_LAT && v->tx_depth >= 2 ? (uint64_t)v->tx_depth / 2
                                                           : 1;
    v->timeout_ms = (int)(ctx->spec->timeout * 1000);
    v->nqp = (int)v->o.qps;
    v->gid_index = -1;
    v->gid_type = -1;
    v->mem_poll = v->pat == FS_PAT_LAT && v->op == FS_OP_WRITE;
    v->needs_recv = v->op == FS_OP_SEND || v->op == FS_OP_WRITE_IMM;
    v->passive_target = v->is_server && v->pat != FS_PAT_BIBW &&
                        (v->pat == FS_PAT_LAT ? fs_ops[v->op].lat_role : fs_ops[v->op].bw_role) ==
                            FS_ROLE_PASSIVE;

    if (vb_select_device(v, ctx->spec->device, err))
        return -1;
    if (ibv_query_device(v->ctx, &v->dattr))
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_query_device(%s): %s", v->dev_name,
                       strerror(errno));
    v->transport = v->ctx->device->transport_type;
    if (vb_select_port(v, err) || vb_select_gid(v, err) || check_service(v, err))
        return -1;

    /* queue sizes */
    uint32_t maxwr = (uint32_t)v->dattr.max_qp_wr;
    v->sq_depth = (uint32_t)v->tx_depth + 2; /* + the tail flush, + one spare */
    if (v->sq_depth > maxwr)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by device %s: --tx-depth %ld (a QP holds at most %u work "
                       "requests)",
                       v->dev_name, v->tx_depth, maxwr);
    if (v->o.rx_depth)
        v->rx_depth = (uint32_t)v->o.rx_depth;
    else
        v->rx_depth = v->svc == VB_RC ? 512u : 4096u;
    if (v->rx_depth < (uint32_t)v->tx_depth && v->o.rx_depth == 0)
        v->rx_depth = (uint32_t)v->tx_depth;
    if (v->rx_depth > maxwr) {
        if (v->o.rx_depth)
            return fs_fail(err, FS_EXIT_UNSUPPORTED,
                           "unsupported by device %s: --rx-depth %ld (max %u)", v->dev_name,
                           v->o.rx_depth, maxwr);
        v->rx_depth = maxwr;
    }
    /* One message in flight, so with two receives or more one is always posted while the other
     * waits for the next send; with one, a request could meet an empty queue (UC and UD drop it). */
    v->defer_rx = v->needs_recv && v->pat == FS_PAT_LAT && v->rx_depth >= 2;
    uint64_t cqe = (uint64_t)v->nqp * (v->sq_depth + (v->needs_recv ? v->rx_depth : 1)) + 16;
    if (cqe > (uint64_t)v->dattr.max_cqe)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by device %s: %" PRIu64 " completion queue entries for %d "
                       "QPs (max %d); lower --qps, --tx-depth or --rx-depth",
                       v->dev_name, cqe, v->nqp, v->dattr.max_cqe);
    v->cq_size = (uint32_t)cqe;

    /* memory: checked against the memlock limit before anything is pinned */
    const size_t page = 4096;
    size_t tx_len = (v->max_size + page - 1) / page * page;
    v->rx_len = v->max_size + (v->svc == VB_UD ? VB_GRH : 0);
    if (v->rx_len < 8)
        v->rx_len = 8; /* atomics land 8 bytes here */
    v->rx_off = tx_len;
    v->buf_len = tx_len + (v->rx_len + page - 1) / page * page;
    /* Only the buffer is certain to be pinned: rxe/siw keep queues in the kernel, while mlx5
     * and others pin user-space queues too (the message says so). */
    if (vb_check_memlock(v, v->buf_len, err))
        return -1;
    if (posix_memalign((void **)&v->buf, page, v->buf_len))
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: cannot allocate %zu bytes", v->buf_len);
    memset(v->buf, 0, v->buf_len);
    vb_fill_pat(v->buf, v->max_size, 0);

    v->pd = ibv_alloc_pd(v->ctx);
    if (!v->pd)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_alloc_pd(%s): %s", v->dev_name,
                       strerror(errno));
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                 (v->dattr.atomic_cap != IBV_ATOMIC_NONE ? IBV_ACCESS_REMOTE_ATOMIC : 0);
    v->mr = ibv_reg_mr(v->pd, v->buf, v->buf_len, access);
    if (!v->mr) {
        int e = errno;
        return fs_fail(err, e == ENOMEM || e == EPERM || e == EAGAIN ? FS_EXIT_USAGE : FS_EXIT_MEASURE,
                       "verbs: ibv_reg_mr of %zu bytes on %s failed: %s. %s", v->buf_len,
                       v->dev_name, strerror(e),
                       e == ENOMEM || e == EPERM || e == EAGAIN
                           ? "Usually the locked-memory limit: check `ulimit -l` (raise it in "
                             "/etc/security/limits.d, pam_limits for ssh, LimitMEMLOCK for "
                             "systemd/slurmd)"
                           : "Check `dmesg`");
    }
    v->ch = ibv_create_comp_channel(v->ctx);
    if (!v->ch)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_create_comp_channel: %s", strerror(errno));
    fcntl(v->ch->fd, F_SETFL, fcntl(v->ch->fd, F_GETFL) | O_NONBLOCK);
    v->cq = ibv_create_cq(v->ctx, (int)v->cq_size, NULL, v->ch, 0);
    if (!v->cq)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_create_cq(%u entries): %s", v->cq_size,
                       strerror(errno));
    v->rd_atom = (uint32_t)(v->dattr.max_qp_rd_atom < v->dattr.max_qp_init_rd_atom
                                ? v->dattr.max_qp_rd_atom
                                : v->dattr.max_qp_init_rd_atom);
    if (v->rd_atom > 255) /* the verbs field is 8 bits */
        v->rd_atom = 255;
    if (v->rd_atom == 0)
        v->rd_atom = 1;

    if (v->o.cm)
        return vb_cm_setup(v, ctx->spec->bind, err);
    if (vb_create_qps(v, err))
        return -1;
    for (int i = 0; i < v->nqp; i++) {
        if (qp_to_init(v, &v->qp[i], err))
            return -1;
        /* posted before the peer can send: an RC send with no receive waiting is an RNR NAK */
        if (v->needs_recv && vb_post_recvs(v, &v->qp[i], i, v->rx_depth, err))
            return -1;
    }
    return 0;
}

/* ---- address exchange and connection -------------------------------------------------------- */

int vb_local_address(void *be, cJSON *o, struct fs_err *err)
{
    struct vb *v = be;
    char hex[40];
    (void)err;
    cJSON_AddStringToObject(o, "device", v->dev_name);
    cJSON_AddStringToObject(o, "link_layer", vb_link_layer_name(v->pattr.link_layer));
    cJSON_AddNumberToObject(o, "lid", v->pattr.lid);
    char g[2 * sizeof v->gid.raw + 1];
    fs_hex_encode(v->gid.raw, sizeof v->gid.raw, g);
    cJSON_AddStringToObject(o, "gid", g);
    cJSON_AddNumberToObject(o, "gid_index", v->gid_index);
    cJSON_AddNumberToObject(o, "mtu_active", vb_mtu_bytes(v->pattr.active_mtu));
    cJSON_AddNumberToObject(o, "rd_atom", v->rd_atom);
    vb_hex_u64(hex, sizeof hex, v->mr ? v->mr->rkey : 0);
    cJSON_AddStringToObject(o, "rkey", hex);
    vb_hex_u64(hex, sizeof hex, (uint64_t)(uintptr_t)(v->buf + v->rx_off));
    cJSON_AddStringToObject(o, "rx_addr", hex);
    vb_hex_u64(hex, sizeof hex, (uint64_t)(uintptr_t)v->buf);
    cJSON_AddStringToObject(o, "tx_addr", hex);
    if (v->o.cm) {
        vb_cm_local_address(v, o);
        return 0;
    }
    cJSON *qps = cJSON_AddArrayToObject(o, "qps");
    for (int i = 0; i < v->nqp; i++) {
        cJSON *q = cJSON_CreateObject();
        cJSON_AddNumberToObject(q, "qpn", v->qp[i].qp->qp_num);
        cJSON_AddNumberToObject(q, "psn", v->qp[i].psn);
        cJSON_AddItemToArray(qps, q);
    }
    return 0;
}

static int parse_peer(struct vb *v, const cJSON *p, struct fs_err *err)
{
    double d;
    if (!cJSON_IsObject(p) || vb_parse_hex_u64(p, "rx_addr", &v->peer_rx_addr) ||
        vb_parse_hex_u64(p, "tx_addr", &v->peer_tx_addr) || vb_get_num(p, "mtu_active", &d))
        return fs_fail(err, FS_EXIT_PEER, "verbs: the peer sent an incomplete address");
    v->peer_mtu = (int)d;
    uint64_t rkey;
    if (vb_parse_hex_u64(p, "rkey", &rkey))
        return fs_fail(err, FS_EXIT_PEER, "verbs: the peer sent no rkey");
    v->peer_rkey = (uint32_t)rkey;
    v->peer_rd_atom = vb_get_num(p, "rd_atom", &d) ? 1 : (uint32_t)d;
    v->peer_lid = vb_get_num(p, "lid", &d) ? 0 : (uint16_t)d;
    const cJSON *ll = cJSON_GetObjectItemCaseSensitive(p, "link_layer");
    if (cJSON_IsString(ll) && strcmp(ll->valuestring, vb_link_layer_name(v->pattr.link_layer)) != 0)
        return fs_fail(err, FS_EXIT_USAGE,
                       "verbs: this side's port is %s but the peer's is %s: they cannot talk "
                       "verbs to each other; choose ports of the same kind with --device/--ib-port",
                       vb_link_layer_name(v->pattr.link_layer), ll->valuestring);
    /* The GID addresses every packet to the peer on RoCE: one that does not decode is the
     * peer's fault, named, never a zero GID that times out later. */
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(p, "gid");
    if (!cJSON_IsString(g) ||
        fs_hex_decode_exact(g->valuestring, v->peer_gid.raw, sizeof v->peer_gid.raw))
        return fs_fail(err, FS_EXIT_PEER,
                       "verbs: the peer's GID is %s%.40s%s, not %zu hex digits: the peer is not "
                       "this fabscope's engine, or another version of it (compare `fabscope "
                       "--version` on both hosts)",
                       cJSON_IsString(g) ? "\"" : "", cJSON_IsString(g) ? g->valuestring : "missing",
                       cJSON_IsString(g) ? "\"" : "", 2 * sizeof v->peer_gid.raw);
    return 0;
}

static int qp_to_rtr_rts(struct vb *v, struct vb_qp *q, struct fs_err *err)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
    int mask = IBV_QP_STATE;
    if (v->svc != VB_UD) {
        a.path_mtu = vb_mtu_enum(v->mtu_used);
        a.dest_qp_num = q->peer_qpn;
        a.rq_psn = q->peer_psn;
        a.ah_attr.dlid = v->peer_lid;
        a.ah_attr.sl = (uint8_t)v->o.sl;
        a.ah_attr.port_num = (uint8_t)v->port;
        if (v->use_grh) {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = v->peer_gid;
            a.ah_attr.grh.sgid_index = (uint8_t)v->gid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        if (v->svc == VB_RC) {
            a.max_dest_rd_atomic = (uint8_t)v->rd_atom;
            a.min_rnr_timer = 12; /* 0.64 ms between RNR retries */
            mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        }
    }
    int rc = ibv_modify_qp(q->qp, &a, mask);
    if (rc)
        return fs_fail(err, FS_EXIT_MEASURE,
                       "verbs: QPN %u to RTR (peer QPN %u, GID index %d, MTU %d): %s%s",
                       q->qp->qp_num, q->peer_qpn, v->gid_index, v->mtu_used, strerror(rc),
                       rc == EINVAL && v->use_grh ? " (is the GID index valid on both sides?)"
                                                  : "");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = q->psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (v->svc == VB_RC) {
        a.timeout = 14; /* 4.096 us * 2^14 = 67 ms per try: roomy enough for a slow guest */
        a.retry_cnt = 7;
        a.rnr_retry = 7; /* 7 = retry forever: a receiver that is late is not an error */
        uint32_t init = v->rd_atom < v->peer_rd_atom ? v->rd_atom : v->peer_rd_atom;
        a.max_rd_atomic = (uint8_t)(init ? init : 1);
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    rc = ibv_modify_qp(q->qp, &a, mask);
    if (rc)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: QPN %u to RTS: %s", q->qp->qp_num,
                       strerror(rc));
    return 0;
}

static int pick_mtu(struct vb *v, struct fs_err *err)
{
    int local = vb_mtu_bytes(v->pattr.active_mtu);
    if (v->o.mtu) {
        if (v->o.mtu > v->peer_mtu)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--mtu %ld is larger than the peer port's active MTU (%d bytes)",
                           v->o.mtu, v->peer_mtu);
        v->mtu_used = (int)v->o.mtu;
        snprintf(v->mtu_sel, sizeof v->mtu_sel, "--mtu");
    } else {
        v->mtu_used = local < v->peer_mtu ? local : v->peer_mtu;
        snprintf(v->mtu_sel, sizeof v->mtu_sel,
                 "auto: the smaller active MTU (local %d, peer %d)", local, v->peer_mtu);
    }
    if (v->svc == VB_UD && v->max_size > (uint64_t)v->mtu_used)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by service UD: %" PRIu64 "-byte messages (a UD message is "
                       "one packet: at most the path MTU, %d bytes here); use --sizes up to %d "
                       "or --qp-type rc",
                       v->max_size, v->mtu_used, v->mtu_used);
    return 0;
}

int vb_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct vb *v = be;
    if (parse_peer(v, peer, err))
        return -1;
    if (v->o.cm)
        return vb_cm_connect(v, peer, deadline_ms, err);
    if (pick_mtu(v, err))
        return -1;
    if (v->use_grh && v->pattr.link_layer == IBV_LINK_LAYER_ETHERNET &&
        vb_gid_is_ipv4(&v->gid, NULL, 0) != vb_gid_is_ipv4(&v->peer_gid, NULL, 0)) {
        /* RoCE v2 puts the GIDs in an IP header: an IPv4 one cannot talk to an IPv6 one.
         * Found by perftest users as an EINVAL from ibv_modify_qp or a status 12 later. */
        char pg[INET6_ADDRSTRLEN];
        vb_gid_text(&v->peer_gid, pg, sizeof pg);
        const cJSON *pidx = cJSON_GetObjectItemCaseSensitive(peer, "gid_index");
        return fs_fail(err, FS_EXIT_USAGE,
                       "GID mismatch: this side uses GID index %d (%s, %s) and the peer GID index "
                       "%d (%s, %s); RoCE v2 carries GIDs as IP addresses, so both must be IPv4 or "
                       "both IPv6. Leave --gid-index out on both hosts (fabscope then picks the "
                       "RoCE v2 IPv4 GID) or give indices of the same kind",
                       v->gid_index, v->gid_str, vb_gid_is_ipv4(&v->gid, NULL, 0) ? "IPv4" : "IPv6",
                       cJSON_IsNumber(pidx) ? pidx->valueint : -1, pg,
                       vb_gid_is_ipv4(&v->peer_gid, NULL, 0) ? "IPv4" : "IPv6");
    }
    const cJSON *qps = cJSON_GetObjectItemCaseSensitive(peer, "qps");
    if (!cJSON_IsArray(qps) || cJSON_GetArraySize(qps) != v->nqp)
        return fs_fail(err, FS_EXIT_PEER, "verbs: the peer has %d QPs, this side %d",
                       cJSON_IsArray(qps) ? cJSON_GetArraySize(qps) : 0, v->nqp);
    for (int i = 0; i < v->nqp; i++) {
        const cJSON *q = cJSON_GetArrayItem(qps, i);
        double qpn, psn;
        if (vb_get_num(q, "qpn", &qpn) || vb_get_num(q, "psn", &psn))
            return fs_fail(err, FS_EXIT_PEER, "verbs: the peer's QP %d has no qpn/psn", i);
        v->qp[i].peer_qpn = (uint32_t)qpn;
        v->qp[i].peer_psn = (uint32_t)psn;
        if (qp_to_rtr_rts(v, &v->qp[i], err))
            return -1;
    }
    if (v->svc == VB_UD) {
        struct ibv_ah_attr ah = {.dlid = v->peer_lid,
                                 .sl = (uint8_t)v->o.sl,
                                 .port_num = (uint8_t)v->port};
        if (v->use_grh) {
            ah.is_global = 1;
            ah.grh.dgid = v->peer_gid;
            ah.grh.sgid_index = (uint8_t)v->gid_index;
            ah.grh.hop_limit = 64;
        }
        v->ah = ibv_create_ah(v->pd, &ah);
        if (!v->ah)
            return fs_fail(err, FS_EXIT_MEASURE,
                           "verbs: cannot create the address handle to the peer (GID index %d): "
                           "%s",
                           v->gid_index, strerror(errno));
    }
    v->connected = 1;
    return 0;
}
