/* SPDX-License-Identifier: BSD-3-Clause */
/* Opaque bytes as hex text: how backends carry their addresses (a UCX worker address, a libfabric
 * endpoint name, a packed rkey) in the JSON of the control channel. */
#ifndef FS_HEX_H
#define FS_HEX_H

#include <stddef.h>

struct cJSON;

/* Writes the 2 * n lowercase hex digits of p and a terminating NUL into out (2 * n + 1 bytes). */
void fs_hex_encode(const void *p, size_t n, char *out);
/* The bytes of even-length hex text (either case): a malloc'd buffer of *n bytes, or NULL when s
 * is not such text or memory runs out. */
void *fs_hex_decode(const char *s, size_t *n);
/* Exactly n bytes from exactly 2 * n hex digits (either case) into out: 0, or -1 (out partly
 * written) when s is shorter, longer or not hex. For fixed-size values: a GID, a session key. */
int fs_hex_decode_exact(const char *s, void *out, size_t n);

/* obj[key] = the hex of p; 0, or -1 when memory runs out. */
int fs_json_add_hex(struct cJSON *obj, const char *key, const void *p, size_t n);
/* The bytes of the hex string obj[key] (as fs_hex_decode); NULL when it is missing, not a string
 * or not hex. */
void *fs_json_get_hex(const struct cJSON *obj, const char *key, size_t *n);

#endif
