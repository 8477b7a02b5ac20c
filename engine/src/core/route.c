/* SPDX-License-Identifier: BSD-3-Clause */
#include "route.h"

#include <arpa/inet.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>

/* Netlink answers at once; a kernel that does not is no reason to hold a result back. */
#define ROUTE_WAIT_MS 500

/* "10.0.0.2:18515" -> "10.0.0.2"; "[fd00::2]:18515" -> "fd00::2"; a bare address as it is. */
static int host_part(const char *peer, char *out, size_t len)
{
    if (peer[0] == '[') {
        const char *end = strchr(peer, ']');
        if (!end || (size_t)(end - peer) > len)
            return -1;
        snprintf(out, len, "%.*s", (int)(end - peer - 1), peer + 1);
        return 0;
    }
    const char *colon = strchr(peer, ':');
    if (colon && strchr(colon + 1, ':')) /* a bare IPv6 address */
        colon = NULL;
    snprintf(out, len, "%.*s", colon ? (int)(colon - peer) : (int)strlen(peer), peer);
    return 0;
}

void fs_route_describe(const char *peer, cJSON *out)
{
    char host[INET6_ADDRSTRLEN + 2];
    unsigned char dst[16];
    int family;
    if (!peer || !peer[0] || host_part(peer, host, sizeof host))
        return;
    if (inet_pton(AF_INET, host, dst) == 1)
        family = AF_INET;
    else if (inet_pton(AF_INET6, host, dst) == 1)
        family = AF_INET6;
    else
        return;
    size_t alen = family == AF_INET ? 4 : 16;
    struct {
        struct nlmsghdr nh;
        struct rtmsg rt;
        char attrs[64];
    } req;
    memset(&req, 0, sizeof req);
    req.rt.rtm_family = (unsigned char)family;
    req.rt.rtm_dst_len = (unsigned char)(alen * 8);
    struct rtattr *rta = (struct rtattr *)req.attrs;
    rta->rta_type = RTA_DST;
    rta->rta_len = (unsigned short)RTA_LENGTH(alen);
    memcpy(RTA_DATA(rta), dst, alen);
    req.nh.nlmsg_len = NLMSG_LENGTH(sizeof req.rt) + RTA_ALIGN(rta->rta_len);
    req.nh.nlmsg_type = RTM_GETROUTE;
    req.nh.nlmsg_flags = NLM_F_REQUEST;
    req.nh.nlmsg_seq = 1;
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (fd < 0)
        return;
    char buf[4096];
    ssize_t n = -1;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (send(fd, &req, req.nh.nlmsg_len, 0) == (ssize_t)req.nh.nlmsg_len && poll(&pfd, 1, ROUTE_WAIT_MS) == 1)
        n = recv(fd, buf, sizeof buf, 0);
    close(fd);
    if (n <= 0)
        return;
    struct nlmsghdr *nh = (struct nlmsghdr *)buf;
    if (!NLMSG_OK(nh, (unsigned)n) || nh->nlmsg_type != RTM_NEWROUTE)
        return;
    struct rtmsg *rt = NLMSG_DATA(nh);
    int left = (int)RTM_PAYLOAD(nh);
    char dev[IF_NAMESIZE] = "", gw[INET6_ADDRSTRLEN] = "", src[INET6_ADDRSTRLEN] = "";
    for (struct rtattr *a = RTM_RTA(rt); RTA_OK(a, left); a = RTA_NEXT(a, left)) {
        if (a->rta_type == RTA_OIF && RTA_PAYLOAD(a) >= sizeof(int)) {
            int ifindex;
            memcpy(&ifindex, RTA_DATA(a), sizeof ifindex);
            if (!if_indextoname((unsigned)ifindex, dev))
                dev[0] = '\0';
        } else if (a->rta_type == RTA_GATEWAY && RTA_PAYLOAD(a) >= alen) {
            inet_ntop(family, RTA_DATA(a), gw, sizeof gw);
        } else if (a->rta_type == RTA_PREFSRC && RTA_PAYLOAD(a) >= alen) {
            inet_ntop(family, RTA_DATA(a), src, sizeof src);
        }
    }
    if (!dev[0])
        return;
    cJSON *o = cJSON_AddObjectToObject(out, "route_to_peer");
    cJSON_AddStringToObject(o, "peer", host);
    cJSON_AddStringToObject(o, "dev", dev);
    if (gw[0])
        cJSON_AddStringToObject(o, "gateway", gw);
    else
        cJSON_AddNullToObject(o, "gateway");
    if (src[0])
        cJSON_AddStringToObject(o, "source", src);
    else
        cJSON_AddNullToObject(o, "source");
    cJSON_AddStringToObject(o, "via", "RTM_GETROUTE (ip route get)");
}
