/* SPDX-License-Identifier: BSD-3-Clause */
/* The inventory: one object with a part per library. The parts come from the backend files;
 * this file only assembles them and says which libraries the build left out. */
#include "inventory.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <unistd.h>

#include "fs.h"

static void absent(cJSON *part, const char *library, const char *package)
{
    cJSON_AddStringToObject(part, "status", "absent");
    char why[256];
    snprintf(why, sizeof why,
             "this fabscope-engine was built without %s (install %s and rebuild: `make setup`)",
             library, package);
    cJSON_AddStringToObject(part, "reason", why);
}

/* The part `key` of root: filled by its backend, or absent (fill NULL) naming the package that
 * would add the library. */
static void add_part(cJSON *root, const char *key, void (*fill)(cJSON *part), const char *library,
                     const char *package)
{
    cJSON *part = cJSON_AddObjectToObject(root, key);
    if (fill)
        fill(part);
    else
        absent(part, library, package);
}

/* The parts of the libraries this build left out. */
#ifndef FS_HAVE_VERBS
#define fs_inventory_verbs NULL
#endif
#ifndef FS_HAVE_UCX
#define fs_inventory_ucx NULL
#endif
#ifndef FS_HAVE_OFI
#define fs_inventory_ofi NULL
#endif

int fs_inventory_print(void)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", FS_INVENTORY_SCHEMA);
    cJSON_AddStringToObject(root, "version", FS_TOOL_VERSION);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(root, "host", host);

    add_part(root, "verbs", fs_inventory_verbs, "libibverbs",
             "libibverbs-dev (and librdmacm-dev for --cm)");
    add_part(root, "ucx", fs_inventory_ucx, "UCX", "libucx-dev");
    add_part(root, "libfabric", fs_inventory_ofi, "libfabric", "libfabric-dev");
    char *text = cJSON_Print(root);
    if (text)
        puts(text);
    cJSON_free(text);
    cJSON_Delete(root);
    return 0;
}
