/* UCX backend (UCP): tag, active message, put, get and 64-bit atomics over whatever UCX selects,
 * and a report of what it did select (lanes, transports, devices, protocol for the size).
 *
 * Names the user gives (UCX_TLS, UCX_NET_DEVICES, from options or from the environment) are
 * checked against the transports and devices UCX itself reports on this host before UCX sees
 * them: UCX silently ignores a device list that matches nothing in some layers (UCX #10049), and
 * fabscope must not. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include "../core/backend.h"
#include "../core/datapath.h"
#include "../core/inventory.h"

struct ucx_opts {
    char tls[256];
    char mem[8];
};

static const char *const ucx_mem_values[] = {"ucx", "user", NULL};

#define O(f) offsetof(struct ucx_opts, f)
#define S(f) sizeof(((struct ucx_opts *)0)->f)
static const struct fs_option ucx_options[] = {
    {"ucx-tls", FS_OPT_STR, O(tls), S(tls), 0, 0, NULL, NULL,
     "UCX transports (sets UCX_TLS), e.g. tcp | sm,self | posix,self; every name is checked "
     "against what UCX reports on this host; empty = UCX_TLS from the environment or UCX's "
     "default. --device NAME[,NAME] sets UCX_NET_DEVICES the same way",
     0},
    {"ucx-mem", FS_OPT_ENUM, O(mem), S(mem), 0, 0, "ucx", ucx_mem_values,
     "who allocates the buffers of put/get/atomics: ucx (ucp_mem_map allocates, so shared-memory "
     "transports map it and copy directly, as ucx_perftest does) or user (malloc'd and "
     "registered: what an application's own buffers get, often software-emulated over sm)",
     0},
    {0},
};
#undef O
#undef S

#define UCX_TAG 0x66736370ull /* "fscp": one tag, full mask, for every message of a run */
#define UCX_AM_ID 7
#define UCX_MAX_RX_POSTED 1024

/* One transport resource as `ucx_info -d` lists it: transport name on a device. */
struct ucx_res {
    char tl[UCT_TL_NAME_MAX];
    char dev[UCT_DEVICE_NAME_MAX];
    uct_device_type_t type;
    char md[UCT_MD_NAME_MAX]; /* the memory domain that offers it */
};

struct ucx {
    struct ucx_opts o;
    int is_server;
    int block;       /* the core asked for block mode and the worker has an event fd */
    int mem_polling; /* write in lat: arrivals are seen by polling memory, which cannot block */
    int ucx_owns_buffers; /* sbuf/rbuf came from ucp_mem_map(ALLOCATE): unmapping frees them */
    enum fs_op op;
    enum fs_pattern pat;
    uint64_t bufsize, size;
    long tx_depth;
    double timeout_s;

    /* effective settings, with where they came from (option, environment, UCX default) */
    char tls[256], tls_source[16];
    char net_devices[256], net_devices_source[16];
    char datapath_addr[64]; /* server: our address on the client's data-path network, or "" */

    ucp_context_h context;
    ucp_worker_h worker;
    ucp_ep_h ep;
    ucp_request_param_t send_param; /* for every post of the current op */
    int efd;
    uint8_t *sbuf, *rbuf;
    ucp_mem_h smemh, rmemh;
    ucp_rkey_h peer_rkey;
    uint64_t peer_addr;
    uint64_t *amo_reply; /* one reply slot per outstanding atomic */
    uint64_t amo_slot;

    uint64_t tx_completed, rx_completed, tx_outstanding;
    long rx_posted;
    /* Posted tagged receives, so teardown can cancel them; each request's reserved space
     * (ucp_params.request_size) holds its slot number. */
    void *rx_reqs[UCX_MAX_RX_POSTED];
    unsigned rx_free[UCX_MAX_RX_POSTED];
    unsigned rx_nfree;
    uint8_t tx_seq, rx_expect; /* write-lat: the last byte of each put carries a sequence */
    ucs_status_t failure;      /* first error seen in a completion callback */
    const char *failure_what;
    int flushing;
};

/* ---- small helpers ----------------------------------------------------------------------- */

static void hex_encode(const void *p, size_t n, char *out)
{
    static const char d[] = "0123456789abcdef";
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = d[b[i] >> 4];
        out[2 * i + 1] = d[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_val(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Returns a malloc'd buffer of *n bytes, or NULL when the text is not even-length hex. */
static void *hex_decode(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len % 2)
        return NULL;
    uint8_t *b = malloc(len / 2 + 1);
    if (!b)
        return NULL;
    for (size_t i = 0; i < len / 2; i++) {
        int hi = hex_val(s[2 * i]), lo = hex_val(s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return NULL;
        }
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    *n = len / 2;
    return b;
}

static int add_hex(cJSON *obj, const char *key, const void *p, size_t n)
{
    char *h = malloc(2 * n + 1);
    if (!h)
        return -1;
    hex_encode(p, n, h);
    cJSON_AddStringToObject(obj, key, h);
    free(h);
    return 0;
}

static void *peer_hex(const cJSON *peer, const char *key, size_t *n)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(peer, key);
    return cJSON_IsString(x) ? hex_decode(x->valuestring, n) : NULL;
}

static int ucs_fail(struct fs_err *err, int code, const char *what, ucs_status_t st)
{
    return fs_fail(err, code, "ucx: %s: %s", what, ucs_status_string(st));
}

/* ---- what UCX has on this host ------------------------------------------------------------ */

struct ucx_reslist {
    struct ucx_res *v;
    size_t n;
};

static int reslist_add(struct ucx_reslist *l, const uct_tl_resource_desc_t *r, const char *md)
{
    struct ucx_res *nv = realloc(l->v, (l->n + 1) * sizeof *nv);
    if (!nv)
        return -1;
    l->v = nv;
    snprintf(nv[l->n].tl, sizeof nv[l->n].tl, "%s", r->tl_name);
    snprintf(nv[l->n].dev, sizeof nv[l->n].dev, "%s", r->dev_name);
    nv[l->n].type = r->dev_type;
    snprintf(nv[l->n].md, sizeof nv[l->n].md, "%s", md);
    l->n++;
    return 0;
}

/* The same walk `ucx_info -d` does: every component, every memory domain, every transport
 * resource. Memory domains that fail to open (no device behind them) contribute nothing. */
static int query_resources(struct ucx_reslist *l, struct fs_err *err)
{
    uct_component_h *comps = NULL;
    unsigned ncomp = 0;
    ucs_status_t st = uct_query_components(&comps, &ncomp);
    if (st != UCS_OK)
        return ucs_fail(err, FS_EXIT_MEASURE, "cannot list UCX components", st);
    int rc = 0;
    for (unsigned c = 0; c < ncomp && rc == 0; c++) {
        uct_component_attr_t ca = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                 UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
        if (uct_component_query(comps[c], &ca) != UCS_OK || ca.md_resource_count == 0)
            continue;
        ca.md_resources = calloc(ca.md_resource_count, sizeof *ca.md_resources);
        if (!ca.md_resources) {
            rc = fs_fail(err, FS_EXIT_MEASURE, "out of memory");
            break;
        }
        ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
        if (uct_component_query(comps[c], &ca) == UCS_OK) {
            for (unsigned m = 0; m < ca.md_resource_count && rc == 0; m++) {
                uct_md_config_t *mdc = NULL;
                uct_md_h md = NULL;
                if (uct_md_config_read(comps[c], NULL, NULL, &mdc) != UCS_OK)
                    continue;
                if (uct_md_open(comps[c], ca.md_resources[m].md_name, mdc, &md) == UCS_OK) {
                    uct_tl_resource_desc_t *res = NULL;
                    unsigned nres = 0;
                    if (uct_md_query_tl_resources(md, &res, &nres) == UCS_OK) {
                        for (unsigned k = 0; k < nres && rc == 0; k++)
                            if (reslist_add(l, &res[k], ca.md_resources[m].md_name))
                                rc = fs_fail(err, FS_EXIT_MEASURE, "out of memory");
                        uct_release_tl_resource_list(res);
                    }
                    uct_md_close(md);
                }
                uct_config_release(mdc);
            }
        }
        free(ca.md_resources);
    }
    uct_release_component_list(comps);
    return rc;
}

static int res_has_tl(const struct ucx_reslist *l, const char *tl)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i].tl, tl) == 0)
            return 1;
    return 0;
}

