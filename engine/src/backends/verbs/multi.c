/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: several devices (--device A,B) behind the one backend the core sees, and
 * the backend's ops. */
#define _GNU_SOURCE
#include "verbs_int.h"

/* ---- several devices (--device A,B) --------------------------------------------------------- */

/* One verbs engine per device, each with its own context, PD, buffer and MR, CQ and --qps QPs,
 * behind the one backend the core sees. Work requests go round-robin over the devices (then
 * over each device's QPs); the peer pairs its devices with ours in the order given. With one
 * device every hook is the single engine's, unchanged. */
struct vbm {
    int n;
    struct vb *d[VB_MAX_DEVS];
    char names[VB_MAX_DEVS][IBV_SYSFS_NAME_MAX];
    uint64_t rr;
};

/* "rxe0,rxe1" -> names; "" -> one unnamed device (the engine picks the host's only one). */
static int split_devices(const char *list, char out[][IBV_SYSFS_NAME_MAX], int *n,
                         struct fs_err *err)
{
    *n = 0;
    if (!list[0]) {
        out[0][0] = '\0';
        *n = 1;
        return 0;
    }
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == 0)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--device %s: an empty name in the list; give NAME or NAME,NAME,...",
                           list);
        if (*n == VB_MAX_DEVS)
            return fs_fail(err, FS_EXIT_USAGE, "--device %s: at most %d devices in one run", list,
                           VB_MAX_DEVS);
        if (len >= IBV_SYSFS_NAME_MAX)
            return fs_fail(err, FS_EXIT_USAGE, "--device %s: a name longer than %d characters",
                           list, IBV_SYSFS_NAME_MAX - 1);
        memcpy(out[*n], p, len);
        out[*n][len] = '\0';
        for (int i = 0; i < *n; i++)
            if (strcmp(out[i], out[*n]) == 0)
                return fs_fail(err, FS_EXIT_USAGE,
                               "--device %s names %s twice; for more queue pairs on one device "
                               "use --qps N",
                               list, out[i]);
        (*n)++;
        if (!comma)
            return 0;
        p = comma + 1;
    }
}

static int several_devices_allowed(const struct vb_opts *o, const char *list, int n,
                                   struct fs_err *err)
{
    if (n > 1 && o->cm)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cm with --device %s: fabscope's rdma_cm path opens one connection on "
                       "one device; drop --cm (QP numbers are then exchanged over the control "
                       "channel) or run one device per measurement",
                       list);
    return 0;
}

static int vbm_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    char names[VB_MAX_DEVS][IBV_SYSFS_NAME_MAX];
    int n = 0;
    if (!spec->device[0])
        return 0;
    if (split_devices(spec->device, names, &n, err) ||
        several_devices_allowed(opts, spec->device, n, err))
        return -1;
    for (int i = 0; i < n; i++)
        if (vb_check_name(names[i], err))
            return -1;
    return 0;
}

/* The RDMA device whose port sends through `netdev` (a RoCE port's GID table names it). */
static int rdma_device_on(const char *netdev, char *name, size_t len)
{
    int n = 0, found = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    for (int i = 0; l && i < n && !found; i++) {
        struct ibv_context *c = ibv_open_device(l[i]);
        struct ibv_device_attr da;
        if (!c)
            continue;
        for (int p = 1; !found && ibv_query_device(c, &da) == 0 && p <= da.phys_port_cnt; p++) {
            char nd[IF_NAMESIZE + 1];
            vb_port_netdev(c, p, nd, sizeof nd);
            if (strcmp(nd, netdev) == 0) {
                snprintf(name, len, "%s", ibv_get_device_name(l[i]));
                found = 1;
            }
        }
        ibv_close_device(c);
    }
    if (l)
        ibv_free_device_list(l);
    return found ? 0 : -1;
}

/* A server given no --device: the client named the networks of each device of its list
 * (datapath.h); ours are the devices on the same networks, in the client's order, so rxe1 pairs
 * with the peer's device on rxe1's network whatever the names. Fills `list` and says how in
 * `sel`. Returns 0 when every device was matched, 1 when the hint says nothing usable (the old
 * rule applies: this host's only device), -1 (error set) when the client runs several devices
 * and some has no partner here: guessing would pair rails across networks. */
