/* SPDX-License-Identifier: BSD-3-Clause */
/* libfabric backend: msg (connected) and rdm (reliable datagram) endpoints; send/recv, RMA write
 * and read, and 64-bit fetch-add / compare-swap where the provider has them.
 *
 * The provider, domain and endpoint type the user names are checked against what fi_getinfo
 * reports on this host: an unknown name is a usage error listing what exists, and a capability
 * the provider lacks is "unsupported by provider X" (exit 6). Nothing is substituted.
 *
 * This file: the options, the resources a run opens, the data path, describe and teardown;
 * ofi_int.h lists the others. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/datapath.h"
#include "ofi_int.h"

static const char *const ep_values[] = {"rdm", "msg", NULL};

#define F(f) FS_FIELD(struct ofi_opts, f)
static const struct fs_option ofi_options[] = {
    {"provider", FS_OPT_STR, F(provider), 0, 0, NULL, NULL,
     "libfabric provider (tcp, shm, udp, sockets, net, verbs, or a layered name such as "
     "tcp;ofi_rxm); checked against fi_getinfo; empty = the first provider that can do the op",
     0},
    {"domain", FS_OPT_STR, F(domain), 0, 0, NULL, NULL,
     "libfabric domain on this host (e.g. lo, eth0, mlx5_0); --device means the same; empty = "
     "the domain of this host's address on the network of the client's --device (server), else "
     "of the control connection's address",
     FS_OPTF_LOCAL},
    {"ofi-ep", FS_OPT_ENUM, F(ep), 0, 0, "rdm", ep_values,
     "endpoint type: rdm (reliable datagram) or msg (connected)", 0},
    {"ofi-inject", FS_OPT_INT, F(inject), -1, 1 << 20, "-1", NULL,
     "sends and writes of up to N bytes go out with fi_inject / fi_inject_write (the provider "
     "copies them at once and reports no completion, as fi_pingpong does); -1 = auto: the "
     "provider's inject_size for lat with send/write, 0 otherwise. More than the provider's "
     "inject_size is an error",
     0},
    {0},
};
#undef F

static int ofi_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    if (ofi_lib_open(err) || ofi_check_provider_env(err))
        return -1;
    const struct ofi_opts *o = opts;
    const char *domain = ofi_domain_wanted(o, spec->device, err);
    if (!domain || ofi_check_names(o, domain, err))
        return -1;
    if (spec->bind[0]) {
        struct ifaddrs *ifa = NULL;
        int ok = getifaddrs(&ifa) == 0 && fs_datapath_owner(ifa, spec->bind) != NULL;
        if (ifa)
            freeifaddrs(ifa);
        if (!ok) {
            char sv[FS_SHOWN_LEN];
            return fs_fail(err, FS_EXIT_USAGE,
                           "--bind %s: no interface on this host has that address (`ip -br addr` "
                           "lists them)",
                           fs_shown(spec->bind, sv, sizeof sv));
        }
    }
    return 0;
}


/* ---- resources ---------------------------------------------------------------------------- */

static int reg(struct ofi *f, void *buf, struct fid_mr **mr, uint64_t key, struct fs_err *err)
{
    int rc = fi_mr_reg(f->domain, buf, f->bufsize,
                       FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                       key, 0, mr, NULL);
    if (rc)
        return fs_fail(err, FS_EXIT_MEASURE,
                       "ofi: registering %llu bytes failed: %s; if this is ENOMEM, raise the "
                       "locked-memory limit (ulimit -l)",
                       (unsigned long long)f->bufsize, fi_strerror(-rc));
    return 0;
}

static int open_cq(struct ofi *f, struct fs_err *err)
{
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_MSG,
                            .size = (size_t)(f->ntx + OFI_MAX_RX + 64),
                            .wait_obj = f->block ? FI_WAIT_FD : FI_WAIT_NONE};
    int rc = fi_cq_open(f->domain, &ca, &f->cq, NULL);
    if (rc && f->block) {
        /* Block mode asks for a file-descriptor wait object: the generic one (FI_WAIT_UNSPEC)
         * is a sched_yield spin in some providers (shm) that outlived its timeout here. No fd
         * wait object in this provider: progress busily and say so in the result. */
        ca.wait_obj = FI_WAIT_NONE;
        rc = fi_cq_open(f->domain, &ca, &f->cq, NULL);
        f->cq_waitable = 0;
    } else {
        f->cq_waitable = f->block;
    }
    return rc ? ofi_failc(err, FS_EXIT_MEASURE, "fi_cq_open", rc) : 0;
}

