/* SPDX-License-Identifier: BSD-3-Clause */
/* The contract between the core and a transport backend (fio's ioengine_ops, versioned). A backend
 * moves bytes; the core owns every clock read, every loop and every statistic. */
#ifndef FS_BACKEND_H
#define FS_BACKEND_H

#include "fs.h"
#include "options.h"
#include "spec.h"

struct cJSON;

/* Bump when a hook's meaning or signature changes; registration refuses any other value.
 * 2: fs_events.slept (the backend napped) became fs_events.idle (the core waits). */
#define FS_BACKEND_ABI 2

/* Completions reported by one progress call, added to what the core already counted. */
struct fs_events {
    uint64_t tx_done; /* posted operations that completed at the initiator */
    uint64_t rx_done; /* messages that arrived at this side (ACTIVE ops only) */
    /* Set by a backend with nothing to progress on this side: the target of operations its
     * device completes alone (a NIC answers RDMA reads, atomics and writes). It returns at once;
     * the core then sleeps on the control channel until the peer says something. */
    int idle;
    /* Empty passes a backend repeated inside this call beyond its first (see progress). */
    unsigned turns;
};

struct fs_be_ctx {
    const struct fs_spec *spec;
    const void *opts; /* the backend's own option struct, filled from its rows */
    int is_server;
    uint64_t max_size; /* the largest message of the run: allocate/register once */
    const char *ctl_local_addr;  /* numeric address of our end of the control connection */
    const char *ctl_peer_addr;   /* numeric address of the peer's end */
    /* Server without --device/--bind: its address on the network of the client's --device
     * (datapath.h), where the data endpoint belongs; NULL when the client named none. */
    const char *data_local_addr;
    /* The same server: the client's whole data_path hint (datapath.h), e.g. the networks of each
     * device of its --device list, for backends that pair devices by network (verbs). Network
     * input: anything may be in it. NULL on a client, or with a --device/--bind of our own. */
    const struct cJSON *data_path;
    int block; /* effective poll mode (1 = block): backends whose wakeup support changes what
                * the library selects (UCX's WAKEUP feature) must know before they open it */
    /* The session key of a run `fabscope serve` authenticated (32 bytes), or NULL: a backend
     * that owns its data connections binds them to the session with it (fs_data_token). */
    const uint8_t *session_key;
};

struct fs_backend_ops {
    unsigned abi;
    const char *name;
    const char *summary;
    uint32_t ops;      /* FS_BIT(enum fs_op) */
    uint32_t patterns; /* FS_BIT(enum fs_pattern) */
    const struct fs_option *options; /* the backend's own rows, or NULL */
    size_t options_size;             /* bytes of the struct those rows write into */
    /* 1: --device may name several devices, comma-separated (verbs spreads its QPs over them,
     * ucx passes the list on as UCX_NET_DEVICES); 0: one device, and the core refuses a list. */
    int device_list;

