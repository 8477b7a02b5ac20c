/* SPDX-License-Identifier: BSD-3-Clause */
/* ofi backend: the address exchange and connecting. An rdm endpoint inserts the peer's address
 * into its address vector; a msg server accepts the first connection request that carries the
 * session's token, a msg client connects and a helper thread waits for FI_CONNECTED. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/clock.h"
#include "../core/hex.h"
#include "ofi_int.h"

int ofi_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    struct ofi *f = be;
    uint8_t name[512];
    size_t len = sizeof name;
    int rc = 0;
    if (f->pep)
        rc = fi_getname(&f->pep->fid, name, &len);
    else if (f->cm_thread_running) {
        /* The endpoint belongs to the connection thread until prepare joins it. */
        memcpy(name, f->cached_name, f->cached_name_len);
        len = f->cached_name_len;
    } else if (f->ep)
        rc = fi_getname(&f->ep->fid, name, &len);
    else
        len = 0;
    if (rc)
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_getname", rc);
    if (fs_json_add_hex(obj, "name", name, len))
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    cJSON_AddNumberToObject(obj, "addr_format", f->info->addr_format);
    cJSON_AddStringToObject(obj, "provider", f->info->fabric_attr->prov_name);
    uint64_t raddr = (f->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)f->rbuf : 0;
    char h[24];
    snprintf(h, sizeof h, "%016llx", (unsigned long long)raddr);
    cJSON_AddStringToObject(obj, "raddr", h);
    snprintf(h, sizeof h, "%016llx", (unsigned long long)fi_mr_key(f->rmr));
    cJSON_AddStringToObject(obj, "rkey", h);
    return 0;
}

/* Waits for one connection-manager event; a deadline, not a measurement. */
static int wait_cm_data(struct ofi *f, uint32_t want, struct fi_eq_cm_entry *entry, size_t len,
                        size_t *data_len, int deadline_ms, struct fs_err *err)
{
    uint32_t ev = 0;
    ssize_t n = fi_eq_sread(f->eq, &ev, entry, len, deadline_ms, 0);
    if (data_len)
        *data_len = n > (ssize_t)sizeof *entry ? (size_t)n - sizeof *entry : 0;
    if (n == -FI_EAVAIL) {
        struct fi_eq_err_entry ee = {0};
        fi_eq_readerr(f->eq, &ee, 0);
        return fs_fail(err, FS_EXIT_PEER, "ofi: connection failed: %s (%s)",
                       fi_strerror(ee.err),
                       fi_eq_strerror(f->eq, ee.prov_errno, ee.err_data, NULL, 0));
    }
    if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT)
        return fs_fail(err, FS_EXIT_PEER, "ofi: no %s event within %d ms",
                       want == FI_CONNREQ ? "connection request" : "connection established",
                       deadline_ms);
    if (n < 0)
        return ofi_failc(err, FS_EXIT_PEER, "fi_eq_sread", n);
    if (ev != want)
        return fs_fail(err, FS_EXIT_PEER, "ofi: unexpected connection event %u (wanted %u)", ev,
                       want);
    return 0;
}

static int wait_cm(struct ofi *f, uint32_t want, struct fi_eq_cm_entry *entry, int deadline_ms,
                   struct fs_err *err)
{
    return wait_cm_data(f, want, entry, sizeof *entry, NULL, deadline_ms, err);
}

/* The server's connection request: the first that carries the session's token (any, outside a
 * session); the others are rejected and counted. */