/* Which sizes go out with fi_inject*: checked against what the provider allows, never cut down
 * behind the user's back. */
static int choose_inject(struct ofi *f, struct fs_err *err)
{
    const uint64_t prov_max = f->info->tx_attr->inject_size;
    const char *prov = f->info->fabric_attr->prov_name;
    const int injectable = f->op == FS_OP_SEND || f->op == FS_OP_WRITE;
    if (f->o.inject < 0) {
        f->inject_max = injectable && f->pat == FS_PAT_LAT ? prov_max : 0;
        return 0;
    }
    f->inject_max = (uint64_t)f->o.inject;
    if (!f->inject_max)
        return 0;
    if (!injectable)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--ofi-inject %ld: libfabric injects only sends and writes, not %s; use "
                       "--ofi-inject 0 or -1",
                       f->o.inject, fs_ops[f->op].name);
    if (f->op == FS_OP_WRITE && f->pat != FS_PAT_LAT)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--ofi-inject %ld with write %s: an injected write reports no completion, "
                       "so the initiator could not time its delivery; use --ofi-inject 0",
                       f->o.inject, fs_pattern_names[f->pat]);
    if (f->inject_max > prov_max)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--ofi-inject %ld: provider %s injects at most %llu bytes "
                       "(tx_attr->inject_size); use --ofi-inject %llu or less, or -1 for that",
                       f->o.inject, prov, (unsigned long long)prov_max,
                       (unsigned long long)prov_max);
    return 0;
}