    /* Optional: check this host's names (device, address, port, GID) before any connection is
     * made, so a typo is a usage error even when the peer is missing. */
    int (*check)(const struct fs_spec *spec, const void *opts, struct fs_err *err);
    /* Open the device / endpoint and allocate for ctx->max_size. */
    int (*setup)(const struct fs_be_ctx *ctx, void **be, struct fs_err *err);
    /* What the peer needs to reach us (address, port, QPN, rkey, ...), added to obj. */
    int (*local_address)(void *be, struct cJSON *obj, struct fs_err *err);
    /* Connect using the peer's local_address; bounded by deadline_ms. */
    int (*connect)(void *be, const struct cJSON *peer, int deadline_ms, struct fs_err *err);
    /* Ready buffers (and posted receives) for messages of `size` with `op`. */
    int (*prepare)(void *be, enum fs_op op, uint64_t size, struct fs_err *err);
    /* Post one operation. 1 = posted, 0 = no room (core progresses and retries), -1 = error. */
    int (*post)(void *be, enum fs_op op, uint64_t size, struct fs_err *err);
    /* Reap completions into ev. wait_ms == 0: return at once (busy poll); > 0: may sleep up to
     * that long waiting for an event (block mode); < 0: busy poll, and a pass that found nothing
     * may be repeated in this call, -wait_ms passes in all at most, each added to ev->turns
     * beyond the first (a backend's own tight loop: the core's clock keeps its cadence).
     * -1 = error (peer gone, transport error). */
    int (*progress)(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err);
    /* Optional: make every completed PASSIVE operation visible at the target before the core
     * stops the clock. */
    int (*flush)(void *be, struct fs_err *err);
    /* Optional: 1 when messages may be dropped without an error (InfiniBand UC and UD do not
     * retransmit). A receiver then stops once the sender's count is known and nothing arrived
     * for a grace period, and the record reports the loss instead of a timeout. */
    int (*lossy)(void *be);
    /* What actually carried the bytes: device, addresses, lanes, provider... */
    void (*describe)(void *be, struct cJSON *transport);
    /* Must accept a half set-up state: it also runs after a failed setup. */
    void (*teardown)(void *be);
    /* Optional: a warmup or measured phase starts (both sides); per-phase counters the backend
     * reports in describe() (e.g. verbs' per-QP "flows") restart here. */
    void (*phase_begin)(void *be);
    /* Optional: a phase has ended on this side; reap what it left in flight (a ping-pong does not
     * wait for its own send completions), within the run's deadline, so that describe() counts
     * every operation of the phase. Runs after the clock stopped: it costs the figures nothing. */
    int (*settle)(void *be, struct fs_err *err);
};

/* The hooks every message backend writes, named PREFIX_hook: one list of them for every ops
 * struct (a missing one is a compile error naming it). Optional hooks follow it by name. */
#define FS_BACKEND_HOOKS(prefix)                                                                   \
    .check = prefix##_check, .setup = prefix##_setup, .local_address = prefix##_local_address,     \
    .connect = prefix##_connect, .prepare = prefix##_prepare, .post = prefix##_post,               \
    .progress = prefix##_progress, .describe = prefix##_describe, .teardown = prefix##_teardown

/* lat, bw and bibw: what a backend supports unless it says otherwise. */
#define FS_PATTERNS_ALL (FS_BIT(FS_PAT_LAT) | FS_BIT(FS_PAT_BW) | FS_BIT(FS_PAT_BIBW))
/* Every collective pattern: only a backend whose ranks form one job (mpi) offers them. */
#define FS_PATTERNS_COLLECTIVE                                                                     \
    (FS_BIT(FS_PAT_ALLREDUCE) | FS_BIT(FS_PAT_REDUCE_SCATTER) | FS_BIT(FS_PAT_ALLGATHER) |        \
     FS_BIT(FS_PAT_ALLTOALL) | FS_BIT(FS_PAT_BCAST) | FS_BIT(FS_PAT_BARRIER))

/* Checks abi, name and hooks; a backend that fails is refused at startup, loudly. */
int fs_backend_check(const struct fs_backend_ops *ops, struct fs_err *err);
const struct fs_backend_ops *const *fs_backends(size_t *n);
const struct fs_backend_ops *fs_backend_by_name(const char *name);

/* Every backend this fabscope knows, built into this engine or not: the one list the front end
 * (--options-json "known_backends"), the engine's own refusal of --backend and `fabscope
 * backends` read. `package` is the Debian package whose presence at build time builds it (the
 * build system's, engine/CMakeLists.txt). mpi lives in engines of its own
 * (fabscope-engine-mpi-FLAVOUR, started under a launcher), so it is not built into this one. */
struct fs_backend_known {
    const char *name;
    const char *package;
    const struct fs_backend_ops *ops; /* NULL: not built into this engine */
};
const struct fs_backend_known *fs_backends_known(size_t *n);
const struct fs_backend_known *fs_backend_known_by_name(const char *name);

#endif
