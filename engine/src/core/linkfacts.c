/* SPDX-License-Identifier: BSD-3-Clause */
/* The link facts of the device that carried a run: netdev speed, PCIe link (linkfacts.h). */
#define _GNU_SOURCE
#include "linkfacts.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sysfs.h"

double fs_pcie_usable_gbps(double gts, int width, const char **encoding)
{
    /* Line encoding only. Gen1/2 (2.5, 5 GT/s) send 10 bits per byte; gen3-5 (8, 16, 32 GT/s)
     * 130 bits per 128. Gen6 (64 GT/s, PAM4) runs in FLIT mode: 256 B flits of which 242 B are
     * TLP bytes (the rest DLP, CRC and FEC), taken here as 242/256. The TLP and DLLP overhead on
     * top (headers per TLP at the max payload size, ACKs, flow-control updates) lowers the usable
     * rate further, to ~85-90 % of this: not subtracted, as it depends on the payload size the
     * host negotiated, which sysfs does not show. */
    double share;
    const char *enc;
    if (gts <= 0 || width <= 0)
        return *encoding = NULL, 0;
    if (gts < 7.9)
        share = 8.0 / 10.0, enc = "8b/10b";
    else if (gts < 63.0)
        share = 128.0 / 130.0, enc = "128b/130b";
    else
        share = 242.0 / 256.0, enc = "242/256 (FLIT)";
    *encoding = enc;
    return gts * width * share;
}

/* The real path of root/rel, "" when it does not resolve. */
static void real_of(const char *rel, char *out)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", fs_sysfs_root(), rel);
    if (!realpath(path, out))
        out[0] = '\0';
}

/* A netdev with a lower device (a VLAN, macvlan, bond) reports its lower device's speed (or their
 * sum); a virtual one without (lo, veth, tun, a bridge) has none, or a nominal one (veth says
 * 10000 Mb/s whatever moves through it). */
static int has_lower(const char *nd)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/class/net/%s", fs_sysfs_root(), nd);
    DIR *d = opendir(path);
    struct dirent *e;
    int found = 0;
    while (!found && (e = fs_sysfs_next(d)))
        found = strncmp(e->d_name, "lower_", 6) == 0;
    if (d)
        closedir(d);
    return found;
}