static int ofi_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    const struct ofi_opts *asked = ctx->opts;
    if (ofi_lib_open(err))
        return -1;
    struct ofi *f = calloc(1, sizeof *f);
    if (!f)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = f;
    f->o = *asked;
    f->is_server = ctx->is_server;
    f->block = ctx->block;
    f->timeout_s = ctx->spec->timeout;
    f->tx_depth = ctx->spec->tx_depth;
    int op = fs_op_by_name(ctx->spec->op), pat = fs_pattern_by_name(ctx->spec->pattern);
    f->op = op < 0 ? FS_OP_SEND : (enum fs_op)op;
    f->pat = pat < 0 ? FS_PAT_LAT : (enum fs_pattern)pat;
    f->mem_polling = f->op == FS_OP_WRITE && f->pat == FS_PAT_LAT;
    if (f->mem_polling)
        f->block = 0;
    f->ep_type = strcmp(f->o.ep, "msg") == 0 ? FI_EP_MSG : FI_EP_RDM;
    if (ctx->session_key && f->ep_type == FI_EP_MSG) {
        f->bound = 1;
        fs_data_token(ctx->session_key, "ofi", f->token);
    }
    /* Where our endpoint goes: the --bind address; else, when no domain is named, on the network
     * of the client's --device if it named one (datapath.h), else the control connection's
     * address. */
    snprintf(f->source_addr, sizeof f->source_addr, "%s",
             ctx->spec->bind[0]     ? ctx->spec->bind
             : ctx->data_local_addr ? ctx->data_local_addr
             : ctx->ctl_local_addr  ? ctx->ctl_local_addr
                                   : "");
    f->bind_given = ctx->spec->bind[0] != 0;
    const char *domain = ofi_domain_wanted(&f->o, ctx->spec->device, err);
    if (!domain || ofi_check_names(&f->o, domain, err))
        return -1;
    if (domain[0]) {
        /* A domain that is an interface (tcp, net, udp, sockets) is bound by its own address:
         * the control connection's address may be on another network. */
        struct ifaddrs *ifa = NULL;
        char own[INET6_ADDRSTRLEN];
        if (getifaddrs(&ifa) == 0) {
            if (fs_datapath_addr_of(ifa, domain, own, sizeof own) == 0)
                snprintf(f->source_addr, sizeof f->source_addr, "%s", own);
            freeifaddrs(ifa);
        }
    }
    snprintf(f->domain_req, sizeof f->domain_req, "%s", domain);
    if (ofi_getinfo(f, domain, err))
        return -1;
    int rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL);
    if (rc)
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_fabric", rc);
    if ((rc = fi_domain(f->fabric, f->info, &f->domain, NULL)))
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_domain", rc);
    if ((f->op == FS_OP_FADD || f->op == FS_OP_CSWAP) &&
        strstr(f->info->fabric_attr->prov_name, "ofi_rxd"))
        /* fi_query_atomic says yes, but both ends then crash in fi_cq_read (seen here with
         * 1.17; ofiwg/libfabric#11814): refuse rather than take the peer down. */
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by provider %s: fetching atomics crash inside libfabric's "
                       "rxd utility provider (ofiwg/libfabric#11814); use another provider",
                       f->info->fabric_attr->prov_name);
    if (f->op == FS_OP_FADD || f->op == FS_OP_CSWAP) {
        struct fi_atomic_attr aa;
        rc = f->op == FS_OP_FADD
                 ? fi_query_atomic(f->domain, FI_UINT64, FI_SUM, &aa, FI_FETCH_ATOMIC)
                 : fi_query_atomic(f->domain, FI_UINT64, FI_CSWAP, &aa, FI_COMPARE_ATOMIC);
        if (rc)
            return fs_fail(err, FS_EXIT_UNSUPPORTED,
                           "unsupported by provider %s: 64-bit %s (fi_query_atomic: %s)",
                           f->info->fabric_attr->prov_name,
                           f->op == FS_OP_FADD ? "fetch-add (FI_SUM)" : "compare-swap (FI_CSWAP)",
                           fi_strerror(-rc));
    }
    if (choose_inject(f, err))
        return -1;
    f->ntx = (uint64_t)f->tx_depth + 16;
    size_t tx_size = f->info->tx_attr->size ? f->info->tx_attr->size : 64;
    size_t rx_size = f->info->rx_attr->size ? f->info->rx_attr->size : 64;
    f->nrx = (long)(rx_size < OFI_MAX_RX ? rx_size : OFI_MAX_RX);
    if (f->nrx > f->tx_depth + 1)
        f->nrx = f->tx_depth + 1;
    if (f->ntx > tx_size + 16)
        f->ntx = tx_size + 16;
    f->txctx = calloc(f->ntx, sizeof *f->txctx);
    f->rxctx = calloc((size_t)f->nrx, sizeof *f->rxctx);
    int rx_slots_ok = fs_rx_slots_init(&f->rx, (int)f->nrx) == 0;
    /* sbuf also holds the atomic operand, compare value and one result slot per context. */
    f->bufsize = ctx->max_size;
    if (f->bufsize < 64 + 8 * f->ntx)
        f->bufsize = 64 + 8 * f->ntx;
    if (f->bufsize < 4096)
        f->bufsize = 4096;
    if (!f->txctx || !f->rxctx || !rx_slots_ok || posix_memalign((void **)&f->sbuf, 4096, f->bufsize) ||
        posix_memalign((void **)&f->rbuf, 4096, f->bufsize))
        return fs_fail(err, FS_EXIT_MEASURE, "ofi: cannot allocate buffers");
    memset(f->sbuf, 0xa5, f->bufsize);
    memset(f->rbuf, 0, f->bufsize);
    if (reg(f, f->sbuf, &f->smr, 1, err) || reg(f, f->rbuf, &f->rmr, 2, err) || open_cq(f, err))
        return -1;
    if (f->ep_type == FI_EP_MSG) {
        struct fi_eq_attr ea = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
        if ((rc = fi_eq_open(f->fabric, &ea, &f->eq, NULL)))
            return ofi_failc(err, FS_EXIT_MEASURE, "fi_eq_open", rc);
        if (f->is_server) {
            if ((rc = fi_passive_ep(f->fabric, f->info, &f->pep, NULL)) ||
                (rc = fi_pep_bind(f->pep, &f->eq->fid, 0)) || (rc = fi_listen(f->pep)))
                return ofi_failc(err, FS_EXIT_MEASURE, "listening (passive endpoint)", rc);
        }
        return 0;
    }
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 4};
    if ((rc = fi_av_open(f->domain, &aa, &f->av, NULL)))
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_av_open", rc);
    if ((rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)))
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_endpoint", rc);
    return ofi_bind_enable(f, err);
}


/* ---- data path ---------------------------------------------------------------------------- */

/* Posts every free receive slot the provider takes now (EAGAIN: the rest wait for the next
 * call). Every receive takes the whole buffer, so receives stay valid from size to size. */
static int post_receives(struct ofi *f, struct fs_err *err)
{
    while (f->rx.nfree) {
        int slot = fs_rx_slots_next(&f->rx);
        ssize_t rc = fi_recv(f->ep, f->rbuf, f->bufsize, fi_mr_desc(f->rmr),
                             f->ep_type == FI_EP_RDM ? f->peer : FI_ADDR_UNSPEC, &f->rxctx[slot]);
        if (rc == -FI_EAGAIN)
            return 0;
        if (rc)
            return ofi_failc(err, FS_EXIT_MEASURE, "fi_recv", rc);
        fs_rx_slots_posted(&f->rx);
    }
    return 0;
}