static int res_has_netdev(const struct ucx_reslist *l, const char *dev)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].type == UCT_DEVICE_TYPE_NET && strcmp(l->v[i].dev, dev) == 0)
            return 1;
    return 0;
}

/* "tcp/lo, tcp/eth0, posix/memory, ..." and the distinct transport and network device names. */
static void res_lists(const struct ucx_reslist *l, char *pairs, size_t plen, char *tls,
                      size_t tlen, char *devs, size_t dlen)
{
    size_t pu = 0, tu = 0, du = 0;
    pairs[0] = tls[0] = devs[0] = '\0';
    for (size_t i = 0; i < l->n; i++) {
        if (pu < plen)
            pu += (size_t)snprintf(pairs + pu, plen - pu, "%s%s/%s", pu ? ", " : "", l->v[i].tl,
                                   l->v[i].dev);
        int seen_tl = 0, seen_dev = 0;
        for (size_t j = 0; j < i; j++) {
            seen_tl |= strcmp(l->v[j].tl, l->v[i].tl) == 0;
            seen_dev |= l->v[j].type == UCT_DEVICE_TYPE_NET && strcmp(l->v[j].dev, l->v[i].dev) == 0;
        }
        if (!seen_tl && tu < tlen)
            tu += (size_t)snprintf(tls + tu, tlen - tu, "%s%s", tu ? ", " : "", l->v[i].tl);
        if (!seen_dev && l->v[i].type == UCT_DEVICE_TYPE_NET && du < dlen)
            du += (size_t)snprintf(devs + du, dlen - du, "%s%s", du ? ", " : "", l->v[i].dev);
    }
}

/* UCX's own transport aliases (ucp_tl_aliases in ucp_context.c, UCX 1.13): an alias is valid
 * here when at least one transport it stands for exists on this host. UCX keeps the table static
 * and no API returns it, so this is fabscope's ONE copy: --ucx-tls checks against it and
 * --inventory-json publishes it for the doctor. Members UCX adds only for auxiliary use
 * ("ud_verbs:aux" in rc_v) are left out: on their own they carry no traffic. */
static const struct {
    const char *alias;
    const char *members[8];
} ucx_aliases[] = {
    {"mm", {"posix", "sysv", "xpmem", NULL}},
    {"sm", {"posix", "sysv", "xpmem", "knem", "cma", NULL}},
    {"shm", {"posix", "sysv", "xpmem", "knem", "cma", NULL}},
    {"ib", {"rc_verbs", "ud_verbs", "rc_mlx5", "ud_mlx5", "dc_mlx5", NULL}},
    {"ud_v", {"ud_verbs", NULL}},
    {"ud_x", {"ud_mlx5", NULL}},
    {"ud", {"ud_mlx5", "ud_verbs", NULL}},
    {"rc_v", {"rc_verbs", NULL}},
    {"rc_x", {"rc_mlx5", NULL}},
    {"rc", {"rc_mlx5", "rc_verbs", NULL}},
    {"dc", {"dc_mlx5", NULL}},
    {"dc_x", {"dc_mlx5", NULL}},
    {"ugni", {"ugni_smsg", "ugni_rdma", NULL}},
    {"cuda", {"cuda_copy", "cuda_ipc", "gdr_copy", NULL}},
    {"rocm", {"rocm_copy", "rocm_ipc", "rocm_gdr", NULL}},
};

static int tl_token_ok(const struct ucx_reslist *l, const char *tok)
{
    if (strcmp(tok, "all") == 0 || res_has_tl(l, tok))
        return 1;
    for (size_t i = 0; i < sizeof ucx_aliases / sizeof ucx_aliases[0]; i++)
        if (strcmp(ucx_aliases[i].alias, tok) == 0)
            for (int k = 0; ucx_aliases[i].members[k]; k++)
                if (res_has_tl(l, ucx_aliases[i].members[k]))
                    return 1;
    return 0;
}

/* Checks a comma list; `what` names the setting in the message ("--ucx-tls", "UCX_TLS from the
 * environment"). A leading '^' (exclude) is allowed; every name after it must still exist. */
static int check_list(const struct ucx_reslist *l, const char *value, int devices,
                      const char *what, struct fs_err *err)
{
    char copy[256];
    snprintf(copy, sizeof copy, "%s", value[0] == '^' ? value + 1 : value);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char name[128];
        /* UCX accepts "\name" (no alias expansion) and "name:aux" (auxiliary use only). */
        snprintf(name, sizeof name, "%s", tok[0] == '\\' ? tok + 1 : tok);
        char *colon = strchr(name, ':');
        if (colon && !devices)
            *colon = '\0';
        int ok = devices ? strcmp(name, "all") == 0 || res_has_netdev(l, name) ||
                               res_has_netdev(l, tok)
                         : tl_token_ok(l, name);
        if (ok)
            continue;
        char pairs[1024], tls[512], devs[512], sv[FS_SHOWN_LEN];
        res_lists(l, pairs, sizeof pairs, tls, sizeof tls, devs, sizeof devs);
        fs_shown(name, sv, sizeof sv);
        if (devices)
            return fs_fail(err, FS_EXIT_USAGE,
                           "%s: UCX has no network device %s on this host; its network "
                           "devices here: %s (all resources: %s). `ucx_info -d` lists them",
                           what, sv, devs[0] ? devs : "(none)", pairs);
        return fs_fail(err, FS_EXIT_USAGE,
                       "%s: UCX has no transport %s on this host; transports here: %s "
                       "(aliases: sm/shm = the shared-memory ones, all); resources: %s. "
                       "`ucx_info -d` lists them",
                       what, sv, tls, pairs);
    }
    return 0;
}

