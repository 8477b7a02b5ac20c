/* SPDX-License-Identifier: BSD-3-Clause */
#define _GNU_SOURCE
#include "datapath.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The address bytes of an AF_INET/AF_INET6 sockaddr, and their count; NULL for anything else. */
static const uint8_t *addr_bytes(const struct sockaddr *sa, int *family, int *nbytes)
{
    if (!sa)
        return NULL;
    if (sa->sa_family == AF_INET) {
        *family = AF_INET;
        *nbytes = 4;
        return (const uint8_t *)&((const struct sockaddr_in *)(const void *)sa)->sin_addr;
    }
    if (sa->sa_family == AF_INET6) {
        *family = AF_INET6;
        *nbytes = 16;
        return (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr;
    }
    return NULL;
}

static int prefix_len(const struct sockaddr *mask, int nbytes)
{
    int fam, n;
    const uint8_t *m = addr_bytes(mask, &fam, &n);
    if (!m || n != nbytes)
        return nbytes * 8;
    int bits = 0;
    for (int i = 0; i < n; i++)
        for (int b = 7; b >= 0 && (m[i] >> b & 1); b--)
            bits++;
    return bits;
}

static int same_prefix(const uint8_t *a, const uint8_t *b, int bits)
{
    int whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, (size_t)whole) != 0)
        return 0;
    if (!rest)
        return 1;
    uint8_t mask = (uint8_t)(0xffu << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

/* The networks of `device`'s addresses ("10.201.0.1/24", ...), or NULL when it has none. */
static cJSON *networks_of(const char *device, const struct ifaddrs *ifa)
{
    cJSON *nets = cJSON_CreateArray();
    int n = 0;
    for (const struct ifaddrs *i = ifa; i && n < FS_DATAPATH_MAX_NETS; i = i->ifa_next) {
        int fam, nb;
        const uint8_t *a = addr_bytes(i->ifa_addr, &fam, &nb);
        if (!a || !i->ifa_name || strcmp(i->ifa_name, device) != 0)
            continue;
        if (fam == AF_INET6 && a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
            continue; /* link-local: the same on every link, says nothing about which one */
        char txt[INET6_ADDRSTRLEN], net[INET6_ADDRSTRLEN + 8];
        if (!inet_ntop(fam, a, txt, sizeof txt))
            continue;
        snprintf(net, sizeof net, "%s/%d", txt, prefix_len(i->ifa_netmask, nb));
        cJSON_AddItemToArray(nets, cJSON_CreateString(net));
        n++;
    }
    if (!n) {
        cJSON_Delete(nets);
        return NULL;
    }
    return nets;
}

int fs_datapath_describe(const char *device, const struct ifaddrs *ifa, cJSON *out)
{
    if (!device || !device[0])
        return 0;
    cJSON *nets = networks_of(device, ifa);
    if (!nets)
        return 0;
    cJSON_AddStringToObject(out, "device", device);
    cJSON_AddItemToObject(out, "networks", nets);
    return cJSON_GetArraySize(nets);
}

int fs_datapath_rdma_netdev(const char *sysfs, const char *rdma, char *netdev, size_t len)
{
    if (!rdma[0] || strchr(rdma, '/') || strcmp(rdma, "..") == 0)
        return -1;
    /* ports/N/gid_attrs/ndevs/I: the netdev of GID entry I, unreadable when the entry is empty.
     * Entry 0 (the link-local GID) has it on RoCE; later ones are looked at for robustness. */
    for (int port = 1; port <= 4; port++) {
        char path[512], line[64];
        snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d", sysfs, rdma, port);
        if (access(path, F_OK))
            break;
        for (int idx = 0; idx < 16; idx++) {
            snprintf(path, sizeof path, "%s/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d",
                     sysfs, rdma, port, idx);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            char *got = fgets(line, sizeof line, f);
            fclose(f);
            if (!got)
                continue;
            line[strcspn(line, "\n")] = '\0';
            if (line[0] && strlen(line) < len) {
                snprintf(netdev, len, "%s", line);
                return 0;
            }
        }
    }
    return -1;
}

static int is_netdev(const char *name, const struct ifaddrs *ifa)
{
    for (const struct ifaddrs *i = ifa; i; i = i->ifa_next)
        if (i->ifa_name && strcmp(i->ifa_name, name) == 0)
            return 1;
    return 0;
}

int fs_datapath_describe_list(const char *list, const struct ifaddrs *ifa, const char *sysfs,
                              cJSON *out)
{
    if (!list || !list[0])
        return 0;
    cJSON *devs = cJSON_CreateArray();
    int with_nets = 0;
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char name[64], netdev[64] = "";
        if (n && n < sizeof name) {
            memcpy(name, p, n);
            name[n] = '\0';
            cJSON *d = cJSON_CreateObject();
            cJSON_AddStringToObject(d, "device", name);
            if (is_netdev(name, ifa))
                snprintf(netdev, sizeof netdev, "%s", name);
            else
                fs_datapath_rdma_netdev(sysfs, name, netdev, sizeof netdev);
            cJSON *nets = netdev[0] ? networks_of(netdev, ifa) : NULL;
            if (netdev[0])
                cJSON_AddStringToObject(d, "netdev", netdev);
            if (nets) {
                cJSON_AddItemToObject(d, "networks", nets);
                with_nets++;
            }
            cJSON_AddItemToArray(devs, d);
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    cJSON_AddItemToObject(out, "devices", devs);
    return with_nets;
}

const char *fs_datapath_owner(const struct ifaddrs *ifa, const char *addr)
{
    for (const struct ifaddrs *i = ifa; i; i = i->ifa_next) {
        int fam, nb;
        char txt[INET6_ADDRSTRLEN];
        const uint8_t *a = addr_bytes(i->ifa_addr, &fam, &nb);
        if (a && inet_ntop(fam, a, txt, sizeof txt) && strcmp(txt, addr) == 0)
            return i->ifa_name;
    }
    return NULL;
}

int fs_datapath_addr_of(const struct ifaddrs *ifa, const char *netdev, char *addr, size_t addr_len)
{
    /* Two passes: IPv4 first (what sockets providers list first), then IPv6 beyond link-local. */
    for (int want = AF_INET;; want = AF_INET6) {
        for (const struct ifaddrs *i = ifa; i; i = i->ifa_next) {
            int fam, nb;
            const uint8_t *a = addr_bytes(i->ifa_addr, &fam, &nb);
            if (!a || fam != want || strcmp(i->ifa_name, netdev) != 0)
                continue;
            if (fam == AF_INET6 && a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
                continue; /* link-local: needs a scope, useless as a bind address here */
            if (inet_ntop(fam, a, addr, (socklen_t)addr_len))
                return 0;
        }
        if (want == AF_INET6)
            return -1;
    }
}

/* "10.201.0.1/24" -> family, address bytes, prefix bits. -1 if it is not that. */
static int parse_net(const char *s, int *family, uint8_t *bytes, int *bits)
{
    char host[INET6_ADDRSTRLEN + 1];
    const char *slash = strchr(s, '/');
    size_t hl = slash ? (size_t)(slash - s) : 0;
    if (!slash || hl == 0 || hl >= sizeof host)
        return -1;
    memcpy(host, s, hl);
    host[hl] = '\0';
    char *end = NULL;
    long b = strtol(slash + 1, &end, 10);
    if (!end || *end || end == slash + 1)
        return -1;
    if (inet_pton(AF_INET, host, bytes) == 1)
        *family = AF_INET;
    else if (inet_pton(AF_INET6, host, bytes) == 1)
        *family = AF_INET6;
    else
        return -1;
    /* A /0 would match every address: that names no network. */
    if (b < 1 || b > (*family == AF_INET ? 32 : 128))
        return -1;
    *bits = (int)b;
    return 0;
}

int fs_datapath_pick(const cJSON *hint, const struct ifaddrs *ifa, char *addr, size_t addr_len)
{
    const cJSON *nets = cJSON_IsObject(hint) ? cJSON_GetObjectItemCaseSensitive(hint, "networks")
                                             : NULL;
    if (!cJSON_IsArray(nets))
        return -1;
    int seen = 0;
    const cJSON *n;
    cJSON_ArrayForEach(n, nets)
    {
        if (++seen > FS_DATAPATH_MAX_NETS)
            break;
        int fam, bits;
        uint8_t want[16];
        if (!cJSON_IsString(n) || parse_net(n->valuestring, &fam, want, &bits))
            continue;
        for (const struct ifaddrs *i = ifa; i; i = i->ifa_next) {
            int f, nb;
            const uint8_t *a = addr_bytes(i->ifa_addr, &f, &nb);
            if (a && f == fam && same_prefix(a, want, bits) &&
                inet_ntop(f, a, addr, (socklen_t)addr_len))
                return 0;
        }
    }
    return -1;
}