static int ofi_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct ofi *f = be;
    f->op = op;
    f->size = size;
    if (size > f->bufsize)
        return fs_fail(err, FS_EXIT_MEASURE, "ofi: size beyond the allocated buffer");
    if (ofi_join_cm(f, err))
        return -1;
    if (f->mem_polling) {
        f->rbuf[size - 1] = 0;
        f->tx_seq = 0;
        f->rx_expect = 1;
    }
    return op == FS_OP_SEND ? post_receives(f, err) : 0;
}

static uint8_t next_seq(uint8_t s) { return (uint8_t)(s % 255 + 1); }

static int ofi_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct ofi *f = be;
    if (f->tx_outstanding >= f->ntx)
        return 0;
    struct fi_context2 *ctx = &f->txctx[f->tx_seq_ctx % f->ntx];
    fi_addr_t dest = f->ep_type == FI_EP_RDM ? f->peer : FI_ADDR_UNSPEC;
    void *sdesc = fi_mr_desc(f->smr);
    ssize_t rc;
    const char *what;
    const int inject = size <= f->inject_max;
    switch (op) {
    case FS_OP_SEND:
        what = inject ? "fi_inject" : "fi_send";
        rc = inject ? fi_inject(f->ep, f->sbuf, size, dest)
                    : fi_send(f->ep, f->sbuf, size, sdesc, dest, ctx);
        break;
    case FS_OP_WRITE:
        what = inject ? "fi_inject_write" : "fi_write";
        /* The sequence advances only when the write is accepted: an EAGAIN retry must carry
         * the same value, or the target waits for a number that never comes. */
        if (f->mem_polling)
            f->sbuf[size - 1] = next_seq(f->tx_seq);
        rc = inject ? fi_inject_write(f->ep, f->sbuf, size, dest, f->peer_raddr, f->peer_key)
                    : fi_write(f->ep, f->sbuf, size, sdesc, dest, f->peer_raddr, f->peer_key, ctx);
        break;
    case FS_OP_READ:
        what = "fi_read";
        rc = fi_read(f->ep, f->sbuf, size, sdesc, dest, f->peer_raddr, f->peer_key, ctx);
        break;
    case FS_OP_FADD:
    case FS_OP_CSWAP: {
        uint64_t *operand = (uint64_t *)(void *)f->sbuf, *compare = operand + 1;
        uint64_t *result = operand + 8 + f->tx_seq_ctx % f->ntx;
        *operand = 1;
        *compare = 0;
        if (op == FS_OP_FADD) {
            what = "fi_fetch_atomic";
            rc = fi_fetch_atomic(f->ep, operand, 1, sdesc, result, sdesc, dest, f->peer_raddr,
                                 f->peer_key, FI_UINT64, FI_SUM, ctx);
        } else {
            what = "fi_compare_atomic";
            rc = fi_compare_atomic(f->ep, operand, 1, sdesc, compare, sdesc, result, sdesc, dest,
                                   f->peer_raddr, f->peer_key, FI_UINT64, FI_CSWAP, ctx);
        }
        break;
    }
    default:
        return fs_fail(err, FS_EXIT_USAGE, "ofi: op %s is not supported", fs_ops[op].name);
    }
    if (rc == -FI_EAGAIN)
        return 0;
    if (rc)
        return ofi_failc(err, FS_EXIT_MEASURE, what, rc);
    if (f->mem_polling && op == FS_OP_WRITE)
        f->tx_seq = next_seq(f->tx_seq);
    if (inject) {
        f->tx_immediate++;
    } else {
        f->tx_seq_ctx++;
        f->tx_outstanding++;
    }
    /* The message is on its way: now is the time to post receives again (as a ping-pong posts
     * its receive after its send), not between an arrival and the answer to it. */
    return f->rx.nfree && post_receives(f, err) ? -1 : 1;
}

static int cq_error(struct ofi *f, struct fs_err *err)
{
    struct fi_cq_err_entry ee = {0};
    fi_cq_readerr(f->cq, &ee, 0);
    const char *detail = fi_cq_strerror(f->cq, ee.prov_errno, ee.err_data, NULL, 0);
    int code = ee.err == FI_ECONNRESET || ee.err == FI_ECONNABORTED || ee.err == FI_ENOTCONN ||
                       ee.err == FI_EHOSTUNREACH || ee.err == FI_ETIMEDOUT
                   ? FS_EXIT_PEER
                   : FS_EXIT_MEASURE;
    return fs_fail(err, code, "ofi: completion error: %s (%s)", fi_strerror(ee.err),
                   detail ? detail : "");
}