int fs_link_netdev_rate(const char *nd, double *gbps, char *src, size_t len)
{
    char rel[PATH_MAX], real[PATH_MAX], speed[32];
    *gbps = 0;
    if (!nd || !nd[0])
        return snprintf(src, len, "no netdev carried the run"), -1;
    snprintf(rel, sizeof rel, "class/net/%s", nd);
    real_of(rel, real);
    if (!real[0])
        return snprintf(src, len, "netdev %s not found in sysfs", nd), -1;
    int fd = open(fs_sysfs_root(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(rel, sizeof rel, "class/net/%s/speed", nd);
    speed[0] = '\0';
    if (fd >= 0) {
        fs_sysfs_str(NULL, fd, rel, speed, sizeof speed);
        close(fd);
    }
    int is_virtual = strstr(real, "/devices/virtual/") != NULL;
    if (is_virtual && !has_lower(nd)) {
        if (speed[0] && speed[0] != '-')
            snprintf(src, len, "%s is virtual: its speed %s Mb/s is nominal, not a link rate", nd, speed);
        else
            snprintf(src, len, "%s is virtual: no link rate", nd);
        return -1;
    }
    char *end = NULL;
    long mbps = speed[0] ? strtol(speed, &end, 10) : -1;
    if (!speed[0])
        return snprintf(src, len, "netdev %s speed unreadable (no link, or its driver reports none)", nd), -1;
    if (mbps <= 0 || !end || (*end && *end != '\n'))
        return snprintf(src, len, "netdev %s speed %s: unknown (its driver reports none)", nd, speed), -1;
    *gbps = (double)mbps / 1000.0;
    snprintf(src, len, "netdev %s speed (sysfs)%s", nd,
             is_virtual ? "; virtual, the speed of its lower device(s)" : "");
    return 0;
}

/* dddd:bb:dd.f */
static int is_pci_address(const char *s)
{
    unsigned a, b, c, f;
    char tail;
    return strlen(s) == 12 && sscanf(s, "%4x:%2x:%2x.%1x%c", &a, &b, &c, &f, &tail) == 4;
}

int fs_link_pcie(const char *cls, const char *name, struct fs_pcie *out, char *src, size_t len)
{
    char rel[PATH_MAX], real[PATH_MAX], top[PATH_MAX];
    memset(out, 0, sizeof *out);
    snprintf(rel, sizeof rel, "class/%s/%s/device", cls, name);
    real_of(rel, real);
    if (!real[0]) {
        snprintf(rel, sizeof rel, "class/%s/%s", cls, name);
        real_of(rel, real);
        return snprintf(src, len, "no PCI function: %s has no bus device (%s)", name,
                        real[0] && strstr(real, "/devices/virtual/") ? "virtual" : "not in sysfs"),
               -1;
    }
    /* Up from the device (a virtio netdev's device is the virtio device, the PCI function its
     * parent) to the first PCI function with a PCIe link (conventional PCI has none: a bridge
     * above it may); the devices/ directory is the end. */
    snprintf(top, sizeof top, "%s/devices", fs_sysfs_root());
    char topreal[PATH_MAX], first[32] = "";
    if (!realpath(top, topreal))
        snprintf(topreal, sizeof topreal, "%s", top);
    size_t toplen = strlen(topreal);
    char *slash;
    while (strlen(real) > toplen && (slash = strrchr(real, '/'))) {
        char text[32];
        int fd = is_pci_address(slash + 1) ? open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            if (!first[0])
                snprintf(first, sizeof first, "%s", slash + 1);
            char speed[32];
            fs_sysfs_str(NULL, fd, "current_link_speed", speed, sizeof speed);
            fs_sysfs_str(NULL, fd, "current_link_width", text, sizeof text);
            close(fd);
            if (speed[0] || text[0]) {
                snprintf(out->address, sizeof out->address, "%s", slash + 1);
                out->gts = strtod(speed, NULL); /* "16.0 GT/s PCIe", "8 GT/s", "Unknown" (0) */
                out->width = atoi(text);
                out->usable_gbps = fs_pcie_usable_gbps(out->gts, out->width, &out->encoding);
                if (out->usable_gbps <= 0)
                    return snprintf(src, len, "PCI function %s of %s: current_link_speed '%s', "
                                    "current_link_width '%s': the link's rate is unknown", out->address,
                                    name, speed, text),
                           -1;
                snprintf(src, len, "sysfs class/%s/%s/device: PCI function %s, current_link_speed x "
                         "current_link_width", cls, name, out->address);
                return 0;
            }
        }
        *slash = '\0';
    }
    if (first[0])
        return snprintf(src, len, "%s's PCI function %s has no PCIe link in sysfs (conventional PCI, "
                        "as a virtual machine's virtio NIC)", name, first),
               -1;
    return snprintf(src, len, "no PCI function: %s's device is not on PCI", name), -1;
}

void fs_link_add_rate(cJSON *o, double gbps, const char *source)
{
    if (gbps > 0)
        cJSON_AddNumberToObject(o, "rate_gbps", gbps);
    else
        cJSON_AddNullToObject(o, "rate_gbps");
    cJSON_AddStringToObject(o, "rate_source", source);
}

void fs_link_add_netdev_rate(cJSON *o, const char *nd)
{
    char src[256];
    double gbps;
    fs_link_netdev_rate(nd, &gbps, src, sizeof src);
    fs_link_add_rate(o, gbps, src);
}

void fs_link_add_pcie(cJSON *o, const char *const cls[], const char *const names[], int n)
{
    char src[512] = "no device to look up", why[256];
    size_t used = 0;
    struct fs_pcie p;
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0])
            continue;
        if (fs_link_pcie(cls[i], names[i], &p, why, sizeof why) == 0) {
            cJSON *x = cJSON_AddObjectToObject(o, "pcie");
            cJSON_AddStringToObject(x, "address", p.address);
            cJSON_AddNumberToObject(x, "gts", p.gts);
            cJSON_AddNumberToObject(x, "width", p.width);
            cJSON_AddNumberToObject(x, "usable_gbps", p.usable_gbps);
            cJSON_AddStringToObject(x, "encoding", p.encoding);
            cJSON_AddStringToObject(o, "pcie_source", why);
            return;
        }
        /* Every device tried, in order: rxe0 has none, and neither has its virtio netdev. */
        used += (size_t)snprintf(src + used, sizeof src - (used < sizeof src ? used : sizeof src),
                                 "%s%s", used ? "; " : "", why);
        if (used >= sizeof src)
            used = sizeof src - 1;
    }
    cJSON_AddNullToObject(o, "pcie");
    cJSON_AddStringToObject(o, "pcie_source", src);
}
