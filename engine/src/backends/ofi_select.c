/* SPDX-License-Identifier: BSD-3-Clause */
/* ofi backend: libfabric on this host. Loads the library, checks the provider and domain the user
 * names against what fi_getinfo reports (an unknown name is a usage error listing what exists, a
 * capability the provider lacks is "unsupported by provider X"), and chooses the fi_info a run
 * opens. Nothing is substituted. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ofi_int.h"

struct ofi_lib ofi_lib;

int ofi_lib_open(struct fs_err *err)
{
    if (ofi_lib.handle)
        return 0;
    /* The sockets provider's progress thread waits FI_SOCKETS_PE_WAITTIME (10 ms by default)
     * between passes: every ping-pong took 10 ms and a 5,000-iteration row outlived its deadline.
     * libfabric reads the variable once, when its providers are initialised (the first
     * fi_getinfo, possibly a device check long before the provider is known), so it is set here,
     * before libfabric is loaded, unless the user set it; it changes nothing but that provider,
     * and the record says which value ran and who set it (describe). */
    if (!getenv("FI_SOCKETS_PE_WAITTIME") && setenv("FI_SOCKETS_PE_WAITTIME", "0", 0) == 0)
        ofi_lib.pe_waittime_set = 1;
    void *h = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return fs_fail(err, FS_EXIT_UNSUPPORTED,
                       "ofi: libfabric cannot be loaded (%s): install libfabric1", dlerror());
    /* Through a union: ISO C has no conversion from void * to a function pointer. */
#define LF_SYM(field, name)                                                                    \
    do {                                                                                       \
        union {                                                                                \
            void *p;                                                                           \
            __typeof__(ofi_lib.field) f;                                                       \
        } u = {dlsym(h, name)};                                                                \
        if (!u.p) {                                                                            \
            dlclose(h);                                                                        \
            return fs_fail(err, FS_EXIT_UNSUPPORTED, "ofi: libfabric.so.1 lacks %s", name);    \
        }                                                                                      \
        ofi_lib.field = u.f;                                                                   \
    } while (0)
    LF_SYM(getinfo, "fi_getinfo");
    LF_SYM(freeinfo, "fi_freeinfo");
    LF_SYM(dupinfo, "fi_dupinfo");
    LF_SYM(fabric, "fi_fabric");
    LF_SYM(strerror, "fi_strerror");
    LF_SYM(tostr, "fi_tostr");
    LF_SYM(version, "fi_version");
#undef LF_SYM
    ofi_lib.handle = h;
    return 0;
}

int ofi_failc(struct fs_err *err, int code, const char *what, long rc)
{
    return fs_fail(err, code, "ofi: %s: %s (%ld)", what, fi_strerror((int)-rc), rc);
}

const char *ofi_ep_name(enum fi_ep_type t)
{
    return t == FI_EP_MSG ? "msg" : t == FI_EP_RDM ? "rdm" : t == FI_EP_DGRAM ? "dgram" : "?";
}

/* "tcp" matches "tcp" and the layered "tcp;ofi_rxm": the core provider is the first component,
 * and the result names the full stack, so nothing is hidden. */
int ofi_prov_matches(const char *want, const char *have)
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

const char *ofi_domain_wanted(const struct ofi_opts *o, const char *device, struct fs_err *err)
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
int ofi_check_provider_env(struct fs_err *err)
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
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_getinfo (listing providers)", rc);
    char sv[FS_SHOWN_LEN];
    return fs_fail(err, FS_EXIT_USAGE,
                   "FI_PROVIDER=%s (from the environment): libfabric has no provider of that name "
                   "on this host, so it offers none at all. Unset FI_PROVIDER (and name the "
                   "provider with --provider), or set it to one that `env -u FI_PROVIDER fi_info "
                   "-l` lists",
                   fs_shown(env, sv, sizeof sv));
}

