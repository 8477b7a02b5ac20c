/* libfabric backend: msg (connected) and rdm (reliable datagram) endpoints; send/recv, RMA write
 * and read, and 64-bit fetch-add / compare-swap where the provider has them.
 *
 * The provider, domain and endpoint type the user names are checked against what fi_getinfo
 * reports on this host: an unknown name is a usage error listing what exists, and a capability
 * the provider lacks is "unsupported by provider X" (exit 6). Nothing is substituted. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/backend.h"
#include "../core/clock.h"
#include "../core/ctl.h"
#include "../core/datapath.h"
#include "../core/inventory.h"

/* libfabric is opened when this backend is first used, not linked into the engine: Debian's
 * libfabric links its PSM provider's libinfinipath, whose load-time constructor spends 0.1-0.2 s
 * calibrating a clock in every process that loads it, TCP runs and --help included (measured
 * here: `fi_info --version` 0.205 s, `ucx_info -v` 0.004 s). The backend calls seven libfabric
 * functions; everything else in the API is an inline call through an object's operation table. */
static struct {
    void *handle;
    __typeof__(fi_getinfo) *getinfo;
    __typeof__(fi_freeinfo) *freeinfo;
    __typeof__(fi_dupinfo) *dupinfo;
    __typeof__(fi_fabric) *fabric;
    __typeof__(fi_strerror) *strerror;
    __typeof__(fi_tostr) *tostr;
    __typeof__(fi_version) *version;
} lf;
#define fi_getinfo (*lf.getinfo)
#define fi_freeinfo (*lf.freeinfo)
#define fi_dupinfo (*lf.dupinfo)
#define fi_fabric (*lf.fabric)
#define fi_strerror (*lf.strerror)
#define fi_tostr (*lf.tostr)
#define fi_version (*lf.version)

/* Whether this process set FI_SOCKETS_PE_WAITTIME itself (lf_open), for the record. */
static int pe_waittime_set;

static int lf_open(struct fs_err *err)
{
    if (lf.handle)
        return 0;
    /* The sockets provider's progress thread waits FI_SOCKETS_PE_WAITTIME (10 ms by default)
     * between passes: every ping-pong took 10 ms and a 5,000-iteration row outlived its deadline.
     * libfabric reads the variable once, when its providers are initialised (the first
     * fi_getinfo, possibly a device check long before the provider is known), so it is set here,
     * before libfabric is loaded, unless the user set it; it changes nothing but that provider,
     * and the record says which value ran and who set it (describe). */
    if (!getenv("FI_SOCKETS_PE_WAITTIME") && setenv("FI_SOCKETS_PE_WAITTIME", "0", 0) == 0)
        pe_waittime_set = 1;
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ofi: libfabric cannot be loaded (%s): install libfabric1", dlerror());
    /* Through a union: ISO C has no conversion from void * to a function pointer. */
#define LF_SYM(field, name)                                                                    \
    do {                                                                                       \
        union {                                                                                \
            void *p;                                                                           \
            __typeof__(lf.field) f;                                                            \
        } u = {dlsym(h, name)};                                                                \
        if (!u.p) {                                                                            \
            dlclose(h);                                                                        \
            return fs_fail(err, FS_EXIT_UNSUPPORTED, "ofi: libfabric.so.1 lacks %s", name);    \
        }                                                                                      \
        lf.field = u.f;                                                                        \
    } while (0)
    LF_SYM(getinfo, "fi_getinfo");
    LF_SYM(freeinfo, "fi_freeinfo");
    LF_SYM(dupinfo, "fi_dupinfo");
    LF_SYM(fabric, "fi_fabric");
    LF_SYM(strerror, "fi_strerror");
    LF_SYM(tostr, "fi_tostr");
    LF_SYM(version, "fi_version");
#undef LF_SYM
    lf.handle = h;
    return 0;
}

#define OFI_API FI_VERSION(1, 17)

static const char *const ep_values[] = {"rdm", "msg", NULL};

struct ofi_opts {
    char provider[64];
    char domain[64];
    char ep[8];
    long inject;
};

