/* SPDX-License-Identifier: BSD-3-Clause */
/* ofi backend: the providers, fabrics, domains and endpoint types libfabric offers on this host,
 * for --inventory-json. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/inventory.h"
#include "ofi_int.h"

/* ---- inventory (--inventory-json) ----------------------------------------------------------- */

static void add_unique_str(cJSON *arr, const char *s)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (strcmp(x->valuestring, s) == 0) return;
    cJSON_AddItemToArray(arr, cJSON_CreateString(s));
}

static cJSON *provider_entry(cJSON *provs, const char *name)
{
    cJSON *p;
    cJSON_ArrayForEach(p, provs)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(p, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return p;
    }
    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", name);
    cJSON_AddArrayToObject(p, "fabrics");
    cJSON_AddArrayToObject(p, "domains");
    cJSON_AddArrayToObject(p, "endpoint_types");
    cJSON_AddItemToArray(provs, p);
    return p;
}

/* The same fi_getinfo listing --provider and --domain are checked against (ofi_check_names), so
 * "provider_names" is exactly what --provider accepts: every listed provider and the core
 * provider of every layered one ("tcp" for "tcp;ofi_rxm", see ofi_prov_matches). libfabric is
 * opened here, not at engine start (see ofi_lib_open). */
void fs_inventory_ofi(cJSON *part)
{
    cJSON_AddStringToObject(part, "library", "libfabric");
    struct fs_err err = {0};
    if (ofi_lib_open(&err)) {
        cJSON_AddStringToObject(part, "status", "error");
        cJSON_AddStringToObject(part, "error", err.msg);
        return;
    }
    uint32_t v = fi_version();
    char buf[64];
    snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(v), FI_MINOR(v));
    cJSON_AddStringToObject(part, "version", buf);
    snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(OFI_API), FI_MINOR(OFI_API));
    cJSON_AddStringToObject(part, "api_version_asked", buf);
    struct fi_info *all = NULL;
    int rc = fi_getinfo(OFI_API, NULL, NULL, 0, NULL, &all);
    if (rc && rc != -FI_ENODATA) {
        cJSON_AddStringToObject(part, "status", "error");
        snprintf(err.msg, sizeof err.msg, "fi_getinfo: %s (%d)", fi_strerror(-rc), rc);
        cJSON_AddStringToObject(part, "error", err.msg);
        return;
    }
    cJSON_AddStringToObject(part, "status", "ok");
    const char *env = getenv("FI_PROVIDER");
    if (env)
        cJSON_AddStringToObject(part, "fi_provider_env", env);
    else
        cJSON_AddNullToObject(part, "fi_provider_env");
    cJSON *provs = cJSON_AddArrayToObject(part, "providers");
    cJSON *names = cJSON_AddArrayToObject(part, "provider_names");
    cJSON *entries = cJSON_AddArrayToObject(part, "entries");
    for (struct fi_info *i = all; i; i = i->next) {
        const char *pn = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
        const char *fabric = i->fabric_attr->name ? i->fabric_attr->name : "";
        const char *dom = i->domain_attr->name ? i->domain_attr->name : "";
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "provider", pn);
        snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(i->fabric_attr->prov_version),
                 FI_MINOR(i->fabric_attr->prov_version));
        cJSON_AddStringToObject(e, "provider_version", buf);
        cJSON_AddStringToObject(e, "fabric", fabric);
        cJSON_AddStringToObject(e, "domain", dom);
        cJSON_AddStringToObject(e, "endpoint_type", ofi_ep_name(i->ep_attr->type));
        char *as = fi_tostr(&i->addr_format, FI_TYPE_ADDR_FORMAT);
        cJSON_AddStringToObject(e, "addr_format", as ? as : "");
        cJSON *caps = cJSON_AddArrayToObject(e, "caps");
        char *cs = fi_tostr(&i->caps, FI_TYPE_CAPS);
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", cs ? cs : "");
        char *save = NULL;
        for (char *t = strtok_r(copy, " |,", &save); t; t = strtok_r(NULL, " |,", &save))
            cJSON_AddItemToArray(caps, cJSON_CreateString(t));
        cJSON_AddNumberToObject(e, "inject_size", (double)i->tx_attr->inject_size);
        cJSON_AddItemToArray(entries, e);

        cJSON *p = provider_entry(provs, pn);
        add_unique_str(cJSON_GetObjectItemCaseSensitive(p, "fabrics"), fabric);
        add_unique_str(cJSON_GetObjectItemCaseSensitive(p, "domains"), dom);
        add_unique_str(cJSON_GetObjectItemCaseSensitive(p, "endpoint_types"),
                       ofi_ep_name(i->ep_attr->type));
        add_unique_str(names, pn);
        const char *semi = strchr(pn, ';');
        if (semi) {
            char core[64];
            snprintf(core, sizeof core, "%.*s", (int)(semi - pn), pn);
            if (ofi_prov_matches(core, pn))
                add_unique_str(names, core);
        }
    }
    fi_freeinfo(all);
}
