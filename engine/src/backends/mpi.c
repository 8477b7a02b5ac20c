/* SPDX-License-Identifier: BSD-3-Clause */
/* MPI backend: point-to-point between ranks 0 and 1 of MPI_COMM_WORLD, as MPI users see it, with
 * the same timing loop as every other transport. Built only into fabscope-engine-mpi-<flavor>,
 * whose main initialises MPI and runs rank 1 as the server and rank 0 as the client.
 *
 * Every result says which components MPI really selected, read from the library at run time
 * (Open MPI: the pml/mtl selected and the btls of the peer's endpoint; pml ucx: the UCX lanes;
 * MPICH: the device), and when a user setting had no effect (UCX_NET_DEVICES with ob1...). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/backend.h"
#include "../core/datapath.h"
#include "../core/rx_slots.h"
#include "../core/sysfs.h"

#ifdef OPEN_MPI
#include "mpi_ompi.h"
#endif
#ifdef FS_HAVE_UCX
#include "ucx_lanes.h"
#endif

#define MPI_TAG_DATA 4242
#define MPI_MAX_RX 256
/* Open MPI ping-pong: progress passes between two looks at the receive, per backend call. */
#define MPI_WAIT_PASSES 64

struct mpib {
    int rank, peer;
    uint64_t bufsize, size;
    long tx_depth;
    uint8_t *sbuf, *rbuf;
    /* One request array, receives in [0, nrx) and sends in [nrx, nrx + ntx), so one
     * MPI_Testsome (one pass of MPI's progress engine) per turn sees both: testing sends and
     * receives separately doubled the progress calls between two arrivals. */
    MPI_Request *req;
    int ntx, nrx;
    int pingpong; /* lat: one receive, tested with MPI_Test; sends freed once posted */
    int ompi_spin; /* Open MPI whose progress engine this build can spin (mpi_ompi_private.c) */
    int tx_used; /* active send requests */
    struct fs_rx_slots rx; /* the receives, m->req[0, nrx) */
    int *idx;
    /* Real status arrays rather than MPI_STATUSES_IGNORE: MPICH's header marks that argument
     * with an access size that GCC then flags (-Wstringop-overflow) for the (MPI_Status *)1
     * sentinel. */
    MPI_Status *st;
    /* Each rank's IPv4 address on the --device asked for ("" without one): swapped when the ranks
     * meet, so the record can carry the kernel's route to the peer's address on that network (a
     * host route over another netdev misroutes MPI's bytes whatever MPI was told). */
    char device_addr[INET_ADDRSTRLEN], peer_device_addr[INET_ADDRSTRLEN];
};

static int mpi_failc(struct fs_err *err, int code, const char *what, int rc)
{
    char s[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, s, &len);
    return fs_fail(err, code, "mpi: %s: %s", what, s);
}

/* This host's names, checked by each rank on its own host before MPI_Init (main_mpi.c) and again by
 * rank 0's engine: MPI itself would either ignore a device that is not there (no silent fallback,
 * ever) or fail MPI_Init with a message about unreachable processes. --device is a netdev (what
 * btl_tcp_if_include and UCX's tcp transport name) or an RDMA device, optionally with ":PORT" as
 * UCX_NET_DEVICES writes it; the front end maps it onto MPI's settings. --bind has no MPI meaning:
 * each rank's library picks its own source addresses. */