/* A server without a device of its own: the client's data-path hint chose our address on the
 * client's network (`addr`, datapath.h). UCX's tcp transport would offer every interface, and a
 * client bound to fabric0 reached our mgmt0 address over the management link (misrouted). Keep
 * the interface holding that address, the RDMA ports that send through it, and RDMA ports whose
 * netdev is unknown (InfiniBand: no Ethernet netdev behind its GIDs). Empty when the address is
 * not ours or nothing matches (then UCX's default stays). */
static void devices_on_datapath(const struct ucx_reslist *l, const char *addr, char *out, size_t len)
{
    out[0] = '\0';
    struct ifaddrs *ifa = NULL;
    if (getifaddrs(&ifa))
        return;
    const char *owner = fs_datapath_owner(ifa, addr);
    char netdev[64] = "";
    if (owner)
        snprintf(netdev, sizeof netdev, "%s", owner);
    freeifaddrs(ifa);
    if (!netdev[0])
        return;
    size_t used = 0;
    for (size_t i = 0; i < l->n; i++) {
        const char *dev = l->v[i].dev;
        if (l->v[i].type != UCT_DEVICE_TYPE_NET)
            continue;
        int keep = strcmp(dev, netdev) == 0;
        const char *colon = strchr(dev, ':');
        if (!keep && colon) { /* "rxe0:1": an RDMA port */
            char rdma[UCT_DEVICE_NAME_MAX], through[64];
            snprintf(rdma, sizeof rdma, "%.*s", (int)(colon - dev), dev);
            keep = fs_datapath_rdma_netdev("/sys", rdma, through, sizeof through) != 0 ||
                   strcmp(through, netdev) == 0;
        }
        char token[UCT_DEVICE_NAME_MAX + 2];
        snprintf(token, sizeof token, ",%s,", dev);
        char listed[sizeof(((struct ucx *)0)->net_devices) + 2];
        snprintf(listed, sizeof listed, ",%s,", out);
        if (!keep || strstr(listed, token))
            continue;
        int n = snprintf(out + used, len - used, "%s%s", used ? "," : "", dev);
        if (n < 0 || (size_t)n >= len - used) {
            out[used] = '\0';
            break;
        }
        used += (size_t)n;
    }
}

/* Decides UCX_TLS / UCX_NET_DEVICES and checks them, whichever place they come from. */
static int resolve_names(struct ucx *u, const char *device, struct fs_err *err)
{
    struct ucx_reslist l = {0};
    if (query_resources(&l, err))
        return -1;
    const char *env_tls = getenv("UCX_TLS"), *env_dev = getenv("UCX_NET_DEVICES");
    int rc = 0;
    if (u->o.tls[0]) {
        snprintf(u->tls, sizeof u->tls, "%s", u->o.tls);
        snprintf(u->tls_source, sizeof u->tls_source, "option");
        rc = check_list(&l, u->tls, 0, "--ucx-tls", err);
    } else if (env_tls && *env_tls) {
        snprintf(u->tls, sizeof u->tls, "%s", env_tls);
        snprintf(u->tls_source, sizeof u->tls_source, "environment");
        rc = check_list(&l, u->tls, 0, "UCX_TLS (from the environment)", err);
    } else {
        snprintf(u->tls, sizeof u->tls, "all");
        snprintf(u->tls_source, sizeof u->tls_source, "default");
    }
    if (rc == 0 && device[0]) {
        snprintf(u->net_devices, sizeof u->net_devices, "%s", device);
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "option");
        rc = check_list(&l, u->net_devices, 1, "--device", err);
    } else if (rc == 0 && env_dev && *env_dev) {
        snprintf(u->net_devices, sizeof u->net_devices, "%s", env_dev);
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "environment");
        rc = check_list(&l, u->net_devices, 1, "UCX_NET_DEVICES (from the environment)", err);
    } else if (rc == 0 && u->datapath_addr[0] &&
               (devices_on_datapath(&l, u->datapath_addr, u->net_devices, sizeof u->net_devices),
                u->net_devices[0])) {
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "data path");
    } else if (rc == 0) {
        snprintf(u->net_devices, sizeof u->net_devices, "all");
        snprintf(u->net_devices_source, sizeof u->net_devices_source, "default");
    }
    free(l.v);
    return rc;
}

/* Before any connection: a misspelt transport or device is a usage error even with no peer. */
static int ucx_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    struct ucx *u = calloc(1, sizeof *u);
    if (!u)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    u->o = *(const struct ucx_opts *)opts;
    int rc = resolve_names(u, spec->device, err);
    free(u);
    return rc;
}

/* ---- completion callbacks ----------------------------------------------------------------- */

static void note_failure(struct ucx *u, ucs_status_t st, const char *what)
{
    if (u->failure == UCS_OK) {
        u->failure = st;
        u->failure_what = what;
    }
}

static void send_done(void *req, ucs_status_t st, void *user)
{
    struct ucx *u = user;
    if (st != UCS_OK)
        note_failure(u, st, "send/put/get/atomic completion");
    u->tx_completed++;
    ucp_request_free(req);
}

static void tag_recv_done(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    struct ucx *u = user;
    (void)info;
    unsigned slot = *(unsigned *)req;
    u->rx_reqs[slot] = NULL;
    u->rx_free[u->rx_nfree++] = slot;
    u->rx_posted--;
    if (st == UCS_OK)
        u->rx_completed++;
    else if (st != UCS_ERR_CANCELED)
        note_failure(u, st, "tagged receive");
    ucp_request_free(req);
}

static void am_data_done(void *req, ucs_status_t st, size_t len, void *user)
{
    struct ucx *u = user;
    (void)len;
    if (st == UCS_OK)
        u->rx_completed++;
    else
        note_failure(u, st, "active-message rendezvous receive");
    ucp_request_free(req);
}

/* Eager data is complete when the handler runs; rendezvous data is fetched into our buffer
 * and counts when that receive completes. */
static ucs_status_t am_handler(void *arg, const void *header, size_t header_len, void *data,
                               size_t len, const ucp_am_recv_param_t *param)
{
    struct ucx *u = arg;
    (void)header;
    (void)header_len;
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        u->rx_completed++;
        return UCS_OK;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = am_data_done,
                             .user_data = u};
    ucs_status_ptr_t sp = ucp_am_recv_data_nbx(u->worker, data, u->rbuf, len, &p);
    if (sp == NULL)
        u->rx_completed++;
    else if (UCS_PTR_IS_ERR(sp))
        note_failure(u, UCS_PTR_STATUS(sp), "active-message rendezvous receive");
    return UCS_INPROGRESS;
}

/* ---- setup -------------------------------------------------------------------------------- */

static uint64_t features_for(enum fs_op op)
{
    switch (op) {
    case FS_OP_TAG:
        return UCP_FEATURE_TAG;
    case FS_OP_AM:
        return UCP_FEATURE_AM;
    case FS_OP_WRITE:
    case FS_OP_READ:
        return UCP_FEATURE_RMA;
    default:
        return UCP_FEATURE_AMO64;
    }
}

