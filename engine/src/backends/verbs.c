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
 * read test never races with a write into the same bytes. */
#define _GNU_SOURCE
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
#include <rdma/rdma_cma.h>

#include "../core/backend.h"
#include "../core/datapath.h"
#include "../core/inventory.h"

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

/* ---- options -------------------------------------------------------------------------------- */

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

static const char *const qp_type_values[] = {"rc", "uc", "ud", NULL};

#define O(f) offsetof(struct vb_opts, f)
#define S(f) sizeof(((struct vb_opts *)0)->f)
static const struct fs_option vb_options[] = {
    {"qp-type", FS_OPT_ENUM, O(qp_type), S(qp_type), 0, 0, "rc", qp_type_values,
     "transport service: rc (reliable connected), uc (unreliable connected), ud (datagram)", 0},
    {"inline", FS_OPT_INT, O(inline_size), S(inline_size), -1, 4096, "-1", NULL,
     "send/write payloads up to N bytes are copied into the work request (IBV_SEND_INLINE); "
     "-1 = auto: 220 for lat with send/write/write_imm when the QP allows it, 0 otherwise",
     0},
    {"cq-mod", FS_OPT_INT, O(cq_mod), S(cq_mod), 1, 65536, "1", NULL,
     "request a completion every N work requests (CQ moderation); must be <= --tx-depth", 0},
    {"qps", FS_OPT_INT, O(qps), S(qps), 1, VB_MAX_QPS, "1", NULL,
     "queue pairs per device; work requests are posted round-robin over them (and over the "
     "devices of --device A,B)",
     0},
    {"mtu", FS_OPT_INT, O(mtu), S(mtu), 0, 4096, "0", NULL,
     "path MTU 256|512|1024|2048|4096; 0 = the smaller active MTU of the two ports. Larger than "
     "a port's active MTU is an error",
     0},
    {"ib-port", FS_OPT_INT, O(ib_port), S(ib_port), 0, 255, "0", NULL,
     "port of --device (1-based); 0 = the device's only port (several ports = say which)",
     FS_OPTF_LOCAL},
    {"gid-index", FS_OPT_INT, O(gid_index), S(gid_index), -1, VB_MAX_GIDS - 1, "-1", NULL,
     "GID table index on this host; -1 = auto: the RoCE v2 GID with an IPv4 address on "
     "Ethernet, LID routing on InfiniBand",
     FS_OPTF_LOCAL},
    {"rx-depth", FS_OPT_INT, O(rx_depth), S(rx_depth), 0, 65536, "0", NULL,
     "receives kept posted per QP (send/write_imm); 0 = auto (512 on RC, 4096 on UC/UD, capped "
     "by the device)",
     0},
    {"sl", FS_OPT_INT, O(sl), S(sl), 0, 15, "0", NULL, "service level (InfiniBand QoS lane)", 0},
    {"cm", FS_OPT_BOOL, O(cm), S(cm), 0, 1, "false", NULL,
     "connect through rdma_cm (REQ/REP/RTU, RC only) instead of exchanging QP numbers over the "
     "control channel; needed for iWARP",
     0},
    {"verify", FS_OPT_BOOL, O(verify), S(verify), 0, 1, "false", NULL,
     "check every payload byte (lat only; send, write, write_imm, read). With --cm --op send "
     "this is fabscope's rping: connect through rdma_cm and verify data both ways",
     0},
    {0},
};
#undef O
#undef S

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
};

struct vb {
    struct vb_opts o;
    int is_server;
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
    int needs_recv;
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

/* ---- small helpers -------------------------------------------------------------------------- */

static const char *svc_name(enum vb_svc s) { return s == VB_RC ? "RC" : s == VB_UC ? "UC" : "UD"; }

static int mtu_bytes(enum ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0; }

static enum ibv_mtu mtu_enum(int bytes)
{
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
    }
}

static const char *gid_type_name(int t)
{
    switch (t) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    default: return "unknown";
    }
}

static const char *link_layer_name(int ll)
{
    return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet"
           : ll == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
                                             : "unspecified";
}

static const char *port_state_name(enum ibv_port_state st)
{
    switch (st) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
    }
}

static int gid_is_zero(const union ibv_gid *g)
{
    static const uint8_t z[16];
    return memcmp(g->raw, z, 16) == 0;
}

static int gid_is_ipv4(const union ibv_gid *g, char *ip, size_t len)
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(g->raw, pfx, 12) != 0)
        return 0;
    if (ip)
        inet_ntop(AF_INET, g->raw + 12, ip, (socklen_t)len);
    return 1;
}

static void gid_text(const union ibv_gid *g, char *out, size_t len)
{
    if (!inet_ntop(AF_INET6, g->raw, out, (socklen_t)len))
        snprintf(out, len, "?");
}

static void hex_u64(char *out, size_t len, uint64_t x) { snprintf(out, len, "0x%" PRIx64, x); }

static int parse_hex_u64(const cJSON *o, const char *key, uint64_t *out)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(x))
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(x->valuestring, &end, 16);
    if (errno || !end || *end)
        return -1;
    *out = v;
    return 0;
}

static int get_num(const cJSON *o, const char *key, double *out)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x))
        return -1;
    *out = x->valuedouble;
    return 0;
}

/* The payload pattern of message `seq`: position-dependent so a shifted or truncated copy
 * fails too, sequence-dependent so a stale buffer fails. */
static inline uint8_t pat(uint64_t seq, uint64_t i)
{
    return (uint8_t)((seq + 1) * 167u ^ (i * 31u + (i >> 8) * 7u));
}

/* Last byte of a write in lat: never 0 (the cleared state) and never the previous value. */
static inline uint8_t marker(uint64_t seq) { return (uint8_t)(seq % 255u + 1u); }

static void fill_pat(uint8_t *p, uint64_t n, uint64_t seq)
{
    for (uint64_t i = 0; i < n; i++)
        p[i] = pat(seq, i);
}

static int check_pat(const uint8_t *p, uint64_t n, uint64_t seq, const char *what,
                     struct fs_err *err)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != pat(seq, i))
            return fs_fail(err, FS_EXIT_MEASURE,
                           "verbs --verify: %s #%" PRIu64 " is corrupt at byte %" PRIu64
                           " of %" PRIu64 ": expected 0x%02x, found 0x%02x",
                           what, seq, i, n, pat(seq, i), p[i]);
    return 0;
}

/* ---- device, port and GID selection --------------------------------------------------------- */

/* The netdev of a port, from the first GID entry that names one. */
static void port_netdev(struct ibv_context *c, int port, char *out, size_t len)
{
    struct ibv_gid_entry e[64];
    out[0] = '\0';
    ssize_t n = ibv_query_gid_table(c, e, 64, 0);
    for (ssize_t i = 0; i < n; i++)
        if ((int)e[i].port_num == port && e[i].ndev_ifindex) {
            char name[IF_NAMESIZE + 1];
            if (if_indextoname(e[i].ndev_ifindex, name))
                snprintf(out, len, "%s", name);
            return;
        }
}

/* The netdev whose MAC is the first 6 bytes of the GID: siw builds its GID from the MAC and
 * lists no netdev in the GID table or sysfs (only netlink, which `rdma link` reads). */
