/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: the RDMA devices of this host for --inventory-json. */
#define _GNU_SOURCE
#include "verbs_int.h"

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

/* The port's rate the way the kernel's sysfs `rate` attribute prints it (rate_show in ib_core):
 * "100 Gb/sec (4X EDR)"; the number in rate_gbps is the same figure (vb_port_rate). */
static void port_rate(const struct ibv_port_attr *pa, cJSON *o)
{
    int lanes;
    const char *speed;
    double gbps = vb_port_rate(pa, &lanes, &speed);
    if (gbps <= 0) {
        cJSON_AddNullToObject(o, "rate");
        cJSON_AddNullToObject(o, "rate_gbps");
        return;
    }
    int tenths = (int)(gbps * 10 + 0.5);
    char text[64];
    snprintf(text, sizeof text, "%d%s Gb/sec (%dX %s)", tenths / 10, tenths % 10 ? ".5" : "", lanes,
             speed);
    cJSON_AddStringToObject(o, "rate", text);
    cJSON_AddNumberToObject(o, "rate_gbps", gbps);
    cJSON_AddNumberToObject(o, "active_width_lanes", lanes);
    cJSON_AddStringToObject(o, "active_speed", speed);
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
    cJSON_AddStringToObject(o, "state", vb_port_state_name(pa.state));
    const char *phys = phys_state_name(pa.phys_state);
    if (phys)
        cJSON_AddStringToObject(o, "phys_state", phys);
    else
        cJSON_AddNullToObject(o, "phys_state");
    cJSON_AddStringToObject(o, "link_layer", vb_link_layer_name(pa.link_layer));
    cJSON_AddNumberToObject(o, "active_mtu", vb_mtu_bytes(pa.active_mtu));
    cJSON_AddNumberToObject(o, "max_mtu", vb_mtu_bytes(pa.max_mtu));
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
        if ((int)all[i].port_num != port || vb_gid_is_zero(&all[i].gid))
            continue;
        cJSON *g = cJSON_CreateObject();
        char text[48], ip[INET_ADDRSTRLEN], gnd[IF_NAMESIZE + 1] = "";
        gid_sysfs_text(&all[i].gid, text, sizeof text);
        cJSON_AddNumberToObject(g, "index", all[i].gid_index);
        cJSON_AddStringToObject(g, "gid", text);
        cJSON_AddStringToObject(g, "type", vb_gid_type_name((int)all[i].gid_type));
        if (all[i].ndev_ifindex && if_indextoname(all[i].ndev_ifindex, gnd)) {
            cJSON_AddStringToObject(g, "netdev", gnd);
            if (!nd[0]) {
                snprintf(nd, sizeof nd, "%s", gnd);
                nd_source = "GID table";
            }
        } else {
            cJSON_AddNullToObject(g, "netdev");
        }
        if (vb_gid_is_ipv4(&all[i].gid, ip, sizeof ip))
            cJSON_AddStringToObject(g, "ipv4", ip);
        else
            cJSON_AddNullToObject(g, "ipv4");
        cJSON_AddItemToArray(gids, g);
    }
    if (!nd[0] && pa.link_layer == IBV_LINK_LAYER_ETHERNET && cJSON_GetArraySize(gids) > 0) {
        union ibv_gid g0;
        if (ibv_query_gid(c, (uint8_t)port, 0, &g0) == 0 && !vb_gid_is_zero(&g0)) {
            vb_netdev_by_gid_mac(&g0, nd, sizeof nd);
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
    ssize_t n = vb_query_gid_table(c, all, max);
    if (n >= 0)
        return n;
    ssize_t k = 0;
    for (int p = 1; p <= nports; p++) {
        struct ibv_port_attr pa;
        if (ibv_query_port(c, (uint8_t)p, &pa))
            continue;
        for (int i = 0; i < pa.gid_tbl_len && (size_t)k < max; i++)
            if (ibv_query_gid_ex(c, (uint32_t)p, (uint32_t)i, &all[k], 0) == 0 &&
                !vb_gid_is_zero(&all[k].gid))
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
