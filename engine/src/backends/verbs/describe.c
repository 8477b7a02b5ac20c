/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: what the result says about the run, and teardown. */
#define _GNU_SOURCE
#include "verbs_int.h"

#include "linkfacts.h"

/* ---- describe / teardown -------------------------------------------------------------------- */

/* UC and UD do not retransmit: a dropped message is a loss to report, not a stalled peer. */
int vb_lossy(void *be)
{
    const struct vb *v = be;
    return v->svc != VB_RC;
}

/* Core operations of this phase that completed on q. */
static uint64_t phase_completed(const struct vb_qp *q)
{
    return q->completed_ops > q->phase_first_op ? q->completed_ops - q->phase_first_op : 0;
}

/* The ceiling's facts (issue 20; linkfacts.h): an InfiniBand port's rate is its width x speed;
 * a RoCE port's (rxe, mlx5 in Ethernet mode) is its netdev's speed: the port's own figure is the
 * nearest IB width x speed to it, and rxe's is a made-up 1X SDR (2.5 Gb/s) whatever the netdev
 * does. The PCIe link is the device's, or (rxe has no bus device) its netdev's. */
static void link_facts(const struct vb *v, cJSON *o)
{
    if (v->pattr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
        int lanes;
        const char *speed;
        char src[64];
        double gbps = vb_port_rate(&v->pattr, &lanes, &speed);
        if (gbps > 0)
            snprintf(src, sizeof src, "ibv_query_port: %dX %s", lanes, speed);
        else
            snprintf(src, sizeof src, "ibv_query_port: width %u, speed %u not known here",
                     v->pattr.active_width, v->pattr.active_speed);
        fs_link_add_rate(o, gbps, src);
        if (gbps > 0)
            cJSON_AddStringToObject(o, "ib_speed", speed);
    } else {
        char src[384];
        double gbps;
        if (fs_link_netdev_rate(v->netdev, &gbps, src, sizeof src) != 0) {
            size_t n = strlen(src);
            snprintf(src + n, sizeof src - n, "; the RDMA port's own width x speed is not the "
                     "Ethernet link's rate");
        }
        fs_link_add_rate(o, gbps, src);
    }
    const char *const cls[] = {"infiniband", "net"};
    const char *const names[] = {v->dev_name, v->netdev};
    fs_link_add_pcie(o, cls, names, 2);
}