static int devices_by_network(const cJSON *hint, char *list, size_t len, char *sel, size_t sel_len,
                              struct fs_err *err)
{
    const cJSON *devs = cJSON_IsObject(hint) ? cJSON_GetObjectItemCaseSensitive(hint, "devices")
                                             : NULL;
    int n = cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 0;
    if (n < 1 || n > VB_MAX_DEVS)
        return 1;
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa))
        return 1;
    size_t used = 0, sused = 0;
    char missing[512] = "";
    size_t mused = 0;
    list[0] = sel[0] = '\0';
    const cJSON *d;
    cJSON_ArrayForEach(d, devs)
    {
        const cJSON *theirs = cJSON_GetObjectItemCaseSensitive(d, "device");
        const char *tname = cJSON_IsString(theirs) ? theirs->valuestring : "?";
        char addr[INET6_ADDRSTRLEN] = "", mine[IBV_SYSFS_NAME_MAX] = "";
        const char *netdev = fs_datapath_pick(d, ifa, addr, sizeof addr) == 0
                                 ? fs_datapath_owner(ifa, addr)
                                 : NULL;
        if (!netdev || rdma_device_on(netdev, mine, sizeof mine)) {
            const cJSON *nets = cJSON_GetObjectItemCaseSensitive(d, "networks");
            const cJSON *first = cJSON_IsArray(nets) ? cJSON_GetArrayItem(nets, 0) : NULL;
            if (mused < sizeof missing)
                mused += (size_t)snprintf(missing + mused, sizeof missing - mused, "%s%.64s (%s%s)",
                                          mused ? ", " : "", tname,
                                          cJSON_IsString(first) ? "on " : "no IP network",
                                          cJSON_IsString(first) ? first->valuestring : "");
            continue;
        }
        if (used < len)
            used += (size_t)snprintf(list + used, len - used, "%s%s", used ? "," : "", mine);
        if (sused < sel_len)
            sused += (size_t)snprintf(sel + sused, sel_len - sused, "%s%s: the client's %.64s is on "
                                      "this host's %s network (%s)",
                                      sused ? "; " : "", mine, tname, netdev, addr);
    }
    freeifaddrs(ifa);
    if (!missing[0])
        return 0;
    if (n == 1)
        return 1;
    char have[1536];
    vb_list_devices(have, sizeof have);
    return fs_fail(err, FS_EXIT_USAGE,
                   "the client runs on %d devices and this host (serve without --device) has no "
                   "RDMA device on the network of: %s. Devices here: %s. Give serve the devices "
                   "to pair with, in the client's order (`fabscope serve --device A,B`), or put "
                   "each rail of both hosts on one IP network",
                   n, missing, have);
}

static int vbm_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    struct vbm *m = calloc(1, sizeof *m);
    if (!m)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = m;
    struct fs_spec spec = *ctx->spec;
    struct fs_be_ctx one = *ctx;
    one.spec = &spec;
    char sel[256] = "";
    if (ctx->is_server && !spec.device[0] && ctx->data_path) {
        int rc = devices_by_network(ctx->data_path, spec.device, sizeof spec.device, sel,
                                    sizeof sel, err);
        if (rc < 0)
            return -1;
        if (rc > 0)
            spec.device[0] = sel[0] = '\0';
    }
    if (split_devices(spec.device, m->names, &m->n, err) ||
        several_devices_allowed(ctx->opts, spec.device, m->n, err))
        return -1;
    for (int i = 0; i < m->n; i++) {
        snprintf(spec.device, sizeof spec.device, "%s", m->names[i]);
        if (vb_setup(&one, (void **)&m->d[i], err))
            return -1;
        if (sel[0])
            snprintf(m->d[i]->dev_sel, sizeof m->d[i]->dev_sel, "no --device here; by network: %s",
                     sel);
        /* The core keeps tx_depth operations in flight over all devices together: a device asks
         * for a completion once it holds its share, not the whole window. */
        if (m->n > 1)
            m->d[i]->window = (ctx->spec->tx_depth + m->n - 1) / m->n;
    }
    return 0;
}

static int vbm_local_address(void *be, cJSON *o, struct fs_err *err)
{
    struct vbm *m = be;
    if (m->n == 1)
        return vb_local_address(m->d[0], o, err);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    for (int i = 0; i < m->n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToArray(devs, x);
        if (vb_local_address(m->d[i], x, err))
            return -1;
    }
    return 0;
}

