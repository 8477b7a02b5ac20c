/* SPDX-License-Identifier: BSD-3-Clause */
/* Client and server flows around the timing loops: configuration agreement, connection, the
 * per-size protocol, and the result records. */
#include "engine.h"
#include "collective.h"

#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "datapath.h"
#include "output.h"
#include "sysfs.h"

const struct fs_op_info fs_ops[FS_OP_COUNT] = {
    [FS_OP_SEND] = {"send", FS_ROLE_ACTIVE, FS_ROLE_ACTIVE, 0, "two-sided send/receive"},
    [FS_OP_WRITE] = {"write", FS_ROLE_ACTIVE, FS_ROLE_PASSIVE, 0,
                     "one-sided write; lat: the target polls its memory"},
    [FS_OP_WRITE_IMM] = {"write_imm", FS_ROLE_ACTIVE, FS_ROLE_ACTIVE, 0,
                         "write with immediate data; the target gets a completion"},
    [FS_OP_READ] = {"read", FS_ROLE_PASSIVE, FS_ROLE_PASSIVE, 0, "one-sided read"},
    [FS_OP_FADD] = {"fadd", FS_ROLE_PASSIVE, FS_ROLE_PASSIVE, 8, "atomic fetch-and-add, 8 bytes"},
    [FS_OP_CSWAP] = {"cswap", FS_ROLE_PASSIVE, FS_ROLE_PASSIVE, 8,
                     "atomic compare-and-swap, 8 bytes"},
    [FS_OP_TAG] = {"tag", FS_ROLE_ACTIVE, FS_ROLE_ACTIVE, 0, "tagged send/receive"},
    [FS_OP_AM] = {"am", FS_ROLE_ACTIVE, FS_ROLE_ACTIVE, 0, "active message"},
};

const char *const fs_pattern_names[FS_PAT_COUNT] = {
    "lat", "bw", "bibw", "allreduce", "reduce_scatter", "allgather", "alltoall", "bcast", "barrier"};

int fs_op_by_name(const char *name)
{
    for (int i = 0; i < FS_OP_COUNT; i++)
        if (strcmp(fs_ops[i].name, name) == 0)
            return i;
    return -1;
}

int fs_pattern_by_name(const char *name)
{
    for (int i = 0; i < FS_PAT_COUNT; i++)
        if (strcmp(fs_pattern_names[i], name) == 0)
            return i;
    return -1;
}

static void cap_list(uint32_t mask, int ops, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    int n = ops ? FS_OP_COUNT : FS_PAT_COUNT;
    for (int i = 0; i < n && used < len; i++)
        if (mask & FS_BIT(i))
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "",
                                     ops ? fs_ops[i].name : fs_pattern_names[i]);
}

/* The operation (ops = 1) or pattern called `name`, which backend b must offer: its index, or -1
 * after naming the ones b has. */
static int backend_offers(const struct fs_backend_ops *b, int ops, const char *name,
                          struct fs_err *err)
{
    int i = ops ? fs_op_by_name(name) : fs_pattern_by_name(name);
    uint32_t offered = ops ? b->ops : b->patterns;
    if (i >= 0 && (offered & FS_BIT(i)))
        return i;
    char list[256];
    cap_list(offered, ops, list, sizeof list);
    return fs_fail(err, FS_EXIT_USAGE,
                   ops ? "--op %s: not an operation of backend %s; it has: %s"
                       : "--pattern %s: backend %s supports: %s",
                   name, b->name, list);
}