#define O(f) offsetof(struct ofi_opts, f)
#define S(f) sizeof(((struct ofi_opts *)0)->f)
static const struct fs_option ofi_options[] = {
    {"provider", FS_OPT_STR, O(provider), S(provider), 0, 0, NULL, NULL,
     "libfabric provider (tcp, shm, udp, sockets, net, verbs, or a layered name such as "
     "tcp;ofi_rxm); checked against fi_getinfo; empty = the first provider that can do the op",
     0},
    {"domain", FS_OPT_STR, O(domain), S(domain), 0, 0, NULL, NULL,
     "libfabric domain on this host (e.g. lo, eth0, mlx5_0); --device means the same; empty = "
     "the domain of this host's address on the network of the client's --device (server), else "
     "of the control connection's address",
     FS_OPTF_LOCAL},
    {"ofi-ep", FS_OPT_ENUM, O(ep), S(ep), 0, 0, "rdm", ep_values,
     "endpoint type: rdm (reliable datagram) or msg (connected)", 0},
    {"ofi-inject", FS_OPT_INT, O(inject), S(inject), -1, 1 << 20, "-1", NULL,
     "sends and writes of up to N bytes go out with fi_inject / fi_inject_write (the provider "
     "copies them at once and reports no completion, as fi_pingpong does); -1 = auto: the "
     "provider's inject_size for lat with send/write, 0 otherwise. More than the provider's "
     "inject_size is an error",
     0},
    {0},
};
#undef O
#undef S

#define OFI_MAX_RX 512

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
    long nrx, rx_posted;
    long *rx_free; /* receive slots waiting to be posted (again) */
    long rx_nfree;
    uint64_t inject_max;   /* sends/writes up to this size use fi_inject*; 0 = never */
    uint64_t tx_immediate; /* injected operations since the last progress: complete at once */
    int delivery_complete; /* writes complete only once the data is visible at the target */
    uint8_t tx_seq, rx_expect;
};

/* ---- helpers ------------------------------------------------------------------------------ */

static int fi_failc(struct fs_err *err, int code, const char *what, long rc)
{
    return fs_fail(err, code, "ofi: %s: %s (%ld)", what, fi_strerror((int)-rc), rc);
}

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

static void *hex_decode(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len % 2)
        return NULL;
    uint8_t *b = malloc(len / 2 + 1);
    for (size_t i = 0; b && i < len / 2; i++) {
        char pair[3] = {s[2 * i], s[2 * i + 1], 0};
        if (!isxdigit((unsigned char)pair[0]) || !isxdigit((unsigned char)pair[1])) {
            free(b);
            return NULL;
        }
        b[i] = (uint8_t)strtoul(pair, NULL, 16);
    }
    *n = len / 2;
    return b;
}

static const char *ep_name(enum fi_ep_type t)
{
    return t == FI_EP_MSG ? "msg" : t == FI_EP_RDM ? "rdm" : t == FI_EP_DGRAM ? "dgram" : "?";
}

/* "tcp" matches "tcp" and the layered "tcp;ofi_rxm": the core provider is the first component,
 * and the result names the full stack, so nothing is hidden. */
static int prov_matches(const char *want, const char *have)
{
    if (!want[0] || strcmp(want, have) == 0)
        return 1;
    size_t n = strlen(want);
    return strchr(want, ';') == NULL && strncmp(have, want, n) == 0 && have[n] == ';';
}

static void append_unique(char *buf, size_t len, const char *item)
{
    /* comma-separated set; items are short names */
    char probe[160];
    snprintf(probe, sizeof probe, "%s", item);
    const char *p = buf;
    size_t il = strlen(probe);
    while ((p = strstr(p, probe))) {
        if ((p == buf || p[-2] == ',') && (p[il] == ',' || p[il] == '\0'))
            return;
        p += il;
    }
    size_t used = strlen(buf);
    snprintf(buf + used, len - used, "%s%s", used ? ", " : "", probe);
}

static const char *domain_wanted(const struct ofi_opts *o, const char *device, struct fs_err *err)
{
    if (o->domain[0] && device[0] && strcmp(o->domain, device) != 0) {
        fs_fail(err, FS_EXIT_USAGE,
                "--domain %s and --device %s disagree: for the ofi backend both name the "
                "libfabric domain; give one",
                o->domain, device);
        return NULL;
    }
    return o->domain[0] ? o->domain : device;
}

/* FI_PROVIDER in the environment filters the providers libfabric loads: a message about a
 * provider that is missing or cannot do something names it, as UCX_TLS is named by the ucx
 * backend. Returns "" when it is not set. */