static int mpi_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    (void)opts;
    /* The front end asks (--validate-only) on its own host, which need not be a rank's host; it
     * refuses --bind itself (mpirun.device_mapping). */
    if (spec->validate_only)
        return 0;
    if (spec->bind[0])
        return fs_fail(err, FS_EXIT_USAGE,
                       "--bind %s: the mpi backend cannot bind: MPI picks the source addresses of "
                       "each rank itself. Name the device instead (--device NETDEV, mapped to Open "
                       "MPI's btl_tcp_if_include and UCX_NET_DEVICES)",
                       spec->bind);
    if (!spec->device[0])
        return 0;
    char name[128], path[300];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(spec->device, ":"), spec->device);
    if (if_nametoindex(name) != 0 ||
        (fs_sysfs_path(path, sizeof path, "class/infiniband/%s", name) == 0 && access(path, F_OK) == 0))
        return 0;
    char have[600] = "", host[256] = "";
    gethostname(host, sizeof host - 1);
    size_t used = 0;
    struct if_nameindex *ifs = if_nameindex();
    for (struct if_nameindex *i = ifs; i && i->if_index && used < sizeof have; i++)
        used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", used ? ", " : "",
                                 i->if_name);
    if (ifs)
        if_freenameindex(ifs);
    DIR *d = fs_sysfs_path(path, sizeof path, "class/infiniband") ? NULL : opendir(path);
    for (struct dirent *e; d && (e = readdir(d)) != NULL && used < sizeof have;)
        if (e->d_name[0] != '.')
            used += (size_t)snprintf(have + used, sizeof have - used, "%s%s (RDMA)",
                                     used ? ", " : "", e->d_name);
    if (d)
        closedir(d);
    return fs_fail(err, FS_EXIT_USAGE,
                   "--device %s: no such network or RDMA device on host %s; it has: %s. Name one "
                   "of those (the same name must exist on both ranks' hosts)",
                   spec->device, host, have);
}

/* This host's IPv4 address on `device` (a netdev, or an RDMA device[:port] through the netdev
 * behind it), or "". */
static void device_address(const char *device, char *out, size_t len)
{
    char name[IF_NAMESIZE + 16], netdev[IF_NAMESIZE + 16];
    out[0] = '\0';
    snprintf(name, sizeof name, "%s", device);
    name[strcspn(name, ":,")] = '\0';
    if (!name[0])
        return;
    if (fs_datapath_rdma_netdev(fs_sysfs_root(), name, netdev, sizeof netdev) != 0)
        snprintf(netdev, sizeof netdev, "%s", name);
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa))
        return;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, netdev) == 0) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr, out, (socklen_t)len);
            break;
        }
    freeifaddrs(ifa);
}

static int mpi_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--backend mpi runs only in fabscope-engine-mpi-<openmpi|mpich> under "
                       "mpirun/srun with 2 ranks (`fabscope run --backend mpi`)");
    struct mpib *m = calloc(1, sizeof *m);
    if (!m)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = m;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2)
        return fs_fail(err, FS_EXIT_USAGE, "mpi: run with exactly 2 ranks (mpirun -np 2), not %d",
                       size);
    m->peer = 1 - m->rank;
    m->tx_depth = ctx->spec->tx_depth;
    m->bufsize = ctx->max_size > 64 ? ctx->max_size : 64;
    m->ntx = (int)m->tx_depth + 16;
    m->nrx = m->tx_depth + 1 < MPI_MAX_RX ? (int)m->tx_depth + 1 : MPI_MAX_RX;
    if (m->nrx < 2)
        m->nrx = 2;
    if (strcmp(ctx->spec->pattern, "bw") == 0) {
        /* One direction: the sender needs no receives and the receiver no sends. Every turn
         * tests the whole request array, so unused slots are not free. */
        if (ctx->is_server)
            m->ntx = 1;
        else
            m->nrx = 1;
    } else if (strcmp(ctx->spec->pattern, "lat") == 0) {
        m->pingpong = 1;
        /* A ping-pong has one message in flight: one posted receive, and no send slot (its
         * sends are freed once posted, mpi_post). Testing 65 receives and 80 sends on every turn
         * nearly doubled the latency (0.30 vs 0.18 us over vader, measured). */
        m->ntx = 0;
        m->nrx = 1;
    }
    const int nreq = m->nrx + m->ntx;
    m->req = malloc((size_t)nreq * sizeof *m->req);
    m->idx = malloc((size_t)nreq * sizeof *m->idx);
    m->st = malloc((size_t)nreq * sizeof *m->st);
    m->sbuf = malloc(m->bufsize);
    m->rbuf = malloc(m->bufsize);
    if (!m->req || fs_rx_slots_init(&m->rx, m->nrx) || !m->idx || !m->st || !m->sbuf || !m->rbuf)
        return fs_fail(err, FS_EXIT_MEASURE, "mpi: cannot allocate %llu-byte buffers",
                       (unsigned long long)m->bufsize);
    for (int i = 0; i < nreq; i++)
        m->req[i] = MPI_REQUEST_NULL;
    memset(m->sbuf, 0xa5, m->bufsize);
