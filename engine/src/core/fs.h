/* SPDX-License-Identifier: BSD-3-Clause */
/* fabscope engine: shared types. Everything the core and the backends agree on lives here. */
#ifndef FS_H
#define FS_H

#include <stddef.h>
#include <stdint.h>

/* The build defines it from python/fabscope/__init__.py (engine/CMakeLists.txt): one version. */
#ifndef FS_TOOL_VERSION
#error "FS_TOOL_VERSION is defined by the build (engine/CMakeLists.txt reads python/fabscope/__init__.py)"
#endif
/* Bumped whenever a control message changes meaning; both ends must agree exactly. */
#define FS_PROTO_VERSION 2
#define FS_RESULT_SCHEMA "fabscope.result/1"

/* Exit codes are a contract with the front end and with scripts (fabtests style). */
enum fs_exit {
    FS_EXIT_OK = 0,
    FS_EXIT_USAGE = 2,       /* bad option, unknown device/backend/op, value out of range */
    FS_EXIT_PEER = 3,        /* peer missing, dead, busy, version mismatch, connection lost */
    FS_EXIT_MEASURE = 4,     /* the measurement itself failed (backend error, bad data) */
    FS_EXIT_UNSUPPORTED = 6, /* valid request the device/provider cannot do: a skip, not a failure */
    FS_EXIT_WRONG_DATA = 12, /* a collective's result differs from what the operation must give */
};

/* An error carries its exit class and a message that says what was asked, what was found and
 * how to fix it. Functions return -1 and fill this; nobody calls exit() below main(). */
struct fs_err {
    int code; /* enum fs_exit */
    char msg[2048];
};

#if defined(__GNUC__)
#define FS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FS_PRINTF(a, b)
#endif

int fs_fail(struct fs_err *err, int code, const char *fmt, ...) FS_PRINTF(3, 4);

/* A value the user (or a peer) gave, quoted for a message as the front end's argtypes.shown() does:
 * in single quotes, control characters, quotes, backslashes and bytes that are not printable ASCII
 * escaped (\n, \t, \xNN), cut after FS_SHOWN_MAX characters with the full length said. Writes into
 * buf (FS_SHOWN_LEN bytes are always enough) and returns it, so it can sit in a printf argument. */
#define FS_SHOWN_MAX 60
#define FS_SHOWN_LEN (4 * FS_SHOWN_MAX + 48)
const char *fs_shown(const char *value, char *buf, size_t len);

/* Operations. Whether the target side sees each message decides which timing loop applies:
 * ACTIVE targets can answer (ping-pong) and count arrivals (receiver-side bandwidth);
 * PASSIVE targets cannot, so the initiator measures completion (which for RDMA RC means the
 * remote side acknowledged it). */
enum fs_op {
    FS_OP_SEND,      /* two-sided send/recv; TCP stream messages */
    FS_OP_WRITE,     /* RDMA write / put: target polls memory in lat, passive in bw */
    FS_OP_WRITE_IMM, /* write with immediate: target gets a completion */
    FS_OP_READ,      /* RDMA read / get: initiator only */
    FS_OP_FADD,      /* atomic fetch-and-add: initiator only */
    FS_OP_CSWAP,     /* atomic compare-and-swap: initiator only */
    FS_OP_TAG,       /* UCX tagged send/recv */
    FS_OP_AM,        /* UCX active message */
    FS_OP_COUNT
};

enum fs_role { FS_ROLE_ACTIVE, FS_ROLE_PASSIVE };

struct fs_op_info {
    const char *name;
    enum fs_role lat_role;
    enum fs_role bw_role;
    int fixed_size; /* atomics move exactly 8 bytes; 0 = any size */
    const char *summary;
};

extern const struct fs_op_info fs_ops[FS_OP_COUNT];
int fs_op_by_name(const char *name);

/* The pair patterns, then the collectives: every rank of an MPI job in one operation, timed by
 * the core's collective loop (collective.h), never by the pair loops. */
enum fs_pattern {
    FS_PAT_LAT,
    FS_PAT_BW,
    FS_PAT_BIBW,
    FS_PAT_ALLREDUCE,
    FS_PAT_REDUCE_SCATTER,
    FS_PAT_ALLGATHER,
    FS_PAT_ALLTOALL,
    FS_PAT_BCAST,
    FS_PAT_BARRIER,
    FS_PAT_COUNT
};
#define FS_PAT_IS_COLLECTIVE(p) ((p) >= FS_PAT_ALLREDUCE && (p) < FS_PAT_COUNT)
extern const char *const fs_pattern_names[FS_PAT_COUNT];
int fs_pattern_by_name(const char *name);

#define FS_BIT(x) (1u << (unsigned)(x))

#endif