static const char *fi_provider_note(char *buf, size_t len)
{
    const char *env = getenv("FI_PROVIDER");
    char sv[FS_SHOWN_LEN];
    buf[0] = '\0'; /* callers print buf itself */
    if (!env || !env[0])
        return buf;
    snprintf(buf, len,
             " (FI_PROVIDER=%s in the environment limits libfabric to the providers it names; "
             "unset FI_PROVIDER to use the others)",
             fs_shown(env, sv, sizeof sv));
    return buf;
}

/* FI_PROVIDER that leaves libfabric no provider at all (a typo, or a provider not built here). */
static int check_fi_provider_env(struct fs_err *err)
{
    const char *env = getenv("FI_PROVIDER");
    if (!env || !env[0])
        return 0;
    struct fi_info *all = NULL;
    int rc = fi_getinfo(OFI_API, NULL, NULL, 0, NULL, &all);
    if (rc == 0 && all) {
        fi_freeinfo(all);
        return 0;
    }
    if (rc && rc != -FI_ENODATA)
        return fi_failc(err, FS_EXIT_MEASURE, "fi_getinfo (listing providers)", rc);
    char sv[FS_SHOWN_LEN];
    return fs_fail(err, FS_EXIT_USAGE,
                   "FI_PROVIDER=%s (from the environment): libfabric has no provider of that name "
                   "on this host, so it offers none at all. Unset FI_PROVIDER (and name the "
                   "provider with --provider), or set it to one that `env -u FI_PROVIDER fi_info "
                   "-l` lists",
                   fs_shown(env, sv, sizeof sv));
}

/* Names only: provider and domain exist on this host (any endpoint type, any caps). */
static int check_names(const struct ofi_opts *o, const char *domain, struct fs_err *err)
{
    if (!o->provider[0] && !domain[0])
        return 0;
    struct fi_info *all = NULL;
    int rc = fi_getinfo(OFI_API, NULL, NULL, 0, NULL, &all);
    if (rc)
        return fi_failc(err, FS_EXIT_MEASURE, "fi_getinfo (listing providers)", rc);
    char provs[1024] = "", doms[1024] = "";
    int prov_found = 0, dom_found = 0;
    for (struct fi_info *i = all; i; i = i->next) {
        const char *pn = i->fabric_attr->prov_name;
        append_unique(provs, sizeof provs, pn);
        if (!prov_matches(o->provider, pn))
            continue;
        prov_found = 1;
        append_unique(doms, sizeof doms, i->domain_attr->name);
        if (!domain[0] || strcmp(domain, i->domain_attr->name) == 0)
            dom_found = 1;
    }
    fi_freeinfo(all);
    char note[FS_SHOWN_LEN + 160];
    if (!prov_found)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--provider %s: libfabric has no such provider on this host; providers "
                       "here: %s%s (`fabscope devices` lists them; `fi_info -l` also names "
                       "utility providers such as ofi_rxm that only run layered under one of "
                       "these)",
                       o->provider, provs, fi_provider_note(note, sizeof note));
    if (!dom_found)
        return fs_fail(err, FS_EXIT_USAGE,
                       "--domain %s: provider %s has no such domain on this host; its domains: "
                       "%s (`fi_info%s%s` lists them)",
                       domain, o->provider[0] ? o->provider : "(any)", doms,
                       o->provider[0] ? " -p " : "", o->provider);
    return 0;
}