static void netdev_by_gid_mac(const union ibv_gid *gid, char *nd, size_t len)
{
    char want[18], path[300], got[32];
    const uint8_t *m = gid->raw;
    snprintf(want, sizeof want, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    struct if_nameindex *ifs = if_nameindex();
    for (struct if_nameindex *i = ifs; i && i->if_index && !nd[0]; i++) {
        snprintf(path, sizeof path, "/sys/class/net/%s/address", i->if_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(got, sizeof got, f) && strncmp(got, want, 17) == 0)
            snprintf(nd, len, "%s", i->if_name);
        fclose(f);
    }
    if_freenameindex(ifs);
}

/* The IPv4 address of the netdev a device sits on, for rdma_cm when the GID carries none
 * (iWARP): the GID table's netdev, else the netdev owning the GID's MAC. */
static void device_ipv4(struct vb *v, char *ip, size_t len)
{
    char nd[IF_NAMESIZE + 1] = "";
    ip[0] = '\0';
    port_netdev(v->ctx, v->port, nd, sizeof nd);
    if (!nd[0])
        netdev_by_gid_mac(&v->gid, nd, sizeof nd);
    struct ifaddrs *ifa = NULL;
    if (!nd[0] || getifaddrs(&ifa))
        return;
    for (struct ifaddrs *i = ifa; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strcmp(i->ifa_name, nd) == 0) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, ip, (socklen_t)len);
            snprintf(v->netdev, sizeof v->netdev, "%s", nd);
            break;
        }
    freeifaddrs(ifa);
}

/* "rxe0 (port 1: ACTIVE, Ethernet, netdev eth0), mlx5_0 (...)" for error messages. */
static void list_devices(char *buf, size_t len)
{
    int n = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; l && i < n && used < len; i++) {
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "; " : "",
                                 ibv_get_device_name(l[i]));
        struct ibv_context *c = ibv_open_device(l[i]);
        struct ibv_device_attr da;
        if (!c || ibv_query_device(c, &da)) {
            if (used < len)
                used += (size_t)snprintf(buf + used, len - used, " (cannot open: %s)",
                                         strerror(errno));
            if (c)
                ibv_close_device(c);
            continue;
        }
        for (int p = 1; p <= da.phys_port_cnt && used < len; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(c, (uint8_t)p, &pa))
                continue;
            char nd[IF_NAMESIZE + 1];
            port_netdev(c, p, nd, sizeof nd);
            used += (size_t)snprintf(buf + used, len - used, "%sport %d: %s, %s%s%s",
                                     p == 1 ? " (" : ", ", p, port_state_name(pa.state),
                                     link_layer_name(pa.link_layer), nd[0] ? ", netdev " : "", nd);
        }
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, ")");
        ibv_close_device(c);
    }
    if (l)
        ibv_free_device_list(l);
}

static int no_devices(struct fs_err *err, int why)
{
    int have_dir = access("/sys/class/infiniband", F_OK) == 0;
    return fs_fail(err, FS_EXIT_USAGE,
                   "--backend verbs: no RDMA devices found on this host (/sys/class/infiniband %s%s"
                   "%s). Load the driver of the RDMA NIC (mlx5_ib, irdma, bnxt_re, efa, ...) and "
                   "check `ibv_devices` and `rdma link`, or create a Soft-RoCE device on an "
                   "Ethernet interface: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev "
                   "eth0`. Where the kernel has no RDMA support at all, `fabscope testbed "
                   "softroce run -- ...` boots a guest that has one",
                   have_dir ? "is empty" : "does not exist",
                   why == ENOSYS ? "; libibverbs: the kernel has no RDMA (ib_uverbs) support"
                   : why        ? "; libibverbs: "
                                 : "",
                   why && why != ENOSYS ? strerror(why) : "");
}

static int select_device(struct vb *v, const char *want, struct fs_err *err)
{
    char list[1536];
    int n = 0;
    if (v->o.cm) {
        /* rdma_cm resolves addresses to its own contexts; the PD, CQ and MR must live on the
         * same one as the cm_id's QP. */
        v->cm_list = rdma_get_devices(&n);
        if (!v->cm_list || n == 0)
            return no_devices(err, v->cm_list ? 0 : errno);
        int pick = -1;
        for (int i = 0; i < n; i++)
            if (want[0] && strcmp(ibv_get_device_name(v->cm_list[i]->device), want) == 0)
                pick = i;
        if (!want[0] && n == 1)
            pick = 0;
        if (pick >= 0) {
            v->ctx = v->cm_list[pick];
            snprintf(v->dev_name, sizeof v->dev_name, "%s", ibv_get_device_name(v->ctx->device));
            snprintf(v->dev_sel, sizeof v->dev_sel, "%s",
                     want[0] ? "--device" : "the only RDMA device on this host (no --device given)");
            return 0;
        }
    } else {
        int why = 0;
        errno = 0;
        struct ibv_device **l = ibv_get_device_list(&n);
        why = errno;
        if (!l || n == 0) {
            if (l)
                ibv_free_device_list(l);
            return no_devices(err, l ? 0 : why);
        }
        int pick = -1;
        for (int i = 0; i < n; i++)
            if (want[0] && strcmp(ibv_get_device_name(l[i]), want) == 0)
                pick = i;
        if (!want[0] && n == 1)
            pick = 0;
        if (pick >= 0) {
            v->ctx = ibv_open_device(l[pick]);
            v->own_ctx = 1;
            snprintf(v->dev_name, sizeof v->dev_name, "%s", ibv_get_device_name(l[pick]));
            ibv_free_device_list(l);
            if (!v->ctx)
                return fs_fail(err, FS_EXIT_USAGE, "verbs: cannot open device %s: %s%s",
                               v->dev_name, strerror(errno),
                               errno == EACCES ? " (permissions of /dev/infiniband/uverbs*)" : "");
            snprintf(v->dev_sel, sizeof v->dev_sel, "%s",
                     want[0] ? "--device" : "the only RDMA device on this host (no --device given)");
            return 0;
        }
        ibv_free_device_list(l);
    }
    list_devices(list, sizeof list);
    char sv[FS_SHOWN_LEN];
    if (want[0])
        return fs_fail(err, FS_EXIT_USAGE,
                       "--device %s: no such RDMA device on this host; it has: %s",
                       fs_shown(want, sv, sizeof sv), list);
    return fs_fail(err, FS_EXIT_USAGE,
                   "this host has %d RDMA devices and fabscope does not guess: say which with "
                   "--device NAME (and --ib-port N). Devices: %s",
                   n, list);
}

static int select_port(struct vb *v, struct fs_err *err)
{
    char ports[1024];
    size_t used = 0;
    ports[0] = '\0';
    for (int p = 1; p <= v->dattr.phys_port_cnt && used < sizeof ports; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(v->ctx, (uint8_t)p, &pa) == 0)
            used += (size_t)snprintf(ports + used, sizeof ports - used, "%s%d (%s, %s)",
                                     p > 1 ? ", " : "", p, port_state_name(pa.state),
                                     link_layer_name(pa.link_layer));
    }
    if (v->o.ib_port == 0) {
        if (v->dattr.phys_port_cnt != 1)
            return fs_fail(err, FS_EXIT_USAGE,
                           "device %s has %d ports and fabscope does not guess: say which with "
                           "--ib-port N. Ports: %s",
                           v->dev_name, v->dattr.phys_port_cnt, ports);
        v->port = 1;
        snprintf(v->port_sel, sizeof v->port_sel, "the device's only port");
    } else {
        if (v->o.ib_port > v->dattr.phys_port_cnt)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--ib-port %ld: device %s has no such port; its ports: %s",
                           v->o.ib_port, v->dev_name, ports);
        v->port = (int)v->o.ib_port;
        snprintf(v->port_sel, sizeof v->port_sel, "--ib-port");
    }
    if (ibv_query_port(v->ctx, (uint8_t)v->port, &v->pattr))
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_query_port(%s, %d): %s", v->dev_name,
                       v->port, strerror(errno));
    if (v->pattr.state != IBV_PORT_ACTIVE) {
        char nd[IF_NAMESIZE + 1];
        port_netdev(v->ctx, v->port, nd, sizeof nd);
        return fs_fail(err, FS_EXIT_USAGE,
                       "port %d of %s is %s, not ACTIVE: %s. Ports: %s", v->port, v->dev_name,
                       port_state_name(v->pattr.state),
                       v->pattr.link_layer == IBV_LINK_LAYER_ETHERNET
                           ? "on RoCE the port follows its netdev; check `ip link` (carrier, "
                             "admin up)"
                           : "on InfiniBand a port stays INIT until a subnet manager (opensm) "
                             "configures it; check `ibstat` and the cable",
                       ports);
    }
    return 0;
}