#ifdef OPEN_MPI
    m->ompi_spin = fs_ompi_internals_unknown() == NULL;
#endif
    /* A rank given no --device (the server side) has its address on the client's data-path
     * network from the client's hint (datapath.h). */
    if (ctx->spec->device[0])
        device_address(ctx->spec->device, m->device_addr, sizeof m->device_addr);
    else if (ctx->data_local_addr && ctx->data_local_addr[0])
        snprintf(m->device_addr, sizeof m->device_addr, "%s", ctx->data_local_addr);
    return 0;
}

/* The ranks already know each other: a sanity check, and each rank's address on the device. */
static int mpi_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    struct mpib *m = be;
    (void)err;
    cJSON_AddNumberToObject(obj, "rank", m->rank);
    cJSON_AddStringToObject(obj, "device_address", m->device_addr);
    return 0;
}

static int mpi_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct mpib *m = be;
    (void)deadline_ms;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(peer, "rank");
    if (!cJSON_IsNumber(r) || r->valueint != m->peer)
        return fs_fail(err, FS_EXIT_PEER,
                       "mpi: the control peer is not MPI rank %d of this job (two separate "
                       "jobs?)",
                       m->peer);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(peer, "device_address");
    if (cJSON_IsString(a))
        snprintf(m->peer_device_addr, sizeof m->peer_device_addr, "%s", a->valuestring);
    return 0;
}

/* Posts every free receive slot. Each receive takes the whole buffer, so receives stay valid
 * from size to size. */
static int post_receives(struct mpib *m, struct fs_err *err)
{
    while (m->rx.nfree) {
        int rc = MPI_Irecv(m->rbuf, (int)m->bufsize, MPI_BYTE, m->peer, MPI_TAG_DATA,
                           MPI_COMM_WORLD, &m->req[fs_rx_slots_next(&m->rx)]);
        if (rc != MPI_SUCCESS)
            return mpi_failc(err, FS_EXIT_MEASURE, "MPI_Irecv", rc);
        fs_rx_slots_posted(&m->rx);
    }
    return 0;
}

static int mpi_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct mpib *m = be;
    (void)op; /* the one op, send */
    m->size = size;
    if (size > m->bufsize || size > (uint64_t)INT32_MAX)
        return fs_fail(err, FS_EXIT_USAGE, "mpi: size %llu beyond the buffer or MPI's int count",
                       (unsigned long long)size);
    return post_receives(m, err);
}

static int mpi_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct mpib *m = be;
    (void)op;
    /* A ping-pong's send needs no request to test, which takes a MPI_Testsome over the sends out
     * of every turn (1,165 -> 902 instructions of MPI calls and engine per message on the
     * responder, callgrind, pml ucx over shared memory). The standard's own example for
     * MPI_Request_free: the receiver's reply tells the sender that the send completed. Here the
     * reply does for every message but a responder's last, and for that one the initiator's
     * count, sent on the control channel after the reply arrived, ends the phase before anything
     * is torn down. */
    MPI_Request sent, *slot = &sent;
    if (!m->pingpong) {
        if (m->tx_used >= m->ntx)
            return 0;
        slot = NULL;
        for (int i = m->nrx; i < m->nrx + m->ntx; i++)
            if (m->req[i] == MPI_REQUEST_NULL) {
                slot = &m->req[i];
                break;
            }
        if (!slot)
            return 0;
    }
    int rc = MPI_Isend(m->sbuf, (int)size, MPI_BYTE, m->peer, MPI_TAG_DATA, MPI_COMM_WORLD, slot);
    if (rc != MPI_SUCCESS)
        return mpi_failc(err, FS_EXIT_MEASURE, "MPI_Isend", rc);
    if (!m->pingpong)
        m->tx_used++;
    else if ((rc = MPI_Request_free(slot)) != MPI_SUCCESS)
        return mpi_failc(err, FS_EXIT_MEASURE, "MPI_Request_free (a ping-pong's send)", rc);
    /* The message is on its way: now is the time to post receives again, as an OSU ping-pong
     * posts its MPI_Recv after its MPI_Send. */
    return post_receives(m, err) ? -1 : 1;
}

