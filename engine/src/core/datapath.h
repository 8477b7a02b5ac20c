/* SPDX-License-Identifier: BSD-3-Clause */
/* Which network the data path is on, told by the client to a server that was given no device.
 *
 * A client asks for `--device fabric0` while its control connection reaches the server over
 * another network (a management LAN). The server, started without a device of its own, used to
 * put its data endpoint on the address the control connection came in on, so the client's
 * fabric0 bytes went to the management address and out over the management link (the verdict
 * caught it: misrouted). The client now sends the networks of its device in "config"; the
 * server takes its own address on one of them. */
#ifndef FS_DATAPATH_H
#define FS_DATAPATH_H

#include <stddef.h>

struct cJSON;
struct ifaddrs;

#define FS_DATAPATH_MAX_NETS 16

/* Client: adds {"device": NAME, "networks": ["10.201.0.1/24", "fd00::1/64", ...]} to `out`
 * when `device` is a network interface with addresses here (IPv4, and IPv6 beyond link-local).
 * Returns the number of networks added (0: not a netdev or no address, nothing useful to say). */
int fs_datapath_describe(const char *device, const struct ifaddrs *ifa, struct cJSON *out);

/* Client, for devices that are not netdevs themselves (verbs --device rxe0,rxe1): adds
 * "devices": [{"device": "rxe0", "netdev": "eth0", "networks": [...]}, ...] to `out`, one entry
 * per comma-separated name in `list`, in its order. A name that is a netdev here is its own; an
 * RDMA device's is the netdev its port sends through (`sysfs`/class/infiniband/NAME/ports/N/
 * gid_attrs/ndevs/I; `sysfs` is "/sys" but for tests). An entry without networks says the name
 * has no IP network here. Returns the number of entries with networks. */
int fs_datapath_describe_list(const char *list, const struct ifaddrs *ifa, const char *sysfs,
                              struct cJSON *out);

/* The netdev an RDMA device's port sends through (see above); 0 when found. */
int fs_datapath_rdma_netdev(const char *sysfs, const char *rdma, char *netdev, size_t len);

/* The name of the interface in `ifa` holding the numeric address `addr`, or NULL. */
const char *fs_datapath_owner(const struct ifaddrs *ifa, const char *addr);

/* The first IPv4 address (else the first IPv6 one beyond link-local) of the interface `netdev`
 * in `ifa`, as numeric text. Returns 0 when found, -1 otherwise (not an interface here, or no
 * address). Providers whose domains are interfaces bind their endpoints with it (ofi). */
int fs_datapath_addr_of(const struct ifaddrs *ifa, const char *netdev, char *addr, size_t addr_len);

/* Server: the first address in `ifa` inside one of the hint's networks, as numeric text.
 * Returns 0 when found, -1 otherwise (no hint, a malformed hint, or no address of ours on those
 * networks). The hint is network input: anything is tolerated. */
int fs_datapath_pick(const struct cJSON *hint, const struct ifaddrs *ifa, char *addr,
                     size_t addr_len);

#endif