/* ibv_query_gid_table for at most VB_GID_QUERY_MAX entries, however large the buffer. */
static ssize_t query_gid_table(struct ibv_context *c, struct ibv_gid_entry *all, size_t max)
{
    return ibv_query_gid_table(c, all, max < VB_GID_QUERY_MAX ? max : VB_GID_QUERY_MAX, 0);
}

/* Every populated GID of our port, one ioctl (reading the 1024 sysfs files of a port one by one
 * takes minutes on a slow machine). Falls back to per-index queries on kernels without it. */
static ssize_t read_gids(struct vb *v, struct ibv_gid_entry *e, size_t max)
{
    struct ibv_gid_entry *all = calloc(VB_GID_QUERY_MAX, sizeof *all);
    ssize_t n = -1, k = 0;
    if (all)
        n = query_gid_table(v->ctx, all, VB_GID_QUERY_MAX);
    if (n >= 0) {
        for (ssize_t i = 0; i < n && (size_t)k < max; i++)
            if ((int)all[i].port_num == v->port)
                e[k++] = all[i];
    } else {
        for (int i = 0; i < v->pattr.gid_tbl_len && (size_t)k < max; i++)
            if (ibv_query_gid_ex(v->ctx, (uint32_t)v->port, (uint32_t)i, &e[k], 0) == 0 &&
                !gid_is_zero(&e[k].gid))
                k++;
    }
    free(all);
    return k;
}

static void gid_table_text(const struct ibv_gid_entry *e, ssize_t n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (ssize_t i = 0; i < n && used < len; i++) {
        char g[INET6_ADDRSTRLEN], nd[IF_NAMESIZE + 1] = "";
        gid_text(&e[i].gid, g, sizeof g);
        if (e[i].ndev_ifindex)
            if_indextoname(e[i].ndev_ifindex, nd);
        used += (size_t)snprintf(buf + used, len - used, "%s%u: %s %s%s%s", i ? "; " : "",
                                 e[i].gid_index, gid_type_name((int)e[i].gid_type), g,
                                 nd[0] ? " on " : "", nd);
    }
    if (!n)
        snprintf(buf, len, "(empty)");
}

static void take_gid(struct vb *v, const struct ibv_gid_entry *e)
{
    v->gid_index = (int)e->gid_index;
    v->gid_type = (int)e->gid_type;
    v->gid = e->gid;
    gid_text(&e->gid, v->gid_str, sizeof v->gid_str);
    if (!gid_is_ipv4(&e->gid, v->gid_ip, sizeof v->gid_ip))
        v->gid_ip[0] = '\0';
    if (e->ndev_ifindex)
        if_indextoname(e->ndev_ifindex, v->netdev);
}

static int select_gid(struct vb *v, struct fs_err *err)
{
    struct ibv_gid_entry *e = calloc(VB_MAX_GIDS, sizeof *e);
    if (!e)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    ssize_t n = read_gids(v, e, VB_MAX_GIDS);
    char table[1536];
    int rc = 0;
    v->gid_index = -1;
    v->gid_type = -1;
    const int eth = v->pattr.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (v->o.gid_index >= 0) {
        ssize_t hit = -1;
        for (ssize_t i = 0; i < n; i++)
            if ((long)e[i].gid_index == v->o.gid_index)
                hit = i;
        if (hit < 0) {
            gid_table_text(e, n, table, sizeof table);
            rc = fs_fail(err, FS_EXIT_USAGE,
                         "--gid-index %ld: entry %ld of %s port %d %s (the table has %d "
                         "entries). Populated entries: %s. Leave --gid-index out to pick the "
                         "RoCE v2 GID with an IPv4 address automatically",
                         v->o.gid_index, v->o.gid_index, v->dev_name, v->port,
                         v->o.gid_index >= v->pattr.gid_tbl_len ? "does not exist" : "is empty",
                         v->pattr.gid_tbl_len, table);
        } else {
            take_gid(v, &e[hit]);
            v->use_grh = 1;
            snprintf(v->gid_sel, sizeof v->gid_sel, "--gid-index");
        }
    } else if (v->transport == IBV_TRANSPORT_IWARP) {
        /* iWARP runs over TCP: rdma_cm connects by IP address and there is no GID routing, so
         * the GID (siw derives it from the MAC) is recorded but never chosen between. */
        for (ssize_t i = 0; i < n; i++)
            if (e[i].gid_index == 0)
                take_gid(v, &e[i]);
        v->use_grh = 0;
        snprintf(v->gid_sel, sizeof v->gid_sel, "iWARP: addressed by IP through rdma_cm, no GID");
    } else if (eth) {
        ssize_t hit = -1;
        int count = 0;
        for (ssize_t i = 0; i < n; i++)
            if (e[i].gid_type == IBV_GID_TYPE_ROCE_V2 && gid_is_ipv4(&e[i].gid, NULL, 0)) {
                if (hit < 0)
                    hit = i;
                count++;
            }
        if (hit < 0) {
            gid_table_text(e, n, table, sizeof table);
            char nd[IF_NAMESIZE + 1];
            port_netdev(v->ctx, v->port, nd, sizeof nd);
            rc = fs_fail(err, FS_EXIT_USAGE,
                         "%s port %d (RoCE) has no RoCE v2 GID with an IPv4 address, which is "
                         "what fabscope uses by default (the `-x` index perftest users guess). "
                         "GID table: %s. Fix: give %s an IPv4 address (`ip addr add A.B.C.D/N dev "
                         "%s`; the GID appears at once), or choose an entry with --gid-index N "
                         "(the same kind on both hosts)",
                         v->dev_name, v->port, table, nd[0] ? nd : "its netdev",
                         nd[0] ? nd : "IFACE");
        } else {
            take_gid(v, &e[hit]);
            v->use_grh = 1;
            snprintf(v->gid_sel, sizeof v->gid_sel,
                     "auto: lowest-index RoCE v2 GID with an IPv4 address (%d such)", count);
        }
    } else {
        /* InfiniBand routes by LID inside a subnet; a GRH would only add 40 bytes per packet. */
        for (ssize_t i = 0; i < n; i++)
            if (e[i].gid_index == 0)
                take_gid(v, &e[i]);
        v->use_grh = 0;
        snprintf(v->gid_sel, sizeof v->gid_sel,
                 "auto: InfiniBand LID routing, no GRH (use --gid-index to route by GID)");
    }
    free(e);
    return rc;
}

/* ---- memory --------------------------------------------------------------------------------- */

static int has_cap_ipc_lock(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int yes = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "CapEff:", 7) == 0) {
            unsigned long long caps = strtoull(line + 7, NULL, 16);
            yes = (caps >> 14) & 1; /* CAP_IPC_LOCK */
        }
    if (f)
        fclose(f);
    return yes;
}

/* ib_umem_get() refuses to pin more than RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK;
 * the failure surfaces as an ENOMEM from ibv_reg_mr (or a misleading queue-creation error in
 * MPI stacks), so check first and say how to fix it. */
