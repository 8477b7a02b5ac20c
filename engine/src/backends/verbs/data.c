/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: the data path: work requests, completions, per-size preparation. */
#define _GNU_SOURCE
#include "verbs_int.h"

static int post_flush(struct vb *v, struct vb_qp *q, int qi, struct fs_err *err);
static int poll_cq(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err);

/* ---- work completions ----------------------------------------------------------------------- */

static const char *wc_advice(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
        return "the peer did not acknowledge (transport retries exhausted; perftest prints this "
               "as 'Failed status 12'): the two sides use GIDs of different kinds or subnets "
               "(compare the gid_index/gid of both results), the wrong port, the peer process "
               "is gone, the link is down, or a firewall drops UDP port 4791 (RoCE v2)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "receiver not ready: the peer had no receive posted for a send/write_imm and "
               "the RNR retries ran out (peer stalled or exited, or it runs a different --op)";
    case IBV_WC_REM_ACCESS_ERR:
        return "the peer refused the access: rkey/address/permissions do not match (the two "
               "sides run different --op/--sizes, or the peer's memory was deregistered)";
    case IBV_WC_REM_INV_REQ_ERR:
        return "the peer's QP rejected the request: message larger than its receive buffer, "
               "an operation its QP does not allow (atomics/read on a QP without them), or "
               "mismatched --qp-type/--sizes";
    case IBV_WC_LOC_LEN_ERR:
        return "a message was larger than the posted receive buffer (the sides disagree on "
               "--sizes, or UD payload larger than the MTU)";
    case IBV_WC_LOC_PROT_ERR:
        return "a local buffer is outside the registered memory region (a fabscope bug; "
               "please report it)";
    case IBV_WC_LOC_QP_OP_ERR:
        return "the local QP could not run the request (inline larger than allowed, or a "
               "malformed work request)";
    case IBV_WC_REM_OP_ERR:
        return "the peer failed to complete the operation (its receive queue or memory is in "
               "error)";
    case IBV_WC_WR_FLUSH_ERR:
        return "the QP is in the error state after an earlier failure or the connection was "
               "closed";
    case IBV_WC_BAD_RESP_ERR:
        return "the peer answered with an unexpected opcode (mismatched --qp-type)";
    case IBV_WC_RESP_TIMEOUT_ERR:
        return "the responder timed out";
    case IBV_WC_FATAL_ERR:
        return "fatal device error: check `dmesg`";
    default:
        return "see `dmesg` on both hosts";
    }
}

static int wc_fail(struct vb *v, const struct ibv_wc *wc, struct fs_err *err)
{
    int peer = wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_RNR_RETRY_EXC_ERR;
    return fs_fail(err, peer ? FS_EXIT_PEER : FS_EXIT_MEASURE,
                   "verbs: %s %s completion failed with status %d (%s) on %s port %d QPN %u "
                   "(GID index %d %s): %s",
                   vb_svc_name(v->svc), fs_ops[v->op].name, (int)wc->status,
                   ibv_wc_status_str(wc->status), v->dev_name, v->port, wc->qp_num, v->gid_index,
                   v->gid_str[0] ? v->gid_str : "-", wc_advice(wc->status));
}

int vb_post_recvs(struct vb *v, struct vb_qp *q, int qi, uint32_t n, struct fs_err *err)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(v->buf + v->rx_off),
                          .length = (uint32_t)v->rx_len,
                          .lkey = v->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = WR_RECV | WR_QP(qi), .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad = NULL;
    /* Every receive lands in the same bytes: the measurement needs arrivals, not copies (lat
     * with --verify has one message in flight, so it checks each one before the next). */
    for (uint32_t i = 0; i < n; i++) {
        int rc = ibv_post_recv(q->qp, &wr, &bad);
        if (rc)
            return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_post_recv on QPN %u: %s",
                           q->qp->qp_num, strerror(rc));
    }
    return 0;
}

/* A consumed receive is posted again at once, or in a ping-pong owed until the next send is
 * posted (vb.defer_rx). */
static int recv_consumed(struct vb *v, int qi, struct fs_err *err)
{
    if (!v->defer_rx)
        return vb_post_recvs(v, &v->qp[qi], qi, 1, err);
    v->qp[qi].rx_owed++;
    v->rx_owed++;
    return 0;
}

int vb_repost_owed(struct vb *v, struct fs_err *err)
{
    for (int i = 0; v->rx_owed && i < v->nqp; i++) {
        struct vb_qp *q = &v->qp[i];
        if (!q->rx_owed)
            continue;
        if (vb_post_recvs(v, q, i, q->rx_owed, err))
            return -1;
        v->rx_owed -= q->rx_owed;
        q->rx_owed = 0;
    }
    return 0;
}

/* ---- per size ------------------------------------------------------------------------------- */