/* MPI has no wait with a deadline and no event fd, so this polls in every poll mode; the result
 * says so. A ping-pong (one receive) tests it with MPI_Test, which looks again right after its
 * progress pass, so an arrival counts in the call that received it (MPI_Testsome reports it one
 * call later: ~20 ns of every sample over vader); its sends are freed when posted (mpi_post).
 * Streams test everything with one MPI_Testsome, so each turn runs MPI's progress engine once. */
static int mpi_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct mpib *m = be;
    (void)wait_ms;
    int n = 0, rx = 0, rc;
    if (m->pingpong) {
        int flag = 0;
#ifdef OPEN_MPI
        /* Spin Open MPI's progress engine between looks at the request, as MPI_Recv and
         * MPI_Wait do inside: MPI_Test adds its argument checks and a second look to every
         * pass (an OSU ping-pong saw arrivals ~20 ns sooner than an MPI_Test loop over vader,
         * measured here). Bounded, so the core keeps its deadline; MPI_Test then reaps it. */
        if (m->ompi_spin)
            fs_ompi_progress(m->req[0], MPI_WAIT_PASSES);
#endif
        if (m->req[0] != MPI_REQUEST_NULL) {
            if ((rc = MPI_Test(&m->req[0], &flag, m->st)) != MPI_SUCCESS)
                return mpi_failc(err, FS_EXIT_MEASURE, "MPI_Test", rc);
            if (flag) {
                fs_rx_slots_done(&m->rx, 0);
                rx = 1;
            }
        }
        n = rx;
    } else {
        rc = MPI_Testsome(m->nrx + m->ntx, m->req, &n, m->idx, m->st);
        if (rc != MPI_SUCCESS)
            return mpi_failc(err, FS_EXIT_MEASURE, "MPI_Testsome", rc);
        n = n == MPI_UNDEFINED ? 0 : n;
        for (int i = 0; i < n; i++)
            if (m->idx[i] < m->nrx) {
                fs_rx_slots_done(&m->rx, m->idx[i]);
                rx++;
            }
    }
    m->tx_used -= n - rx;
    ev->rx_done += (uint64_t)rx;
    ev->tx_done += (uint64_t)(n - rx);
    /* After an arrival the core is about to time it or answer it: receives are posted again
     * on a turn that completed nothing, or when half of them are used. */
    if (m->rx.nfree && (n == 0 || m->rx.posted < m->nrx / 2))
        return post_receives(m, err);
    return 0;
}

/* ---- what MPI selected -------------------------------------------------------------------- */

static int cvar_string(const char *name, char *out, size_t len)
{
    int idx = -1, count = 0;
    out[0] = '\0';
    if (MPI_T_cvar_get_index(name, &idx) != MPI_SUCCESS)
        return -1;
    MPI_T_cvar_handle h;
    if (MPI_T_cvar_handle_alloc(idx, NULL, &h, &count) != MPI_SUCCESS)
        return -1;
    char nm[256], desc[1024];
    int nl = sizeof nm, dl = sizeof desc, verb, bind, scope;
    MPI_Datatype dt;
    MPI_T_enum en;
    int rc = MPI_T_cvar_get_info(idx, nm, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope);
    if (rc == MPI_SUCCESS && dt == MPI_CHAR && count > 0) {
        char *buf = calloc((size_t)count + 1, 1);
        if (buf && MPI_T_cvar_read(h, buf) == MPI_SUCCESS)
            snprintf(out, len, "%s", buf);
        free(buf);
    } else if (rc == MPI_SUCCESS && dt == MPI_INT) {
        int v = 0;
        if (MPI_T_cvar_read(h, &v) == MPI_SUCCESS)
            snprintf(out, len, "%d", v);
    }
    MPI_T_cvar_handle_free(&h);
    return out[0] ? 0 : -1;
}

static void add_cvar(cJSON *o, const char *name)
{
    char v[512];
    if (cvar_string(name, v, sizeof v) == 0)
        cJSON_AddStringToObject(o, name, v);
    else
        cJSON_AddNullToObject(o, name);
}

static void env_list(cJSON *o, const char *prefix)
{
    extern char **environ;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, prefix, strlen(prefix)) == 0) {
            char k[128];
            const char *eq = strchr(*e, '=');
            if (!eq)
                continue;
            snprintf(k, sizeof k, "%.*s", (int)(eq - *e), *e);
            cJSON_AddStringToObject(o, k, eq + 1);
        }
}