static int check_memlock(struct vb *v, size_t need, struct fs_err *err)
{
    struct rlimit rl;
    v->cap_ipc_lock = has_cap_ipc_lock();
    if (getrlimit(RLIMIT_MEMLOCK, &rl))
        return 0;
    v->memlock_limit = rl.rlim_cur == RLIM_INFINITY ? ~0ull : (unsigned long long)rl.rlim_cur;
    if (rl.rlim_cur == RLIM_INFINITY || need <= rl.rlim_cur || v->cap_ipc_lock)
        return 0;
    char hard[48];
    if (rl.rlim_max == RLIM_INFINITY)
        snprintf(hard, sizeof hard, "unlimited");
    else
        snprintf(hard, sizeof hard, "%llu KiB", (unsigned long long)rl.rlim_max / 1024);
    return fs_fail(err, FS_EXIT_USAGE,
                   "locked-memory limit too low: fabscope must pin about %zu KiB for device %s "
                   "(buffers for %" PRIu64 "-byte messages; NICs with user-space queues pin those "
                   "too), but RLIMIT_MEMLOCK "
                   "(`ulimit -l`) is %llu KiB (hard limit: %s). RDMA memory is pinned and counts "
                   "against it. Fix: `ulimit -l unlimited` in this shell before starting (needs "
                   "a high enough hard limit or root); for good, add to "
                   "/etc/security/limits.d/rdma.conf `* soft memlock unlimited` and `* hard "
                   "memlock unlimited` (ssh logins pick it up through pam_limits: UsePAM yes in "
                   "sshd_config; systemd services need LimitMEMLOCK=infinity). Under mpirun/srun "
                   "the ranks inherit the limit of the daemon that starts them (orted/prted, "
                   "slurmd): raise it there (slurmd: LimitMEMLOCK=infinity) or wrap the command "
                   "as `sh -c 'ulimit -l unlimited && exec ...'`",
                   (need + 1023) / 1024, v->dev_name, v->max_size,
                   (unsigned long long)rl.rlim_cur / 1024, hard);
}

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
                   svc_name(v->svc), fs_ops[v->op].name, (int)wc->status,
                   ibv_wc_status_str(wc->status), v->dev_name, v->port, wc->qp_num, v->gid_index,
                   v->gid_str[0] ? v->gid_str : "-", wc_advice(wc->status));
}

/* wr_id layout: bit 63 = receive, bit 62 = tail flush, bits 32..39 = QP index, low 32 = number
 * of core operations this completion accounts for. */
#define WR_RECV (1ull << 63)
#define WR_FLUSH (1ull << 62)
#define WR_QP(i) ((uint64_t)(i) << 32)
#define WR_QPI(id) ((int)(((id) >> 32) & 0xff))
#define WR_OPS(id) ((id) & 0xffffffffull)

static int post_recvs(struct vb *v, struct vb_qp *q, int qi, uint32_t n, struct fs_err *err)
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
        if (v->o.mtu > mtu_bytes(v->pattr.active_mtu))
            return fs_fail(err, FS_EXIT_USAGE,
                           "--mtu %ld is larger than the active MTU of %s port %d (%d bytes%s); "
                           "use --mtu %d or less, or leave it out",
                           v->o.mtu, v->dev_name, v->port, mtu_bytes(v->pattr.active_mtu),
                           v->pattr.link_layer == IBV_LINK_LAYER_ETHERNET
                               ? ": on RoCE it follows the netdev MTU minus headers; raise it "
                                 "with `ip link set IFACE mtu 9000`"
                               : "",
                           mtu_bytes(v->pattr.active_mtu));
        if (v->o.cm)
            return fs_fail(err, FS_EXIT_USAGE,
                           "--mtu with --cm: rdma_cm takes the path MTU from the resolved route; "
                           "leave --mtu out (the MTU used is in the result)");
    }
    if (v->o.cm && v->svc != VB_RC)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--cm connects RC queue pairs only in fabscope; use --qp-type rc, or drop "
                       "--cm for %s",
                       svc_name(v->svc));
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

static int create_qps(struct vb *v, struct fs_err *err)
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
            rc = rdma_create_qp(v->qp[i].id, v->pd, &a) ? errno : 0;
            if (rc == 0)
                v->qp[i].qp = v->qp[i].id->qp;
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
                           svc_name(v->svc), v->dev_name, first.cap.max_send_wr,
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

static int cm_wait(struct vb *v, enum rdma_cm_event_type want, int deadline_ms,
                   struct rdma_cm_event **out, struct fs_err *err);

static void vb_teardown(void *be);
static int post_flush(struct vb *v, struct vb_qp *q, int qi, struct fs_err *err);
static int poll_cq(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err);

static int vb_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    struct vb *v = calloc(1, sizeof *v);
    if (!v)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = v;
    v->o = *(const struct vb_opts *)ctx->opts;
    v->is_server = ctx->is_server;
    v->op = (enum fs_op)fs_op_by_name(ctx->spec->op);
    v->pat = (enum fs_pattern)fs_pattern_by_name(ctx->spec->pattern);
    v->svc = strcmp(v->o.qp_type, "uc") == 0 ? VB_UC : strcmp(v->o.qp_type, "ud") == 0 ? VB_UD
                                                                                    : VB_RC;
    v->max_size = ctx->max_size ? ctx->max_size : 1;
    v->tx_depth = ctx->spec->tx_depth;
    v->window = v->tx_depth;
    v->timeout_ms = (int)(ctx->spec->timeout * 1000);
    v->nqp = (int)v->o.qps;
    v->gid_index = -1;
    v->gid_type = -1;
    v->mem_poll = v->pat == FS_PAT_LAT && v->op == FS_OP_WRITE;
    v->needs_recv = v->op == FS_OP_SEND || v->op == FS_OP_WRITE_IMM;
    v->passive_target = v->is_server && v->pat != FS_PAT_BIBW &&
                        (v->pat == FS_PAT_LAT ? fs_ops[v->op].lat_role : fs_ops[v->op].bw_role) ==
                            FS_ROLE_PASSIVE;

    if (select_device(v, ctx->spec->device, err))
        return -1;
    if (ibv_query_device(v->ctx, &v->dattr))
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_query_device(%s): %s", v->dev_name,
                       strerror(errno));
    v->transport = v->ctx->device->transport_type;
    if (select_port(v, err) || select_gid(v, err) || check_service(v, err))
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
    if (check_memlock(v, v->buf_len, err))
        return -1;
    if (posix_memalign((void **)&v->buf, page, v->buf_len))
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: cannot allocate %zu bytes", v->buf_len);
    memset(v->buf, 0, v->buf_len);
    fill_pat(v->buf, v->max_size, 0);

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

    if (v->o.cm) {
        v->ech = rdma_create_event_channel();
        if (!v->ech)
            return fs_fail(err, FS_EXIT_MEASURE, "rdma_cm: cannot create an event channel: %s",
                           strerror(errno));
        fcntl(v->ech->fd, F_SETFL, fcntl(v->ech->fd, F_GETFL) | O_NONBLOCK);
        /* The data address belongs to the chosen device: --bind, else the IPv4 of its GID.
         * (Binding to the control address could land on loopback, which rdma_cm maps to an
         * arbitrary device.) */
        char dev_ip[INET_ADDRSTRLEN] = "";
        if (!ctx->spec->bind[0] && !v->gid_ip[0])
            device_ipv4(v, dev_ip, sizeof dev_ip);
        const char *addr = ctx->spec->bind[0] ? ctx->spec->bind : v->gid_ip[0] ? v->gid_ip : dev_ip;
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
            if (rdma_listen(v->listen_id, 1))
                return fs_fail(err, FS_EXIT_MEASURE, "rdma_cm: listen on %s: %s", addr,
                               strerror(errno));
            snprintf(v->cm_local, sizeof v->cm_local, "%s:%u", addr,
                     ntohs(rdma_get_src_port(v->listen_id)));
        }
        return 0;
    }
    if (create_qps(v, err))
        return -1;
    for (int i = 0; i < v->nqp; i++) {
        if (qp_to_init(v, &v->qp[i], err))
            return -1;
        /* posted before the peer can send: an RC send with no receive waiting is an RNR NAK */
        if (v->needs_recv && post_recvs(v, &v->qp[i], i, v->rx_depth, err))
            return -1;
    }
    return 0;
}

/* ---- address exchange and connection -------------------------------------------------------- */

