#define _GNU_SOURCE
#include "counters.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const net_keys[FS_CNT_NVAL] = {"tx_bytes", "rx_bytes", "tx_packets",
                                                   "rx_packets", NULL, NULL};
static const char *const rdma_keys[FS_CNT_NVAL] = {"port_xmit_data", "port_rcv_data",
                                                    "port_xmit_packets", "port_rcv_packets",
                                                    "hw_sent_pkts", "hw_rcvd_pkts"};
/* Where each rdma key lives under ports/N/. */
static const char *const rdma_files[FS_CNT_NVAL] = {
    "counters/port_xmit_data",    "counters/port_rcv_data", "counters/port_xmit_packets",
    "counters/port_rcv_packets",  "hw_counters/sent_pkts",  "hw_counters/rcvd_pkts"};

static const char *sysfs_root(void)
{
    const char *r = getenv("FABSCOPE_SYSFS_ROOT");
    return r && *r ? r : "/sys";
}

static int read_u64(const char *path, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    unsigned long long v;
    int ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (!ok)
        return -1;
    *out = v;
    return 0;
}

static void read_str(const char *path, char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)len, f))
        out[strcspn(out, "\n")] = '\0';
    fclose(f);
}

static int skip(const char *name) { return name[0] == '.'; }

void fs_counters_snap(struct fs_cnt_snap *s)
{
    const char *root = sysfs_root();
    char path[1024];
    s->n = 0;
    snprintf(path, sizeof path, "%s/class/net", root);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)) && s->n < FS_CNT_MAX_DEV) {
        if (skip(e->d_name))
            continue;
        struct fs_cnt_dev *dev = &s->dev[s->n];
        memset(dev, 0, sizeof *dev);
        snprintf(dev->name, sizeof dev->name, "%s", e->d_name);
        int any = 0;
        for (int k = 0; k < FS_CNT_NVAL && net_keys[k]; k++) {
            snprintf(path, sizeof path, "%s/class/net/%s/statistics/%s", root, e->d_name,
                     net_keys[k]);
            dev->have[k] = read_u64(path, &dev->v[k]) == 0;
            any |= dev->have[k];
        }
        if (any)
            s->n++;
    }
    if (d)
        closedir(d);
    snprintf(path, sizeof path, "%s/class/infiniband", root);
    d = opendir(path);
    while (d && (e = readdir(d))) {
        if (skip(e->d_name))
            continue;
        char ports[1024];
        snprintf(ports, sizeof ports, "%s/class/infiniband/%s/ports", root, e->d_name);
        DIR *pd = opendir(ports);
        struct dirent *pe;
        while (pd && (pe = readdir(pd)) && s->n < FS_CNT_MAX_DEV) {
            if (skip(pe->d_name))
                continue;
            struct fs_cnt_dev *dev = &s->dev[s->n];
            memset(dev, 0, sizeof *dev);
            dev->is_rdma = 1;
            snprintf(dev->name, sizeof dev->name, "%.40s/%.40s", e->d_name, pe->d_name);
            snprintf(path, sizeof path, "%s/%s/link_layer", ports, pe->d_name);
            read_str(path, dev->link_layer, sizeof dev->link_layer);
            for (int k = 0; k < FS_CNT_NVAL; k++) {
                snprintf(path, sizeof path, "%s/%s/%s", ports, pe->d_name, rdma_files[k]);
                dev->have[k] = read_u64(path, &dev->v[k]) == 0;
            }
            /* The first few GID slots name the netdev; reading all (up to 1024) costs minutes
             * under emulation and adds nothing. */
            int nn = 0;
            for (int g = 0; g < 8 && nn < FS_CNT_NDEVS; g++) {
                char nd[32];
                snprintf(path, sizeof path, "%s/%s/gid_attrs/ndevs/%d", ports, pe->d_name, g);
                read_str(path, nd, sizeof nd);
                int dup = !nd[0];
                for (int k = 0; k < nn && !dup; k++)
                    dup = strcmp(dev->ndevs[k], nd) == 0;
                if (!dup)
                    snprintf(dev->ndevs[nn++], sizeof dev->ndevs[0], "%s", nd);
            }
            s->n++;
        }
        if (pd)
            closedir(pd);
    }
    if (d)
        closedir(d);
}

static cJSON *values(const struct fs_cnt_dev *dev)
{
    const char *const *keys = dev->is_rdma ? rdma_keys : net_keys;
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; k < FS_CNT_NVAL; k++)
        if (dev->have[k] && keys[k])
            cJSON_AddNumberToObject(o, keys[k], (double)dev->v[k]);
    return o;
}

cJSON *fs_counters_json(const struct fs_cnt_snap *before, const struct fs_cnt_snap *after)
{
    cJSON *o = cJSON_CreateObject();
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(o, "host", host);
    cJSON *net = cJSON_AddObjectToObject(o, "net");
    cJSON *rdma = cJSON_AddObjectToObject(o, "rdma");
    for (size_t i = 0; i < after->n; i++) {
        const struct fs_cnt_dev *a = &after->dev[i];
        const struct fs_cnt_dev *b = NULL;
        for (size_t j = 0; j < before->n && !b; j++)
            if (before->dev[j].is_rdma == a->is_rdma && strcmp(before->dev[j].name, a->name) == 0)
                b = &before->dev[j];
        if (!b)
            continue; /* appeared during the run: no baseline to compare */
        cJSON *d = cJSON_AddObjectToObject(a->is_rdma ? rdma : net, a->name);
        if (a->is_rdma) {
            cJSON_AddStringToObject(d, "link_layer", a->link_layer);
            cJSON *nd = cJSON_AddArrayToObject(d, "ndevs");
            for (int k = 0; k < FS_CNT_NDEVS && a->ndevs[k][0]; k++)
                cJSON_AddItemToArray(nd, cJSON_CreateString(a->ndevs[k]));
        }
        cJSON_AddItemToObject(d, "before", values(b));
        cJSON_AddItemToObject(d, "after", values(a));
    }
    return o;
}