/* "rxe0,rxe1" from the peer's address, for an error message. */
static void peer_device_names(const cJSON *peer, char *out, size_t len)
{
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(peer, "devices");
    size_t used = 0;
    out[0] = '\0';
    if (!cJSON_IsArray(devs)) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(peer, "device");
        snprintf(out, len, "%s", cJSON_IsString(d) ? d->valuestring : "?");
        return;
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, devs)
    {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(x, "device");
        if (used < len)
            used += (size_t)snprintf(out + used, len - used, "%s%s", used ? "," : "",
                                     cJSON_IsString(d) ? d->valuestring : "?");
    }
}

static int vbm_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct vbm *m = be;
    const cJSON *devs = cJSON_GetObjectItemCaseSensitive(peer, "devices");
    int peer_n = cJSON_IsArray(devs) ? cJSON_GetArraySize(devs) : 1;
    if (peer_n != m->n) {
        char mine[VB_MAX_DEVS * IBV_SYSFS_NAME_MAX], theirs[VB_MAX_DEVS * IBV_SYSFS_NAME_MAX];
        size_t used = 0;
        mine[0] = '\0';
        for (int i = 0; i < m->n && used < sizeof mine; i++)
            used += (size_t)snprintf(mine + used, sizeof mine - used, "%s%s", i ? "," : "",
                                     m->d[i]->dev_name);
        peer_device_names(peer, theirs, sizeof theirs);
        return fs_fail(err, FS_EXIT_USAGE,
                       "verbs: this side opened %d device%s (%s) and the peer %d (%s); the two "
                       "sides pair their devices in the order given, so both need as many: give "
                       "each side its list with --device (on the server: `fabscope serve "
                       "--device A,B`)",
                       m->n, m->n == 1 ? "" : "s", mine, peer_n, theirs);
    }
    if (m->n == 1)
        return vb_connect(m->d[0], peer, deadline_ms, err);
    for (int i = 0; i < m->n; i++)
        if (vb_connect(m->d[i], cJSON_GetArrayItem(devs, i), deadline_ms, err))
            return -1;
    return 0;
}

static int vbm_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct vbm *m = be;
    for (int i = 0; i < m->n; i++)
        if (vb_prepare(m->d[i], op, size, err))
            return -1;
    return 0;
}

static int vbm_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct vbm *m = be;
    if (m->n == 1)
        return vb_post(m->d[0], op, size, err);
    /* The next device in turn; one that holds its share of the window (or whose send queue is
     * full) passes its turn on. So each device keeps its own share in flight, and a faster rail
     * completes more operations than a slower one: the per-device rates show which is slow,
     * where strict turns would hold every rail to the slowest. Both sides of a ping-pong take
     * the same turns (one message in flight: nothing is ever full), so a reply leaves on the
     * device its request came in on. */
    for (int k = 0; k < m->n; k++) {
        struct vb *v = m->d[(m->rr + (uint64_t)k) % (uint64_t)m->n];
        if (v->unreported >= (uint64_t)v->window)
            continue;
        int rc = vb_post(v, op, size, err);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            m->rr += (uint64_t)k + 1;
            return 1;
        }
    }
    return 0;
}

static int vbm_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct vbm *m = be;
    if (m->n == 1)
        return vb_progress(m->d[0], wait_ms, ev, err);
    if (m->d[0]->passive_target) {
        ev->idle = 1;
        return 0;
    }
    int got = 0;
    for (int i = 0; i < m->n; i++) {
        int g = 0;
        if (vb_progress_now(m->d[i], ev, &g, err))
            return -1;
        got += g;
    }
    if (got || m->d[0]->mem_poll || wait_ms <= 0)
        return 0;
    for (int i = 0; i < m->n; i++)
        if (vb_arm_cq(m->d[i], ev, &got, err))
            return -1;
    if (got)
        return 0;
    struct pollfd p[VB_MAX_DEVS];
    for (int i = 0; i < m->n; i++)
        p[i] = (struct pollfd){.fd = m->d[i]->ch->fd, .events = POLLIN};
    if (poll(p, (nfds_t)m->n, wait_ms) <= 0)
        return 0;
    for (int i = 0; i < m->n; i++)
        if (p[i].revents && vb_take_cq_event(m->d[i], ev, &got, err))
            return -1;
    return 0;
}

static int vbm_lossy(void *be)
{
    const struct vbm *m = be;
    return vb_lossy(m->d[0]);
}