static int needs_rkey(enum fs_op op)
{
    return op == FS_OP_WRITE || op == FS_OP_READ || op == FS_OP_FADD || op == FS_OP_CSWAP;
}

/* Registers *buf, or with --ucx-mem ucx lets UCX allocate it (then *buf is UCX's and must not
 * be freed by us): memory UCX allocates can be mapped by its shared-memory transports, so put
 * and get copy directly instead of being emulated with active messages. */
static int map_buffer(struct ucx *u, uint8_t **buf, ucp_mem_h *memh, struct fs_err *err)
{
    const int alloc = strcmp(u->o.mem, "ucx") == 0;
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                             UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                             UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                               .address = alloc ? NULL : *buf,
                               .length = u->bufsize,
                               .flags = alloc ? UCP_MEM_MAP_ALLOCATE : 0};
    ucs_status_t st = ucp_mem_map(u->context, &mp, memh);
    if (st != UCS_OK)
        return fs_fail(err, FS_EXIT_MEASURE,
                       "ucx: cannot %s %llu bytes (ucp_mem_map): %s; if this is ENOMEM, "
                       "raise the locked-memory limit (ulimit -l)",
                       alloc ? "allocate" : "register", (unsigned long long)u->bufsize,
                       ucs_status_string(st));
    if (alloc) {
        ucp_mem_attr_t attr = {.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS};
        if ((st = ucp_mem_query(*memh, &attr)) != UCS_OK)
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_mem_query", st);
        free(*buf);
        *buf = attr.address;
        u->ucx_owns_buffers = 1;
    }
    return 0;
}

static int ucx_setup(const struct fs_be_ctx *ctx, void **out, struct fs_err *err)
{
    struct ucx *u = calloc(1, sizeof *u);
    if (!u)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    *out = u;
    u->o = *(const struct ucx_opts *)ctx->opts;
    u->is_server = ctx->is_server;
    u->efd = -1;
    u->failure = UCS_OK;
    for (unsigned i = 0; i < UCX_MAX_RX_POSTED; i++)
        u->rx_free[i] = UCX_MAX_RX_POSTED - 1 - i;
    u->rx_nfree = UCX_MAX_RX_POSTED;
    int op = fs_op_by_name(ctx->spec->op), pat = fs_pattern_by_name(ctx->spec->pattern);
    u->op = op < 0 ? FS_OP_TAG : (enum fs_op)op;
    u->pat = pat < 0 ? FS_PAT_LAT : (enum fs_pattern)pat;
    u->tx_depth = ctx->spec->tx_depth;
    u->timeout_s = ctx->spec->timeout;
    u->mem_polling = u->op == FS_OP_WRITE && u->pat == FS_PAT_LAT;
    u->block = ctx->block && !u->mem_polling;
    if (ctx->is_server && ctx->data_local_addr)
        snprintf(u->datapath_addr, sizeof u->datapath_addr, "%s", ctx->data_local_addr);
    if (resolve_names(u, ctx->spec->device, err))
        return -1;

    ucp_config_t *cfg = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        return ucs_fail(err, FS_EXIT_USAGE, "reading the UCX configuration (UCX_* variables)", st);
    if (strcmp(u->tls_source, "option") == 0 && (st = ucp_config_modify(cfg, "TLS", u->tls)) != UCS_OK) {
        ucp_config_release(cfg);
        return fs_fail(err, FS_EXIT_USAGE, "--ucx-tls %s: UCX refused it: %s", u->tls,
                       ucs_status_string(st));
    }
    if ((strcmp(u->net_devices_source, "option") == 0 ||
         strcmp(u->net_devices_source, "data path") == 0) &&
        (st = ucp_config_modify(cfg, "NET_DEVICES", u->net_devices)) != UCS_OK) {
        ucp_config_release(cfg);
        return fs_fail(err, FS_EXIT_USAGE, "--device %s: UCX refused it: %s", u->net_devices,
                       ucs_status_string(st));
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                                         UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                                         UCP_PARAM_FIELD_REQUEST_SIZE,
                           .features = features_for(u->op) | (u->block ? UCP_FEATURE_WAKEUP : 0),
                           .request_size = sizeof(unsigned),
                           .mt_workers_shared = 0,
                           .estimated_num_eps = 1};
    st = ucp_init(&params, cfg, &u->context);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ucx: ucp_init failed with UCX_TLS=%s UCX_NET_DEVICES=%s: %s",
                       u->tls, u->net_devices, ucs_status_string(st));
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((st = ucp_worker_create(u->context, &wp, &u->worker)) != UCS_OK)
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_create", st);
    if (u->block && (st = ucp_worker_get_efd(u->worker, &u->efd)) != UCS_OK)
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_get_efd (block mode)", st);
    if (u->op == FS_OP_AM) {
        ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                                                   UCP_AM_HANDLER_PARAM_FIELD_CB |
                                                   UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                     .id = UCX_AM_ID,
                                     .flags = UCP_AM_FLAG_WHOLE_MSG,
                                     .cb = am_handler,
                                     .arg = u};
        if ((st = ucp_worker_set_am_recv_handler(u->worker, &hp)) != UCS_OK)
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_set_am_recv_handler", st);
    }
    /* Page-aligned so 8-byte atomics on the first word are aligned and registration is clean. */
    u->bufsize = ctx->max_size > 4096 ? ctx->max_size : 4096;
    if (posix_memalign((void **)&u->sbuf, 4096, u->bufsize) ||
        posix_memalign((void **)&u->rbuf, 4096, u->bufsize))
        return fs_fail(err, FS_EXIT_MEASURE, "ucx: cannot allocate %llu-byte buffers",
                       (unsigned long long)u->bufsize);
    if (needs_rkey(u->op) &&
        (map_buffer(u, &u->sbuf, &u->smemh, err) || map_buffer(u, &u->rbuf, &u->rmemh, err)))
        return -1;
    memset(u->sbuf, 0xa5, u->bufsize);
    memset(u->rbuf, 0, u->bufsize);
    if (u->op == FS_OP_FADD || u->op == FS_OP_CSWAP) {
        u->amo_reply = calloc((size_t)u->tx_depth, sizeof *u->amo_reply);
        if (!u->amo_reply)
            return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    }
    return 0;
}

static int ucx_local_address(void *be, cJSON *obj, struct fs_err *err)
{
    struct ucx *u = be;
    ucp_address_t *addr = NULL;
    size_t len = 0;
    ucs_status_t st = ucp_worker_get_address(u->worker, &addr, &len);
    if (st != UCS_OK)
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_get_address", st);
    int rc = add_hex(obj, "worker", addr, len);
    ucp_worker_release_address(u->worker, addr);
    if (rc == 0 && u->rmemh) {
        void *rk = NULL;
        size_t rklen = 0;
        if ((st = ucp_rkey_pack(u->context, u->rmemh, &rk, &rklen)) != UCS_OK)
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_rkey_pack", st);
        rc = add_hex(obj, "rkey", rk, rklen);
        ucp_rkey_buffer_release(rk);
        uint64_t a = (uint64_t)(uintptr_t)u->rbuf;
        char h[24];
        snprintf(h, sizeof h, "%016llx", (unsigned long long)a);
        cJSON_AddStringToObject(obj, "addr", h);
    }
    return rc ? fs_fail(err, FS_EXIT_MEASURE, "out of memory") : 0;
}

