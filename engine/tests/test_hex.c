/* SPDX-License-Identifier: BSD-3-Clause */
/* fs_hex_*: the hex text backends exchange their addresses in (hex.h). */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hex.h"

int main(void)
{
    const uint8_t bytes[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
    char text[2 * sizeof bytes + 1];
    fs_hex_encode(bytes, sizeof bytes, text);
    CHECK(strcmp(text, "00017f80abff") == 0);

    size_t n = 0;
    uint8_t *back = fs_hex_decode(text, &n);
    CHECK(back && n == sizeof bytes && memcmp(back, bytes, n) == 0);
    free(back);
    back = fs_hex_decode("00017F80ABFF", &n); /* either case */
    CHECK(back && n == sizeof bytes && memcmp(back, bytes, n) == 0);
    free(back);
    back = fs_hex_decode("", &n);
    CHECK(back && n == 0);
    free(back);
    CHECK(fs_hex_decode("abc", &n) == NULL);  /* odd length */
    CHECK(fs_hex_decode("0g", &n) == NULL);   /* not a digit */
    CHECK(fs_hex_decode("1 ", &n) == NULL);
    CHECK(fs_hex_decode("-1", &n) == NULL);

    /* Fixed size (a peer's GID, the session key): exactly 2 * n digits, nothing else. */
    uint8_t gid[16];
    CHECK(fs_hex_decode_exact("fe80000000000000020c29fffe8d1a2B", gid, sizeof gid) == 0);
    CHECK(gid[0] == 0xfe && gid[1] == 0x80 && gid[8] == 0x02 && gid[15] == 0x2b);
    CHECK(fs_hex_decode_exact("fe80000000000000020c29fffe8d1a2", gid, sizeof gid) == -1);   /* short */
    CHECK(fs_hex_decode_exact("fe80000000000000020c29fffe8d1a2b0", gid, sizeof gid) == -1); /* long */
    CHECK(fs_hex_decode_exact("fe80000000000000020c29fffe8d1a2g", gid, sizeof gid) == -1);  /* not hex */
    CHECK(fs_hex_decode_exact(" e80000000000000020c29fffe8d1a2b", gid, sizeof gid) == -1);  /* sscanf took it */
    CHECK(fs_hex_decode_exact("", gid, sizeof gid) == -1);

    cJSON *o = cJSON_CreateObject();
    CHECK(fs_json_add_hex(o, "name", bytes, sizeof bytes) == 0);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    CHECK(cJSON_IsString(name) && strcmp(name->valuestring, "00017f80abff") == 0);
    back = fs_json_get_hex(o, "name", &n);
    CHECK(back && n == sizeof bytes && memcmp(back, bytes, n) == 0);
    free(back);
    CHECK(fs_json_get_hex(o, "missing", &n) == NULL);
    cJSON_AddNumberToObject(o, "number", 12);
    CHECK(fs_json_get_hex(o, "number", &n) == NULL);
    cJSON_Delete(o);
    return CHECK_DONE();
}