static int vb_local_address(void *be, cJSON *o, struct fs_err *err)
{
    struct vb *v = be;
    char hex[40];
    (void)err;
    cJSON_AddStringToObject(o, "device", v->dev_name);
    cJSON_AddStringToObject(o, "link_layer", link_layer_name(v->pattr.link_layer));
    cJSON_AddNumberToObject(o, "lid", v->pattr.lid);
    char g[33];
    for (int i = 0; i < 16; i++)
        snprintf(g + 2 * i, 3, "%02x", v->gid.raw[i]);
    cJSON_AddStringToObject(o, "gid", g);
    cJSON_AddNumberToObject(o, "gid_index", v->gid_index);
    cJSON_AddNumberToObject(o, "mtu_active", mtu_bytes(v->pattr.active_mtu));
    cJSON_AddNumberToObject(o, "rd_atom", v->rd_atom);
    hex_u64(hex, sizeof hex, v->mr ? v->mr->rkey : 0);
    cJSON_AddStringToObject(o, "rkey", hex);
    hex_u64(hex, sizeof hex, (uint64_t)(uintptr_t)(v->buf + v->rx_off));
    cJSON_AddStringToObject(o, "rx_addr", hex);
    hex_u64(hex, sizeof hex, (uint64_t)(uintptr_t)v->buf);
    cJSON_AddStringToObject(o, "tx_addr", hex);
    if (v->o.cm) {
        if (v->is_server) {
            char a[INET6_ADDRSTRLEN];
            snprintf(a, sizeof a, "%s", v->cm_local);
            char *colon = strrchr(a, ':');
            if (colon)
                *colon = '\0';
            cJSON_AddStringToObject(o, "cm_addr", a);
            cJSON_AddNumberToObject(o, "cm_port", ntohs(rdma_get_src_port(v->listen_id)));
        }
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
    if (!cJSON_IsObject(p) || parse_hex_u64(p, "rx_addr", &v->peer_rx_addr) ||
        parse_hex_u64(p, "tx_addr", &v->peer_tx_addr) || get_num(p, "mtu_active", &d))
        return fs_fail(err, FS_EXIT_PEER, "verbs: the peer sent an incomplete address");
    v->peer_mtu = (int)d;
    uint64_t rkey;
    if (parse_hex_u64(p, "rkey", &rkey))
        return fs_fail(err, FS_EXIT_PEER, "verbs: the peer sent no rkey");
    v->peer_rkey = (uint32_t)rkey;
    v->peer_rd_atom = get_num(p, "rd_atom", &d) ? 1 : (uint32_t)d;
    v->peer_lid = get_num(p, "lid", &d) ? 0 : (uint16_t)d;
    const cJSON *ll = cJSON_GetObjectItemCaseSensitive(p, "link_layer");
    if (cJSON_IsString(ll) && strcmp(ll->valuestring, link_layer_name(v->pattr.link_layer)) != 0)
        return fs_fail(err, FS_EXIT_USAGE,
                       "verbs: this side's port is %s but the peer's is %s: they cannot talk "
                       "verbs to each other; choose ports of the same kind with --device/--ib-port",
                       link_layer_name(v->pattr.link_layer), ll->valuestring);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(p, "gid");
    if (cJSON_IsString(g) && strlen(g->valuestring) == 32)
        for (int i = 0; i < 16; i++) {
            unsigned b;
            sscanf(g->valuestring + 2 * i, "%2x", &b);
            v->peer_gid.raw[i] = (uint8_t)b;
        }
    return 0;
}

static int qp_to_rtr_rts(struct vb *v, struct vb_qp *q, struct fs_err *err)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
    int mask = IBV_QP_STATE;
    if (v->svc != VB_UD) {
        a.path_mtu = mtu_enum(v->mtu_used);
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
    int local = mtu_bytes(v->pattr.active_mtu);
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

static int cm_connect_client(struct vb *v, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(peer, "cm_addr");
    double port;
    if (!cJSON_IsString(a) || get_num(peer, "cm_port", &port))
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
    if (create_qps(v, err) || (v->needs_recv && post_recvs(v, &v->qp[0], 0, v->rx_depth, err)))
        return -1;
    struct rdma_conn_param cp = {.responder_resources = (uint8_t)v->rd_atom,
                                 .initiator_depth = (uint8_t)v->rd_atom,
                                 .retry_count = 7,
                                 .rnr_retry_count = 7};
    if (rdma_connect(v->qp[0].id, &cp))
        return fs_fail(err, FS_EXIT_PEER, "rdma_cm: connect to %s: %s", v->cm_peer,
                       strerror(errno));
    /* The server accepts only after our control message arrives: ESTABLISHED is awaited in
     * prepare(), after the core's "connected". */
    v->cm_pending = 1;
    return 0;
}

static int cm_accept_server(struct vb *v, int deadline_ms, struct fs_err *err)
{
    struct rdma_cm_event *ev = NULL;
    if (cm_wait(v, RDMA_CM_EVENT_CONNECT_REQUEST, deadline_ms, &ev, err))
        return -1;
    v->qp[0].id = ev->id;
    uint8_t peer_init = ev->param.conn.initiator_depth;
    struct sockaddr *pa = rdma_get_peer_addr(ev->id);
    char h[INET6_ADDRSTRLEN] = "?";
    if (pa && pa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)pa)->sin_addr, h, sizeof h);
    snprintf(v->cm_peer, sizeof v->cm_peer, "%s:%u", h, ntohs(rdma_get_dst_port(ev->id)));
    rdma_ack_cm_event(ev);
    if (create_qps(v, err) || (v->needs_recv && post_recvs(v, &v->qp[0], 0, v->rx_depth, err)))
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
        v->mtu_used = mtu_bytes(a.path_mtu);
        v->qp[0].peer_qpn = a.dest_qp_num;
        snprintf(v->mtu_sel, sizeof v->mtu_sel, "rdma_cm: from the resolved path");
    }
    /* rdma_cm chooses the source GID from the bound address; record what it used. */
    struct rdma_cm_id *id = v->qp[0].id;
    if (id) {
        union ibv_gid sg;
        memcpy(sg.raw, id->route.addr.addr.ibaddr.sgid.raw, 16);
        if (!gid_is_zero(&sg) && memcmp(sg.raw, v->gid.raw, 16) != 0) {
            gid_text(&sg, v->gid_str, sizeof v->gid_str);
            snprintf(v->gid_sel, sizeof v->gid_sel, "rdma_cm: source GID of the bound address");
        }
    }
}

