/* SPDX-License-Identifier: BSD-3-Clause */
/* Hex text of opaque bytes for the control channel (hex.h). */
#include "hex.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void fs_hex_encode(const void *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The one loop that reads hex: n bytes from the first 2 * n characters of s, all of them digits. */
static int decode(const char *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(s[2 * i]), lo = hi < 0 ? -1 : hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void *fs_hex_decode(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len % 2)
        return NULL;
    uint8_t *b = malloc(len / 2 + 1); /* + 1: empty text is zero bytes, not a failure */
    if (!b)
        return NULL;
    if (decode(s, b, len / 2)) {
        free(b);
        return NULL;
    }
    *n = len / 2;
    return b;
}

int fs_hex_decode_exact(const char *s, void *out, size_t n)
{
    /* strnlen: a longer text is refused without reading past what a shorter one would need. */
    return strnlen(s, 2 * n + 1) == 2 * n ? decode(s, out, n) : -1;
}

int fs_json_add_hex(cJSON *obj, const char *key, const void *p, size_t n)
{
    char *text = malloc(2 * n + 1);
    if (!text)
        return -1;
    fs_hex_encode(p, n, text);
    cJSON *added = cJSON_AddStringToObject(obj, key, text);
    free(text);
    return added ? 0 : -1;
}

void *fs_json_get_hex(const cJSON *obj, const char *key, size_t *n)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(x) ? fs_hex_decode(x->valuestring, n) : NULL;
}
