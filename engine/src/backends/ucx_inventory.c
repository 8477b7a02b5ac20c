/* SPDX-License-Identifier: BSD-3-Clause */
/* ucx backend: the UCX components, memory domains, transports and aliases of this host for
 * --inventory-json. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#include "../core/inventory.h"
#include "ucx_int.h"

/* ---- inventory (--inventory-json) ----------------------------------------------------------- */

static const char *dev_type_name(uct_device_type_t t)
{
    switch (t) {
    case UCT_DEVICE_TYPE_NET: return "net";
    case UCT_DEVICE_TYPE_SHM: return "shm";
    case UCT_DEVICE_TYPE_ACC: return "acc";
    case UCT_DEVICE_TYPE_SELF: return "self";
    default: return "other";
    }
}

static void add_unique(cJSON *arr, const char *s)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (strcmp(x->valuestring, s) == 0) return;
    cJSON_AddItemToArray(arr, cJSON_CreateString(s));
}

/* The resources UCX offers here, from the same walk that checks --ucx-tls and --device: what
 * "transports", "net_devices" and the available aliases list is exactly what those accept. */
void fs_inventory_ucx(cJSON *part)
{
    cJSON_AddStringToObject(part, "library", "UCX");
    cJSON_AddStringToObject(part, "version", ucp_get_version_string());
    struct ucx_reslist l = {0};
    struct fs_err err = {0};
    if (ucx_query_resources(&l, &err)) {
        cJSON_AddStringToObject(part, "status", "error");
        cJSON_AddStringToObject(part, "error", err.msg);
        free(l.v);
        return;
    }
    cJSON_AddStringToObject(part, "status", "ok");
    cJSON *comps = cJSON_AddArrayToObject(part, "components");
    uct_component_h *cl = NULL;
    unsigned nc = 0;
    if (uct_query_components(&cl, &nc) == UCS_OK) {
        for (unsigned c = 0; c < nc; c++) {
            uct_component_attr_t ca = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                     UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
            if (uct_component_query(cl[c], &ca) != UCS_OK)
                continue;
            cJSON *co = cJSON_CreateObject();
            cJSON_AddStringToObject(co, "name", ca.name);
            cJSON *mds = cJSON_AddArrayToObject(co, "memory_domains");
            ca.md_resources = ca.md_resource_count
                                  ? calloc(ca.md_resource_count, sizeof *ca.md_resources)
                                  : NULL;
            ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
            if (ca.md_resources && uct_component_query(cl[c], &ca) == UCS_OK)
                for (unsigned m = 0; m < ca.md_resource_count; m++)
                    cJSON_AddItemToArray(mds, cJSON_CreateString(ca.md_resources[m].md_name));
            free(ca.md_resources);
            cJSON_AddItemToArray(comps, co);
        }
        uct_release_component_list(cl);
    }
    cJSON *res = cJSON_AddArrayToObject(part, "resources");
    cJSON *tls = cJSON_AddArrayToObject(part, "transports");
    cJSON *nets = cJSON_AddArrayToObject(part, "net_devices");
    cJSON *mds = cJSON_AddArrayToObject(part, "memory_domains");
    for (size_t i = 0; i < l.n; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "transport", l.v[i].tl);
        cJSON_AddStringToObject(r, "device", l.v[i].dev);
        cJSON_AddStringToObject(r, "device_type", dev_type_name(l.v[i].type));
        cJSON_AddStringToObject(r, "memory_domain", l.v[i].md);
        cJSON_AddItemToArray(res, r);
        add_unique(tls, l.v[i].tl);
        add_unique(mds, l.v[i].md);
        if (l.v[i].type == UCT_DEVICE_TYPE_NET)
            add_unique(nets, l.v[i].dev);
    }
    cJSON *al = cJSON_AddArrayToObject(part, "aliases");
    for (size_t i = 0; i < ucx_n_aliases; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "name", ucx_aliases[i].alias);
        cJSON *mem = cJSON_AddArrayToObject(a, "transports");
        for (int k = 0; ucx_aliases[i].members[k]; k++)
            cJSON_AddItemToArray(mem, cJSON_CreateString(ucx_aliases[i].members[k]));
        cJSON_AddBoolToObject(a, "available", ucx_tl_token_ok(&l, ucx_aliases[i].alias));
        cJSON_AddItemToArray(al, a);
    }
    cJSON_AddStringToObject(part, "aliases_source",
                            "UCX 1.13 ucp_context.c ucp_tl_aliases (static in UCX, not in its "
                            "API); fabscope's copy: engine/src/backends/ucx_resources.c ucx_aliases");
    /* What --ucx-tls accepts: "all", every transport above, every available alias (and
     * "^name", "\\name", "name:aux" forms of those). --device accepts net_devices and "all". */
    cJSON *acc = cJSON_AddArrayToObject(part, "tls_names");
    add_unique(acc, "all");
    for (size_t i = 0; i < l.n; i++)
        add_unique(acc, l.v[i].tl);
    for (size_t i = 0; i < ucx_n_aliases; i++)
        if (ucx_tl_token_ok(&l, ucx_aliases[i].alias))
            add_unique(acc, ucx_aliases[i].alias);
    free(l.v);
}