static int vb_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct vb *v = be;
    if (parse_peer(v, peer, err))
        return -1;
    if (v->o.cm) {
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
    if (pick_mtu(v, err))
        return -1;
    if (v->use_grh && v->pattr.link_layer == IBV_LINK_LAYER_ETHERNET &&
        gid_is_ipv4(&v->gid, NULL, 0) != gid_is_ipv4(&v->peer_gid, NULL, 0)) {
        /* RoCE v2 puts the GIDs in an IP header: an IPv4 one cannot talk to an IPv6 one.
         * Found by perftest users as an EINVAL from ibv_modify_qp or a status 12 later. */
        char pg[INET6_ADDRSTRLEN];
        gid_text(&v->peer_gid, pg, sizeof pg);
        const cJSON *pidx = cJSON_GetObjectItemCaseSensitive(peer, "gid_index");
        return fs_fail(err, FS_EXIT_USAGE,
                       "GID mismatch: this side uses GID index %d (%s, %s) and the peer GID index "
                       "%d (%s, %s); RoCE v2 carries GIDs as IP addresses, so both must be IPv4 or "
                       "both IPv6. Leave --gid-index out on both hosts (fabscope then picks the "
                       "RoCE v2 IPv4 GID) or give indices of the same kind",
                       v->gid_index, v->gid_str, gid_is_ipv4(&v->gid, NULL, 0) ? "IPv4" : "IPv6",
                       cJSON_IsNumber(pidx) ? pidx->valueint : -1, pg,
                       gid_is_ipv4(&v->peer_gid, NULL, 0) ? "IPv4" : "IPv6");
    }
    const cJSON *qps = cJSON_GetObjectItemCaseSensitive(peer, "qps");
    if (!cJSON_IsArray(qps) || cJSON_GetArraySize(qps) != v->nqp)
        return fs_fail(err, FS_EXIT_PEER, "verbs: the peer has %d QPs, this side %d",
                       cJSON_IsArray(qps) ? cJSON_GetArraySize(qps) : 0, v->nqp);
    for (int i = 0; i < v->nqp; i++) {
        const cJSON *q = cJSON_GetArrayItem(qps, i);
        double qpn, psn;
        if (get_num(q, "qpn", &qpn) || get_num(q, "psn", &psn))
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

/* ---- per size ------------------------------------------------------------------------------- */

static int vb_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct vb *v = be;
    if (v->cm_pending) {
        struct rdma_cm_event *ev = NULL;
        if (cm_wait(v, RDMA_CM_EVENT_ESTABLISHED, v->timeout_ms, &ev, err))
            return -1;
        rdma_ack_cm_event(ev);
        v->cm_pending = 0;
        cm_learn_path(v);
        v->connected = 1;
    }
    if (op != v->op || size > v->max_size)
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: prepare for %s/%" PRIu64 " outside setup",
                       fs_ops[op].name, size);
    /* A ping-pong does not wait for its own send completions, and with --cq-mod it may end on
     * an unsignaled run: settle both before the next size reuses the queues. */
    for (int i = 0; i < v->nqp; i++)
        if (v->qp[i].unsig_ops && !v->qp[i].sig_inflight && post_flush(v, &v->qp[i], i, err))
            return -1;
    for (int slice = 0; v->unreported && slice * 10 < v->timeout_ms; slice++) {
        struct fs_events ev = {0, 0, 0};
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
                       "verbs: %" PRIu64 " operations of the previous size never completed "
                       "within %d ms (peer gone?)",
                       v->unreported, v->timeout_ms);
    v->size = size;
    v->tx_seq = v->rx_seq = 0;
    /* Nothing is in flight between sizes (both sides finished the phase), so the receive area
     * can be reset: write-lat arrivals are detected by a marker in its last byte, and atomics
     * start from 0. The tx area holds the read pattern the peer checks with --verify. */
    memset(v->buf + v->rx_off, 0, v->rx_len);
    fill_pat(v->buf, size, VB_READ_SEED);
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

static int vb_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
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
    int sig = passive_lat || q->unsig_ops + 1 >= (uint64_t)v->o.cq_mod ||
              v->unreported + 1 >= (uint64_t)v->window || q->slots + 3 > v->sq_depth;
    uint64_t seq = v->tx_seq;
    switch (op) {
    case FS_OP_SEND:
        wr.opcode = IBV_WR_SEND;
        if (v->o.verify)
            fill_pat(v->buf, size, seq);
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
                fill_pat(v->buf, size - 1, seq);
            v->buf[size - 1] = marker(seq);
        }
        break;
    case FS_OP_WRITE_IMM:
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl((uint32_t)seq);
        wr.wr.rdma.remote_addr = v->peer_rx_addr;
        wr.wr.rdma.rkey = v->peer_rkey;
        if (v->o.verify)
            fill_pat(v->buf, size, seq);
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
    return 1;
}

/* 1 = a message of the run arrived, 0 = a UD tail flush (see post_flush), -1 = error. */
static int on_recv(struct vb *v, const struct ibv_wc *wc, struct fs_err *err)
{
    const uint64_t hdr = v->svc == VB_UD ? VB_GRH : 0;
    int qi = WR_QPI(wc->wr_id);
    if (v->svc == VB_UD && wc->byte_len == VB_GRH)
        return post_recvs(v, &v->qp[qi], qi, 1, err) ? -1 : 0; /* sizes are >= 1 byte */
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
        if (check_pat(v->buf + v->rx_off + hdr, v->size, v->rx_seq,
                      v->op == FS_OP_SEND ? "received message" : "written buffer", err))
            return -1;
    }
    v->rx_seq++;
    v->qp[qi].rx_msgs++;
    return post_recvs(v, &v->qp[qi], qi, 1, err) ? -1 : 1;
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
            if (check_pat(v->buf + v->rx_off, v->size, VB_READ_SEED, "read buffer", err))
                return -1;
        }
    }
    *got += n;
    return 0;
}

/* The busy part of progress: reap completions, watch write-lat memory, and close a run of
 * unsignaled requests that nothing signaled follows. */
