/* SPDX-License-Identifier: BSD-3-Clause */
/* Private to the ucx backend: the transport resources UCX offers on this host and the check of
 * names against them, with UCX's transport aliases (ucx_resources.c); the inventory
 * (ucx_inventory.c) reads them too. */
#ifndef FS_UCX_INT_H
#define FS_UCX_INT_H

#include <stddef.h>
#include <uct/api/uct.h>

#include "../core/backend.h"

/* One transport resource as `ucx_info -d` lists it: transport name on a device. */
struct ucx_res {
    char tl[UCT_TL_NAME_MAX];
    char dev[UCT_DEVICE_NAME_MAX];
    uct_device_type_t type;
    char md[UCT_MD_NAME_MAX]; /* the memory domain that offers it */
};

struct ucx_reslist {
    struct ucx_res *v;
    size_t n;
};

/* Every component, memory domain and transport resource into l (l->v is the caller's to free). */
int ucx_query_resources(struct ucx_reslist *l, struct fs_err *err);
/* Whether --ucx-tls may name tok here: "all", a transport of l, or an alias with one of them. */
int ucx_tl_token_ok(const struct ucx_reslist *l, const char *tok);
/* A comma list of transports (devices = 0) or network devices (1) checked against l; `what`
 * names the setting in the message. */
int ucx_check_list(const struct ucx_reslist *l, const char *value, int devices, const char *what,
                   struct fs_err *err);

/* UCX_TLS and UCX_NET_DEVICES in effect, each with where it came from: "option", "environment",
 * "data path" (devices only) or "default" (ucx_names.c). */
struct ucx_names {
    char tls[256], tls_source[16];
    char net_devices[256], net_devices_source[16];
};
/* Decides both from --ucx-tls (opt_tls, "" when not given), --device, the environment and, for a
 * server without a device, its address on the client's network (datapath_addr, or ""), and checks
 * every name against what UCX has here: a name it lacks is a usage error. */
int ucx_resolve_names(const char *opt_tls, const char *device, const char *datapath_addr,
                      struct ucx_names *out, struct fs_err *err);

/* UCX's transport aliases (ucx_resources.c says where they come from). */
struct ucx_alias {
    const char *alias;
    const char *members[8];
};
extern const struct ucx_alias ucx_aliases[];
extern const size_t ucx_n_aliases;

#endif
