/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: choosing the device, port and GID, and the locked-memory check. */
#define _GNU_SOURCE
#include "verbs_int.h"
#include <limits.h>
#include "sysfs.h"

/* The netdev of a port, from the first GID entry that names one. */
void vb_port_netdev(struct ibv_context *c, int port, char *out, size_t len)
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
void vb_netdev_by_gid_mac(const union ibv_gid *gid, char *nd, size_t len)
{
    char want[18], path[300], got[32];
    const uint8_t *m = gid->raw;
    snprintf(want, sizeof want, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    struct if_nameindex *ifs = if_nameindex();
    for (struct if_nameindex *i = ifs; i && i->if_index && !nd[0]; i++) {
        FILE *f = fs_sysfs_path(path, sizeof path, "class/net/%s/address", i->if_name)
                      ? NULL
                      : fopen(path, "r");
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
void vb_device_ipv4(struct vb *v, char *ip, size_t len)
{
    char nd[IF_NAMESIZE + 1] = "";
    ip[0] = '\0';
    vb_port_netdev(v->ctx, v->port, nd, sizeof nd);
    if (!nd[0])
        vb_netdev_by_gid_mac(&v->gid, nd, sizeof nd);
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
void vb_list_devices(char *buf, size_t len)
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
            vb_port_netdev(c, p, nd, sizeof nd);
            used += (size_t)snprintf(buf + used, len - used, "%sport %d: %s, %s%s%s",
                                     p == 1 ? " (" : ", ", p, vb_port_state_name(pa.state),
                                     vb_link_layer_name(pa.link_layer), nd[0] ? ", netdev " : "", nd);
        }
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, ")");
        ibv_close_device(c);
    }
    if (l)
        ibv_free_device_list(l);
}

int vb_no_devices(struct fs_err *err, int why)
{
    char dir[PATH_MAX];
    fs_sysfs_path(dir, sizeof dir, "class/infiniband");
    int have_dir = access(dir, F_OK) == 0;
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

int vb_select_device(struct vb *v, const char *want, struct fs_err *err)
{
    char list[1536];
    int n = 0;
    if (v->o.cm) {
        int rc = vb_cm_select_device(v, want, &n, err);
        if (rc <= 0)
            return rc;
    } else {
        int why = 0;
        errno = 0;
        struct ibv_device **l = ibv_get_device_list(&n);
        why = errno;
        if (!l || n == 0) {
            if (l)
                ibv_free_device_list(l);
            return vb_no_devices(err, l ? 0 : why);
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
    vb_list_devices(list, sizeof list);
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

int vb_select_port(struct vb *v, struct fs_err *err)
{
    char ports[1024];
    size_t used = 0;
    ports[0] = '\0';
    for (int p = 1; p <= v->dattr.phys_port_cnt && used < sizeof ports; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(v->ctx, (uint8_t)p, &pa) == 0)
            used += (size_t)snprintf(ports + used, sizeof ports - used, "%s%d (%s, %s)",
                                     p > 1 ? ", " : "", p, vb_port_state_name(pa.state),
                                     vb_link_layer_name(pa.link_layer));
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
        vb_port_netdev(v->ctx, v->port, nd, sizeof nd);
        return fs_fail(err, FS_EXIT_USAGE,
                       "port %d of %s is %s, not ACTIVE: %s. Ports: %s", v->port, v->dev_name,
                       vb_port_state_name(v->pattr.state),
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
ssize_t vb_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *all, size_t max)
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
        n = vb_query_gid_table(v->ctx, all, VB_GID_QUERY_MAX);
    if (n >= 0) {
        for (ssize_t i = 0; i < n && (size_t)k < max; i++)
            if ((int)all[i].port_num == v->port)
                e[k++] = all[i];
    } else {
        for (int i = 0; i < v->pattr.gid_tbl_len && (size_t)k < max; i++)
            if (ibv_query_gid_ex(v->ctx, (uint32_t)v->port, (uint32_t)i, &e[k], 0) == 0 &&
                !vb_gid_is_zero(&e[k].gid))
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
        vb_gid_text(&e[i].gid, g, sizeof g);
        if (e[i].ndev_ifindex)
            if_indextoname(e[i].ndev_ifindex, nd);
        used += (size_t)snprintf(buf + used, len - used, "%s%u: %s %s%s%s", i ? "; " : "",
                                 e[i].gid_index, vb_gid_type_name((int)e[i].gid_type), g,
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
    vb_gid_text(&e->gid, v->gid_str, sizeof v->gid_str);
    if (!vb_gid_is_ipv4(&e->gid, v->gid_ip, sizeof v->gid_ip))
        v->gid_ip[0] = '\0';
    if (e->ndev_ifindex)
        if_indextoname(e->ndev_ifindex, v->netdev);
}

int vb_select_gid(struct vb *v, struct fs_err *err)
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
            if (e[i].gid_type == IBV_GID_TYPE_ROCE_V2 && vb_gid_is_ipv4(&e[i].gid, NULL, 0)) {
                if (hit < 0)
                    hit = i;
                count++;
            }
        if (hit < 0) {
            gid_table_text(e, n, table, sizeof table);
            char nd[IF_NAMESIZE + 1];
            vb_port_netdev(v->ctx, v->port, nd, sizeof nd);
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
int vb_check_memlock(struct vb *v, size_t need, struct fs_err *err)
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

/* Before any connection: each --device names a device libibverbs lists here (the same list
 * --inventory-json prints), so a typo is a usage error even when the peer is missing. */
int vb_check_name(const char *want, struct fs_err *err)
{
    int n = 0;
    errno = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    int why = errno;
    if (!l || n == 0) {
        if (l)
            ibv_free_device_list(l);
        return vb_no_devices(err, l ? 0 : why);
    }
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        found = strcmp(ibv_get_device_name(l[i]), want) == 0;
    ibv_free_device_list(l);
    if (found)
        return 0;
    char list[1536];
    vb_list_devices(list, sizeof list);
    char sv[FS_SHOWN_LEN];
    return fs_fail(err, FS_EXIT_USAGE, "--device %s: no such RDMA device on this host; it has: %s",
                   fs_shown(want, sv, sizeof sv), list);
}