int fs_run_select_backend(struct fs_run *r, struct fs_err *err)
{
    r->bops = fs_backend_by_name(r->spec.backend);
    if (!r->bops) {
        char names[256] = "";
        size_t n, used = 0;
        const struct fs_backend_ops *const *all = fs_backends(&n);
        for (size_t i = 0; i < n; i++)
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                     all[i]->name);
        const struct fs_backend_known *k = fs_backend_known_by_name(r->spec.backend);
        if (k && !k->ops && strcmp(k->name, "mpi") != 0)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--backend %s: this engine was built without it (%s was missing at "
                           "build time). Built-in backends: %s. Install it and rebuild (`make "
                           "setup`)",
                           r->spec.backend, k->package, names);
        /* Names are lower case; "MPI" or "Verbs" is a typo worth naming. mpi is a backend of
         * the MPI engine that the front end starts under a launcher, not of this one. */
        const char *like = strcasecmp(r->spec.backend, "mpi") == 0 ? "mpi" : NULL;
        for (size_t i = 0; i < n && !like; i++)
            if (strcasecmp(all[i]->name, r->spec.backend) == 0)
                like = all[i]->name;
        return fs_fail(err, FS_EXIT_USAGE,
                       "--backend %s: unknown backend%s%s%s; available: %s, and mpi (`fabscope run "
                       "--backend mpi`, under mpirun or srun)",
                       r->spec.backend, like ? " (names are lower case: did you mean " : "",
                       like ? like : "", like ? "?)" : "", names);
    }
    if (fs_backend_check(r->bops, err))
        return -1;
    /* Selecting the backend that is already selected keeps the options parsed into it: main()
     * selects again after parse_args, which used to reset every --<backend>-option to its
     * default. */
    if (r->bopts && r->be_set.rows == r->bops->options && r->be_set.base == r->bopts)
        return 0;
    free(r->bopts);
    r->bopts = r->bops->options_size ? calloc(1, r->bops->options_size) : NULL;
    r->be_set.scope = r->bops->name;
    r->be_set.rows = r->bops->options;
    r->be_set.base = r->bopts;
    return fs_opt_set_defaults(&r->be_set, err);
}

/* Resolves documented pattern-dependent defaults and checks combinations. Never changes a value
 * the user gave. */
int fs_run_validate(struct fs_run *r, struct fs_err *err)
{
    if (!r->spec.op[0]) {
        for (int i = 0; i < FS_OP_COUNT; i++)
            if (r->bops->ops & FS_BIT(i)) {
                snprintf(r->spec.op, sizeof r->spec.op, "%s", fs_ops[i].name);
                break;
            }
    }
    int op = backend_offers(r->bops, 1, r->spec.op, err);
    int pat = op < 0 ? -1 : backend_offers(r->bops, 0, r->spec.pattern, err);
    if (pat < 0)
        return -1;
    r->op = (enum fs_op)op;
    r->pat = (enum fs_pattern)pat;
    if (fs_collective_check(&r->spec, r->pat, err))
        return -1;
    long cpu;
    if (fs_cpu_asked_check(r->spec.cpu, &cpu, err))
        return -1;
    if (!r->backend_by_peer && strchr(r->spec.device, ',') && !r->bops->device_list)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s names several devices, and backend %s runs on one; measure "
                       "one device per run, or use --backend verbs (QPs spread over the devices) "
                       "or --backend ucx (the list is its UCX_NET_DEVICES)",
                       r->spec.device, r->bops->name);
    if (r->spec.sizes.n == 0) {
        r->spec.sizes.n = 1;
        r->spec.sizes.v[0] = fs_ops[op].fixed_size ? (uint64_t)fs_ops[op].fixed_size
                             : r->pat == FS_PAT_LAT ? FS_DEFAULT_LAT_SIZE
                                                    : FS_DEFAULT_BW_SIZE;
    }
    if (fs_ops[op].fixed_size)
        for (size_t i = 0; i < r->spec.sizes.n; i++)
            if (r->spec.sizes.v[i] != (uint64_t)fs_ops[op].fixed_size)
                return fs_fail(err, FS_EXIT_USAGE,
                               "--op %s moves exactly %d bytes; use --sizes %d (got %llu)",
                               r->spec.op, fs_ops[op].fixed_size, fs_ops[op].fixed_size,
                               (unsigned long long)r->spec.sizes.v[i]);
    if (r->pat != FS_PAT_LAT && r->spec.duration <= 0 && r->spec.iters < 2)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--iters %ld: a bandwidth test needs at least 2 messages (the receiver "
                       "times from the first arrival to the last)",
                       r->spec.iters);
    if (fs_interval_resolve(r, err))
        return -1;
    if (strcmp(r->spec.poll, "auto") == 0)
        r->block = r->pat != FS_PAT_LAT;
    else
        r->block = strcmp(r->spec.poll, "block") == 0;
    r->timeout_ns = (uint64_t)(r->spec.timeout * 1e9);
    if (!r->backend_by_peer && r->bops->check && r->bops->check(&r->spec, r->bopts, err)) {
        if (!err->code)
            err->code = FS_EXIT_USAGE;
        return -1;
    }
    return 0;
}

