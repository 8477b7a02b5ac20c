/* SPDX-License-Identifier: BSD-3-Clause */
/* What UCX selected for an endpoint: its lanes (transport, device, usage) and the protocol of a
 * message size, read from ucp_ep_print_info's text. That text is not an API: the parser knows the
 * layout of UCX 1.13 (lane[i]: ... md[k] -> ... sysdev[n] USAGE, and "op: A..<proto>..B" threshold
 * lines); what it cannot read is left out of the result, never guessed (protocol null). */
#define _GNU_SOURCE
#include "ucx_lanes.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

/* From "<egr/short>", "<egr/bcopy>", "<egr/zcopy>", "<rndv>": which protocol a message of
 * `size` bytes takes, read from a ucp_ep_print_info threshold line such as
 *   tag_send: 0..<egr/short>..8185..<egr/bcopy>..8192..<rndv>..(inf)
 * Ranges are half-open: "A..<p>..B" covers [A, B). */
static int protocol_for(const char *line, uint64_t size, char *out, size_t len)
{
    const char *p = strchr(line, ':');
    if (!p)
        return -1;
    p++;
    uint64_t lo = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        char *end = NULL;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p)
            return -1;
        lo = v;
        p = end;
        if (strncmp(p, "..<", 3) != 0)
            return -1;
        p += 3;
        const char *close = strchr(p, '>');
        if (!close)
            return -1;
        char proto[64];
        snprintf(proto, sizeof proto, "%.*s", (int)(close - p), p);
        p = close + 1;
        if (strncmp(p, "..", 2) != 0)
            return -1;
        p += 2;
        uint64_t hi = UINT64_MAX;
        if (strncmp(p, "(inf)", 5) != 0)
            hi = strtoull(p, NULL, 10);
        if (size >= lo && size < hi) {
            snprintf(out, len, "%s", proto);
            return 0;
        }
        if (hi == UINT64_MAX)
            return -1;
    }
    return -1;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

/* Turns ucp_ep_print_info's text into lanes [{tl, device, usage}] plus the threshold lines. */
static void parse_ep_info(const char *text, uint64_t size, enum fs_op op, cJSON *o)
{
    cJSON *lanes = cJSON_AddArrayToObject(o, "lanes");
    cJSON *tls = cJSON_CreateArray(), *devs = cJSON_CreateArray();
    cJSON *thr = cJSON_CreateObject();
    /* The threshold line that applies to our operation; put[0]/get[0] is the first RMA lane. */
    const char *want = op == FS_OP_TAG     ? "tag_send"
                       : op == FS_OP_AM    ? "am_send"
                       : op == FS_OP_WRITE ? "put[0]"
                       : op == FS_OP_READ  ? "get[0]"
                                           : NULL;
    char proto[64] = "";
    char line[512];
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), p);
        p += n + (nl ? 1 : 0);
        char *s = line;
        while (*s == '#' || *s == ' ')
            s++;
        trim(s);
        if (strncmp(s, "lane[", 5) == 0) {
            /* lane[0]:  2:self/memory.0 md[2]  -> md[2]/self/sysdev[255] am am_bw#0 */
            char *colon = strchr(s, ':');
            if (!colon)
                continue;
            char *rsc = colon + 1;
            while (*rsc == ' ')
                rsc++;
            char *c2 = strchr(rsc, ':');
            if (c2)
                rsc = c2 + 1;
            char tl[64] = "", dev[64] = "";
            char *slash = strchr(rsc, '/');
            if (!slash)
                continue;
            snprintf(tl, sizeof tl, "%.*s", (int)(slash - rsc), rsc);
            char *dend = slash + 1;
            while (*dend && *dend != ' ')
                dend++;
            snprintf(dev, sizeof dev, "%.*s", (int)(dend - slash - 1), slash + 1);
            char *dot = strrchr(dev, '.'); /* "memory.0": the path index, not the device */
            if (dot && isdigit((unsigned char)dot[1]))
                *dot = '\0';
            const char *usage = "";
            char *sysdev = strstr(s, "sysdev[");
            if (sysdev && (sysdev = strchr(sysdev, ']')))
                usage = sysdev + 1;
            while (*usage == ' ')
                usage++;
            /* UCX 1.13 names am/rma_bw/amo/tag lanes; a plain RMA lane prints no usage and shows
             * up in the put[i]/get[i] threshold lines instead. */
            if (!*usage)
                usage = "rma (see put[]/get[] thresholds)";
            cJSON *l = cJSON_CreateObject();
            cJSON_AddStringToObject(l, "transport", tl);
            cJSON_AddStringToObject(l, "device", dev);
            cJSON_AddStringToObject(l, "usage", usage);
            cJSON_AddItemToArray(lanes, l);
            int dup = 0;
            cJSON *x;
            cJSON_ArrayForEach(x, tls) dup |= strcmp(x->valuestring, tl) == 0;
            if (!dup)
                cJSON_AddItemToArray(tls, cJSON_CreateString(tl));
            dup = 0;
            cJSON_ArrayForEach(x, devs) dup |= strcmp(x->valuestring, dev) == 0;
            if (!dup)
                cJSON_AddItemToArray(devs, cJSON_CreateString(dev));
            continue;
        }
        char *colon = strchr(s, ':');
        if (colon && strstr(s, "..<")) {
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)(colon - s), s);
            trim(key);
            cJSON_AddStringToObject(thr, key, colon + 1 + strspn(colon + 1, " "));
            if (want && strcmp(key, want) == 0)
                protocol_for(s, size, proto, sizeof proto);
        } else if (colon && strncmp(s, "rma_bw", 6) == 0) {
            cJSON_AddStringToObject(thr, "rma_bw", colon + 1 + strspn(colon + 1, " "));
        }
    }
    cJSON_AddItemToObject(o, "transports", tls);
    cJSON_AddItemToObject(o, "devices", devs);
    cJSON_AddItemToObject(o, "thresholds", thr);
    if (!size) {
        /* Described at connect time, before any size ran: no size, no protocol. */
        cJSON_AddNullToObject(o, "protocol");
        cJSON_AddStringToObject(o, "protocol_source", "no message size yet (described at connect)");
    } else if (proto[0]) {
        cJSON_AddStringToObject(o, "protocol", proto);
        cJSON_AddStringToObject(o, "protocol_source", "ucp_ep_print_info thresholds for this size");
    } else {
        cJSON_AddNullToObject(o, "protocol");
        cJSON_AddStringToObject(o, "protocol_source",
                                "not printed by this UCX for this operation");
    }
}

void fs_ucx_describe_ep_op(void *ep, uint64_t size, enum fs_op op, cJSON *o)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    ucp_ep_print_info((ucp_ep_h)ep, f);
    fclose(f);
    parse_ep_info(text, size, op, o);
    free(text);
}

void fs_ucx_describe_ep(void *ep, uint64_t size, cJSON *o)
{
    fs_ucx_describe_ep_op(ep, size, FS_OP_TAG, o);
}