/* A ping-pong does not wait for its own send completions, and with --cq-mod it may end on an
 * unsignaled run: both are settled when a phase ends (the per-device and per-QP counts then hold
 * every operation: a two-device ping-pong counted 199 on one device and 200 on the other when the
 * last write's completion was still in the queue), so the next size starts on empty queues. */
int vb_settle(void *be, struct fs_err *err)
{
    struct vb *v = be;
    for (int i = 0; i < v->nqp; i++)
        if (v->qp[i].unsig_ops && !v->qp[i].sig_inflight && post_flush(v, &v->qp[i], i, err))
            return -1;
    for (int slice = 0; v->unreported && slice * 10 < v->timeout_ms; slice++) {
        struct fs_events ev = {0};
        int got = 0;
        if (poll_cq(v, &ev, &got, err))
            return -1;
        if (!got) {
            struct pollfd p = {.fd = v->ch->fd, .events = POLLIN};
            if (!v->cq_armed && ibv_req_notify_cq(v->cq, 0) == 0)
                v->cq_armed = 1;
            else if (poll(&p, 1, 10) > 0) {
                struct ibv_cq *cq;
                void *cctx;
                if (ibv_get_cq_event(v->ch, &cq, &cctx) == 0) {
                    v->cq_armed = 0;
                    v->unacked++;
                }
            }
        }
    }
    if (v->unreported)
        return fs_fail(err, FS_EXIT_PEER,
                       "verbs: %" PRIu64 " operations of the phase never completed "
                       "within %d ms (peer gone?)",
                       v->unreported, v->timeout_ms);
    return vb_repost_owed(v, err); /* the next phase starts with every receive posted */
}

int vb_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct vb *v = be;
    if (v->cm_pending && vb_cm_established(v, err))
        return -1;
    if (op != v->op || size > v->max_size)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: prepare for %s/%" PRIu64 " outside setup",
                       fs_ops[op].name, size);
    /* The queues are empty: the core settled the previous phase (vb_settle). */
    v->size = size;
    v->tx_seq = v->rx_seq = 0;
    /* Nothing is in flight between sizes (both sides finished the phase), so the receive area
     * can be reset: write-lat arrivals are detected by a marker in its last byte, and atomics
     * start from 0. The tx area holds the read pattern the peer checks with --verify. */
    memset(v->buf + v->rx_off, 0, v->rx_len);
    vb_fill_pat(v->buf, size, VB_READ_SEED);
    return 0;
}

static int post_flush(struct vb *v, struct vb_qp *q, int qi, struct fs_err *err)
{
    /* A zero-length RDMA write: changes no memory and consumes no receive, and its completion
     * (completions of one send queue arrive in order) vouches for the unsignaled run before
     * it. Needed because the core, not the backend, decides when a run of posts ends.
     * UD has no RDMA write: there it is a zero-length send, which the receiver takes for what
     * it is (only the 40-byte GRH, never a message of the run, see on_recv) and does not count. */
    struct ibv_send_wr wr = {.wr_id = WR_FLUSH | WR_QP(qi) | q->unsig_ops,
                             .sg_list = NULL,
                             .num_sge = 0,
                             .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED};
    if (v->svc == VB_UD) {
        wr.opcode = IBV_WR_SEND;
        wr.wr.ud.ah = v->ah;
        wr.wr.ud.remote_qpn = q->peer_qpn;
        wr.wr.ud.remote_qkey = VB_QKEY;
    } else {
        wr.wr.rdma.remote_addr = v->peer_rx_addr;
        wr.wr.rdma.rkey = v->peer_rkey;
    }
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(q->qp, &wr, &bad);
    if (rc)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: posting the tail flush: %s", strerror(rc));
    q->unsig_ops = 0;
    q->sig_inflight++;
    q->slots++;
    v->tail_flushes++;
    return 0;
}