static int send_error(struct fs_run *r, const struct fs_err *e)
{
    if (r->ctl.fd < 0)
        return 0;
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "error");
    cJSON_AddNumberToObject(m, "code", e->code);
    cJSON_AddStringToObject(m, "message", e->msg);
    struct fs_err ignore;
    fs_ctl_send(&r->ctl, m, 1000, &ignore);
    cJSON_Delete(m);
    return 0;
}

static int timeout_ms(const struct fs_run *r) { return (int)(r->timeout_ns / 1000000); }

static uint64_t max_size(const struct fs_run *r)
{
    uint64_t m = 0;
    for (size_t i = 0; i < r->spec.sizes.n; i++)
        if (r->spec.sizes.v[i] > m)
            m = r->spec.sizes.v[i];
    return m;
}

/* hint: the client's data_path (server only), for a server with no --device/--bind. */
static int backend_setup(struct fs_run *r, const cJSON *hint, struct fs_err *err)
{
    fs_sock_addrs(r->ctl.fd, r->ctl_local, sizeof r->ctl_local, r->ctl_peer, sizeof r->ctl_peer);
    struct fs_be_ctx ctx = {.spec = &r->spec,
                            .opts = r->bopts,
                            .is_server = r->is_server,
                            .max_size = max_size(r),
                            .ctl_local_addr = r->ctl_local,
                            .ctl_peer_addr = r->ctl_peer,
                            .data_local_addr = r->data_local[0] ? r->data_local : NULL,
                            .data_path = r->spec.device[0] || r->spec.bind[0] ? NULL : hint,
                            .block = r->block,
                            .session_key = r->ctl.mac_on ? r->ctl.mac_key : NULL};
    if (r->bops->setup(&ctx, &r->be, err)) {
        if (!err->code)
            err->code = FS_EXIT_MEASURE;
        return -1; /* r->be may be half set up: teardown handles that */
    }
    return 0;
}

/* ---- connection: both sides trade backend addresses the same way ------------------------ */

/* Which kernel boot we run on, in config and ready: the peer learns whether it shares our CPUs. */
static void add_boot_id(const struct fs_run *r, cJSON *m)
{
    if (r->si.boot_id[0])
        cJSON_AddStringToObject(m, "boot_id", r->si.boot_id);
}

/* A peer whose boot id differs from ours runs on another machine; one that sent none, or ours
 * unknown, counts as this machine (the cautious side: an idle target then sleeps). */
static void note_peer_boot(struct fs_run *r, const cJSON *m)
{
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(m, "boot_id");
    r->peer_elsewhere = cJSON_IsString(b) && b->valuestring[0] && r->si.boot_id[0] &&
                        strcmp(b->valuestring, r->si.boot_id) != 0;
}

/* Sends {"type": type, "address": what the peer needs to reach our backend}. */
static int send_address(struct fs_run *r, const char *type, struct fs_err *err)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", type);
    add_boot_id(r, m);
    cJSON *addr = cJSON_AddObjectToObject(m, "address");
    int rc = r->bops->local_address(r->be, addr, err) || fs_ctl_send(&r->ctl, m, timeout_ms(r), err);
    cJSON_Delete(m);
    return rc ? -1 : 0;
}

/* Waits for a `type` message and connects the backend to the address it carries. */
static int connect_from(struct fs_run *r, const char *type, struct fs_err *err)
{
    cJSON *m = NULL;
    if (fs_ctl_expect(&r->ctl, type, timeout_ms(r), &m, err))
        return -1;
    note_peer_boot(r, m);
    int rc = r->bops->connect(r->be, cJSON_GetObjectItemCaseSensitive(m, "address"), timeout_ms(r),
                              err);
    cJSON_Delete(m);
    return rc;
}

