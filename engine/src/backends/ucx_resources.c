/* SPDX-License-Identifier: BSD-3-Clause */
/* ucx backend: what UCX offers on this host (the walk `ucx_info -d` does) and the check of the
 * names a user gives (--ucx-tls, --device, UCX_TLS, UCX_NET_DEVICES) against it, before UCX sees
 * them, with UCX's transport aliases. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucs/type/status.h>

#include "ucx_int.h"

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
int ucx_query_resources(struct ucx_reslist *l, struct fs_err *err)
{
    uct_component_h *comps = NULL;
    unsigned ncomp = 0;
    ucs_status_t st = uct_query_components(&comps, &ncomp);
    if (st != UCS_OK)
        return fs_fail(err, FS_EXIT_MEASURE, "ucx: cannot list UCX components: %s",
                       ucs_status_string(st));
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
const struct ucx_alias ucx_aliases[] = {
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
const size_t ucx_n_aliases = sizeof ucx_aliases / sizeof ucx_aliases[0];

int ucx_tl_token_ok(const struct ucx_reslist *l, const char *tok)
{
    if (strcmp(tok, "all") == 0 || res_has_tl(l, tok))
        return 1;
    for (size_t i = 0; i < ucx_n_aliases; i++)
        if (strcmp(ucx_aliases[i].alias, tok) == 0)
            for (int k = 0; ucx_aliases[i].members[k]; k++)
                if (res_has_tl(l, ucx_aliases[i].members[k]))
                    return 1;
    return 0;
}

/* Checks a comma list; `what` names the setting in the message ("--ucx-tls", "UCX_TLS from the
 * environment"). A leading '^' (exclude) is allowed; every name after it must still exist. */
int ucx_check_list(const struct ucx_reslist *l, const char *value, int devices,
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
                         : ucx_tl_token_ok(l, name);
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
