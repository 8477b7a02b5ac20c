/* SPDX-License-Identifier: BSD-3-Clause */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "ctl.h"

static size_t frame(uint8_t *out, const char *json)
{
    size_t n = strlen(json);
    out[0] = (uint8_t)(n >> 24);
    out[1] = (uint8_t)(n >> 16);
    out[2] = (uint8_t)(n >> 8);
    out[3] = (uint8_t)n;
    memcpy(out + 4, json, n);
    return n + 4;
}

int main(void)
{
    /* The frame MAC agrees with the front end's (python: auth.frame_mac(bytes(range(32)), "c", 5,
     * b'{"type":"sent","n":7}')), and the direction and the sequence number change it. */
    {
        uint8_t key[32], mac[32], other[32];
        for (int i = 0; i < 32; i++)
            key[i] = (uint8_t)i;
        const char *body = "{\"type\":\"sent\",\"n\":7}";
        static const char want[] =
            "ab0fa20b59280b5226e4b660d0ffe1539b9f0edd21ee57fcd7b030c25c517567";
        CHECK(fs_ctl_frame_mac(key, 'c', 5, (const uint8_t *)body, strlen(body), mac) == 0);
        char hex[65];
        for (int i = 0; i < 32; i++)
            snprintf(hex + 2 * i, 3, "%02x", mac[i]);
        CHECK(strcmp(hex, want) == 0);
        CHECK(fs_ctl_frame_mac(key, 's', 5, (const uint8_t *)body, strlen(body), other) == 0);
        CHECK(memcmp(mac, other, 32) != 0);
        CHECK(fs_ctl_frame_mac(key, 'c', 6, (const uint8_t *)body, strlen(body), other) == 0);
        CHECK(memcmp(mac, other, 32) != 0);
    }
    uint8_t buf[1024];
    size_t used = 0;
    cJSON *m = NULL;
    struct fs_err err = {0};

    size_t n = frame(buf, "{\"type\":\"hello\",\"proto\":1}");
    CHECK(fs_ctl_parse_frame(buf, n, &used, &m, &err) == 1 && used == n);
    CHECK(m && strcmp(fs_ctl_type(m), "hello") == 0);
    cJSON_Delete(m);

    /* Every strict prefix is "need more", never an error or a crash. */
    for (size_t k = 0; k < n; k++)
        CHECK(fs_ctl_parse_frame(buf, k, &used, &m, &err) == 0);

    /* Two frames back to back: the first one is taken, the rest left. */
    size_t n2 = frame(buf + n, "{\"type\":\"bye\"}");
    CHECK(fs_ctl_parse_frame(buf, n + n2, &used, &m, &err) == 1 && used == n);
    cJSON_Delete(m);

    n = frame(buf, "[1,2,3]");
    CHECK(fs_ctl_parse_frame(buf, n, &used, &m, &err) == -1 && m == NULL);
    n = frame(buf, "{\"type\":7}");
    CHECK(fs_ctl_parse_frame(buf, n, &used, &m, &err) == -1);
    n = frame(buf, "{\"type\":\"x\"} junk");
    CHECK(fs_ctl_parse_frame(buf, n, &used, &m, &err) == -1);
    n = frame(buf, "{\"type\":\"x\"");
    CHECK(fs_ctl_parse_frame(buf, n, &used, &m, &err) == -1 && err.code == FS_EXIT_PEER);

    /* Oversized length is refused before any allocation. */
    uint8_t big[4] = {0x7f, 0xff, 0xff, 0xff};
    CHECK(fs_ctl_parse_frame(big, 4, &used, &m, &err) == -1 && strstr(err.msg, "allowed"));
    uint8_t zero[4] = {0, 0, 0, 0};
    CHECK(fs_ctl_parse_frame(zero, 4, &used, &m, &err) == -1);

    char host[64];
    int port;
    CHECK(fs_split_hostport("10.0.0.1:99", host, sizeof host, &port, 1) == 0 && port == 99 &&
          strcmp(host, "10.0.0.1") == 0);
    CHECK(fs_split_hostport("node7", host, sizeof host, &port, 18515) == 0 && port == 18515);
    CHECK(fs_split_hostport("[fe80::1]:5", host, sizeof host, &port, 1) == 0 && port == 5 &&
          strcmp(host, "fe80::1") == 0);
    CHECK(fs_split_hostport("::1", host, sizeof host, &port, 7) == 0 && port == 7);
    CHECK(fs_split_hostport("h:70000", host, sizeof host, &port, 1) == -1);
    CHECK(fs_split_hostport(":5", host, sizeof host, &port, 1) == -1);
    return CHECK_DONE();
}