/* ---- per-size protocol ------------------------------------------------------------------ */

static int size_phases(struct fs_run *r, uint64_t size, struct fs_side_view *mine,
                       struct fs_side_view *theirs, struct fs_side_view *warm_mine,
                       cJSON **peer_msg, struct fs_err *err)
{
    struct fs_side_view warm_theirs;
    memset(warm_mine, 0, sizeof *warm_mine);
    fs_samples_clear(&r->samples);
    if (r->spec.warmup > 0 && r->spec.warmup_time > 0) {
        if (fs_phase_run(r, FS_PHASE_WARMUP, size, warm_mine, err) ||
            fs_phase_exchange(r, warm_mine, NULL, &warm_theirs, NULL, err))
            return -1;
    }
    if (fs_phase_run(r, FS_PHASE_MEASURE, size, mine, err))
        return -1;
    cJSON *extra = cJSON_CreateObject();
    cJSON *sys = cJSON_AddObjectToObject(extra, "host");
    fs_host_json(&r->si, sys);
    /* Our transport as it is after this size's measured phase (what it retransmitted, its path
     * MTU): the client prints it as the peer's, not the description sent when connecting. */
    r->bops->describe(r->be, cJSON_AddObjectToObject(extra, "transport"));
    if (fs_phase_exchange(r, mine, extra, theirs, peer_msg, err))
        return -1;
    /* The counters are read only now that both sides have ended the phase: every byte a sender
     * queued has then reached the receiver. A sender's phase ends when its last write is queued,
     * up to a socket buffer (and a shaped link's queue) earlier, so a snapshot taken then missed
     * the tail of the payload and the sender's path verdict fell short of it. The server sends
     * its snapshot; the client, which prints the record, attaches it to the peer's message. */
    fs_counters_snap(&r->cnt_after, r->ctl.fd);
    cJSON *cnt = fs_counters_json(&r->cnt_before, &r->cnt_after);
    if (r->is_server) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "counters");
        cJSON_AddItemToObject(m, "counters", cnt);
        int rc = fs_ctl_send(&r->ctl, m, timeout_ms(r), err);
        cJSON_Delete(m);
        return rc ? -1 : 0;
    }
    cJSON_Delete(cnt); /* the client's own counters are printed from cnt_before/cnt_after */
    cJSON *m = NULL;
    if (fs_ctl_expect(&r->ctl, "counters", timeout_ms(r), &m, err))
        return -1;
    cJSON *peer_cnt = cJSON_DetachItemFromObjectCaseSensitive(m, "counters");
    cJSON_Delete(m);
    if (peer_msg && *peer_msg && peer_cnt)
        cJSON_AddItemToObject(*peer_msg, "counters", peer_cnt);
    else
        cJSON_Delete(peer_cnt);
    return 0;
}

static int prepare_size(struct fs_run *r, uint64_t size, struct fs_err *err)
{
    if (r->bops->prepare(r->be, r->op, size, err)) {
        if (!err->code)
            err->code = FS_EXIT_MEASURE;
        return -1;
    }
    fs_counters_snap(&r->cnt_before, r->ctl.fd);
    return 0;
}

/* ---- server ------------------------------------------------------------------------------ */

/* The client named its --device's networks: without a device or address of our own, the data
 * endpoint goes on our address in one of them, not on the address control came in on. */
static void server_data_path(struct fs_run *r, const cJSON *hint)
{
    r->data_local[0] = '\0';
    struct ifaddrs *ifa = NULL;
    if (!hint || r->spec.device[0] || r->spec.bind[0] || getifaddrs(&ifa))
        return;
    if (fs_datapath_pick(hint, ifa, r->data_local, sizeof r->data_local))
        r->data_local[0] = '\0';
    freeifaddrs(ifa);
}