static int ucx_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    struct ucx *u = be;
    (void)deadline_ms; /* address-based endpoints connect lazily; the warmup completes wireup */
    size_t alen = 0;
    void *addr = peer_hex(peer, "worker", &alen);
    if (!addr)
        return fs_fail(err, FS_EXIT_PEER, "ucx: the peer sent no UCX worker address");
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                          .address = addr};
    ucs_status_t st = ucp_ep_create(u->worker, &ep, &u->ep);
    free(addr);
    if (st != UCS_OK && strstr(u->tls, "rc_") && !strstr(u->tls, "ud"))
        /* UCX says "no auxiliary transport" in its log: rc cannot wire itself up by address. */
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ucx: no usable path to the peer with UCX_TLS=%s UCX_NET_DEVICES=%s: %s "
                       "(a connected RDMA transport sets its connections up over a datagram one, "
                       "which UCX_TLS leaves out: use --ucx-tls %s,ud_verbs:aux, as UCX's own "
                       "\"rc\" alias does; ucx_perftest fails the same way)",
                       u->tls, u->net_devices, ucs_status_string(st), u->tls);
    if (st != UCS_OK)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ucx: no usable path to the peer with UCX_TLS=%s UCX_NET_DEVICES=%s: %s "
                       "(UCX needs a transport for active messages on both sides: e.g. "
                       "cma alone has none; add self and posix/sysv or tcp)",
                       u->tls, u->net_devices, ucs_status_string(st));
    if (needs_rkey(u->op)) {
        size_t rklen = 0;
        void *rk = peer_hex(peer, "rkey", &rklen);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(peer, "addr");
        if (!rk || !cJSON_IsString(a)) {
            free(rk);
            return fs_fail(err, FS_EXIT_PEER, "ucx: the peer sent no memory key for op %s",
                           fs_ops[u->op].name);
        }
        u->peer_addr = strtoull(a->valuestring, NULL, 16);
        st = ucp_ep_rkey_unpack(u->ep, rk, &u->peer_rkey);
        free(rk);
        if (st != UCS_OK)
            return ucs_fail(err, FS_EXIT_PEER, "unpacking the peer's memory key", st);
    }
    return 0;
}

/* ---- data path ---------------------------------------------------------------------------- */

/* Tagged receives kept posted: one per message in flight, at least 2. */
static long rx_want(const struct ucx *u)
{
    long want = u->tx_depth < UCX_MAX_RX_POSTED ? u->tx_depth : UCX_MAX_RX_POSTED;
    return want < 2 ? 2 : want;
}

static int post_receives(struct ucx *u, struct fs_err *err)
{
    const long want = rx_want(u);
    while (u->rx_posted < want) {
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                 UCP_OP_ATTR_FIELD_USER_DATA,
                                 .cb.recv = tag_recv_done,
                                 .user_data = u};
        /* Every receive takes the whole buffer: a message of any size of the run fits, so
         * receives posted for one size stay valid for the next. */
        ucs_status_ptr_t sp = ucp_tag_recv_nbx(u->worker, u->rbuf, u->bufsize, UCX_TAG,
                                               (ucp_tag_t)-1, &p);
        if (UCS_PTR_IS_ERR(sp))
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_tag_recv_nbx", UCS_PTR_STATUS(sp));
        if (sp == NULL) {
            u->rx_completed++;
            continue;
        }
        unsigned slot = u->rx_free[--u->rx_nfree];
        *(unsigned *)sp = slot;
        u->rx_reqs[slot] = sp;
        u->rx_posted++;
    }
    return 0;
}

static int ucx_prepare(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct ucx *u = be;
    u->op = op;
    u->size = size;
    /* Built once, not on every post. */
    u->send_param = (ucp_request_param_t){.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                                          UCP_OP_ATTR_FIELD_USER_DATA,
                                          .cb.send = send_done,
                                          .user_data = u};
    switch (op) {
    case FS_OP_WRITE:
    case FS_OP_READ:
        u->send_param.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
        u->send_param.memh = u->smemh;
        break;
    case FS_OP_FADD:
    case FS_OP_CSWAP: /* each post sets its own reply slot */
        u->send_param.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        u->send_param.datatype = ucp_dt_make_contig(8);
        break;
    default:
        break;
    }
    if (size > u->bufsize)
        return fs_fail(err, FS_EXIT_MEASURE, "ucx: size %llu beyond the allocated buffer",
                       (unsigned long long)size);
    if (u->mem_polling) {
        /* The previous size's messages are all answered, so nothing is still landing here. */
        u->rbuf[size - 1] = 0;
        u->tx_seq = 0;
        u->rx_expect = 1;
    }
    if (op == FS_OP_TAG)
        return post_receives(u, err);
    return 0;
}

static uint8_t next_seq(uint8_t s) { return (uint8_t)(s % 255 + 1); }

static int ucx_post(void *be, enum fs_op op, uint64_t size, struct fs_err *err)
{
    struct ucx *u = be;
    if (u->tx_outstanding >= 65536)
        return 0;
    ucp_request_param_t *p = &u->send_param;
    ucs_status_ptr_t sp;
    const char *what;
    switch (op) {
    case FS_OP_TAG:
        what = "ucp_tag_send_nbx";
        sp = ucp_tag_send_nbx(u->ep, u->sbuf, size, UCX_TAG, p);
        break;
    case FS_OP_AM:
        what = "ucp_am_send_nbx";
        sp = ucp_am_send_nbx(u->ep, UCX_AM_ID, NULL, 0, u->sbuf, size, p);
        break;
    case FS_OP_WRITE:
        what = "ucp_put_nbx";
        if (u->mem_polling)
            u->sbuf[size - 1] = u->tx_seq = next_seq(u->tx_seq);
        sp = ucp_put_nbx(u->ep, u->sbuf, size, u->peer_addr, u->peer_rkey, p);
        break;
    case FS_OP_READ:
        what = "ucp_get_nbx";
        sp = ucp_get_nbx(u->ep, u->sbuf, size, u->peer_addr, u->peer_rkey, p);
        break;
    case FS_OP_FADD:
    case FS_OP_CSWAP: {
        what = "ucp_atomic_op_nbx";
        uint64_t *reply = &u->amo_reply[u->amo_slot++ % (uint64_t)u->tx_depth];
        static const uint64_t one = 1;
        /* cswap: compare with the value in the reply slot (0 here, so the first swap succeeds
         * and later ones fail: both cost the same round trip). */
        *reply = 0;
        p->reply_buffer = reply;
        sp = ucp_atomic_op_nbx(u->ep, op == FS_OP_FADD ? UCP_ATOMIC_OP_ADD : UCP_ATOMIC_OP_CSWAP,
                               &one, 1, u->peer_addr, u->peer_rkey, p);
        break;
    }
    default:
        return fs_fail(err, FS_EXIT_USAGE, "ucx: op %s is not supported", fs_ops[op].name);
    }
    if (UCS_PTR_IS_ERR(sp))
        return fs_fail(err, FS_EXIT_MEASURE, "ucx: %s (%llu bytes) failed: %s", what,
                       (unsigned long long)size, ucs_status_string(UCS_PTR_STATUS(sp)));
    if (sp == NULL)
        u->tx_completed++;
    else
        u->tx_outstanding++;
    /* The message is on its way: now is the time to post receives again. */
    if (op == FS_OP_TAG && u->rx_posted < rx_want(u) && post_receives(u, err))
        return -1;
    return 1;
}