static int progress_now(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err)
{
    if (poll_cq(v, ev, got, err))
        return -1;
    if (v->mem_poll) {
        volatile uint8_t *last = v->buf + v->rx_off + v->size - 1;
        if (*last == marker(v->rx_seq)) {
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (v->o.verify && check_pat(v->buf + v->rx_off, v->size - 1, v->rx_seq,
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
    if (v->o.cq_mod > 1 && (v->pat != FS_PAT_LAT))
        for (int i = 0; i < v->nqp; i++)
            if (v->qp[i].unsig_ops && !v->qp[i].sig_inflight && post_flush(v, &v->qp[i], i, err))
                return -1;
    return 0;
}

/* Asks for an event at the next completion; one that arrived before arming raises none, so the
 * CQ is looked at once more. */
static int arm_cq(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err)
{
    if (v->cq_armed)
        return 0;
    if (ibv_req_notify_cq(v->cq, 0))
        return fs_fail(err, FS_EXIT_MEASURE, "verbs: ibv_req_notify_cq on %s failed", v->dev_name);
    v->cq_armed = 1;
    return poll_cq(v, ev, got, err);
}

/* The completion channel is readable: take its event and reap. */
static int take_cq_event(struct vb *v, struct fs_events *ev, int *got, struct fs_err *err)
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
 * progress, and spinning would take the CPU from the initiator and from a software device (rxe,
 * siw) on a shared core. It says so (fs_events.idle) and the core sleeps on the control channel. */
static int vb_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct vb *v = be;
    int got = 0;
    if (v->passive_target) {
        ev->idle = 1;
        return 0;
    }
    if (progress_now(v, ev, &got, err))
        return -1;
    if (got || v->mem_poll || wait_ms <= 0)
        return 0;
    if (arm_cq(v, ev, &got, err))
        return -1;
    if (got)
        return 0;
    struct pollfd p = {.fd = v->ch->fd, .events = POLLIN};
    if (poll(&p, 1, wait_ms) > 0 && take_cq_event(v, ev, &got, err))
        return -1;
    return 0;
}

/* ---- describe / teardown -------------------------------------------------------------------- */

/* UC and UD do not retransmit: a dropped message is a loss to report, not a stalled peer. */
static int vb_lossy(void *be)
{
    const struct vb *v = be;
    return v->svc != VB_RC;
}

/* Core operations of this phase that completed on q. */
static uint64_t phase_completed(const struct vb_qp *q)
{
    return q->completed_ops > q->phase_first_op ? q->completed_ops - q->phase_first_op : 0;
}

static void vb_describe(void *be, cJSON *o)
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
    cJSON_AddStringToObject(o, "link_layer", link_layer_name(v->pattr.link_layer));
    if (v->netdev[0])
        cJSON_AddStringToObject(o, "netdev", v->netdev);
    cJSON_AddNumberToObject(o, "lid", v->pattr.lid);
    cJSON *g = cJSON_AddObjectToObject(o, "gid");
    cJSON_AddNumberToObject(g, "index", v->gid_index);
    cJSON_AddStringToObject(g, "type", v->gid_type >= 0 ? gid_type_name(v->gid_type) : "none");
    cJSON_AddStringToObject(g, "address", v->gid_str);
    if (v->gid_ip[0])
        cJSON_AddStringToObject(g, "ipv4", v->gid_ip);
    cJSON_AddBoolToObject(g, "grh", v->use_grh);
    cJSON_AddStringToObject(g, "selection", v->gid_sel);
    cJSON_AddStringToObject(o, "qp_type", svc_name(v->svc));
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
    cJSON_AddNumberToObject(m, "active", mtu_bytes(v->pattr.active_mtu));
    cJSON_AddNumberToObject(m, "used", v->mtu_used);
    cJSON_AddStringToObject(m, "selection", v->mtu_sel);
    cJSON_AddNumberToObject(o, "inline", v->inline_eff);
    cJSON_AddNumberToObject(o, "cq_mod", v->o.cq_mod);
    cJSON_AddNumberToObject(o, "tail_flushes", (double)v->tail_flushes);
    cJSON_AddNumberToObject(o, "sq_depth", v->sq_depth);
    cJSON_AddNumberToObject(o, "rx_depth", v->needs_recv ? v->rx_depth : 0);
    cJSON_AddNumberToObject(o, "rd_atomic", v->rd_atom);
    cJSON_AddBoolToObject(o, "cm", v->o.cm);
    if (v->o.cm) {
        cJSON_AddStringToObject(o, "cm_local", v->cm_local);
        cJSON_AddStringToObject(o, "cm_peer", v->cm_peer);
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

static void vb_teardown(void *be)
{
    struct vb *v = be;
    if (!v)
        return;
    for (int i = 0; i < v->nqp; i++) {
        if (v->o.cm && v->qp[i].id) {
            if (v->connected)
                rdma_disconnect(v->qp[i].id);
            if (v->qp[i].qp)
                rdma_destroy_qp(v->qp[i].id);
            rdma_destroy_id(v->qp[i].id);
        } else if (v->qp[i].qp) {
            ibv_destroy_qp(v->qp[i].qp);
        }
    }
    if (v->listen_id)
        rdma_destroy_id(v->listen_id);
    if (v->ech)
        rdma_destroy_event_channel(v->ech);
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
    if (v->cm_list)
        rdma_free_devices(v->cm_list);
    free(v->buf);
    free(v);
}

static void vb_phase_begin(void *be)
{
    struct vb *v = be;
    for (int i = 0; i < v->nqp; i++) {
        v->qp[i].phase_first_op = v->qp[i].posted_ops;
        v->qp[i].rx_msgs = 0;
    }
}

/* Before any connection: each --device names a device libibverbs lists here (the same list
 * --inventory-json prints), so a typo is a usage error even when the peer is missing. */
static int vb_check_name(const char *want, struct fs_err *err)
{
    int n = 0;
    errno = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    int why = errno;
    if (!l || n == 0) {
        if (l)
            ibv_free_device_list(l);
        return no_devices(err, l ? 0 : why);
    }
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        found = strcmp(ibv_get_device_name(l[i]), want) == 0;
    ibv_free_device_list(l);
    if (found)
        return 0;
    char list[1536];
    list_devices(list, sizeof list);
    char sv[FS_SHOWN_LEN];
    return fs_fail(err, FS_EXIT_USAGE, "--device %s: no such RDMA device on this host; it has: %s",
                   fs_shown(want, sv, sizeof sv), list);
}

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
            port_netdev(c, p, nd, sizeof nd);
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
    list_devices(have, sizeof have);
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
        if (progress_now(m->d[i], ev, &g, err))
            return -1;
        got += g;
    }
    if (got || m->d[0]->mem_poll || wait_ms <= 0)
        return 0;
    for (int i = 0; i < m->n; i++)
        if (arm_cq(m->d[i], ev, &got, err))
            return -1;
    if (got)
        return 0;
    struct pollfd p[VB_MAX_DEVS];
    for (int i = 0; i < m->n; i++)
        p[i] = (struct pollfd){.fd = m->d[i]->ch->fd, .events = POLLIN};
    if (poll(p, (nfds_t)m->n, wait_ms) <= 0)
        return 0;
    for (int i = 0; i < m->n; i++)
        if (p[i].revents && take_cq_event(m->d[i], ev, &got, err))
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
    cJSON_AddStringToObject(o, "qp_type", svc_name(m->d[0]->svc));
    cJSON_AddNumberToObject(o, "qps_per_device", m->d[0]->nqp);
    cJSON_AddNumberToObject(o, "cq_mod", m->d[0]->o.cq_mod);
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
    .patterns = FS_BIT(FS_PAT_LAT) | FS_BIT(FS_PAT_BW) | FS_BIT(FS_PAT_BIBW),
    .options = vb_options,
    .options_size = sizeof(struct vb_opts),
    .device_list = 1,
    .check = vbm_check,
    .setup = vbm_setup,
    .local_address = vbm_local_address,
    .connect = vbm_connect,
    .prepare = vbm_prepare,
    .post = vbm_post,
    .progress = vbm_progress,
    .lossy = vbm_lossy,
    .describe = vbm_describe,
    .teardown = vbm_teardown,
    .phase_begin = vbm_phase_begin,
};

/* ---- inventory (--inventory-json) ----------------------------------------------------------- */

/* The kernel's names (ib_core sysfs), so the inventory reads like /sys/class/infiniband. */
static const char *phys_state_name(uint8_t s)
{
    static const char *const names[] = {NULL,     "Sleep",  "Polling",           "Disabled",
                                        "PortConfigurationTraining", "LinkUp",
                                        "LinkErrorRecovery", "Phy Test"};
    return s < sizeof names / sizeof names[0] && names[s] ? names[s] : NULL;
}

static const char *node_type_name(enum ibv_node_type t)
{
    switch (t) {
    case IBV_NODE_CA: return "CA";
    case IBV_NODE_SWITCH: return "switch";
    case IBV_NODE_ROUTER: return "router";
    case IBV_NODE_RNIC: return "RNIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    default: return "unspecified";
    }
}

/* Width x speed the way the kernel's sysfs `rate` attribute prints it (rate_show in ib_core):
 * "100 Gb/sec (4X EDR)"; FDR lanes count 14 Gb/s as there, so 4X FDR is 56. The number in
 * rate_gbps is the same figure. */
static void port_rate(const struct ibv_port_attr *pa, cJSON *o)
{
    int lanes = pa->active_width == 1 ? 1 : pa->active_width == 2 ? 4 : pa->active_width == 4 ? 8
                : pa->active_width == 8 ? 12 : pa->active_width == 16 ? 2 : 0;
    int tenths;
    const char *speed;
    switch (pa->active_speed) {
    case 1: tenths = 25, speed = " SDR"; break;
    case 2: tenths = 50, speed = " DDR"; break;
    case 4: tenths = 100, speed = " QDR"; break;
    case 8: tenths = 100, speed = " FDR10"; break;
    case 16: tenths = 140, speed = " FDR"; break;
    case 32: tenths = 250, speed = " EDR"; break;
    case 64: tenths = 500, speed = " HDR"; break;
    case 128: tenths = 1000, speed = " NDR"; break;
    default: tenths = 0, speed = NULL; break;
    }
    if (!lanes || !speed) {
        cJSON_AddNullToObject(o, "rate");
        cJSON_AddNullToObject(o, "rate_gbps");
        return;
    }
    int rate = tenths * lanes;
    char text[64];
    snprintf(text, sizeof text, "%d%s Gb/sec (%dX%s)", rate / 10, rate % 10 ? ".5" : "", lanes,
             speed);
    cJSON_AddStringToObject(o, "rate", text);
    cJSON_AddNumberToObject(o, "rate_gbps", rate / 10.0);
    cJSON_AddNumberToObject(o, "active_width_lanes", lanes);
    cJSON_AddStringToObject(o, "active_speed", speed + 1);
}

/* A GID the way sysfs prints it: eight groups of four hex digits. */
static void gid_sysfs_text(const union ibv_gid *g, char *out, size_t len)
{
    const uint8_t *r = g->raw;
    snprintf(out, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
             r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12],
             r[13], r[14], r[15]);
}

static void guid_text(__be64 be, char *out, size_t len)
{
    uint64_t x = be64toh(be);
    snprintf(out, len, "%04x:%04x:%04x:%04x", (unsigned)(x >> 48) & 0xffff,
             (unsigned)(x >> 32) & 0xffff, (unsigned)(x >> 16) & 0xffff, (unsigned)x & 0xffff);
}

static void inventory_port(struct ibv_context *c, int port, const struct ibv_gid_entry *all,
                           ssize_t nall, cJSON *o)
{
    struct ibv_port_attr pa;
    cJSON_AddNumberToObject(o, "port", port);
    if (ibv_query_port(c, (uint8_t)port, &pa)) {
        cJSON_AddStringToObject(o, "error", strerror(errno));
        return;
    }
    cJSON_AddStringToObject(o, "state", port_state_name(pa.state));
    const char *phys = phys_state_name(pa.phys_state);
    if (phys)
        cJSON_AddStringToObject(o, "phys_state", phys);
    else
        cJSON_AddNullToObject(o, "phys_state");
    cJSON_AddStringToObject(o, "link_layer", link_layer_name(pa.link_layer));
    cJSON_AddNumberToObject(o, "active_mtu", mtu_bytes(pa.active_mtu));
    cJSON_AddNumberToObject(o, "max_mtu", mtu_bytes(pa.max_mtu));
    port_rate(&pa, o);
    cJSON_AddNumberToObject(o, "lid", pa.lid);
    cJSON_AddNumberToObject(o, "sm_lid", pa.sm_lid);
    cJSON_AddNumberToObject(o, "lmc", pa.lmc);
    cJSON_AddNumberToObject(o, "gid_tbl_len", pa.gid_tbl_len);
    char capm[16];
    snprintf(capm, sizeof capm, "0x%08x", pa.port_cap_flags);
    cJSON_AddStringToObject(o, "cap_mask", capm);

    /* The netdev: a GID entry naming one; else (siw) the netdev owning the GID's MAC. */
    char nd[IF_NAMESIZE + 1] = "";
    const char *nd_source = NULL;
    cJSON *gids = cJSON_AddArrayToObject(o, "gids");
    for (ssize_t i = 0; i < nall; i++) {
        if ((int)all[i].port_num != port || gid_is_zero(&all[i].gid))
            continue;
        cJSON *g = cJSON_CreateObject();
        char text[48], ip[INET_ADDRSTRLEN], gnd[IF_NAMESIZE + 1] = "";
        gid_sysfs_text(&all[i].gid, text, sizeof text);
        cJSON_AddNumberToObject(g, "index", all[i].gid_index);
        cJSON_AddStringToObject(g, "gid", text);
        cJSON_AddStringToObject(g, "type", gid_type_name((int)all[i].gid_type));
        if (all[i].ndev_ifindex && if_indextoname(all[i].ndev_ifindex, gnd)) {
            cJSON_AddStringToObject(g, "netdev", gnd);
            if (!nd[0]) {
                snprintf(nd, sizeof nd, "%s", gnd);
                nd_source = "GID table";
            }
        } else {
            cJSON_AddNullToObject(g, "netdev");
        }
        if (gid_is_ipv4(&all[i].gid, ip, sizeof ip))
            cJSON_AddStringToObject(g, "ipv4", ip);
        else
            cJSON_AddNullToObject(g, "ipv4");
        cJSON_AddItemToArray(gids, g);
    }
    if (!nd[0] && pa.link_layer == IBV_LINK_LAYER_ETHERNET && cJSON_GetArraySize(gids) > 0) {
        union ibv_gid g0;
        if (ibv_query_gid(c, (uint8_t)port, 0, &g0) == 0 && !gid_is_zero(&g0)) {
            netdev_by_gid_mac(&g0, nd, sizeof nd);
            if (nd[0])
                nd_source = "MAC in GID 0";
        }
    }
    if (nd[0]) {
        cJSON_AddStringToObject(o, "netdev", nd);
        cJSON_AddStringToObject(o, "netdev_source", nd_source);
    } else {
        cJSON_AddNullToObject(o, "netdev");
    }
}

/* Every populated GID of every port of the device: one ioctl where the kernel has it, else one
 * query per index and port (old kernels). */
static ssize_t inventory_gids(struct ibv_context *c, int nports, struct ibv_gid_entry *all,
                              size_t max)
{
    ssize_t n = query_gid_table(c, all, max);
    if (n >= 0)
        return n;
    ssize_t k = 0;
    for (int p = 1; p <= nports; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(c, (uint8_t)p, &pa))
            continue;
        for (int i = 0; i < pa.gid_tbl_len && (size_t)k < max; i++)
            if (ibv_query_gid_ex(c, (uint32_t)p, (uint32_t)i, &all[k], 0) == 0 &&
                !gid_is_zero(&all[k].gid))
                k++;
    }
    return k;
}