static int reap(struct ofi *f, int wait_ms, struct fs_err *err)
{
    struct fi_cq_msg_entry ent[32];
    ssize_t n = wait_ms > 0 ? fi_cq_sread(f->cq, ent, 32, NULL, wait_ms)
                            : fi_cq_read(f->cq, ent, 32);
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT || n == 0)
        return 0;
    if (n == -FI_EAVAIL)
        return cq_error(f, err);
    if (n < 0)
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_cq_read", n);
    for (ssize_t i = 0; i < n; i++) {
        if (ent[i].flags & FI_RECV) {
            struct fi_context2 *c = ent[i].op_context;
            fs_rx_slots_done(&f->rx, (int)(c - f->rxctx));
            f->rx_completed++;
        } else {
            f->tx_completed++;
        }
    }
    return 0;
}

static int ofi_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct ofi *f = be;
    if (reap(f, 0, err))
        return -1;
    if (f->mem_polling && f->size) {
        volatile uint8_t *last = &f->rbuf[f->size - 1];
        if (*last == f->rx_expect) {
            f->rx_completed++;
            f->rx_expect = next_seq(f->rx_expect);
        }
    }
    /* After an arrival the core is about to time it or answer it: receives are posted again
     * on a turn that completed nothing, or when half of them are used. */
    if (f->rx.nfree && (!f->rx_completed || f->rx.posted < f->nrx / 2) && post_receives(f, err))
        return -1;
    if (!f->tx_completed && !f->rx_completed && !f->tx_immediate && wait_ms > 0 && f->cq_waitable &&
        reap(f, wait_ms, err))
        return -1;
    ev->tx_done += f->tx_completed + f->tx_immediate;
    ev->rx_done += f->rx_completed;
    f->tx_outstanding -= f->tx_completed < f->tx_outstanding ? f->tx_completed : f->tx_outstanding;
    f->tx_completed = f->rx_completed = f->tx_immediate = 0;
    return 0;
}

/* "127.0.0.1:40123" for socket-address providers; other formats (shm names, IB GIDs) are left
 * to the provider/domain fields. */
static int sockaddr_str(uint32_t fmt, const void *name, size_t len, char *out, size_t olen)
{
    char h[INET6_ADDRSTRLEN] = "";
    const struct sockaddr *sa = name;
    if (!ofi_sockaddr_format(fmt) || len < sizeof(struct sockaddr_in))
        return -1;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = name;
        inet_ntop(AF_INET, &in->sin_addr, h, sizeof h);
        snprintf(out, olen, "%s:%u", h, ntohs(in->sin_port));
        return 0;
    }
    if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *in6 = name;
        inet_ntop(AF_INET6, &in6->sin6_addr, h, sizeof h);
        snprintf(out, olen, "[%s]:%u", h, ntohs(in6->sin6_port));
        return 0;
    }
    return -1;
}