static int report_failure(struct ucx *u, struct fs_err *err)
{
    int code = u->failure == UCS_ERR_CONNECTION_RESET || u->failure == UCS_ERR_ENDPOINT_TIMEOUT ||
                       u->failure == UCS_ERR_UNREACHABLE
                   ? FS_EXIT_PEER
                   : FS_EXIT_MEASURE;
    return fs_fail(err, code, "ucx: %s failed: %s", u->failure_what,
                   ucs_status_string(u->failure));
}

/* Inline test, out-of-line report: this runs on every polling turn. */
static inline int check_failure(struct ucx *u, struct fs_err *err)
{
    return u->failure == UCS_OK ? 0 : report_failure(u, err);
}

/* One pass: progress the worker and see memory arrivals. Returns what ucp_worker_progress did
 * (0 = nothing: the worker may be armed), or -1. */
static int progress_once(struct ucx *u, struct fs_err *err)
{
    unsigned did = ucp_worker_progress(u->worker);
    if (u->mem_polling && u->size) {
        volatile uint8_t *last = &u->rbuf[u->size - 1];
        if (*last == u->rx_expect) {
            u->rx_completed++;
            u->rx_expect = next_seq(u->rx_expect);
            did++;
        }
    }
    return check_failure(u, err) ? -1 : (int)did;
}

static int ucx_progress(void *be, int wait_ms, struct fs_events *ev, struct fs_err *err)
{
    struct ucx *u = be;
    int did = progress_once(u, err);
    if (did < 0)
        return -1;
    /* Block mode: UCX's rule is to arm the worker only after a progress pass that found
     * nothing. A pass that did something goes back to the core first, to be counted: draining
     * the worker here made a whole bibw phase one receive event (no bandwidth could be
     * timed). BUSY from the arm means events raced in: go round. */
    if (!did && !u->tx_completed && !u->rx_completed && wait_ms > 0 && u->block) {
        ucs_status_t st = ucp_worker_arm(u->worker);
        if (st == UCS_OK) {
            struct pollfd pfd = {.fd = u->efd, .events = POLLIN};
            poll(&pfd, 1, wait_ms);
        } else if (st != UCS_ERR_BUSY) {
            return ucs_fail(err, FS_EXIT_MEASURE, "ucp_worker_arm", st);
        }
        if (progress_once(u, err) < 0)
            return -1;
    }
    /* Receives are topped up on turns that completed nothing, or when half are used: after a
     * completion the core is about to time it or answer it, and a ucp_tag_recv_nbx there would
     * sit inside every round trip (ucx_perftest too posts its receive after the send). */
    if (u->op == FS_OP_TAG && (!u->rx_completed || u->rx_posted < rx_want(u) / 2) &&
        u->rx_posted < rx_want(u) && post_receives(u, err))
        return -1;
    ev->tx_done += u->tx_completed;
    ev->rx_done += u->rx_completed;
    u->tx_outstanding -= u->tx_completed < u->tx_outstanding ? u->tx_completed : u->tx_outstanding;
    u->tx_completed = u->rx_completed = 0;
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void flush_done(void *req, ucs_status_t st, void *user)
{
    struct ucx *u = user;
    if (st != UCS_OK)
        note_failure(u, st, "endpoint flush");
    u->flushing = 0;
    ucp_request_free(req);
}

/* Remote completion of every put/get/atomic before the core stops the clock: a completed put
 * only means the source buffer may be reused. */
static int ucx_flush(void *be, struct fs_err *err)
{
    struct ucx *u = be;
    if (!needs_rkey(u->op))
        return 0;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = flush_done,
                             .user_data = u};
    u->flushing = 1;
    ucs_status_ptr_t sp = ucp_ep_flush_nbx(u->ep, &p);
    if (UCS_PTR_IS_ERR(sp))
        return ucs_fail(err, FS_EXIT_MEASURE, "ucp_ep_flush_nbx", UCS_PTR_STATUS(sp));
    if (sp == NULL)
        u->flushing = 0;
    /* A deadline, not a measurement: the flush waits on the peer's progress. */
    double end = now_s() + u->timeout_s;
    unsigned turns = 0;
    while (u->flushing) {
        ucp_worker_progress(u->worker);
        if (check_failure(u, err))
            return -1;
        if (++turns % 4096 == 0 && now_s() > end)
            return fs_fail(err, FS_EXIT_PEER,
                           "ucx: flushing puts/gets to the peer did not finish within %.1f s "
                           "(peer gone or not progressing)",
                           u->timeout_s);
    }
    return 0;
}

/* ---- what UCX selected -------------------------------------------------------------------- */

/* From "<egr/short>", "<egr/bcopy>", "<egr/zcopy>", "<rndv>": which protocol a message of
 * `size` bytes takes, read from a ucp_ep_print_info threshold line such as
 *   tag_send: 0..<egr/short>..8185..<egr/bcopy>..8192..<rndv>..(inf)
 * Ranges are half-open: "A..<p>..B" covers [A, B). */
static int protocol_for(const char *line, uint64_t size, char *out, size_t len)
{
    const char *p = strchr(line, ':');
    if (!p)
        return -1;
    p++;
    uint64_t lo = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        char *end = NULL;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p)
            return -1;
        lo = v;
        p = end;
        if (strncmp(p, "..<", 3) != 0)
            return -1;
        p += 3;
        const char *close = strchr(p, '>');
        if (!close)
            return -1;
        char proto[64];
        snprintf(proto, sizeof proto, "%.*s", (int)(close - p), p);
        p = close + 1;
        if (strncmp(p, "..", 2) != 0)
            return -1;
        p += 2;
        uint64_t hi = UINT64_MAX;
        if (strncmp(p, "(inf)", 5) != 0)
            hi = strtoull(p, NULL, 10);
        if (size >= lo && size < hi) {
            snprintf(out, len, "%s", proto);
            return 0;
        }
        if (hi == UINT64_MAX)
            return -1;
    }
    return -1;
}

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
}

