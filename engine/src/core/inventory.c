/* The inventory: one object with a part per library. The parts come from the backend files;
 * this file only assembles them and says which libraries the build left out. */
#include "inventory.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <unistd.h>

#include "fs.h"

#if !defined(FS_HAVE_VERBS) || !defined(FS_HAVE_UCX) || !defined(FS_HAVE_OFI)
static void absent(cJSON *part, const char *library, const char *package)
{
    cJSON_AddStringToObject(part, "status", "absent");
    char why[256];
    snprintf(why, sizeof why,
             "this fabscope-engine was built without %s (install %s and rebuild: `make setup`)",
             library, package);
    cJSON_AddStringToObject(part, "reason", why);
}
#endif

int fs_inventory_print(void)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", FS_INVENTORY_SCHEMA);
    cJSON_AddStringToObject(root, "version", FS_TOOL_VERSION);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    cJSON_AddStringToObject(root, "host", host);

    cJSON *verbs = cJSON_AddObjectToObject(root, "verbs");
#ifdef FS_HAVE_VERBS
    fs_inventory_verbs(verbs);
#else
    absent(verbs, "libibverbs", "libibverbs-dev (and librdmacm-dev for --cm)");
#endif
    cJSON *ucx = cJSON_AddObjectToObject(root, "ucx");
#ifdef FS_HAVE_UCX
    fs_inventory_ucx(ucx);
#else
    absent(ucx, "UCX", "libucx-dev");
#endif
    cJSON *ofi = cJSON_AddObjectToObject(root, "libfabric");
#ifdef FS_HAVE_OFI
    fs_inventory_ofi(ofi);
#else
    absent(ofi, "libfabric", "libfabric-dev");
#endif
    char *text = cJSON_Print(root);
    if (text)
        puts(text);
    cJSON_free(text);
    cJSON_Delete(root);
    return 0;
}