static void no_effect(cJSON *arr, const char *fmt, const char *a, const char *b)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, b);
    cJSON_AddItemToArray(arr, cJSON_CreateString(msg));
}

#ifdef OPEN_MPI
/* The components Open MPI selected, read from its internals (mpi_ompi_private.c): 1 when they use
 * UCX, 0 when not, -1 when this build cannot read them (the record says why). */
static int describe_ompi_selection(struct mpib *m, cJSON *o, cJSON **ucx)
{
    const char *unknown = fs_ompi_internals_unknown();
    if (unknown) {
        cJSON_AddNullToObject(o, "selected");
        cJSON_AddStringToObject(o, "selection_source", unknown);
        return -1;
    }
    const char *pml = fs_ompi_pml(), *mtl = fs_ompi_mtl();
    cJSON *sel = cJSON_AddObjectToObject(o, "selected");
    cJSON_AddStringToObject(sel, "pml", pml);
    if (mtl)
        cJSON_AddStringToObject(sel, "mtl", mtl);
    else
        cJSON_AddNullToObject(sel, "mtl");
    cJSON_AddStringToObject(o, "selection_source",
                            "Open MPI MCA framework at run time (selected pml/mtl components and "
                            "the btls of the peer's endpoint)");
    int uses_ucx = strcmp(pml, "ucx") == 0;
    cJSON *btl = fs_ompi_peer_btls(m->peer);
    if (btl) {
        cJSON_AddItemToObject(sel, "btl", btl);
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(btl, "send")) uses_ucx |=
            strcmp(x->valuestring, "uct") == 0;
    } else {
        cJSON_AddNullToObject(sel, "btl");
    }
    if (mtl && strcmp(mtl, "ucx") == 0)
        uses_ucx = 1;
#ifdef FS_HAVE_UCX
    void *ep = strcmp(pml, "ucx") == 0 ? fs_ompi_peer_pml_endpoint(m->peer) : NULL;
    if (ep) {
        *ucx = cJSON_AddObjectToObject(o, "ucx");
        fs_ucx_describe_ep(ep, m->size, *ucx);
    }
#endif
    return uses_ucx;
}

static void describe_ompi(struct mpib *m, cJSON *o, cJSON *noeff)
{
    cJSON *ucx = NULL;
    int uses_ucx = describe_ompi_selection(m, o, &ucx);
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(o, "selected");
    const cJSON *pml_item = cJSON_GetObjectItemCaseSensitive(sel, "pml");
    const char *pml = cJSON_IsString(pml_item) ? pml_item->valuestring : "";
    cJSON *mca = cJSON_AddObjectToObject(o, "mca");
    add_cvar(mca, "pml");
    add_cvar(mca, "btl");
    add_cvar(mca, "mtl");
    add_cvar(mca, "pml_ucx_tls");
    add_cvar(mca, "pml_ucx_devices");
    add_cvar(mca, "btl_tcp_if_include");
    add_cvar(mca, "btl_tcp_if_exclude");
    /* Which setting chose each value: Debian's openmpi-mca-params.conf excludes pml ucx on a line
     * of its own; a misrouted result names that line (fabscope.results.misroute). */
    cJSON *src = cJSON_AddObjectToObject(o, "mca_sources");
    const cJSON *item;
    cJSON_ArrayForEach(item, mca)
    {
        char where[600];
        if (cJSON_IsString(item) && fs_ompi_var_source(item->string, where, sizeof where) == 0)
            cJSON_AddStringToObject(src, item->string, where);
    }
    const char *ucx_vars[] = {"UCX_NET_DEVICES", "UCX_TLS", NULL};
    for (int i = 0; ucx_vars[i]; i++) {
        const char *v = getenv(ucx_vars[i]);
        if (!v || !*v || uses_ucx < 0) /* what was selected is unknown: no verdict */
            continue;
        if (!uses_ucx) {
            char what[320];
            snprintf(what, sizeof what, "%s=%s", ucx_vars[i], v);
            no_effect(noeff, "%s had no effect: the pml is %s, which does not use UCX (see "
                             "selected.btl for what carried the bytes)",
                      what, pml);
        } else if (ucx && strcmp(ucx_vars[i], "UCX_NET_DEVICES") == 0 && strcmp(v, "all") != 0) {
            /* Did any requested device carry a lane? pml ucx can filter devices itself
             * (pml_ucx_devices), which is how UCX_NET_DEVICES ends up ignored (UCX #10049). */
            const cJSON *devs = cJSON_GetObjectItemCaseSensitive(ucx, "devices"), *d;
            int hit = 0;
            cJSON_ArrayForEach(d, devs) hit |= strstr(v, d->valuestring) != NULL;
            if (!hit)
                no_effect(noeff,
                          "UCX_NET_DEVICES=%s had no effect: UCX's lanes use other devices (see "
                          "ucx.devices); pml_ucx_devices=%s",
                          v, cJSON_IsString(cJSON_GetObjectItemCaseSensitive(mca, "pml_ucx_devices"))
                                 ? cJSON_GetObjectItemCaseSensitive(mca, "pml_ucx_devices")->valuestring
                                 : "?");
        }
    }
}
#endif