int vb_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct vb *v = be;
    const int qi = (int)(v->rr % (uint64_t)v->nqp);
    struct vb_qp *q = &v->qp[qi];
    if (q->slots + 2 > v->sq_depth) /* keep one entry for a tail flush */
        return 0;
    struct ibv_sge sge = {.addr = (uintptr_t)v->buf, .length = (uint32_t)size, .lkey = v->mr->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1};
    struct ibv_send_wr *bad = NULL;
    const int passive_lat = v->pat == FS_PAT_LAT && fs_ops[op].lat_role == FS_ROLE_PASSIVE;
    /* Ask for a completion every cq-mod requests, and whenever the core is about to stop and
     * wait (its window is full) or the send queue needs room. */
    int sig = passive_lat || q->unsig_ops + 1 >= v->cq_mod ||
              v->unreported + 1 >= (uint64_t)v->window || q->slots + 3 > v->sq_depth;
    uint64_t seq = v->tx_seq;
    switch (op) {
    case FS_OP_SEND:
        wr.opcode = IBV_WR_SEND;
        if (v->o.verify)
            vb_fill_pat(v->buf, size, seq);
        if (v->svc == VB_UD) {
            wr.wr.ud.ah = v->ah;
            wr.wr.ud.remote_qpn = q->peer_qpn;
            wr.wr.ud.remote_qkey = VB_QKEY;
        }
        break;
    case FS_OP_WRITE:
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma.remote_addr = v->peer_rx_addr;
        wr.wr.rdma.rkey = v->peer_rkey;
        if (v->mem_poll) {
            if (v->o.verify)
                vb_fill_pat(v->buf, size - 1, seq);
            v->buf[size - 1] = marker(seq);
        }
        break;
    case FS_OP_WRITE_IMM:
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl((uint32_t)seq);
        wr.wr.rdma.remote_addr = v->peer_rx_addr;
        wr.wr.rdma.rkey = v->peer_rkey;
        if (v->o.verify)
            vb_fill_pat(v->buf, size, seq);
        break;
    case FS_OP_READ:
        wr.opcode = IBV_WR_RDMA_READ;
        sge.addr = (uintptr_t)(v->buf + v->rx_off);
        wr.wr.rdma.remote_addr = v->peer_tx_addr;
        wr.wr.rdma.rkey = v->peer_rkey;
        if (v->o.verify)
            memset(v->buf + v->rx_off, 0, size);
        break;
    case FS_OP_FADD:
    case FS_OP_CSWAP:
        wr.opcode = op == FS_OP_FADD ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
        sge.addr = (uintptr_t)(v->buf + v->rx_off);
        sge.length = 8;
        wr.wr.atomic.remote_addr = v->peer_rx_addr;
        wr.wr.atomic.rkey = v->peer_rkey;
        wr.wr.atomic.compare_add = op == FS_OP_FADD ? 1 : seq;
        wr.wr.atomic.swap = seq + 1;
        break;
    default:
        return fs_fail(err, FS_EXIT_USAGE, "verbs: --op %s is not a verbs operation",
                       fs_ops[op].name);
    }
    if (size <= v->inline_eff && (op == FS_OP_SEND || op == FS_OP_WRITE || op == FS_OP_WRITE_IMM))
        wr.send_flags |= IBV_SEND_INLINE;
    if (sig) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        wr.wr_id = WR_QP(qi) | (q->unsig_ops + 1);
    } else {
        wr.wr_id = WR_QP(qi);
    }
    int rc = ibv_post_send(q->qp, &wr, &bad);
    if (rc) {
        if (rc == ENOMEM)
            return 0; /* queue full after all: the core progresses and retries */
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_post_send (%s, %" PRIu64 " bytes) on "
                                             "QPN %u: %s",
                       fs_ops[op].name, size, q->qp->qp_num, strerror(rc));
    }
    if (sig) {
        q->unsig_ops = 0;
        q->sig_inflight++;
    } else {
        q->unsig_ops++;
    }
    q->slots++;
    q->posted_ops++;
    v->unreported++;
    v->tx_seq++;
    v->rr++;
    /* The message is on its way: now the receives a ping-pong consumed are posted again. */
    if (v->rx_owed && vb_repost_owed(v, err))
        return -1;
    return 1;
}

/* 1 = a message of the run arrived, 0 = a UD tail flush (see post_flush), -1 = error. */
static int on_recv(struct vb *v, const struct ibv_wc *wc, struct fs_err *err)
{
    const uint64_t hdr = v->svc == VB_UD ? VB_GRH : 0;
    int qi = WR_QPI(wc->wr_id);
    /* A UD tail flush (sizes are >= 1 byte). It took a receive outside a ping-pong's one
     * message in flight, so that receive is posted again at once: owed until the next send,
     * it left none for an answer that came back before that send returned (--rx-depth 2). */
    if (v->svc == VB_UD && wc->byte_len == VB_GRH)
        return vb_post_recvs(v, &v->qp[qi], qi, 1, err) ? -1 : 0;
    if (v->o.verify) {
        if (wc->byte_len != v->size + hdr)
            return fs_fail(err, FS_EXIT_MEASURE,
                           "verbs --verify: message #%" PRIu64 " arrived with %u bytes, expected "
                           "%" PRIu64,
                           v->rx_seq, wc->byte_len, v->size + hdr);
        if (v->op == FS_OP_WRITE_IMM && ntohl(wc->imm_data) != (uint32_t)v->rx_seq)
            return fs_fail(err, FS_EXIT_MEASURE,
                           "verbs --verify: write_imm #%" PRIu64 " carried immediate %u",
                           v->rx_seq, ntohl(wc->imm_data));
        if (vb_check_pat(v->buf + v->rx_off + hdr, v->size, v->rx_seq,
                      v->op == FS_OP_SEND ? "received message" : "written buffer", err))
            return -1;
    }
    v->rx_seq++;
    v->qp[qi].rx_msgs++;
    return recv_consumed(v, qi, err) ? -1 : 1;
}