static int accept_request(struct ofi *f, int deadline_ms, struct fs_err *err)
{
    uint64_t deadline = fs_now_ns() + (uint64_t)deadline_ms * 1000000ull;
    for (;;) {
        union {
            struct fi_eq_cm_entry e;
            uint8_t raw[sizeof(struct fi_eq_cm_entry) + 256];
        } req;
        size_t got = 0;
        int left = fs_ms_until(deadline);
        if (left == 0 || wait_cm_data(f, FI_CONNREQ, &req.e, sizeof req, &got, left, err)) {
            if (f->strangers)
                return fs_fail(err, FS_EXIT_PEER,
                               "ofi: no connection request with this session's token came within "
                               "%d ms; %u request(s) without it were rejected (something else is "
                               "connecting to the endpoint: `ss -tnp` names it for the tcp providers; a "
                               "client engine of another fabscope version sends no token: run one "
                               "version on both hosts)",
                               deadline_ms, f->strangers);
            return left == 0 ? fs_fail(err, FS_EXIT_PEER,
                                       "ofi: no connection request event within %d ms", deadline_ms)
                             : -1;
        }
        uint8_t diff = f->bound && got < sizeof f->token ? 1 : 0;
        for (size_t i = 0; f->bound && i < sizeof f->token && i < got; i++)
            diff |= (uint8_t)(req.e.data[i] ^ f->token[i]);
        if (!diff) {
            f->conn = req.e.info;
            return 0;
        }
        f->strangers++;
        fi_reject(f->pep, req.e.info->handle, NULL, 0);
        fi_freeinfo(req.e.info);
    }
}

static void *cm_main(void *arg)
{
    struct ofi *f = arg;
    struct fi_eq_cm_entry entry;
    f->cm_rc = wait_cm(f, FI_CONNECTED, &entry, f->cm_deadline_ms, &f->cm_err);
    return NULL;
}

int ofi_join_cm(struct ofi *f, struct fs_err *err)
{
    if (!f->cm_thread_running)
        return 0;
    pthread_join(f->cm_thread, NULL);
    f->cm_thread_running = 0;
    if (f->cm_rc) {
        *err = f->cm_err;
        return -1;
    }
    f->connected = 1;
    return 0;
}

int ofi_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct ofi *f = be;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(peer, "name");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(peer, "addr_format");
    const cJSON *prov = cJSON_GetObjectItemCaseSensitive(peer, "provider");
    const cJSON *ra = cJSON_GetObjectItemCaseSensitive(peer, "raddr");
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(peer, "rkey");
    if (!cJSON_IsString(nm) || !cJSON_IsNumber(fmt) || !cJSON_IsString(prov) ||
        !cJSON_IsString(ra) || !cJSON_IsString(rk))
        return fs_fail(err, FS_EXIT_PEER, "ofi: the peer sent an incomplete address");
    if (strcmp(prov->valuestring, f->info->fabric_attr->prov_name) != 0)
        return fs_fail(err, FS_EXIT_USAGE,
                       "ofi: provider mismatch: this side opened %s, the peer %s; pass the same "
                       "--provider (and a domain both can reach) on both sides",
                       f->info->fabric_attr->prov_name, prov->valuestring);
    f->peer_raddr = strtoull(ra->valuestring, NULL, 16);
    f->peer_key = strtoull(rk->valuestring, NULL, 16);
    size_t nlen = 0;
    void *name = fs_hex_decode(nm->valuestring, &nlen);
    if (!name)
        return fs_fail(err, FS_EXIT_PEER, "ofi: the peer's address is not hex");
    int rc;
    if (f->ep_type == FI_EP_RDM) {
        rc = fi_av_insert(f->av, name, 1, &f->peer, 0, NULL);
        free(name);
        if (rc != 1)
            return fs_fail(err, FS_EXIT_PEER, "ofi: fi_av_insert of the peer's address failed (%d)",
                           rc);
        f->connected = 1;
        return 0;
    }
    if (f->is_server) {
        free(name);
        struct fi_eq_cm_entry entry;
        if (accept_request(f, deadline_ms, err))
            return -1;
        f->conn->tx_attr->op_flags |= ofi_tx_op_flags(f); /* a connection request carries none */
        if ((rc = fi_endpoint(f->domain, f->conn, &f->ep, NULL)))
            return ofi_failc(err, FS_EXIT_MEASURE, "fi_endpoint (accepting)", rc);
        if (ofi_bind_enable(f, err))
            return -1;
        if ((rc = fi_accept(f->ep, NULL, 0)))
            return ofi_failc(err, FS_EXIT_PEER, "fi_accept", rc);
        if (wait_cm(f, FI_CONNECTED, &entry, deadline_ms, err))
            return -1;
        f->connected = 1;
        return 0;
    }
    /* Client: an info addressed to the server, on the domain already opened. */
    struct fi_info *h = ofi_make_hints(f, f->info->domain_attr->name);
    if (!h) {
        free(name);
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    }
    h->addr_format = (uint32_t)fmt->valueint;
    h->dest_addr = name;
    h->dest_addrlen = nlen;
    struct fi_info *list = NULL;
    rc = fi_getinfo(OFI_API, NULL, NULL, 0, h, &list);
    fi_freeinfo(h); /* frees name too */
    struct fi_info *c = rc ? NULL : ofi_pick(list, f->info->fabric_attr->prov_name, f->info->domain_attr->name);
    if (!c) {
        fi_freeinfo(list);
        return fs_fail(err, FS_EXIT_PEER, "ofi: provider %s cannot address the server: %s",
                       f->info->fabric_attr->prov_name, rc ? fi_strerror(-rc) : "no match");
    }
    f->conn = fi_dupinfo(c);
    fi_freeinfo(list);
    if ((rc = fi_endpoint(f->domain, f->conn, &f->ep, NULL)))
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_endpoint", rc);
    if (ofi_bind_enable(f, err))
        return -1;
    f->cached_name_len = sizeof f->cached_name;
    if (fi_getname(&f->ep->fid, f->cached_name, &f->cached_name_len))
        f->cached_name_len = 0;
    if (f->bound) {
        size_t most = 0, l = sizeof most;
        if (fi_getopt(&f->ep->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, &most, &l) == 0 &&
            most < sizeof f->token)
            return fs_fail(err, FS_EXIT_UNSUPPORTED,
                           "ofi: provider %s carries %zu bytes of connection data, and binding a "
                           "msg endpoint to the session takes %zu: use --ofi-ep rdm with it",
                           f->info->fabric_attr->prov_name, most, sizeof f->token);
    }
    if ((rc = fi_connect(f->ep, f->conn->dest_addr, f->bound ? f->token : NULL,
                         f->bound ? sizeof f->token : 0)))
        return ofi_failc(err, FS_EXIT_PEER, "fi_connect", rc);
    /* The server accepts only after this side's answer: FI_CONNECTED is awaited by the
     * connection thread and collected in prepare. */
    f->cm_deadline_ms = deadline_ms;
    if ((rc = pthread_create(&f->cm_thread, NULL, cm_main, f)))
        return fs_fail(err, FS_EXIT_MEASURE, "ofi: cannot start the connection thread: %s",
                       strerror(rc));
    f->cm_thread_running = 1;
    return 0;
}