#ifdef MPICH
static void describe_mpich(cJSON *o, cJSON *noeff)
{
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(ver, &len);
    char device[64] = "";
    const char *d = strstr(ver, "MPICH Device:");
    if (d) {
        d += strlen("MPICH Device:");
        while (*d == ' ' || *d == '\t')
            d++;
        size_t n = strcspn(d, " \t\n");
        snprintf(device, sizeof device, "%.*s", (int)n, d);
    }
    cJSON *sel = cJSON_AddObjectToObject(o, "selected");
    cJSON_AddStringToObject(sel, "device", device);
    const char *colon = strchr(device, ':');
    cJSON_AddStringToObject(sel, "netmod", colon ? colon + 1 : "");
    cJSON *cv = cJSON_AddObjectToObject(o, "cvars");
    add_cvar(cv, "MPIR_CVAR_CH4_NETMOD");
    add_cvar(cv, "MPIR_CVAR_NOLOCAL");
    add_cvar(cv, "MPIR_CVAR_CH4_SHM_POSIX_EAGER");
    /* Ranks on one node talk through ch4's shared-memory module unless NOLOCAL is set: this
     * is inferred from locality and the cvar, MPICH exposes no per-peer selection. */
    char host0[MPI_MAX_PROCESSOR_NAME] = "";
    int hl = 0;
    MPI_Get_processor_name(host0, &hl);
    /* The peer's processor name, from the engine's main (the ranks exchanged them). */
    const char *host1 = getenv("FABSCOPE_MPI_PEER_HOST");
    int same_node = !host1 || strcmp(host0, host1) == 0;
    char nolocal[16] = "0";
    cvar_string("MPIR_CVAR_NOLOCAL", nolocal, sizeof nolocal);
    int intranode_shm = same_node && (strcmp(nolocal, "0") == 0 || strcmp(nolocal, "false") == 0);
    cJSON_AddStringToObject(sel, "peer_processor", host1 ? host1 : "");
    cJSON_AddStringToObject(sel, "intranode",
                            !same_node ? "no: the peer is on another node, the netmod carries it"
                            : intranode_shm ? "shm (ch4 shmmod; inferred: same node, NOLOCAL off)"
                                            : "netmod (MPIR_CVAR_NOLOCAL set)");
    cJSON_AddStringToObject(o, "selection_source",
                            "MPI_Get_library_version (device) and MPI_T cvars; intranode path "
                            "inferred");
    const char *v = getenv("UCX_NET_DEVICES");
    if (v && *v && intranode_shm)
        no_effect(noeff,
                  "UCX_NET_DEVICES=%s probably had no effect: the ranks share a node and MPICH "
                  "sends through its shared-memory module, not the %s netmod",
                  v, colon ? colon + 1 : "network");
}
#endif

/* For the collectives (mpi_coll.c): what the library selected, as a pair run reports it, towards
 * rank `peer` (one on another host where there is one), and the collective framework's settings
 * for `pattern`: Open MPI's coll list and coll_tuned_<pattern>_algorithm (the --mca a user passes
 * through), MPICH's MPIR_CVAR_<PATTERN>_INTRA_ALGORITHM. */
