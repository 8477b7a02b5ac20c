/* libFuzzer target for everything the engine parses from the network: control frames, and the
 * peer's settings inside a "config" frame, applied through the option table. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <string.h>

#include "ctl.h"
#include "spec.h"

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
        }
        cJSON_Delete(m);
    }
    return 0;
}
