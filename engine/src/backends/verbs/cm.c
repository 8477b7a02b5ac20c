/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: rdma_cm (--cm): connecting RC queue pairs through librdmacm. Built only
 * where librdmacm is found (cm_none.c otherwise). */
#define _GNU_SOURCE
#include "verbs_int.h"

#include <rdma/rdma_cma.h>

static int cm_wait(struct vb *v, enum rdma_cm_event_type want, int deadline_ms,
                   struct rdma_cm_event **out, struct fs_err *err);

static int cm_connect_client(struct vb *v, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(peer, "cm_addr");
    double port;
    if (!cJSON_IsString(a) || vb_get_num(peer, "cm_port", &port))
        return fs_fail(err, FS_EXIT_PEER,
                       "rdma_cm: the server sent no rdma_cm address (does it run with --cm?)");
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in src = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, a->valuestring, &dst.sin_addr) != 1 ||
        inet_pton(AF_INET, v->cm_local, &src.sin_addr) != 1)
        return fs_fail(err, FS_EXIT_PEER, "rdma_cm: bad address %s or %s", a->valuestring,
                       v->cm_local);
    snprintf(v->cm_peer, sizeof v->cm_peer, "%s:%d", a->valuestring, (int)port);
    struct rdma_cm_event *ev = NULL;
    if (rdma_create_id(v->ech, &v->qp[0].id, v, RDMA_PS_TCP))
        return fs_fail(err, FS_EXIT_MEASURE, "rdma_cm: rdma_create_id: %s", strerror(errno));
    if (rdma_resolve_addr(v->qp[0].id, (struct sockaddr *)&src, (struct sockaddr *)&dst,
                          deadline_ms < 2000 ? deadline_ms : 2000))
        return fs_fail(err, FS_EXIT_PEER, "rdma_cm: resolve %s from %s: %s", v->cm_peer,
                       v->cm_local, strerror(errno));
    if (cm_wait(v, RDMA_CM_EVENT_ADDR_RESOLVED, deadline_ms, &ev, err))
        return -1;
    rdma_ack_cm_event(ev);
    if (v->qp[0].id->verbs->device != v->ctx->device)
        return fs_fail(err, FS_EXIT_USAGE,
                       "rdma_cm: the route from %s to %s leaves through device %s, not %s",
                       v->cm_local, v->cm_peer, ibv_get_device_name(v->qp[0].id->verbs->device),
                       v->dev_name);
    if (rdma_resolve_route(v->qp[0].id, deadline_ms < 2000 ? deadline_ms : 2000))
        return fs_fail(err, FS_EXIT_PEER, "rdma_cm: resolve route to %s: %s", v->cm_peer,
                       strerror(errno));
    if (cm_wait(v, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline_ms, &ev, err))
        return -1;
    rdma_ack_cm_event(ev);
    if (vb_create_qps(v, err) || (v->needs_recv && vb_post_recvs(v, &v->qp[0], 0, v->rx_depth, err)))
        return -1;
    struct rdma_conn_param cp = {.responder_resources = (uint8_t)v->rd_atom,
                                 .initiator_depth = (uint8_t)v->rd_atom,
                                 .retry_count = 7,
                                 .rnr_retry_count = 7};
    if (v->cm_bound) {
        cp.private_data = v->cm_token;
        cp.private_data_len = (uint8_t)sizeof v->cm_token;
    }
    if (rdma_connect(v->qp[0].id, &cp))
        return fs_fail(err, FS_EXIT_PEER, "rdma_cm: connect to %s: %s", v->cm_peer,
                       strerror(errno));
    /* The server accepts only after our control message arrives: ESTABLISHED is awaited in
     * prepare(), after the core's "connected". */
    v->cm_pending = 1;
    return 0;
}

/* Whether a connection request carries this session's token (always, outside a session). */
static int cm_request_ok(const struct vb *v, const struct rdma_cm_event *ev)
{
    if (!v->cm_bound)
        return 1;
    const uint8_t *got = ev->param.conn.private_data;
    if (!got || ev->param.conn.private_data_len < sizeof v->cm_token)
        return 0;
    uint8_t diff = 0;
    for (size_t i = 0; i < sizeof v->cm_token; i++)
        diff |= (uint8_t)(got[i] ^ v->cm_token[i]);
    return diff == 0;
}

