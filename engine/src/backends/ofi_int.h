/* SPDX-License-Identifier: BSD-3-Clause */
/* Private to the ofi backend (libfabric); each file holds one job:
 *   ofi_select.c     libfabric on this host: loading it, checking --provider/--domain against
 *                    fi_getinfo, choosing the fi_info a run opens
 *   ofi.c            options, resources (fabric, domain, buffers, CQ, endpoint), the data path,
 *                    describe, teardown and the backend ops
 *   ofi_cm.c         the address exchange and connecting: AV insert (rdm), connection requests
 *                    and the session's token (msg)
 *   ofi_inventory.c  --inventory-json */
#ifndef FS_OFI_INT_H
#define FS_OFI_INT_H

#include <cjson/cJSON.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdint.h>

#include "../core/backend.h"
#include "../core/ctl.h"
#include "../core/rx_slots.h"

/* libfabric is opened when this backend is first used, not linked into the engine: Debian's
 * libfabric links its PSM provider's libinfinipath, whose load-time constructor spends 0.1-0.2 s
 * calibrating a clock in every process that loads it, TCP runs and --help included (measured
 * here: `fi_info --version` 0.205 s, `ucx_info -v` 0.004 s). The backend calls seven libfabric
 * functions (through this table, filled by ofi_lib_open); everything else in the API is an inline
 * call through an object's operation table. */
struct ofi_lib {
    void *handle;
    __typeof__(fi_getinfo) *getinfo;
    __typeof__(fi_freeinfo) *freeinfo;
    __typeof__(fi_dupinfo) *dupinfo;
    __typeof__(fi_fabric) *fabric;
    __typeof__(fi_strerror) *strerror;
    __typeof__(fi_tostr) *tostr;
    __typeof__(fi_version) *version;
    int pe_waittime_set; /* this process set FI_SOCKETS_PE_WAITTIME itself, for the record */
};
extern struct ofi_lib ofi_lib;
#define fi_getinfo (*ofi_lib.getinfo)
#define fi_freeinfo (*ofi_lib.freeinfo)
#define fi_dupinfo (*ofi_lib.dupinfo)
#define fi_fabric (*ofi_lib.fabric)
#define fi_strerror (*ofi_lib.strerror)
#define fi_tostr (*ofi_lib.tostr)
#define fi_version (*ofi_lib.version)

#define OFI_API FI_VERSION(1, 17)
#define OFI_MAX_RX 512

struct ofi_opts {
    char provider[64];
    char domain[64];
    char ep[8];
    long inject;
};

struct ofi {
    struct ofi_opts o;
    int is_server;
    int block;
    int cq_waitable;
    int mem_polling;
    enum fs_op op;
    enum fs_pattern pat;
    enum fi_ep_type ep_type;
    char domain_req[64];
    char source_addr[64]; /* server: where the endpoint goes when no domain is named */
    int bind_given;       /* source_addr is --bind: used, or the run fails */
    int bound_source;     /* the endpoint was opened on source_addr (FI_SOURCE) */
    /* msg endpoints in a session `fabscope serve` authenticated: the client's connection request
     * carries this token (fs_data_token of the session key) as its connection data, and the server
     * rejects a request without it (a stranger) and waits on. */
    int bound;
    uint8_t token[FS_DATA_TOKEN_LEN];
    unsigned strangers;
    double timeout_s;
    long tx_depth;

    struct fi_info *info;   /* what we opened the fabric/domain with */
    struct fi_info *conn;   /* msg: the connection request (server) or dest-addressed info */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_eq *eq;
    struct fid_pep *pep;
    struct fid_ep *ep;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_mr *smr, *rmr;
    fi_addr_t peer;
    int connected;
    /* msg client: the provider needs its event queue progressed for the connection request to
     * go out, while the core waits on the control channel for the server's accept; a helper
     * thread reads the EQ until FI_CONNECTED (or the deadline) and is joined in prepare. */
    pthread_t cm_thread;
    int cm_thread_running;
    int cm_deadline_ms;
    struct fs_err cm_err;
    int cm_rc;
    uint8_t cached_name[512];
    size_t cached_name_len;

    uint8_t *sbuf, *rbuf;
    uint64_t bufsize, size;
    uint64_t peer_raddr, peer_key;

    struct fi_context2 *txctx, *rxctx;
    uint64_t ntx, tx_seq_ctx, tx_outstanding, tx_completed, rx_completed;
    long nrx;
    struct fs_rx_slots rx; /* which of the nrx receive contexts wait to be posted (again) */
    uint64_t inject_max;   /* sends/writes up to this size use fi_inject*; 0 = never */
    uint64_t tx_immediate; /* injected operations since the last progress: complete at once */
    int delivery_complete; /* writes complete only once the data is visible at the target */
    uint8_t tx_seq, rx_expect;
};

/* ---- ofi_select.c ---- */
/* Loads libfabric once (setting FI_SOCKETS_PE_WAITTIME first, see there). */
int ofi_lib_open(struct fs_err *err);
/* "ofi: WHAT: libfabric's message (rc)". */
int ofi_failc(struct fs_err *err, int code, const char *what, long rc);
const char *ofi_ep_name(enum fi_ep_type t);
/* Whether --provider `want` names `have`: itself, or the core of a layered stack ("tcp" for
 * "tcp;ofi_rxm"); an empty want matches all. */
int ofi_prov_matches(const char *want, const char *have);
/* --domain or --device (the same thing for this backend), or NULL when they disagree. */
const char *ofi_domain_wanted(const struct ofi_opts *o, const char *device, struct fs_err *err);
/* FI_PROVIDER in the environment that leaves libfabric no provider at all. */
int ofi_check_provider_env(struct fs_err *err);
/* The named provider and domain exist on this host (any endpoint type, any caps). */
int ofi_check_names(const struct ofi_opts *o, const char *domain, struct fs_err *err);
/* FI_DELIVERY_COMPLETE for timed writes (see there), else 0. */
uint64_t ofi_tx_op_flags(const struct ofi *f);
/* The hints of f's endpoint type, op and provider on `domain` ("" = any); NULL = out of memory. */
struct fi_info *ofi_make_hints(const struct ofi *f, const char *domain);
int ofi_sockaddr_format(uint32_t fmt);
/* The first of list that is provider prov (as ofi_prov_matches) on domain ("" = any). */
struct fi_info *ofi_pick(struct fi_info *list, const char *prov, const char *domain);
/* f->info: what f opens for the asked provider, domain, endpoint type and op, or an error that
 * says what is missing. */
int ofi_getinfo(struct ofi *f, const char *domain, struct fs_err *err);

/* ---- ofi.c ---- */
/* Binds the endpoint to its CQ (and AV or EQ) and enables it. */
int ofi_bind_enable(struct ofi *f, struct fs_err *err);

/* ---- ofi_cm.c ---- */
int ofi_local_address(void *be, cJSON *obj, struct fs_err *err);
int ofi_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err);
/* msg client: collects the connection thread ofi_connect started (0 when none runs). */
int ofi_join_cm(struct ofi *f, struct fs_err *err);

#endif