static int ofi_check(const struct fs_spec *spec, const void *opts, struct fs_err *err)
{
    if (lf_open(err) || check_fi_provider_env(err))
        return -1;
    const struct ofi_opts *o = opts;
    const char *domain = domain_wanted(o, spec->device, err);
    if (!domain || check_names(o, domain, err))
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

/* ---- setup -------------------------------------------------------------------------------- */

static uint64_t caps_for(enum fs_op op)
{
    switch (op) {
    case FS_OP_SEND:
        return FI_MSG;
    case FS_OP_WRITE:
    case FS_OP_READ:
        return FI_RMA;
    default:
        return FI_ATOMIC;
    }
}

/* A write's default completion may only mean "left this host" (transmit-complete); a bandwidth
 * timed on completions must mean "visible at the target", as an RDMA RC ack does. Not in lat:
 * there the target's answer ends each sample, and an extra ack per write would be measured. */
static uint64_t tx_op_flags(const struct ofi *f)
{
    return f->op == FS_OP_WRITE && f->pat != FS_PAT_LAT ? FI_DELIVERY_COMPLETE : 0;
}

static struct fi_info *make_hints(const struct ofi *f, const char *domain)
{
    struct fi_info *h = fi_dupinfo(NULL); /* fi_allocinfo, which is an inline call of it */
    if (!h)
        return NULL;
    h->ep_attr->type = f->ep_type;
    /* FI_MSG always: the msg endpoint's connection and every provider's basics need it. */
    h->caps = caps_for(f->op) | FI_MSG;
    h->mode = FI_CONTEXT | FI_CONTEXT2;
    h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    h->domain_attr->threading = FI_THREAD_DOMAIN;
    h->addr_format = FI_FORMAT_UNSPEC;
    h->tx_attr->op_flags = tx_op_flags(f);
    if (f->o.provider[0] && strchr(f->o.provider, ';'))
        h->fabric_attr->prov_name = strdup(f->o.provider);
    if (domain[0])
        h->domain_attr->name = strdup(domain);
    return h;
}

static int sockaddr_format(uint32_t fmt)
{
    return fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6 || fmt == FI_SOCKADDR;
}

/* First result that is the asked provider (core name or exact stack) on the asked domain. The
 * domain hint alone is not enough: a utility provider (tcp;ofi_rxm, 1.17) answered a hint of
 * "fabric0" with its mgmt0 domain, and the run went over the management network. */
static struct fi_info *pick(struct fi_info *list, const char *prov, const char *domain)
{
    for (struct fi_info *i = list; i; i = i->next)
        if (prov_matches(prov, i->fabric_attr->prov_name) &&
            (!domain[0] || strcmp(domain, i->domain_attr->name) == 0))
            return i;
    return NULL;
}

/* Says exactly what the provider lacks: endpoint type, or the capability for the op. */
static int explain_unsupported(struct ofi *f, const char *domain, struct fs_err *err)
{
    struct fi_info *all = NULL;
    char types[128] = "", provs[512] = "";
    int prov_has_type = 0;
    if (fi_getinfo(OFI_API, NULL, NULL, 0, NULL, &all) == 0) {
        for (struct fi_info *i = all; i; i = i->next) {
            if (domain[0] && strcmp(domain, i->domain_attr->name) != 0)
                continue;
            if (prov_matches(f->o.provider, i->fabric_attr->prov_name)) {
                append_unique(types, sizeof types, ep_name(i->ep_attr->type));
                prov_has_type |= i->ep_attr->type == f->ep_type;
            }
            if (i->ep_attr->type == f->ep_type && (i->caps & caps_for(f->op)) == caps_for(f->op))
                append_unique(provs, sizeof provs, i->fabric_attr->prov_name);
        }
        fi_freeinfo(all);
    }
    const char *p = f->o.provider[0] ? f->o.provider : "(any)";
    char note[FS_SHOWN_LEN + 160];
    fi_provider_note(note, sizeof note);
    if (!prov_has_type)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "unsupported by provider %s: endpoint type %s (it offers: %s); try "
                       "--ofi-ep %s%s",
                       p, ep_name(f->ep_type), types[0] ? types : "none",
                       f->ep_type == FI_EP_MSG ? "rdm" : "msg", note);
    return fs_fail(err, FS_EXIT_UNSUPPORTED,
                   "unsupported by provider %s: op %s (%s) on a %s endpoint with fabscope's "
                   "memory-registration modes; providers that can: %s%s",
                   p, fs_ops[f->op].name,
                   f->op == FS_OP_SEND   ? "FI_MSG"
                   : f->op == FS_OP_WRITE || f->op == FS_OP_READ ? "FI_RMA"
                                                                  : "FI_ATOMIC",
                   ep_name(f->ep_type), provs[0] ? provs : "none here", note);
}

