/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: names of verbs enums, GID text and the JSON fields of an address. */
#define _GNU_SOURCE
#include "verbs_int.h"

const char *vb_svc_name(enum vb_svc s) { return s == VB_RC ? "RC" : s == VB_UC ? "UC" : "UD"; }

int vb_mtu_bytes(enum ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0; }

enum ibv_mtu vb_mtu_enum(int bytes)
{
    switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
    }
}

double vb_port_rate(const struct ibv_port_attr *pa, int *lanes, const char **speed)
{
    /* Width x speed as the kernel's sysfs `rate` prints it (rate_show in ib_core): FDR lanes count
     * 14 Gb/s as there, so 4X FDR is 56. SDR/DDR/QDR are signalling rates (8b/10b on the wire);
     * FDR10 and later are data rates after 64b/66b (FDR: 14.0625 GBd x 64/66 = 13.64) or
     * PAM4 FEC encoding (fabscope.results.explain applies the difference). */
    int n = pa->active_width == 1 ? 1 : pa->active_width == 2 ? 4 : pa->active_width == 4 ? 8
            : pa->active_width == 8 ? 12 : pa->active_width == 16 ? 2 : 0;
    int tenths;
    const char *name;
    switch (pa->active_speed) {
    case 1: tenths = 25, name = "SDR"; break;
    case 2: tenths = 50, name = "DDR"; break;
    case 4: tenths = 100, name = "QDR"; break;
    case 8: tenths = 100, name = "FDR10"; break;
    case 16: tenths = 140, name = "FDR"; break;
    case 32: tenths = 250, name = "EDR"; break;
    case 64: tenths = 500, name = "HDR"; break;
    case 128: tenths = 1000, name = "NDR"; break;
    default: tenths = 0, name = NULL; break;
    }
    *lanes = n;
    *speed = name;
    return n && name ? tenths * n / 10.0 : 0;
}

const char *vb_gid_type_name(int t)
{
    switch (t) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    default: return "unknown";
    }
}

const char *vb_link_layer_name(int ll)
{
    return ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet"
           : ll == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
                                             : "unspecified";
}

const char *vb_port_state_name(enum ibv_port_state st)
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

int vb_gid_is_zero(const union ibv_gid *g)
{
    static const uint8_t z[16];
    return memcmp(g->raw, z, 16) == 0;
}

int vb_gid_is_ipv4(const union ibv_gid *g, char *ip, size_t len)
{
    static const uint8_t pfx[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(g->raw, pfx, 12) != 0)
        return 0;
    if (ip)
        inet_ntop(AF_INET, g->raw + 12, ip, (socklen_t)len);
    return 1;
}

void vb_gid_text(const union ibv_gid *g, char *out, size_t len)
{
    if (!inet_ntop(AF_INET6, g->raw, out, (socklen_t)len))
        snprintf(out, len, "?");
}

void vb_hex_u64(char *out, size_t len, uint64_t x) { snprintf(out, len, "0x%" PRIx64, x); }

int vb_parse_hex_u64(const cJSON *o, const char *key, uint64_t *out)
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

int vb_get_num(const cJSON *o, const char *key, double *out)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(x))
        return -1;
    *out = x->valuedouble;
    return 0;
}