int fs_run_server(struct fs_run *r, struct fs_err *err)
{
    r->is_server = 1;
    cJSON *m = NULL;
    int rc = -1;
    if (!r->spec.session_open && fs_session_server(&r->ctl, timeout_ms(r), err))
        return -1;
    if (fs_ctl_expect(&r->ctl, "config", timeout_ms(r), &m, err))
        return -1;
    /* Adopt the client's shared settings; our local ones (device, address, CPU) stay. */
    const cJSON *core = cJSON_GetObjectItemCaseSensitive(m, "core");
    const cJSON *beo = cJSON_GetObjectItemCaseSensitive(m, "backend");
    if (!cJSON_IsObject(core) || !cJSON_IsObject(beo)) {
        fs_fail(err, FS_EXIT_PEER, "protocol error: 'config' lacks core/backend settings");
        goto fail;
    }
    r->backend_by_peer = 0;
    if (fs_opt_apply_wire(&r->core_set, core, err) || fs_run_select_backend(r, err) ||
        fs_opt_apply_wire(&r->be_set, beo, err) || fs_run_validate(r, err))
        goto fail;
    note_peer_boot(r, m);
    const cJSON *hint = cJSON_GetObjectItemCaseSensitive(m, "data_path");
    server_data_path(r, hint);
    if (backend_setup(r, hint, err))
        goto fail;
    cJSON_Delete(m);
    m = NULL;
    if (send_address(r, "ready", err) || connect_from(r, "connect", err))
        goto fail;
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "connected");
    cJSON *tr = cJSON_AddObjectToObject(m, "transport");
    r->bops->describe(r->be, tr);
    if (fs_ctl_send(&r->ctl, m, timeout_ms(r), err))
        goto fail;
    cJSON_Delete(m);
    m = NULL;
    if (fs_clock_setup(r->spec.clock, "", &r->clock, err)) /* begun at start-up (entry.c) */
        goto fail;
    for (;;) {
        if (fs_ctl_recv(&r->ctl, timeout_ms(r), &m, err))
            return -1;
        const char *t = fs_ctl_type(m);
        if (strcmp(t, "bye") == 0) {
            cJSON_Delete(m);
            return 0;
        }
        if (strcmp(t, "error") == 0) {
            const cJSON *msg = cJSON_GetObjectItemCaseSensitive(m, "message");
            fs_fail(err, FS_EXIT_PEER, "the client reported: %s",
                    cJSON_IsString(msg) ? msg->valuestring : "(no message)");
            cJSON_Delete(m);
            return -1;
        }
        const cJSON *sz = cJSON_GetObjectItemCaseSensitive(m, "size");
        if (strcmp(t, "size") != 0 || !cJSON_IsNumber(sz) || sz->valuedouble < 1 ||
            sz->valuedouble > (double)max_size(r)) {
            fs_fail(err, FS_EXIT_PEER, "protocol error: expected 'size' within the agreed sizes, "
                                       "got '%s'", t);
            goto fail;
        }
        uint64_t size = (uint64_t)sz->valuedouble;
        cJSON_Delete(m);
        m = NULL;
        if (prepare_size(r, size, err))
            goto fail;
        cJSON *ok = cJSON_CreateObject();
        cJSON_AddStringToObject(ok, "type", "prepared");
        rc = fs_ctl_send(&r->ctl, ok, timeout_ms(r), err);
        cJSON_Delete(ok);
        if (rc)
            goto fail;
        struct fs_side_view mine, theirs, warm;
        if (size_phases(r, size, &mine, &theirs, &warm, NULL, err))
            goto fail;
    }
fail:
    cJSON_Delete(m);
    send_error(r, err);
    return -1;
}

/* ---- client ------------------------------------------------------------------------------ */

/* Names the networks of our --device in `config`, for a server without a device of its own. */
static void client_data_path(const struct fs_run *r, cJSON *config)
{
    struct ifaddrs *ifa = NULL;
    if (!r->spec.device[0] || getifaddrs(&ifa))
        return;
    cJSON *dp = cJSON_CreateObject();
    /* "device"/"networks" for a netdev (tcp, libfabric); "devices" for each name of the list,
     * RDMA devices by the netdev they send through (verbs: the server pairs its devices by
     * network). */
    int said = fs_datapath_describe(r->spec.device, ifa, dp);
    said += fs_datapath_describe_list(r->spec.device, ifa, fs_sysfs_root(), dp);
    if (said > 0)
        cJSON_AddItemToObject(config, "data_path", dp);
    else
        cJSON_Delete(dp);
    freeifaddrs(ifa);
}