static int getinfo(struct ofi *f, const char *domain, struct fs_err *err)
{
    struct fi_info *h = make_hints(f, domain);
    if (!h)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    struct fi_info *list = NULL;
    int rc = fi_getinfo(OFI_API, NULL, NULL, 0, h, &list);
    struct fi_info *chosen = rc ? NULL : pick(list, f->o.provider, domain);
    if (!chosen && domain[0] && !rc) {
        /* The named domain is an interface (sockets providers): ask for its address. */
        struct fi_info *any = pick(list, f->o.provider, "");
        if (any && sockaddr_format(any->addr_format) && f->source_addr[0])
            chosen = any; /* replaced by the bound listing below, or refused after it */
    }
    if (chosen && sockaddr_format(chosen->addr_format) && f->source_addr[0]) {
        /* Follow the data-path (or control) address, as the tcp backend does, instead of
         * whatever interface the provider lists first. */
        struct fi_info *bound = NULL;
        if (fi_getinfo(OFI_API, f->source_addr, NULL, FI_SOURCE, h, &bound) == 0) {
            struct fi_info *b = pick(bound, f->o.provider, domain);
            if (b) {
                fi_freeinfo(list);
                list = bound;
                chosen = b;
                f->bound_source = 1;
            } else {
                fi_freeinfo(bound);
            }
        }
    }
    fi_freeinfo(h);
    if (chosen && f->bind_given && !f->bound_source) {
        int e = fs_fail(err, FS_EXIT_USAGE,
                        "--bind %s: provider %s opens no endpoint on that address%s; give an "
                        "address of an interface it lists (`fi_info -p %s`), or leave --bind out",
                        f->source_addr, chosen->fabric_attr->prov_name,
                        sockaddr_format(chosen->addr_format) ? "" : " (it does not address by IP)",
                        chosen->fabric_attr->prov_name);
        fi_freeinfo(list);
        return e;
    }
    if (chosen && domain[0] && strcmp(chosen->domain_attr->name, domain) != 0) {
        int e = fs_fail(err, FS_EXIT_UNSUPPORTED,
                        "--domain/--device %s: provider %s offers this endpoint only on domain %s "
                        "here, not on %s; name a domain it lists (`fi_info -p %s`), or give "
                        "--bind ADDR with an address of %s (the endpoint is then opened on it)",
                        domain, chosen->fabric_attr->prov_name, chosen->domain_attr->name, domain,
                        f->o.provider[0] ? f->o.provider : chosen->fabric_attr->prov_name, domain);
        fi_freeinfo(list);
        return e;
    }
    if (!chosen) {
        fi_freeinfo(list);
        return explain_unsupported(f, domain, err);
    }
    f->info = fi_dupinfo(chosen);
    fi_freeinfo(list);
    return f->info ? 0 : fs_fail(err, FS_EXIT_MEASURE, "out of memory");
}

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
    return rc ? fi_failc(err, FS_EXIT_MEASURE, "fi_cq_open", rc) : 0;
}

static int bind_enable(struct ofi *f, struct fs_err *err)
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
    return rc ? fi_failc(err, FS_EXIT_MEASURE, "binding/enabling the endpoint", rc) : 0;
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
    if (lf_open(err))
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
    const char *domain = domain_wanted(&f->o, ctx->spec->device, err);
    if (!domain || check_names(&f->o, domain, err))
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
    if (getinfo(f, domain, err))
        return -1;
    int rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL);
    if (rc)
        return fi_failc(err, FS_EXIT_MEASURE, "fi_fabric", rc);
    if ((rc = fi_domain(f->fabric, f->info, &f->domain, NULL)))
        return fi_failc(err, FS_EXIT_MEASURE, "fi_domain", rc);
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
    f->rx_free = calloc((size_t)f->nrx, sizeof *f->rx_free);
    for (long i = 0; f->rx_free && i < f->nrx; i++)
        f->rx_free[f->rx_nfree++] = f->nrx - 1 - i;
    /* sbuf also holds the atomic operand, compare value and one result slot per context. */
    f->bufsize = ctx->max_size;
    if (f->bufsize < 64 + 8 * f->ntx)
        f->bufsize = 64 + 8 * f->ntx;
    if (f->bufsize < 4096)
        f->bufsize = 4096;
    if (!f->txctx || !f->rxctx || !f->rx_free || posix_memalign((void **)&f->sbuf, 4096, f->bufsize) ||
        posix_memalign((void **)&f->rbuf, 4096, f->bufsize))
        return fs_fail(err, FS_EXIT_MEASURE, "ofi: cannot allocate buffers");
    memset(f->sbuf, 0xa5, f->bufsize);
    memset(f->rbuf, 0, f->bufsize);
    if (reg(f, f->sbuf, &f->smr, 1, err) || reg(f, f->rbuf, &f->rmr, 2, err) || open_cq(f, err))
        return -1;
    if (f->ep_type == FI_EP_MSG) {
        struct fi_eq_attr ea = {.size = 16, .wait_obj = FI_WAIT_UNSPEC};
        if ((rc = fi_eq_open(f->fabric, &ea, &f->eq, NULL)))
            return fi_failc(err, FS_EXIT_MEASURE, "fi_eq_open", rc);
        if (f->is_server) {
            if ((rc = fi_passive_ep(f->fabric, f->info, &f->pep, NULL)) ||
                (rc = fi_pep_bind(f->pep, &f->eq->fid, 0)) || (rc = fi_listen(f->pep)))
                return fi_failc(err, FS_EXIT_MEASURE, "listening (passive endpoint)", rc);
        }
        return 0;
    }
    struct fi_av_attr aa = {.type = FI_AV_TABLE, .count = 4};
    if ((rc = fi_av_open(f->domain, &aa, &f->av, NULL)))
        return fi_failc(err, FS_EXIT_MEASURE, "fi_av_open", rc);
    if ((rc = fi_endpoint(f->domain, f->info, &f->ep, NULL)))
        return fi_failc(err, FS_EXIT_MEASURE, "fi_endpoint", rc);
    return bind_enable(f, err);
}