static int cm_accept_server(struct vb *v, int deadline_ms, struct fs_err *err)
{
    struct rdma_cm_event *ev = NULL;
    uint64_t deadline = fs_now_ns() + (uint64_t)deadline_ms * 1000000ull;
    for (;;) {
        int left = fs_ms_until(deadline);
        if (left == 0 || cm_wait(v, RDMA_CM_EVENT_CONNECT_REQUEST, left, &ev, err)) {
            if (v->cm_strangers)
                return fs_fail(err, FS_EXIT_PEER,
                               "rdma_cm: no connection request with this session's token came "
                               "within %d ms; %u request(s) without it were rejected (something "
                               "else is connecting to %s: `rdma res show cm_id` names it; a client engine of "
                               "another fabscope version sends no token: run one version on both hosts)",
                               deadline_ms, v->cm_strangers, v->cm_local);
            return left == 0 ? fs_fail(err, FS_EXIT_PEER,
                                       "rdma_cm: no connection request within %d ms on %s",
                                       deadline_ms, v->cm_local)
                             : -1;
        }
        if (cm_request_ok(v, ev))
            break;
        v->cm_strangers++;
        struct rdma_cm_id *stranger = ev->id;
        rdma_reject(stranger, NULL, 0);
        rdma_ack_cm_event(ev);
        rdma_destroy_id(stranger);
        ev = NULL;
    }
    v->qp[0].id = ev->id;
    uint8_t peer_init = ev->param.conn.initiator_depth;
    struct sockaddr *pa = rdma_get_peer_addr(ev->id);
    char h[INET6_ADDRSTRLEN] = "?";
    if (pa && pa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)pa)->sin_addr, h, sizeof h);
    snprintf(v->cm_peer, sizeof v->cm_peer, "%s:%u", h, ntohs(rdma_get_dst_port(ev->id)));
    rdma_ack_cm_event(ev);
    if (vb_create_qps(v, err) || (v->needs_recv && vb_post_recvs(v, &v->qp[0], 0, v->rx_depth, err)))
        return -1;
    struct rdma_conn_param cp = {
        .responder_resources = (uint8_t)(peer_init < v->rd_atom ? peer_init : v->rd_atom),
        .initiator_depth = (uint8_t)v->rd_atom,
        .retry_count = 7,
        .rnr_retry_count = 7};
    if (rdma_accept(v->qp[0].id, &cp))
        return fs_fail(err, FS_EXIT_PEER, "rdma_cm: accept from %s: %s", v->cm_peer,
                       strerror(errno));
    /* librdmacm moved our QP to RTS inside rdma_accept. ESTABLISHED needs the client's RTU,
     * which its librdmacm sends only when the client reads its own event queue - and the client
     * is waiting for the core's "connected" now. So ESTABLISHED is awaited in prepare() on both
     * sides, after the core's handshake. */
    v->cm_pending = 1;
    return 0;
}

/* What rdma_cm chose, for the result. */
static void cm_learn_path(struct vb *v)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    if (v->qp[0].qp && ibv_query_qp(v->qp[0].qp, &a, IBV_QP_PATH_MTU | IBV_QP_DEST_QPN, &ia) == 0) {
        v->mtu_used = vb_mtu_bytes(a.path_mtu);
        v->qp[0].peer_qpn = a.dest_qp_num;
        snprintf(v->mtu_sel, sizeof v->mtu_sel, "rdma_cm: from the resolved path");
    }
    /* rdma_cm chooses the source GID from the bound address; record what it used. */
    struct rdma_cm_id *id = v->qp[0].id;
    if (id) {
        union ibv_gid sg;
        memcpy(sg.raw, id->route.addr.addr.ibaddr.sgid.raw, 16);
        if (!vb_gid_is_zero(&sg) && memcmp(sg.raw, v->gid.raw, 16) != 0) {
            vb_gid_text(&sg, v->gid_str, sizeof v->gid_str);
            snprintf(v->gid_sel, sizeof v->gid_sel, "rdma_cm: source GID of the bound address");
        }
    }
}

/* ---- rdma_cm events ------------------------------------------------------------------------- */