/* --start-at: sleep until the agreed wall-clock second, bounded by --timeout (the server waits
 * for our first size message no longer than its own). */
static int wait_start_at(const struct fs_run *r, struct fs_err *err)
{
    if (r->spec.start_at <= 0)
        return 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double delay = r->spec.start_at - ((double)now.tv_sec + (double)now.tv_nsec / 1e9);
    if (delay <= 0)
        return 0;
    if (delay >= r->spec.timeout)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--start-at %.3f is %.1f s from now, not within --timeout %g s (the peer "
                       "would stop waiting); give a time sooner than --timeout, or a longer "
                       "--timeout",
                       r->spec.start_at, delay, r->spec.timeout);
    struct timespec ts = {(time_t)delay, (long)((delay - floor(delay)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
    return 0;
}

int fs_run_client(struct fs_run *r, struct fs_out *out, struct fs_err *err)
{
    r->is_server = 0;
    cJSON *m = NULL;
    if (!r->spec.session_open && fs_session_client(&r->ctl, timeout_ms(r), err))
        return -1;
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "config");
    fs_opt_wire_json(&r->core_set, cJSON_AddObjectToObject(m, "core"));
    fs_opt_wire_json(&r->be_set, cJSON_AddObjectToObject(m, "backend"));
    client_data_path(r, m);
    add_boot_id(r, m);
    /* Our deadline, for `fabscope serve`: it starts the peer engine with it, within its limits
     * (an engine server started by hand keeps its own --timeout). */
    cJSON_AddNumberToObject(m, "timeout", r->spec.timeout);
    int rc = fs_ctl_send(&r->ctl, m, timeout_ms(r), err);
    cJSON_Delete(m);
    m = NULL;
    if (rc || backend_setup(r, NULL, err) || connect_from(r, "ready", err) ||
        send_address(r, "connect", err))
        goto fail;
    cJSON *connected = NULL;
    if (fs_ctl_expect(&r->ctl, "connected", timeout_ms(r), &connected, err))
        return -1;
    cJSON *peer_transport = cJSON_DetachItemFromObjectCaseSensitive(connected, "transport");
    cJSON_Delete(connected);
    if (fs_clock_setup(r->spec.clock, "", &r->clock, err)) /* begun at start-up (entry.c) */
        goto fail_transport;
    if (wait_start_at(r, err))
        goto fail_transport;
    fs_out_begin(out, r);
    for (size_t i = 0; i < r->spec.sizes.n; i++) {
        uint64_t size = r->spec.sizes.v[i];
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "size");
        cJSON_AddNumberToObject(m, "size", (double)size);
        rc = fs_ctl_send(&r->ctl, m, timeout_ms(r), err);
        cJSON_Delete(m);
        m = NULL;
        if (rc || prepare_size(r, size, err))
            goto fail_transport;
        if (fs_ctl_expect(&r->ctl, "prepared", timeout_ms(r), &m, err))
            goto fail_transport;
        cJSON_Delete(m);
        m = NULL;
        struct fs_side_view mine, theirs, warm;
        cJSON *peer_msg = NULL;
        if (size_phases(r, size, &mine, &theirs, &warm, &peer_msg, err)) {
            cJSON_Delete(peer_msg);
            goto fail_transport;
        }
        rc = fs_out_record(out, r, size, &mine, &theirs, &warm, peer_msg, peer_transport, err);
        cJSON_Delete(peer_msg);
        if (rc)
            goto fail_transport;
    }
    cJSON_Delete(peer_transport);
    m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "type", "bye");
    fs_ctl_send(&r->ctl, m, timeout_ms(r), err);
    cJSON_Delete(m);
    return 0;
fail_transport:
    cJSON_Delete(peer_transport);
fail:
    cJSON_Delete(m);
    send_error(r, err);
    return -1;
}