void fs_inventory_verbs(cJSON *part)
{
    cJSON_AddStringToObject(part, "library", "libibverbs");
    int n = 0;
    errno = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    int why = errno;
    cJSON_AddStringToObject(part, "status", "ok");
    cJSON *devs = cJSON_AddArrayToObject(part, "devices");
    if (!l) {
        /* No kernel RDMA support is a host without devices, not a failure of the inventory. */
        char note[256];
        snprintf(note, sizeof note, "ibv_get_device_list: %s", strerror(why));
        cJSON_AddStringToObject(part, "note", note);
        return;
    }
    struct ibv_gid_entry *all = calloc(VB_MAX_GIDS, sizeof *all);
    for (int i = 0; i < n; i++) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToArray(devs, d);
        cJSON_AddStringToObject(d, "name", ibv_get_device_name(l[i]));
        cJSON_AddStringToObject(d, "node_type", node_type_name(l[i]->node_type));
        cJSON_AddStringToObject(d, "transport", l[i]->transport_type == IBV_TRANSPORT_IWARP
                                                    ? "iWARP"
                                                    : l[i]->transport_type == IBV_TRANSPORT_IB
                                                        ? "InfiniBand"
                                                        : "other");
        struct ibv_context *c = ibv_open_device(l[i]);
        struct ibv_device_attr da;
        if (!c || ibv_query_device(c, &da)) {
            char e[160];
            snprintf(e, sizeof e, "cannot open: %s%s", strerror(errno),
                     errno == EACCES ? " (permissions of /dev/infiniband/uverbs*)" : "");
            cJSON_AddStringToObject(d, "error", e);
            if (c)
                ibv_close_device(c);
            continue;
        }
        char guid[32];
        guid_text(da.node_guid, guid, sizeof guid);
        cJSON_AddStringToObject(d, "node_guid", guid);
        guid_text(da.sys_image_guid, guid, sizeof guid);
        cJSON_AddStringToObject(d, "sys_image_guid", guid);
        cJSON_AddStringToObject(d, "fw_ver", da.fw_ver);
        char hex[16];
        snprintf(hex, sizeof hex, "0x%04x", da.vendor_id);
        cJSON_AddStringToObject(d, "vendor_id", hex);
        cJSON_AddNumberToObject(d, "vendor_part_id", da.vendor_part_id);
        snprintf(hex, sizeof hex, "0x%x", da.hw_ver);
        cJSON_AddStringToObject(d, "hw_ver", hex);
        cJSON_AddNumberToObject(d, "phys_port_cnt", da.phys_port_cnt);
        ssize_t ng = all ? inventory_gids(c, da.phys_port_cnt, all, VB_MAX_GIDS) : 0;
        cJSON *ports = cJSON_AddArrayToObject(d, "ports");
        for (int p = 1; p <= da.phys_port_cnt; p++) {
            cJSON *po = cJSON_CreateObject();
            inventory_port(c, p, all, ng, po);
            cJSON_AddItemToArray(ports, po);
        }
        ibv_close_device(c);
    }
    free(all);
    ibv_free_device_list(l);
}
