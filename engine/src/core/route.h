/* SPDX-License-Identifier: BSD-3-Clause */
/* The kernel's route to the peer, as `ip route get ADDR` shows it (RTM_GETROUTE over netlink): the
 * netdev the kernel sends the peer's packets through. A result whose bytes left by another netdev
 * than the one asked for names this route (fabscope.results.misroute): a host route over a
 * management interface is the usual cause. */
#ifndef FS_ROUTE_H
#define FS_ROUTE_H

struct cJSON;

/* Adds "route_to_peer": {"peer": ADDR, "dev": NAME, "gateway": ADDR|null, "source": ADDR|null}
 * to `out` for `peer` ("HOST:PORT", "[V6]:PORT" or a numeric address); nothing when the
 * address is not numeric or the kernel does not answer (the record then has no route to judge). */
void fs_route_describe(const char *peer, struct cJSON *out);

#endif