/* Turns ucp_ep_print_info's text into lanes [{tl, device, usage}] plus the threshold lines. */
static void parse_ep_info(const char *text, uint64_t size, enum fs_op op, cJSON *o)
{
    cJSON *lanes = cJSON_AddArrayToObject(o, "lanes");
    cJSON *tls = cJSON_CreateArray(), *devs = cJSON_CreateArray();
    cJSON *thr = cJSON_CreateObject();
    /* The threshold line that applies to our operation; put[0]/get[0] is the first RMA lane. */
    const char *want = op == FS_OP_TAG     ? "tag_send"
                       : op == FS_OP_AM    ? "am_send"
                       : op == FS_OP_WRITE ? "put[0]"
                       : op == FS_OP_READ  ? "get[0]"
                                           : NULL;
    char proto[64] = "";
    char line[512];
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), p);
        p += n + (nl ? 1 : 0);
        char *s = line;
        while (*s == '#' || *s == ' ')
            s++;
        trim(s);
        if (strncmp(s, "lane[", 5) == 0) {
            /* lane[0]:  2:self/memory.0 md[2]  -> md[2]/self/sysdev[255] am am_bw#0 */
            char *colon = strchr(s, ':');
            if (!colon)
                continue;
            char *rsc = colon + 1;
            while (*rsc == ' ')
                rsc++;
            char *c2 = strchr(rsc, ':');
            if (c2)
                rsc = c2 + 1;
            char tl[64] = "", dev[64] = "";
            char *slash = strchr(rsc, '/');
            if (!slash)
                continue;
            snprintf(tl, sizeof tl, "%.*s", (int)(slash - rsc), rsc);
            char *dend = slash + 1;
            while (*dend && *dend != ' ')
                dend++;
            snprintf(dev, sizeof dev, "%.*s", (int)(dend - slash - 1), slash + 1);
            char *dot = strrchr(dev, '.'); /* "memory.0": the path index, not the device */
            if (dot && isdigit((unsigned char)dot[1]))
                *dot = '\0';
            const char *usage = "";
            char *sysdev = strstr(s, "sysdev[");
            if (sysdev && (sysdev = strchr(sysdev, ']')))
                usage = sysdev + 1;
            while (*usage == ' ')
                usage++;
            /* UCX 1.13 names am/rma_bw/amo/tag lanes; a plain RMA lane prints no usage and shows
             * up in the put[i]/get[i] threshold lines instead. */
            if (!*usage)
                usage = "rma (see put[]/get[] thresholds)";
            cJSON *l = cJSON_CreateObject();
            cJSON_AddStringToObject(l, "transport", tl);
            cJSON_AddStringToObject(l, "device", dev);
            cJSON_AddStringToObject(l, "usage", usage);
            cJSON_AddItemToArray(lanes, l);
            int dup = 0;
            cJSON *x;
            cJSON_ArrayForEach(x, tls) dup |= strcmp(x->valuestring, tl) == 0;
            if (!dup)
                cJSON_AddItemToArray(tls, cJSON_CreateString(tl));
            dup = 0;
            cJSON_ArrayForEach(x, devs) dup |= strcmp(x->valuestring, dev) == 0;
            if (!dup)
                cJSON_AddItemToArray(devs, cJSON_CreateString(dev));
            continue;
        }
        char *colon = strchr(s, ':');
        if (colon && strstr(s, "..<")) {
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)(colon - s), s);
            trim(key);
            cJSON_AddStringToObject(thr, key, colon + 1 + strspn(colon + 1, " "));
            if (want && strcmp(key, want) == 0)
                protocol_for(s, size, proto, sizeof proto);
        } else if (colon && strncmp(s, "rma_bw", 6) == 0) {
            cJSON_AddStringToObject(thr, "rma_bw", colon + 1 + strspn(colon + 1, " "));
        }
    }
    cJSON_AddItemToObject(o, "transports", tls);
    cJSON_AddItemToObject(o, "devices", devs);
    cJSON_AddItemToObject(o, "thresholds", thr);
    if (!size) {
        /* Described at connect time, before any size ran: no size, no protocol. */
        cJSON_AddNullToObject(o, "protocol");
        cJSON_AddStringToObject(o, "protocol_source", "no message size yet (described at connect)");
    } else if (proto[0]) {
        cJSON_AddStringToObject(o, "protocol", proto);
        cJSON_AddStringToObject(o, "protocol_source", "ucp_ep_print_info thresholds for this size");
    } else {
        cJSON_AddNullToObject(o, "protocol");
        cJSON_AddStringToObject(o, "protocol_source",
                                "not printed by this UCX for this operation");
    }
}

/* Lanes of any UCP endpoint (also one that Open MPI's pml ucx created): used by the mpi backend
 * to say which UCX transports carried MPI's bytes. */
void fs_ucx_describe_ep(void *ep, uint64_t size, cJSON *o);
void fs_ucx_describe_ep(void *ep, uint64_t size, cJSON *o)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    ucp_ep_print_info((ucp_ep_h)ep, f);
    fclose(f);
    parse_ep_info(text, size, FS_OP_TAG, o);
    free(text);
}

