/* SPDX-License-Identifier: BSD-3-Clause */
/* The one option table: drives parsing, --help, the config echo in every result, the JSON dump
 * the front end reads, and the copy of the shared settings sent to the peer. */
#ifndef FS_OPTIONS_H
#define FS_OPTIONS_H

#include <stdio.h>

#include "fs.h"

struct cJSON;

enum fs_opt_type {
    FS_OPT_STR,   /* char[size] */
    FS_OPT_ENUM,  /* char[size], one of allowed[] */
    FS_OPT_INT,   /* long, min..max */
    FS_OPT_SIZE,  /* uint64_t bytes, K/M/G suffixes (powers of 1024), min..max */
    FS_OPT_DOUBLE,/* double, min..max */
    FS_OPT_BOOL,  /* int 0/1; "--x" alone means 1 */
    FS_OPT_SIZES, /* struct fs_size_list: "2:8M" (powers of two) or "8,4K,1M" */
};

/* Local options describe this host only (device, address, CPU) and are never sent to the peer;
 * shared options must be identical on both ends, so the client sends them and the server adopts
 * them (perftest makes the user type the same flags twice). */
#define FS_OPTF_LOCAL 0x1u
/* Set on the command line only, never echoed (e.g. --help). */
#define FS_OPTF_NOECHO 0x2u
/* Sets this one engine process's role, sockets, CPU or output: two engines on one host (a
 * loopback run) never share it, whereas they share the other local options (device, ...). */
#define FS_OPTF_PROCESS 0x4u
/* Chooses what this process is (client, server, a listing) or how it talks to its caller (control
 * socket, output format): the front end sets it for each process it starts, so a run plan never
 * carries it (--options-json says "mode"). */
#define FS_OPTF_MODE 0x8u

struct fs_option {
    const char *name;
    enum fs_opt_type type;
    size_t offset;
    size_t size; /* buffer size for STR/ENUM */
    double min, max;
    const char *def; /* default, as text; NULL = empty / zero */
    const char *const *allowed;
    const char *help;
    unsigned flags;
};

/* A row's offset and size, from the options struct it fills: each table says
 * `#define F(f) FS_FIELD(struct my_opts, f)` once and writes F(field) in its rows. */
#define FS_FIELD(type, field) offsetof(type, field), sizeof(((type *)0)->field)

#define FS_MAX_SIZES 64
struct fs_size_list {
    size_t n;
    uint64_t v[FS_MAX_SIZES];
};

/* A table plus the struct it writes into. */
struct fs_opt_set {
    const char *scope; /* "core" or the backend name */
    const struct fs_option *rows;
    void *base;
};

int fs_opt_set_defaults(const struct fs_opt_set *set, struct fs_err *err);
const struct fs_option *fs_opt_find(const struct fs_opt_set *set, const char *name);
int fs_opt_assign(const struct fs_opt_set *set, const struct fs_option *opt, const char *value,
                  struct fs_err *err);
int fs_opt_format(const struct fs_option *opt, const void *base, char *buf, size_t len);

int fs_parse_size(const char *text, uint64_t *out);
int fs_parse_size_list(const char *text, struct fs_size_list *out, char *why, size_t why_len);

/* Config echo: typed values (numbers as numbers, sizes as arrays of bytes). */
void fs_opt_echo_json(const struct fs_opt_set *set, struct cJSON *obj);
/* Shared options as canonical text, for the peer; applied there with fs_opt_apply_wire. */
void fs_opt_wire_json(const struct fs_opt_set *set, struct cJSON *obj);
int fs_opt_apply_wire(const struct fs_opt_set *set, const struct cJSON *obj, struct fs_err *err);
void fs_opt_dump_json(const struct fs_opt_set *set, struct cJSON *array);
void fs_opt_help(const struct fs_opt_set *set, FILE *out);
/* The closest option name, for "did you mean" (NULL when nothing is close). */
const char *fs_opt_suggest(const struct fs_opt_set *const *sets, size_t nsets, const char *name);

#endif
