/* SPDX-License-Identifier: BSD-3-Clause */
/* The lanes of a UCP endpoint (ucx_lanes.c), shared by the ucx backend and the mpi backend (Open
 * MPI's pml ucx: which UCX transports carried MPI's bytes). */
#ifndef FS_UCX_LANES_H
#define FS_UCX_LANES_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "../core/backend.h"

/* Into o: "lanes" [{transport, device, usage}], "transports", "devices", "thresholds", and the
 * "protocol" a message of `size` bytes takes for op (null before any size: size 0). ep is a
 * ucp_ep_h. */
void fs_ucx_describe_ep_op(void *ep, uint64_t size, enum fs_op op, cJSON *o);
/* The same for a tag-matching endpoint (what MPI uses). */
void fs_ucx_describe_ep(void *ep, uint64_t size, cJSON *o);

#endif