/* Binds the endpoint to its completion queue, address vector or event queue and enables it: the
 * last step of every connection, whichever side or mode (ofi.c for connectionless endpoints). */
int ofi_bind_enable(struct ofi *f, struct fs_err *err)
{
    const struct fi_info *epi = f->conn ? f->conn : f->info; /* what the endpoint was opened with */
    f->delivery_complete = (epi->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;
    int rc = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV);
    if (!rc && f->av)
        rc = fi_ep_bind(f->ep, &f->av->fid, 0);
    if (!rc && f->eq)
        rc = fi_ep_bind(f->ep, &f->eq->fid, 0);
    if (!rc)
        rc = fi_enable(f->ep);
    if (rc == -FI_EINVAL && strstr(f->info->fabric_attr->prov_name, "ofi_rxm"))
        /* Seen on rxe: "Unable to create verbs CQ" in FI_LOG_LEVEL=warn; fi_pingpong fails alike. */
        return fs_fail(err, FS_EXIT_MEASURE,
                       "ofi: binding/enabling the %s endpoint: %s (%d); ofi_rxm sizes each "
                       "connection's CQ as (tx + rx size) x FI_UNIVERSE_SIZE (default 256), which "
                       "a device with few CQ entries refuses (rxe: max_cqe 32767, see "
                       "ibv_devinfo -v): set FI_UNIVERSE_SIZE=32 on both hosts",
                       f->info->fabric_attr->prov_name, fi_strerror(EINVAL), rc);
    return rc ? ofi_failc(err, FS_EXIT_MEASURE, "binding/enabling the endpoint", rc) : 0;
}