/* Names only: provider and domain exist on this host (any endpoint type, any caps). */
int ofi_check_names(const struct ofi_opts *o, const char *domain, struct fs_err *err)
{
    if (!o->provider[0] && !domain[0])
        return 0;
    struct fi_info *all = NULL;
    int rc = fi_getinfo(OFI_API, NULL, NULL, 0, NULL, &all);
    if (rc)
        return ofi_failc(err, FS_EXIT_MEASURE, "fi_getinfo (listing providers)", rc);
    char provs[1024] = "", doms[1024] = "";
    int prov_found = 0, dom_found = 0;
    for (struct fi_info *i = all; i; i = i->next) {
        const char *pn = i->fabric_attr->prov_name;
        append_unique(provs, sizeof provs, pn);
        if (!ofi_prov_matches(o->provider, pn))
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


/* ---- the fi_info a run opens ----------------------------------------------------------------- */

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
uint64_t ofi_tx_op_flags(const struct ofi *f)
{
    return f->op == FS_OP_WRITE && f->pat != FS_PAT_LAT ? FI_DELIVERY_COMPLETE : 0;
}

struct fi_info *ofi_make_hints(const struct ofi *f, const char *domain)
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
    h->tx_attr->op_flags = ofi_tx_op_flags(f);
    if (f->o.provider[0] && strchr(f->o.provider, ';'))
        h->fabric_attr->prov_name = strdup(f->o.provider);
    if (domain[0])
        h->domain_attr->name = strdup(domain);
    return h;
}

int ofi_sockaddr_format(uint32_t fmt)
{
    return fmt == FI_SOCKADDR_IN || fmt == FI_SOCKADDR_IN6 || fmt == FI_SOCKADDR;
}

/* First result that is the asked provider (core name or exact stack) on the asked domain. The
 * domain hint alone is not enough: a utility provider (tcp;ofi_rxm, 1.17) answered a hint of
 * "fabric0" with its mgmt0 domain, and the run went over the management network. */
struct fi_info *ofi_pick(struct fi_info *list, const char *prov, const char *domain)
{
    for (struct fi_info *i = list; i; i = i->next)
        if (ofi_prov_matches(prov, i->fabric_attr->prov_name) &&
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
            if (ofi_prov_matches(f->o.provider, i->fabric_attr->prov_name)) {
                append_unique(types, sizeof types, ofi_ep_name(i->ep_attr->type));
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
                       p, ofi_ep_name(f->ep_type), types[0] ? types : "none",
                       f->ep_type == FI_EP_MSG ? "rdm" : "msg", note);
    return fs_fail(err, FS_EXIT_UNSUPPORTED,
                   "unsupported by provider %s: op %s (%s) on a %s endpoint with fabscope's "
                   "memory-registration modes; providers that can: %s%s",
                   p, fs_ops[f->op].name,
                   f->op == FS_OP_SEND   ? "FI_MSG"
                   : f->op == FS_OP_WRITE || f->op == FS_OP_READ ? "FI_RMA"
                                                                  : "FI_ATOMIC",
                   ofi_ep_name(f->ep_type), provs[0] ? provs : "none here", note);
}

int ofi_getinfo(struct ofi *f, const char *domain, struct fs_err *err)
{
    struct fi_info *h = ofi_make_hints(f, domain);
    if (!h)
        return fs_fail(err, FS_EXIT_MEASURE, "out of memory");
    struct fi_info *list = NULL;
    int rc = fi_getinfo(OFI_API, NULL, NULL, 0, h, &list);
    struct fi_info *chosen = rc ? NULL : ofi_pick(list, f->o.provider, domain);
    if (!chosen && domain[0] && !rc) {
        /* The named domain is an interface (sockets providers): ask for its address. */
        struct fi_info *any = ofi_pick(list, f->o.provider, "");
        if (any && ofi_sockaddr_format(any->addr_format) && f->source_addr[0])
            chosen = any; /* replaced by the bound listing below, or refused after it */
    }
    if (chosen && ofi_sockaddr_format(chosen->addr_format) && f->source_addr[0]) {
        /* Follow the data-path (or control) address, as the tcp backend does, instead of
         * whatever interface the provider lists first. */
        struct fi_info *bound = NULL;
        if (fi_getinfo(OFI_API, f->source_addr, NULL, FI_SOURCE, h, &bound) == 0) {
            struct fi_info *b = ofi_pick(bound, f->o.provider, domain);
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
                        ofi_sockaddr_format(chosen->addr_format) ? "" : " (it does not address by IP)",
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