static void ofi_describe(void *be, cJSON *o)
{
    struct ofi *f = be;
    cJSON_AddStringToObject(o, "kind", "ofi");
    uint32_t v = fi_version();
    char buf[64];
    snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(v), FI_MINOR(v));
    cJSON_AddStringToObject(o, "libfabric_version", buf);
    if (f->ep_type == FI_EP_MSG) { /* the connection's binding to the session (serve's runs) */
        cJSON_AddBoolToObject(o, "session_bound", f->bound);
        if (f->is_server) /* connection requests rejected for want of the session's token */
            cJSON_AddNumberToObject(o, "strangers_rejected", f->strangers);
    }
    if (!f->info)
        return;
    /* The names come from the info the fabric and domain were opened with: a connection
     * request's info may leave them out (sockets does). */
    const struct fi_info *i = f->info;
    cJSON_AddStringToObject(o, "provider", i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "");
    snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(i->fabric_attr->prov_version),
             FI_MINOR(i->fabric_attr->prov_version));
    cJSON_AddStringToObject(o, "provider_version", buf);
    cJSON_AddStringToObject(o, "fabric", i->fabric_attr->name ? i->fabric_attr->name : "");
    cJSON_AddStringToObject(o, "domain", i->domain_attr->name ? i->domain_attr->name : "");
    cJSON_AddStringToObject(o, "domain_requested", f->domain_req[0] ? f->domain_req : "");
    cJSON_AddStringToObject(o, "endpoint", ofi_ep_name(i->ep_attr->type));
    cJSON_AddStringToObject(o, "data_progress",
                            i->domain_attr->data_progress == FI_PROGRESS_AUTO     ? "auto"
                            : i->domain_attr->data_progress == FI_PROGRESS_MANUAL ? "manual"
                                                                                  : "unspec");
    cJSON_AddStringToObject(o, "progress",
                            f->cq_waitable    ? "block (fi_cq_sread)"
                            : f->mem_polling  ? "busy (write latency polls memory)"
                            : f->block        ? "busy: the provider's CQ has no wait object"
                                              : "busy (fi_cq_read)");
    cJSON_AddNumberToObject(o, "inject_bytes", (double)f->inject_max);
    cJSON_AddNumberToObject(o, "provider_inject_size", (double)i->tx_attr->inject_size);
    if (f->op == FS_OP_WRITE)
        cJSON_AddStringToObject(o, "write_completion",
                                f->delivery_complete
                                    ? "delivery-complete (the data is visible at the target)"
                                    : "the provider's default (ping-pong: the target's answer "
                                      "ends each sample)");
    char *s = fi_tostr(&i->addr_format, FI_TYPE_ADDR_FORMAT);
    cJSON_AddStringToObject(o, "addr_format", s ? s : "");
    uint8_t name[512];
    size_t len = sizeof name;
    if (f->ep && fi_getname(&f->ep->fid, name, &len) == 0) {
        char a[INET6_ADDRSTRLEN + 16] = "";
        sockaddr_str(i->addr_format, name, len, a, sizeof a);
        if (a[0])
            cJSON_AddStringToObject(o, "local_address", a);
        len = sizeof name;
        if (f->ep_type == FI_EP_MSG && fi_getpeer(f->ep, name, &len) == 0 &&
            sockaddr_str(i->addr_format, name, len, a, sizeof a) == 0)
            cJSON_AddStringToObject(o, "peer_address", a);
    }
    if (strncmp(i->fabric_attr->prov_name, "sockets", 7) == 0) {
        const char *w = getenv("FI_SOCKETS_PE_WAITTIME");
        char txt[96];
        snprintf(txt, sizeof txt, "FI_SOCKETS_PE_WAITTIME=%s (%s)", w ? w : "unset (10 ms)",
                 ofi_lib.pe_waittime_set ? "set by fabscope: 10 ms per pass made every round trip 10 ms"
                                 : "from the environment");
        cJSON_AddStringToObject(o, "progress_thread", txt);
    }
}

static void ofi_teardown(void *be)
{
    struct ofi *f = be;
    if (!f)
        return;
    if (f->cm_thread_running) {
        struct fs_err ignore;
        ofi_join_cm(f, &ignore);
    }
    /* Each object before what it was opened on: endpoints, then what they are bound to, then the
     * domain and the fabric. */
#define FID_OF(obj) ((obj) ? &(obj)->fid : NULL)
    struct fid *const opened[] = {FID_OF(f->ep), FID_OF(f->pep),    FID_OF(f->av),
                                  FID_OF(f->cq), FID_OF(f->smr),    FID_OF(f->rmr),
                                  FID_OF(f->eq), FID_OF(f->domain), FID_OF(f->fabric)};
#undef FID_OF
    for (size_t i = 0; i < sizeof opened / sizeof *opened; i++)
        if (opened[i])
            fi_close(opened[i]);
    if (f->conn)
        fi_freeinfo(f->conn);
    if (f->info)
        fi_freeinfo(f->info);
    free(f->sbuf);
    free(f->rbuf);
    free(f->txctx);
    free(f->rxctx);
    fs_rx_slots_release(&f->rx);
    free(f);
}

const struct fs_backend_ops fs_backend_ofi = {
    .abi = FS_BACKEND_ABI,
    .name = "ofi",
    .summary = "libfabric: msg/rdm endpoints; send, RMA write/read, atomics; names the provider",
    .ops = FS_BIT(FS_OP_SEND) | FS_BIT(FS_OP_WRITE) | FS_BIT(FS_OP_READ) | FS_BIT(FS_OP_FADD) |
           FS_BIT(FS_OP_CSWAP),
    .patterns = FS_PATTERNS_ALL,
    .options = ofi_options,
    .options_size = sizeof(struct ofi_opts),
    FS_BACKEND_HOOKS(ofi),
};