static int ofi_local_address(void *be, cJSON *obj, struct fs_err *err)
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
        return fi_failc(err, FS_EXIT_MEASURE, "fi_getname", rc);
    char hex[1100];
    hex_encode(name, len, hex);
    cJSON_AddStringToObject(obj, "name", hex);
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
        return fi_failc(err, FS_EXIT_PEER, "fi_eq_sread", n);
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

static int join_cm(struct ofi *f, struct fs_err *err)
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

static int ofi_connect(void *be, const cJSON *peer, int deadline_ms, struct fs_err *err)
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
    void *name = hex_decode(nm->valuestring, &nlen);
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
        f->conn->tx_attr->op_flags |= tx_op_flags(f); /* a connection request carries none */
        if ((rc = fi_endpoint(f->domain, f->conn, &f->ep, NULL)))
            return fi_failc(err, FS_EXIT_MEASURE, "fi_endpoint (accepting)", rc);
        if (bind_enable(f, err))
            return -1;
        if ((rc = fi_accept(f->ep, NULL, 0)))
            return fi_failc(err, FS_EXIT_PEER, "fi_accept", rc);
        if (wait_cm(f, FI_CONNECTED, &entry, deadline_ms, err))
            return -1;
        f->connected = 1;
        return 0;
    }
    /* Client: an info addressed to the server, on the domain already opened. */
    struct fi_info *h = make_hints(f, f->info->domain_attr->name);
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
    struct fi_info *c = rc ? NULL : pick(list, f->info->fabric_attr->prov_name, f->info->domain_attr->name);
    if (!c) {
        fi_freeinfo(list);
        return fs_fail(err, FS_EXIT_PEER, "ofi: provider %s cannot address the server: %s",
                       f->info->fabric_attr->prov_name, rc ? fi_strerror(-rc) : "no match");
    }
    f->conn = fi_dupinfo(c);
    fi_freeinfo(list);
    if ((rc = fi_endpoint(f->domain, f->conn, &f->ep, NULL)))
        return fi_failc(err, FS_EXIT_MEASURE, "fi_endpoint", rc);
    if (bind_enable(f, err))
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
        return fi_failc(err, FS_EXIT_PEER, "fi_connect", rc);
    /* The server accepts only after this side's answer: FI_CONNECTED is awaited by the
     * connection thread and collected in prepare. */
    f->cm_deadline_ms = deadline_ms;
    if ((rc = pthread_create(&f->cm_thread, NULL, cm_main, f)))
        return fs_fail(err, FS_EXIT_MEASURE, "ofi: cannot start the connection thread: %s",
                       strerror(rc));
    f->cm_thread_running = 1;
    return 0;
}

/* ---- data path ---------------------------------------------------------------------------- */