static int cm_wait(struct vb *v, enum rdma_cm_event_type want, int deadline_ms,
                   struct rdma_cm_event **out, struct fs_err *err)
{
    /* Bounded by counting poll() slices: the backend never reads the clock. */
    const int slice = 100;
    for (int waited = 0; waited <= deadline_ms; waited += slice) {
        struct rdma_cm_event *ev = NULL;
        if (rdma_get_cm_event(v->ech, &ev) == 0) {
            if (ev->event == want) {
                *out = ev;
                return 0;
            }
            enum rdma_cm_event_type got = ev->event;
            int status = ev->status;
            rdma_ack_cm_event(ev);
            const char *why =
                got == RDMA_CM_EVENT_REJECTED
                    ? "the peer rejected the connection (its rdma_cm side is not listening for "
                      "us, or the parameters differ)"
                : got == RDMA_CM_EVENT_UNREACHABLE
                    ? "the peer is unreachable over RDMA (no route, wrong GID, or UDP 4791 "
                      "blocked)"
                : got == RDMA_CM_EVENT_ADDR_ERROR
                    ? "the address did not resolve to an RDMA device (is it on an RDMA port's "
                      "netdev? `rdma link` shows which netdevs have one)"
                : got == RDMA_CM_EVENT_ROUTE_ERROR ? "no route to the peer"
                : got == RDMA_CM_EVENT_CONNECT_ERROR ? "the connection failed while being set up"
                : got == RDMA_CM_EVENT_DISCONNECTED ? "the peer disconnected"
                                                    : "unexpected event";
            return fs_fail(err, FS_EXIT_PEER,
                           "rdma_cm: waiting for %s between %s and %s, got %s (status %d): %s",
                           rdma_event_str(want), v->cm_local, v->cm_peer[0] ? v->cm_peer : "peer",
                           rdma_event_str(got), status, why);
        }
        if (errno != EAGAIN)
            return fs_fail(err, FS_EXIT_MEASURE, "rdma_cm: reading events: %s", strerror(errno));
        struct pollfd p = {.fd = v->ech->fd, .events = POLLIN};
        poll(&p, 1, slice);
    }
    return fs_fail(err, FS_EXIT_PEER,
                   "rdma_cm: no %s within %d ms between %s and %s (peer gone, or the path drops "
                   "RoCE/UDP 4791)",
                   rdma_event_str(want), deadline_ms, v->cm_local,
                   v->cm_peer[0] ? v->cm_peer : "peer");
}

/* ---- what the rest of the backend calls (verbs_int.h) ----------------------------------------- */

int vb_cm_select_device(struct vb *v, const char *want, int *n, struct fs_err *err)
{
    /* rdma_cm resolves addresses to its own contexts; the PD, CQ and MR must live on the
     * same one as the cm_id's QP. */
    v->cm_list = rdma_get_devices(n);
    if (!v->cm_list || *n == 0)
        return vb_no_devices(err, v->cm_list ? 0 : errno);
    int pick = -1;
    for (int i = 0; i < *n; i++)
        if (want[0] && strcmp(ibv_get_device_name(v->cm_list[i]->device), want) == 0)
            pick = i;
    if (!want[0] && *n == 1)
        pick = 0;
    if (pick >= 0) {
        v->ctx = v->cm_list[pick];
        snprintf(v->dev_name, sizeof v->dev_name, "%s", ibv_get_device_name(v->ctx->device));
        snprintf(v->dev_sel, sizeof v->dev_sel, "%s",
                 want[0] ? "--device" : "the only RDMA device on this host (no --device given)");
        return 0;
    }
    return 1;
}

int vb_cm_create_qp(struct vb *v, int i, struct ibv_qp_init_attr *a)
{
    int rc = rdma_create_qp(v->qp[i].id, v->pd, a) ? errno : 0;
    if (rc == 0)
        v->qp[i].qp = v->qp[i].id->qp;
    return rc;
}