/* Several devices: each device's own description under "devices" (with the operations its QPs
 * completed and received, which the core turns into its bandwidth), and every QP in one "flows"
 * list naming its device. */
static void vbm_describe(void *be, cJSON *o)
{
    struct vbm *m = be;
    if (m->n == 1 || !m->d[m->n - 1]) {
        if (m->d[0])
            vb_describe(m->d[0], o);
        return;
    }
    char names[VB_MAX_DEVS * IBV_SYSFS_NAME_MAX];
    size_t used = 0;
    int port = m->d[0]->port;
    uint64_t flushes = 0;
    for (int i = 0; i < m->n; i++) {
        used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? "," : "",
                                 m->d[i]->dev_name);
        port = m->d[i]->port == port ? port : 0;
        flushes += m->d[i]->tail_flushes;
    }
    cJSON_AddStringToObject(o, "kind", "verbs");
    cJSON_AddStringToObject(o, "device", names);
    cJSON_AddStringToObject(o, "device_selection",
                            "--device: several devices, --qps queue pairs on each, work requests "
                            "round-robin over the devices");
    if (port)
        cJSON_AddNumberToObject(o, "port", port);
    cJSON_AddStringToObject(o, "qp_type", vb_svc_name(m->d[0]->svc));
    cJSON_AddNumberToObject(o, "qps_per_device", m->d[0]->nqp);
    cJSON_AddNumberToObject(o, "cq_mod", (double)m->d[0]->cq_mod);
    cJSON_AddNumberToObject(o, "tail_flushes", (double)flushes);
    cJSON_AddBoolToObject(o, "cm", 0);
    cJSON_AddBoolToObject(o, "verify", m->d[0]->o.verify);
    cJSON *devs = cJSON_AddArrayToObject(o, "devices");
    cJSON *flows = NULL;
    for (int i = 0; i < m->n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToArray(devs, x);
        vb_describe(m->d[i], x);
        cJSON *f = cJSON_DetachItemFromObjectCaseSensitive(x, "flows");
        if (!f)
            continue;
        double completed = 0, received = 0;
        if (!flows)
            flows = cJSON_AddArrayToObject(o, "flows");
        while (cJSON_GetArraySize(f) > 0) {
            cJSON *q = cJSON_DetachItemFromArray(f, 0);
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(q, "completed");
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(q, "received");
            completed += cJSON_IsNumber(c) ? c->valuedouble : 0;
            received += cJSON_IsNumber(r) ? r->valuedouble : 0;
            cJSON_AddStringToObject(q, "device", m->d[i]->dev_name);
            cJSON_AddItemToArray(flows, q);
        }
        cJSON_Delete(f);
        cJSON_AddNumberToObject(x, "completed", completed);
        cJSON_AddNumberToObject(x, "received", received);
    }
}

static int vbm_settle(void *be, struct fs_err *err)
{
    struct vbm *m = be;
    for (int i = 0; i < m->n; i++)
        if (vb_settle(m->d[i], err))
            return -1;
    return 0;
}

static void vbm_teardown(void *be)
{
    struct vbm *m = be;
    if (!m)
        return;
    for (int i = 0; i < m->n; i++)
        vb_teardown(m->d[i]);
    free(m);
}

static void vbm_phase_begin(void *be)
{
    struct vbm *m = be;
    for (int i = 0; i < m->n; i++)
        vb_phase_begin(m->d[i]);
}

const struct fs_backend_ops fs_backend_verbs = {
    .abi = FS_BACKEND_ABI,
    .name = "verbs",
    .summary = "RDMA verbs (RoCE/InfiniBand/iWARP): RC/UC/UD, send/write/write_imm/read/atomics, "
               "optional rdma_cm",
    .ops = FS_BIT(FS_OP_SEND) | FS_BIT(FS_OP_WRITE) | FS_BIT(FS_OP_WRITE_IMM) |
           FS_BIT(FS_OP_READ) | FS_BIT(FS_OP_FADD) | FS_BIT(FS_OP_CSWAP),
    .patterns = FS_PATTERNS_ALL,
    .options = vb_options,
    .options_size = sizeof(struct vb_opts),
    .device_list = 1,
    FS_BACKEND_HOOKS(vbm),
    .lossy = vbm_lossy,
    .phase_begin = vbm_phase_begin,
    .settle = vbm_settle,
};