/* Posts every free receive slot the provider takes now (EAGAIN: the rest wait for the next
 * call). Every receive takes the whole buffer, so receives stay valid from size to size. */
static int post_receives(struct ofi *f, struct fs_err *err)
{
    while (f->rx_nfree) {
        long slot = f->rx_free[f->rx_nfree - 1];
        ssize_t rc = fi_recv(f->ep, f->rbuf, f->bufsize, fi_mr_desc(f->rmr),
                             f->ep_type == FI_EP_RDM ? f->peer : FI_ADDR_UNSPEC, &f->rxctx[slot]);
        if (rc == -FI_EAGAIN)
            return 0;
        if (rc)
            return fi_failc(err, FS_EXIT_MEASURE, "fi_recv", rc);
        f->rx_nfree--;
        f->rx_posted++;
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
    if (join_cm(f, err))
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
        return fi_failc(err, FS_EXIT_MEASURE, what, rc);
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
    return f->rx_nfree && post_receives(f, err) ? -1 : 1;
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
        return fi_failc(err, FS_EXIT_MEASURE, "fi_cq_read", n);
    for (ssize_t i = 0; i < n; i++) {
        if (ent[i].flags & FI_RECV) {
            struct fi_context2 *c = ent[i].op_context;
            f->rx_posted--;
            f->rx_completed++;
            f->rx_free[f->rx_nfree++] = (long)(c - f->rxctx);
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
    if (f->rx_nfree && (!f->rx_completed || f->rx_posted < f->nrx / 2) && post_receives(f, err))
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
    if (!sockaddr_format(fmt) || len < sizeof(struct sockaddr_in))
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
    cJSON_AddStringToObject(o, "endpoint", ep_name(i->ep_attr->type));
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
                 pe_waittime_set ? "set by fabscope: 10 ms per pass made every round trip 10 ms"
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
        join_cm(f, &ignore);
    }
    if (f->ep)
        fi_close(&f->ep->fid);
    if (f->pep)
        fi_close(&f->pep->fid);
    if (f->av)
        fi_close(&f->av->fid);
    if (f->cq)
        fi_close(&f->cq->fid);
    if (f->smr)
        fi_close(&f->smr->fid);
    if (f->rmr)
        fi_close(&f->rmr->fid);
    if (f->eq)
        fi_close(&f->eq->fid);
    if (f->domain)
        fi_close(&f->domain->fid);
    if (f->fabric)
        fi_close(&f->fabric->fid);
    if (f->conn)
        fi_freeinfo(f->conn);
    if (f->info)
        fi_freeinfo(f->info);
    free(f->sbuf);
    free(f->rbuf);
    free(f->txctx);
    free(f->rxctx);
    free(f->rx_free);
    free(f);
}

const struct fs_backend_ops fs_backend_ofi = {
    .abi = FS_BACKEND_ABI,
    .name = "ofi",
    .summary = "libfabric: msg/rdm endpoints; send, RMA write/read, atomics; names the provider",
    .ops = FS_BIT(FS_OP_SEND) | FS_BIT(FS_OP_WRITE) | FS_BIT(FS_OP_READ) | FS_BIT(FS_OP_FADD) |
           FS_BIT(FS_OP_CSWAP),
    .patterns = FS_BIT(FS_PAT_LAT) | FS_BIT(FS_PAT_BW) | FS_BIT(FS_PAT_BIBW),
    .options = ofi_options,
    .options_size = sizeof(struct ofi_opts),
    .check = ofi_check,
    .setup = ofi_setup,
    .local_address = ofi_local_address,
    .connect = ofi_connect,
    .prepare = ofi_prepare,
    .post = ofi_post,
    .progress = ofi_progress,
    .describe = ofi_describe,
    .teardown = ofi_teardown,
};

/* ---- inventory (--inventory-json) ----------------------------------------------------------- */

static void add_unique_str(cJSON *arr, const char *s)
{
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (strcmp(x->valuestring, s) == 0) return;
    cJSON_AddItemToArray(arr, cJSON_CreateString(s));
}

static cJSON *provider_entry(cJSON *provs, const char *name)
{
    cJSON *p;
    cJSON_ArrayForEach(p, provs)
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(p, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return p;
    }
    p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", name);
    cJSON_AddArrayToObject(p, "fabrics");
    cJSON_AddArrayToObject(p, "domains");
    cJSON_AddArrayToObject(p, "endpoint_types");
    cJSON_AddItemToArray(provs, p);
    return p;
}

/* The same fi_getinfo listing --provider and --domain are checked against (check_names), so
 * "provider_names" is exactly what --provider accepts: every listed provider and the core
 * provider of every layered one ("tcp" for "tcp;ofi_rxm", see prov_matches). libfabric is
 * opened here, not at engine start (see lf_open). */
void fs_inventory_ofi(cJSON *part)
{
    cJSON_AddStringToObject(part, "library", "libfabric");
    struct fs_err err = {0};
    if (lf_open(&err)) {
        cJSON_AddStringToObject(part, "status", "error");
        cJSON_AddStringToObject(part, "error", err.msg);
        return;
    }
    uint32_t v = fi_version();
    char buf[64];
    snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(v), FI_MINOR(v));
    cJSON_AddStringToObject(part, "version", buf);
    snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(OFI_API), FI_MINOR(OFI_API));
    cJSON_AddStringToObject(part, "api_version_asked", buf);
    struct fi_info *all = NULL;
    int rc = fi_getinfo(OFI_API, NULL, NULL, 0, NULL, &all);
    if (rc && rc != -FI_ENODATA) {
        cJSON_AddStringToObject(part, "status", "error");
        snprintf(err.msg, sizeof err.msg, "fi_getinfo: %s (%d)", fi_strerror(-rc), rc);
        cJSON_AddStringToObject(part, "error", err.msg);
        return;
    }
    cJSON_AddStringToObject(part, "status", "ok");
    const char *env = getenv("FI_PROVIDER");
    if (env)
        cJSON_AddStringToObject(part, "fi_provider_env", env);
    else
        cJSON_AddNullToObject(part, "fi_provider_env");
    cJSON *provs = cJSON_AddArrayToObject(part, "providers");
    cJSON *names = cJSON_AddArrayToObject(part, "provider_names");
    cJSON *entries = cJSON_AddArrayToObject(part, "entries");
    for (struct fi_info *i = all; i; i = i->next) {
        const char *pn = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
        const char *fabric = i->fabric_attr->name ? i->fabric_attr->name : "";
        const char *dom = i->domain_attr->name ? i->domain_attr->name : "";
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "provider", pn);
        snprintf(buf, sizeof buf, "%u.%u", FI_MAJOR(i->fabric_attr->prov_version),
                 FI_MINOR(i->fabric_attr->prov_version));
        cJSON_AddStringToObject(e, "provider_version", buf);
        cJSON_AddStringToObject(e, "fabric", fabric);
        cJSON_AddStringToObject(e, "domain", dom);
        cJSON_AddStringToObject(e, "endpoint_type", ep_name(i->ep_attr->type));
        char *as = fi_tostr(&i->addr_format, FI_TYPE_ADDR_FORMAT);
        cJSON_AddStringToObject(e, "addr_format", as ? as : "");
        cJSON *caps = cJSON_AddArrayToObject(e, "caps");
        char *cs = fi_tostr(&i->caps, FI_TYPE_CAPS);
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", cs ? cs : "");
        char *save = NULL;
        for (char *t = strtok_r(copy, " |,", &save); t; t = strtok_r(NULL, " |,", &save))
            cJSON_AddItemToArray(caps, cJSON_CreateString(t));
        cJSON_AddNumberToObject(e, "inject_size", (double)i->tx_attr->inject_size);
        cJSON_AddItemToArray(entries, e);

        cJSON *p = provider_entry(provs, pn);
        add_unique_str(cJSON_GetObjectItemCaseSensitive(p, "fabrics"), fabric);
        add_unique_str(cJSON_GetObjectItemCaseSensitive(p, "domains"), dom);
        add_unique_str(cJSON_GetObjectItemCaseSensitive(p, "endpoint_types"),
                       ep_name(i->ep_attr->type));
        add_unique_str(names, pn);
        const char *semi = strchr(pn, ';');
        if (semi) {
            char core[64];
            snprintf(core, sizeof core, "%.*s", (int)(semi - pn), pn);
            if (prov_matches(core, pn))
                add_unique_str(names, core);
        }
    }
    fi_freeinfo(all);
}