void fs_mpi_describe_collective(int peer, const char *peer_host, const char *pattern,
                                uint64_t size, cJSON *o)
{
    struct mpib m = {.peer = peer, .size = size};
    MPI_Comm_rank(MPI_COMM_WORLD, &m.rank);
    cJSON *noeff = cJSON_CreateArray();
    cJSON *coll = cJSON_CreateObject();
    char name[128];
#ifdef OPEN_MPI
    describe_ompi(&m, o, noeff);
    add_cvar(coll, "coll");
    snprintf(name, sizeof name, "coll_tuned_%s_algorithm", pattern);
    add_cvar(coll, name);
#elif defined(MPICH)
    setenv("FABSCOPE_MPI_PEER_HOST", peer_host, 1);
    describe_mpich(o, noeff);
    int n = snprintf(name, sizeof name, "MPIR_CVAR_");
    for (const char *p = pattern; *p && n < (int)sizeof name - 1; p++)
        name[n++] = *p == '_' ? '_' : (char)(*p - ('a' <= *p && *p <= 'z' ? 32 : 0));
    snprintf(name + n, sizeof name - (size_t)n, "_INTRA_ALGORITHM");
    add_cvar(coll, name);
#endif
    (void)peer_host;
    (void)pattern;
    cJSON_AddItemToObject(o, "coll", coll);
    cJSON_AddItemToObject(o, "settings_without_effect", noeff);
}

static void mpi_describe(void *be, cJSON *o)
{
    struct mpib *m = be;
    cJSON_AddStringToObject(o, "kind", "mpi");
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = 0, minor = 0;
    MPI_Get_library_version(ver, &len);
    ver[strcspn(ver, "\n")] = '\0';
    cJSON_AddStringToObject(o, "library", ver);
    MPI_Get_version(&major, &minor);
    char s[16];
    snprintf(s, sizeof s, "%d.%d", major, minor);
    cJSON_AddStringToObject(o, "mpi_standard", s);
    cJSON_AddNumberToObject(o, "rank", m->rank);
    if (m->peer_device_addr[0]) /* the core asks the kernel's route to it (route_to_peer) */
        cJSON_AddStringToObject(o, "peer_address", m->peer_device_addr);
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Get_processor_name(host, &len);
    cJSON_AddStringToObject(o, "processor", host);
    cJSON_AddStringToObject(o, "api", "MPI_Isend/MPI_Irecv + MPI_Test/MPI_Testsome (MPI_COMM_WORLD, "
                                      "MPI_BYTE)");
    cJSON_AddStringToObject(o, "progress", "busy (MPI_Test/MPI_Testsome; MPI has no wait with a deadline)");
    cJSON *noeff = cJSON_CreateArray();
#ifdef OPEN_MPI
    describe_ompi(m, o, noeff);
#elif defined(MPICH)
    describe_mpich(o, noeff);
#endif
    cJSON_AddItemToObject(o, "settings_without_effect", noeff);
    cJSON *env = cJSON_AddObjectToObject(o, "environment");
    env_list(env, "OMPI_MCA_");
    env_list(env, "UCX_");
    env_list(env, "MPIR_CVAR_");
    env_list(env, "FI_");
}

static void mpi_teardown(void *be)
{
    struct mpib *m = be;
    if (!m)
        return;
    /* Receives still posted are cancelled and completed, so MPI_Finalize finds none. */
    for (int i = 0; m->req && i < m->nrx; i++)
        if (m->req[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&m->req[i]);
            MPI_Wait(&m->req[i], m->st);
        }
    free(m->req);
    fs_rx_slots_release(&m->rx);
    free(m->idx);
    free(m->st);
    free(m->sbuf);
    free(m->rbuf);
    free(m);
}

const struct fs_backend_ops fs_backend_mpi = {
    .abi = FS_BACKEND_ABI,
    .name = "mpi",
    .summary = "MPI point-to-point (Isend/Irecv) under mpirun/srun; reports pml/btl/mtl or device",
    .ops = FS_BIT(FS_OP_SEND),
    .patterns = FS_PATTERNS_ALL | FS_PATTERNS_COLLECTIVE, /* collectives: mpi_coll.c */
    FS_BACKEND_HOOKS(mpi),
};