static int poll_cq(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err)
{
    struct ibv_wc wc[VB_POLL_BATCH];
    int n = ibv_poll_cq(v->cq, VB_POLL_BATCH, wc);
    if (n < 0)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_poll_cq failed (%d)", n);
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS)
            return wc_fail(v, &wc[i], err);
        if (wc[i].wr_id & WR_RECV) {
            int msg = on_recv(v, &wc[i], err);
            if (msg < 0)
                return -1;
            ev->rx_done += (uint64_t)msg;
            continue;
        }
        struct vb_qp *q = &v->qp[WR_QPI(wc[i].wr_id)];
        uint64_t ops = WR_OPS(wc[i].wr_id);
        q->slots -= ops + ((wc[i].wr_id & WR_FLUSH) ? 1 : 0);
        q->sig_inflight--;
        q->completed_ops += ops;
        v->unreported -= ops;
        ev->tx_done += ops;
        if (v->o.verify && v->op == FS_OP_READ) {
            if (vb_check_pat(v->buf + v->rx_off, v->size, VB_READ_SEED, "read buffer", err))
                return -1;
        }
    }
    *got += n;
    return 0;
}

/* The busy part of progress: reap completions, watch write-lat memory, and close a run of
 * unsignaled requests that nothing signaled follows. */
int vb_progress_now(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err)
{
    if (poll_cq(v, ev, got, err))
        return -1;
    /* A turn that found nothing: a receive still owed (the last message of a phase, or a
     * completion the core has not answered) is posted here. */
    if (!*got && v->rx_owed && vb_repost_owed(v, err))
        return -1;
    if (v->mem_poll) {
        volatile uint8_t *last = v->buf + v->rx_off + v->size - 1;
        if (*last == marker(v->rx_seq)) {
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (v->o.verify && vb_check_pat(v->buf + v->rx_off, v->size - 1, v->rx_seq,
                                         "written buffer", err))
                return -1;
            /* Memory does not say which QP wrote it: the peer takes its QPs in turn, as we do. */
            v->qp[v->rx_seq % (uint64_t)v->nqp].rx_msgs++;
            v->rx_seq++;
            ev->rx_done++;
        }
        return 0; /* memory cannot raise an event: write lat always spins */
    }
    if (*got)
        return 0;
    /* A run of unsignaled requests with nothing signaled behind it would never report: the
     * core stopped posting (window full or phase over), so close the run. Only where the core
     * waits for initiator completions. */
    if (v->cq_mod > 1 && (v->pat != FS_PAT_LAT))
        for (int i = 0; i < v->nqp; i++)
            if (v->qp[i].unsig_ops && !v->qp[i].sig_inflight && post_flush(v, &v->qp[i], i, err))
                return -1;
    return 0;
}

/* Asks for an event at the next completion; one that arrived before arming raises none, so the
 * CQ is looked at once more. */
int vb_arm_cq(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err)
{
    if (v->cq_armed)
        return 0;
    if (ibv_req_notify_cq(v->cq, 0))
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_req_notify_cq on %s failed", v->dev_name);
    v->cq_armed = 1;
    return poll_cq(v, ev, got, err);
}

/* The completion channel is readable: take its event and reap. */
int vb_take_cq_event(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err)
{
    struct ibv_cq *cq;
    void *cctx;
    if (ibv_get_cq_event(v->ch, &cq, &cctx) == 0) {
        v->cq_armed = 0;
        if (++v->unacked >= VB_ACK_EVERY) {
            ibv_ack_cq_events(v->cq, v->unacked);
            v->unacked = 0;
        }
    }
    return poll_cq(v, ev, got, err);
}

/* The NIC answers reads, atomics and writes without the target: that process has nothing to
 * progress. It says so (fs_events.idle) and the core decides how it waits (loop.c, wait_idle):
 * asleep on the control channel, or spinning in busy poll mode where the initiator cannot need
 * its CPU. */
int vb_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct vb *v = be;
    int got = 0;
    if (v->passive_target) {
        ev->idle = 1;
        return 0;
    }
    if (vb_progress_now(v, ev, &got, err))
        return -1;
    if (got || v->mem_poll || wait_ms <= 0)
        return 0;
    if (vb_arm_cq(v, ev, &got, err))
        return -1;
    if (got)
        return 0;
    struct pollfd p = {.fd = v->ch->fd, .events = POLLIN};
    if (poll(&p, 1, wait_ms) > 0 && vb_take_cq_event(v, ev, &got, err))
        return -1;
    return 0;
}
