/* SPDX-License-Identifier: BSD-3-Clause */
/* `fabscope-engine --inventory-json`: what the RDMA, UCX and libfabric libraries on this host
 * really offer, as one JSON object (schema fabscope.inventory/1) the front end's `devices` and
 * `doctor` read instead of parsing ibv_devinfo, ucx_info and fi_info text.
 *
 * Each library part is filled by its backend file (which owns the library's headers and the
 * names the backend's options accept), so what the inventory lists and what --device,
 * --ucx-tls and --provider accept come from the same code. A library the engine was built
 * without is reported as {"status": "absent"}. */
#ifndef FS_INVENTORY_H
#define FS_INVENTORY_H

struct cJSON;

#define FS_INVENTORY_SCHEMA "fabscope.inventory/1"

/* Prints the whole inventory on stdout. Returns 0; a library that fails says so in its part. */
int fs_inventory_print(void);

/* Per-library parts; each adds "status" ("ok" or "error" with "error") and its lists to `part`. */
void fs_inventory_verbs(struct cJSON *part);
void fs_inventory_ucx(struct cJSON *part);
void fs_inventory_ofi(struct cJSON *part);

#endif
