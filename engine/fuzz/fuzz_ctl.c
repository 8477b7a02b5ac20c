/* SPDX-License-Identifier: BSD-3-Clause */
/* libFuzzer target for everything the engine parses from the network: control frames, the
 * peer's settings inside a "config" frame, applied through the option table, and its data-path
 * networks, matched against a fixed list of interfaces. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>

#include "ctl.h"
#include "datapath.h"
#include "spec.h"

/* A host with an IPv4 and an IPv6 address, so the matching code runs, not only the parser. */
static struct ifaddrs *fake_ifaddrs(void)
{
    static struct sockaddr_in a4 = {.sin_family = AF_INET}, m4 = {.sin_family = AF_INET};
    static struct sockaddr_in6 a6 = {.sin6_family = AF_INET6}, m6 = {.sin6_family = AF_INET6};
    static struct ifaddrs v6 = {.ifa_name = "fabric0"}, v4 = {.ifa_name = "fabric0"};
    inet_pton(AF_INET, "10.201.0.2", &a4.sin_addr);
    inet_pton(AF_INET, "255.255.255.0", &m4.sin_addr);
    inet_pton(AF_INET6, "fd01::2", &a6.sin6_addr);
    inet_pton(AF_INET6, "ffff:ffff:ffff:ffff::", &m6.sin6_addr);
    v6.ifa_addr = (struct sockaddr *)&a6;
    v6.ifa_netmask = (struct sockaddr *)&m6;
    v4.ifa_addr = (struct sockaddr *)&a4;
    v4.ifa_netmask = (struct sockaddr *)&m4;
    v4.ifa_next = &v6;
    return &v4;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        size_t used = 0;
        cJSON *m = NULL;
        struct fs_err err = {0};
        int rc = fs_ctl_parse_frame(data + off, size - off, &used, &m, &err);
        if (rc <= 0)
            break;
        off += used;
        if (strcmp(fs_ctl_type(m), "config") == 0) {
            struct fs_spec spec;
            struct fs_opt_set core = {"core", fs_core_options, &spec};
            fs_opt_set_defaults(&core, &err);
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "core");
            if (cJSON_IsObject(c))
                fs_opt_apply_wire(&core, c, &err);
            char addr[64];
            const cJSON *hint = cJSON_GetObjectItemCaseSensitive(m, "data_path");
            if (fs_datapath_pick(hint, fake_ifaddrs(), addr, sizeof addr) == 0)
                fs_datapath_owner(fake_ifaddrs(), addr);
            /* Each device of a verbs --device list, as a server without a device pairs them. */
            const cJSON *devs = cJSON_GetObjectItemCaseSensitive(hint, "devices"), *d;
            cJSON_ArrayForEach(d, devs)
            {
                if (fs_datapath_pick(d, fake_ifaddrs(), addr, sizeof addr) == 0)
                    fs_datapath_owner(fake_ifaddrs(), addr);
            }
        }
        cJSON_Delete(m);
    }
    return 0;
}
