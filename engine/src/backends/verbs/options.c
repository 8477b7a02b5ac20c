/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: its options (--qp-type, --inline, --cm, ...). */
#define _GNU_SOURCE
#include "verbs_int.h"

static const char *const qp_type_values[] = {"rc", "uc", "ud", NULL};

#define F(f) FS_FIELD(struct vb_opts, f)
const struct fs_option vb_options[] = {
    {"qp-type", FS_OPT_ENUM, F(qp_type), 0, 0, "rc", qp_type_values,
     "transport service: rc (reliable connected), uc (unreliable connected), ud (datagram)", 0},
    {"inline", FS_OPT_INT, F(inline_size), -1, 4096, "-1", NULL,
     "send/write payloads up to N bytes are copied into the work request (IBV_SEND_INLINE); "
     "-1 = auto: 220 for lat with send/write/write_imm when the QP allows it, 0 otherwise",
     0},
    {"cq-mod", FS_OPT_INT, F(cq_mod), 0, 65536, "0", NULL,
     "request a completion every N work requests (CQ moderation); must be <= --tx-depth. 0 = "
     "auto: every request in bw/bibw; in a ping-pong every --tx-depth/2 (the answer shows the "
     "send arrived, so its completion only frees send-queue room)",
     0},
    {"qps", FS_OPT_INT, F(qps), 1, VB_MAX_QPS, "1", NULL,
     "queue pairs per device; work requests are posted round-robin over them (and over the "
     "devices of --device A,B)",
     0},
    {"mtu", FS_OPT_INT, F(mtu), 0, 4096, "0", NULL,
     "path MTU 256|512|1024|2048|4096; 0 = the smaller active MTU of the two ports. Larger than "
     "a port's active MTU is an error",
     0},
    {"ib-port", FS_OPT_INT, F(ib_port), 0, 255, "0", NULL,
     "port of --device (1-based); 0 = the device's only port (several ports = say which)",
     FS_OPTF_LOCAL},
    {"gid-index", FS_OPT_INT, F(gid_index), -1, VB_MAX_GIDS - 1, "-1", NULL,
     "GID table index on this host; -1 = auto: the RoCE v2 GID with an IPv4 address on "
     "Ethernet, LID routing on InfiniBand",
     FS_OPTF_LOCAL},
    {"rx-depth", FS_OPT_INT, F(rx_depth), 0, 65536, "0", NULL,
     "receives kept posted per QP (send/write_imm); 0 = auto (512 on RC, 4096 on UC/UD, capped "
     "by the device)",
     0},
    {"sl", FS_OPT_INT, F(sl), 0, 15, "0", NULL, "service level (InfiniBand QoS lane)", 0},
    {"cm", FS_OPT_BOOL, F(cm), 0, 1, "false", NULL,
     "connect through rdma_cm (REQ/REP/RTU, RC only) instead of exchanging QP numbers over the "
     "control channel; needed for iWARP",
     0},
    {"verify", FS_OPT_BOOL, F(verify), 0, 1, "false", NULL,
     "check every payload byte (lat only; send, write, write_imm, read). With --cm --op send "
     "this is fabscope's rping: connect through rdma_cm and verify data both ways",
     0},
    {0},
};
#undef F