static void ucx_describe(void *be, cJSON *o)
{
    struct ucx *u = be;
    cJSON_AddStringToObject(o, "kind", "ucx");
    if (needs_rkey(u->op))
        cJSON_AddStringToObject(o, "rma_memory",
                                u->ucx_owns_buffers ? "allocated by UCX (ucp_mem_map ALLOCATE)"
                                                    : "user memory, registered with ucp_mem_map");
    cJSON_AddStringToObject(o, "ucx_version", ucp_get_version_string());
    cJSON_AddStringToObject(o, "api", u->op == FS_OP_WRITE ? "put (ucp_put_nbx)"
                                      : u->op == FS_OP_READ ? "get (ucp_get_nbx)"
                                      : u->op == FS_OP_TAG  ? "tag (ucp_tag_send_nbx)"
                                      : u->op == FS_OP_AM   ? "am (ucp_am_send_nbx)"
                                                            : "atomic (ucp_atomic_op_nbx)");
    cJSON *req = cJSON_AddObjectToObject(o, "requested");
    cJSON_AddStringToObject(req, "UCX_TLS", u->tls);
    cJSON_AddStringToObject(req, "UCX_TLS_source", u->tls_source);
    cJSON_AddStringToObject(req, "UCX_NET_DEVICES", u->net_devices);
    cJSON_AddStringToObject(req, "UCX_NET_DEVICES_source", u->net_devices_source);
    cJSON_AddStringToObject(o, "progress",
                            u->block       ? "block (ucp_worker_arm + event fd)"
                            : u->mem_polling ? "busy (write latency polls memory, which cannot block)"
                                           : "busy (ucp_worker_progress)");
    if (!u->ep) {
        cJSON_AddNullToObject(o, "lanes");
        return;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    ucp_ep_print_info(u->ep, f);
    fclose(f);
    parse_ep_info(text, u->size, u->op, o);
    free(text);
}

static void ucx_teardown(void *be)
{
    struct ucx *u = be;
    if (!u)
        return;
    if (u->peer_rkey)
        ucp_rkey_destroy(u->peer_rkey);
    if (u->ep) {
        /* Force close: the peer may already be gone, and a graceful close would wait for it. */
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t sp = ucp_ep_close_nbx(u->ep, &p);
        double end = now_s() + 1.0;
        if (sp && !UCS_PTR_IS_ERR(sp)) {
            while (ucp_request_check_status(sp) == UCS_INPROGRESS && now_s() < end)
                ucp_worker_progress(u->worker);
            ucp_request_free(sp);
        }
    }
    if (u->worker && u->rx_posted > 0) {
        /* Cancelled receives complete (with UCS_ERR_CANCELED) in the next progress calls. */
        for (unsigned i = 0; i < UCX_MAX_RX_POSTED; i++)
            if (u->rx_reqs[i])
                ucp_request_cancel(u->worker, u->rx_reqs[i]);
        for (int i = 0; i < 1000 && u->rx_posted > 0; i++)
            ucp_worker_progress(u->worker);
    }
    if (u->smemh)
        ucp_mem_unmap(u->context, u->smemh);
    if (u->rmemh)
        ucp_mem_unmap(u->context, u->rmemh);
    if (u->worker)
        ucp_worker_destroy(u->worker);
    if (u->context)
        ucp_cleanup(u->context);
    if (!u->ucx_owns_buffers) {
        free(u->sbuf);
        free(u->rbuf);
    }
    free(u->amo_reply);
    free(u);
}

const struct fs_backend_ops fs_backend_ucx = {
    .abi = FS_BACKEND_ABI,
    .name = "ucx",
    .summary = "UCX (UCP): tag, active message, put, get, atomics; reports the selected lanes",
    .ops = FS_BIT(FS_OP_TAG) | FS_BIT(FS_OP_AM) | FS_BIT(FS_OP_WRITE) | FS_BIT(FS_OP_READ) |
           FS_BIT(FS_OP_FADD) | FS_BIT(FS_OP_CSWAP),
    .patterns = FS_BIT(FS_PAT_LAT) | FS_BIT(FS_PAT_BW) | FS_BIT(FS_PAT_BIBW),
    .options = ucx_options,
    .options_size = sizeof(struct ucx_opts),
    .device_list = 1,
    .check = ucx_check,
    .setup = ucx_setup,
    .local_address = ucx_local_address,
    .connect = ucx_connect,
    .prepare = ucx_prepare,
    .post = ucx_post,
    .progress = ucx_progress,
    .flush = ucx_flush,
    .describe = ucx_describe,
    .teardown = ucx_teardown,
};

/* ---- inventory (--inventory-json) ----------------------------------------------------------- */

static const char *dev_type_name(uct_device_type_t t)
{
    switch (t) {
    case UCT_DEVICE_TYPE_NET: return "net";
    case UCT_DEVICE_TYPE_SHM: return "shm";
    case UCT_DEVICE_TYPE_ACC: return "acc";
    case UCT_DEVICE_TYPE_SELF: return "self";
    default: return "other";
    }
}

static void add_unique(cJSON *arr, const char *s)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (strcmp(x->valuestring, s) == 0) return;
    cJSON_AddItemToArray(arr, cJSON_CreateString(s));
}

/* The resources UCX offers here, from the same walk that checks --ucx-tls and --device: what
 * "transports", "net_devices" and the available aliases list is exactly what those accept. */
void fs_inventory_ucx(cJSON *part)
{
    cJSON_AddStringToObject(part, "library", "UCX");
    cJSON_AddStringToObject(part, "version", ucp_get_version_string());
    struct ucx_reslist l = {0};
    struct fs_err err = {0};
    if (query_resources(&l, &err)) {
        cJSON_AddStringToObject(part, "status", "error");
        cJSON_AddStringToObject(part, "error", err.msg);
        free(l.v);
        return;
    }
    cJSON_AddStringToObject(part, "status", "ok");
    cJSON *comps = cJSON_AddArrayToObject(part, "components");
    uct_component_h *cl = NULL;
    unsigned nc = 0;
    if (uct_query_components(&cl, &nc) == UCS_OK) {
        for (unsigned c = 0; c < nc; c++) {
            uct_component_attr_t ca = {.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME |
                                                     UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT};
            if (uct_component_query(cl[c], &ca) != UCS_OK)
                continue;
            cJSON *co = cJSON_CreateObject();
            cJSON_AddStringToObject(co, "name", ca.name);
            cJSON *mds = cJSON_AddArrayToObject(co, "memory_domains");
            ca.md_resources = ca.md_resource_count
                                  ? calloc(ca.md_resource_count, sizeof *ca.md_resources)
                                  : NULL;
            ca.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
            if (ca.md_resources && uct_component_query(cl[c], &ca) == UCS_OK)
                for (unsigned m = 0; m < ca.md_resource_count; m++)
                    cJSON_AddItemToArray(mds, cJSON_CreateString(ca.md_resources[m].md_name));
            free(ca.md_resources);
            cJSON_AddItemToArray(comps, co);
        }
        uct_release_component_list(cl);
    }
    cJSON *res = cJSON_AddArrayToObject(part, "resources");
    cJSON *tls = cJSON_AddArrayToObject(part, "transports");
    cJSON *nets = cJSON_AddArrayToObject(part, "net_devices");
    cJSON *mds = cJSON_AddArrayToObject(part, "memory_domains");
    for (size_t i = 0; i < l.n; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "transport", l.v[i].tl);
        cJSON_AddStringToObject(r, "device", l.v[i].dev);
        cJSON_AddStringToObject(r, "device_type", dev_type_name(l.v[i].type));
        cJSON_AddStringToObject(r, "memory_domain", l.v[i].md);
        cJSON_AddItemToArray(res, r);
        add_unique(tls, l.v[i].tl);
        add_unique(mds, l.v[i].md);
        if (l.v[i].type == UCT_DEVICE_TYPE_NET)
            add_unique(nets, l.v[i].dev);
    }
    cJSON *al = cJSON_AddArrayToObject(part, "aliases");
    for (size_t i = 0; i < sizeof ucx_aliases / sizeof ucx_aliases[0]; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "name", ucx_aliases[i].alias);
        cJSON *mem = cJSON_AddArrayToObject(a, "transports");
        for (int k = 0; ucx_aliases[i].members[k]; k++)
            cJSON_AddItemToArray(mem, cJSON_CreateString(ucx_aliases[i].members[k]));
        cJSON_AddBoolToObject(a, "available", tl_token_ok(&l, ucx_aliases[i].alias));
        cJSON_AddItemToArray(al, a);
    }
    cJSON_AddStringToObject(part, "aliases_source",
                            "UCX 1.13 ucp_context.c ucp_tl_aliases (static in UCX, not in its "
                            "API); fabscope's copy: engine/src/backends/ucx.c ucx_aliases");
    /* What --ucx-tls accepts: "all", every transport above, every available alias (and
     * "^name", "\\name", "name:aux" forms of those). --device accepts net_devices and "all". */
    cJSON *acc = cJSON_AddArrayToObject(part, "tls_names");
    add_unique(acc, "all");
    for (size_t i = 0; i < l.n; i++)
        add_unique(acc, l.v[i].tl);
    for (size_t i = 0; i < sizeof ucx_aliases / sizeof ucx_aliases[0]; i++)
        if (tl_token_ok(&l, ucx_aliases[i].alias))
            add_unique(acc, ucx_aliases[i].alias);
    free(l.v);
}