void vb_describe(void *be, cJSON *o)
{
    struct vb *v = be;
    char buf[64];
    cJSON_AddStringToObject(o, "kind", "verbs");
    cJSON_AddStringToObject(o, "device", v->dev_name);
    cJSON_AddStringToObject(o, "device_selection", v->dev_sel);
    if (!v->ctx)
        return;
    cJSON_AddStringToObject(o, "transport_type",
                            v->transport == IBV_TRANSPORT_IWARP ? "iWARP" : "IB/RoCE");
    cJSON_AddNumberToObject(o, "port", v->port);
    cJSON_AddStringToObject(o, "port_selection", v->port_sel);
    cJSON_AddStringToObject(o, "link_layer", vb_link_layer_name(v->pattr.link_layer));
    if (v->netdev[0])
        cJSON_AddStringToObject(o, "netdev", v->netdev);
    link_facts(v, o);
    cJSON_AddNumberToObject(o, "lid", v->pattr.lid);
    cJSON *g = cJSON_AddObjectToObject(o, "gid");
    cJSON_AddNumberToObject(g, "index", v->gid_index);
    cJSON_AddStringToObject(g, "type", v->gid_type >= 0 ? vb_gid_type_name(v->gid_type) : "none");
    cJSON_AddStringToObject(g, "address", v->gid_str);
    if (v->gid_ip[0])
        cJSON_AddStringToObject(g, "ipv4", v->gid_ip);
    cJSON_AddBoolToObject(g, "grh", v->use_grh);
    cJSON_AddStringToObject(g, "selection", v->gid_sel);
    cJSON_AddStringToObject(o, "qp_type", vb_svc_name(v->svc));
    cJSON *qpns = cJSON_AddArrayToObject(o, "qpns");
    cJSON *pq = cJSON_AddArrayToObject(o, "peer_qpns");
    for (int i = 0; i < v->nqp; i++) {
        if (v->qp[i].qp)
            cJSON_AddItemToArray(qpns, cJSON_CreateNumber(v->qp[i].qp->qp_num));
        if (v->connected)
            cJSON_AddItemToArray(pq, cJSON_CreateNumber(v->qp[i].peer_qpn));
    }
    /* Per QP in the last phase: the core adds each flow's rate at the initiator (--qps N). Left
     * out before anything moved (the description sent at connection time). */
    uint64_t moved = 0;
    for (int i = 0; i < v->nqp; i++)
        moved += phase_completed(&v->qp[i]) + v->qp[i].rx_msgs;
    cJSON *flows = moved ? cJSON_AddArrayToObject(o, "flows") : NULL;
    for (int i = 0; flows && i < v->nqp && v->qp[i].qp; i++) {
        cJSON *f = cJSON_CreateObject();
        cJSON_AddNumberToObject(f, "qpn", v->qp[i].qp->qp_num);
        cJSON_AddNumberToObject(f, "completed", (double)phase_completed(&v->qp[i]));
        cJSON_AddNumberToObject(f, "received", (double)v->qp[i].rx_msgs);
        cJSON_AddItemToArray(flows, f);
    }
    cJSON *m = cJSON_AddObjectToObject(o, "mtu");
    cJSON_AddNumberToObject(m, "active", vb_mtu_bytes(v->pattr.active_mtu));
    cJSON_AddNumberToObject(m, "used", v->mtu_used);
    cJSON_AddStringToObject(m, "selection", v->mtu_sel);
    cJSON_AddNumberToObject(o, "inline", v->inline_eff);
    cJSON_AddNumberToObject(o, "cq_mod", (double)v->cq_mod);
    cJSON_AddNumberToObject(o, "tail_flushes", (double)v->tail_flushes);
    cJSON_AddNumberToObject(o, "sq_depth", v->sq_depth);
    cJSON_AddNumberToObject(o, "rx_depth", v->needs_recv ? v->rx_depth : 0);
    cJSON_AddNumberToObject(o, "rd_atomic", v->rd_atom);
    cJSON_AddBoolToObject(o, "cm", v->o.cm);
    if (v->o.cm) {
        cJSON_AddStringToObject(o, "cm_local", v->cm_local);
        cJSON_AddStringToObject(o, "cm_peer", v->cm_peer);
        /* its connection request carried the session's token (serve's keyed runs) */
        cJSON_AddBoolToObject(o, "session_bound", v->cm_bound);
        if (v->is_server)
            cJSON_AddNumberToObject(o, "strangers_rejected", v->cm_strangers);
    }
    cJSON_AddBoolToObject(o, "verify", v->o.verify);
    if (v->mem_poll)
        cJSON_AddStringToObject(o, "arrival",
                                "target polls the last byte of its buffer (as ib_write_lat)");
    if (v->svc == VB_UC && v->pat != FS_PAT_LAT && fs_ops[v->op].bw_role == FS_ROLE_PASSIVE)
        cJSON_AddStringToObject(o, "note",
                                "UC has no acknowledgements: initiator completions are local, "
                                "so this rate is what the sender pushed, not what arrived");
    cJSON *ml = cJSON_AddObjectToObject(o, "memlock");
    if (v->memlock_limit == ~0ull)
        cJSON_AddStringToObject(ml, "limit", "unlimited");
    else
        cJSON_AddNumberToObject(ml, "limit", (double)v->memlock_limit);
    cJSON_AddNumberToObject(ml, "registered", (double)v->buf_len);
    cJSON_AddBoolToObject(ml, "cap_ipc_lock", v->cap_ipc_lock);
    snprintf(buf, sizeof buf, "%s", v->dattr.atomic_cap == IBV_ATOMIC_NONE   ? "none"
                                    : v->dattr.atomic_cap == IBV_ATOMIC_HCA  ? "hca"
                                                                              : "glob");
    cJSON_AddStringToObject(o, "atomic_cap", buf);
    cJSON_AddStringToObject(o, "fw_ver", v->dattr.fw_ver);
}

void vb_teardown(void *be)
{
    struct vb *v = be;
    if (!v)
        return;
    for (int i = 0; i < v->nqp; i++) {
        if (v->o.cm && v->qp[i].id) {
            vb_cm_close_qp(v, i);
        } else if (v->qp[i].qp) {
            ibv_destroy_qp(v->qp[i].qp);
        }
    }
    vb_cm_close(v);
    if (v->ah)
        ibv_destroy_ah(v->ah);
    if (v->cq) {
        if (v->unacked)
            ibv_ack_cq_events(v->cq, v->unacked);
        ibv_destroy_cq(v->cq);
    }
    if (v->ch)
        ibv_destroy_comp_channel(v->ch);
    if (v->mr)
        ibv_dereg_mr(v->mr);
    if (v->pd)
        ibv_dealloc_pd(v->pd);
    if (v->own_ctx && v->ctx)
        ibv_close_device(v->ctx);
    vb_cm_free_devices(v);
    free(v->buf);
    free(v);
}

void vb_phase_begin(void *be)
{
    struct vb *v = be;
    for (int i = 0; i < v->nqp; i++) {
        v->qp[i].phase_first_op = v->qp[i].posted_ops;
        v->qp[i].rx_msgs = 0;
    }
}