int vb_cm_setup(struct vb *v, const char *bind, struct fs_err *err)
{
    v->ech = rdma_create_event_channel();
    if (!v->ech)
        return fs_fail(err, FS_EXIT_MEASURE, "rdma_cm: cannot create an event channel: %s",
                       strerror(errno));
    fcntl(v->ech->fd, F_SETFL, fcntl(v->ech->fd, F_GETFL) | O_NONBLOCK);
    /* The data address belongs to the chosen device: --bind, else the IPv4 of its GID.
     * (Binding to the control address could land on loopback, which rdma_cm maps to an
     * arbitrary device.) */
    char dev_ip[INET_ADDRSTRLEN] = "";
    if (!bind[0] && !v->gid_ip[0])
        vb_device_ipv4(v, dev_ip, sizeof dev_ip);
    const char *addr = bind[0] ? bind : v->gid_ip[0] ? v->gid_ip : dev_ip;
    if (!addr[0])
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cm needs an IP address on %s port %d: its GID has none (%s); give "
                       "the address of its netdev/IPoIB interface with --bind",
                       v->dev_name, v->port, v->gid_str[0] ? v->gid_str : "no GID");
    snprintf(v->cm_local, sizeof v->cm_local, "%s", addr);
    if (v->is_server) {
        struct sockaddr_in sin = {.sin_family = AF_INET};
        if (inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
            return fs_fail(err, FS_EXIT_USAGE, "--cm: '%s' is not an IPv4 address", addr);
        if (rdma_create_id(v->ech, &v->listen_id, v, RDMA_PS_TCP) ||
            rdma_bind_addr(v->listen_id, (struct sockaddr *)&sin))
            return fs_fail(err, FS_EXIT_USAGE,
                           "rdma_cm: cannot bind to %s: %s (is it an address of an RDMA "
                           "port's netdev?)",
                           addr, strerror(errno));
        if (!v->listen_id->verbs || v->listen_id->verbs->device != v->ctx->device)
            return fs_fail(err, FS_EXIT_USAGE,
                           "rdma_cm: address %s belongs to device %s, not %s (chosen by %s)",
                           addr,
                           v->listen_id->verbs
                               ? ibv_get_device_name(v->listen_id->verbs->device)
                               : "(none)",
                           v->dev_name, v->dev_sel);
        /* A backlog beyond the one client: a stranger's request waiting to be read and rejected must
         * not make the kernel turn the real client's away. */
        if (rdma_listen(v->listen_id, 8))
            return fs_fail(err, FS_EXIT_MEASURE, "rdma_cm: listen on %s: %s", addr,
                           strerror(errno));
        snprintf(v->cm_local, sizeof v->cm_local, "%s:%u", addr,
                 ntohs(rdma_get_src_port(v->listen_id)));
    }
    return 0;
}

void vb_cm_local_address(struct vb *v, cJSON *o)
{
    if (v->is_server) {
        char a[INET6_ADDRSTRLEN];
        snprintf(a, sizeof a, "%s", v->cm_local);
        char *colon = strrchr(a, ':');
        if (colon)
            *colon = '\0';
        cJSON_AddStringToObject(o, "cm_addr", a);
        cJSON_AddNumberToObject(o, "cm_port", ntohs(rdma_get_src_port(v->listen_id)));
    }
}

int vb_cm_connect(struct vb *v, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    int rc = v->is_server ? cm_accept_server(v, deadline_ms, err)
                          : cm_connect_client(v, peer, deadline_ms, err);
    if (rc)
        return -1;
    if (v->is_server) {
        cm_learn_path(v);
        v->connected = 1;
    }
    return 0;
}

int vb_cm_established(struct vb *v, struct fs_err *err)
{
    struct rdma_cm_event *ev = NULL;
    if (cm_wait(v, RDMA_CM_EVENT_ESTABLISHED, v->timeout_ms, &ev, err))
        return -1;
    rdma_ack_cm_event(ev);
    v->cm_pending = 0;
    cm_learn_path(v);
    v->connected = 1;
    return 0;
}

void vb_cm_close_qp(struct vb *v, int i)
{
    if (v->connected)
        rdma_disconnect(v->qp[i].id);
    if (v->qp[i].qp)
        rdma_destroy_qp(v->qp[i].id);
    rdma_destroy_id(v->qp[i].id);
}

void vb_cm_close(struct vb *v)
{
    if (v->listen_id)
        rdma_destroy_id(v->listen_id);
    if (v->ech)
        rdma_destroy_event_channel(v->ech);
}

void vb_cm_free_devices(struct vb *v)
{
    if (v->cm_list)
        rdma_free_devices(v->cm_list);
}
