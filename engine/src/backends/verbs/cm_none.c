/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend without librdmacm: --cm is refused at setup, naming the package that adds it;
 * nothing else here is ever reached (every other caller is behind --cm). */
#define _GNU_SOURCE
#include "verbs_int.h"

static int no_cm(struct fs_err *err)
{
    return fs_fail(err, FS_EXIT_UNSUPPORTED,
                   "--cm: this fabscope engine was built without librdmacm, so it cannot connect "
                   "through rdma_cm. Drop --cm (QP numbers are then exchanged over the control "
                   "channel; iWARP devices need --cm), or rebuild with librdmacm "
                   "(apt-get install librdmacm-dev)");
}

int vb_cm_select_device(struct vb *v, const char *want, int *n, struct fs_err *err)
{
    (void)v;
    (void)want;
    (void)n;
    return no_cm(err);
}

int vb_cm_create_qp(struct vb *v, int i, struct ibv_qp_init_attr *a)
{
    (void)v;
    (void)i;
    (void)a;
    return ENOSYS;
}

int vb_cm_setup(struct vb *v, const char *bind, struct fs_err *err)
{
    (void)v;
    (void)bind;
    return no_cm(err);
}

void vb_cm_local_address(struct vb *v, cJSON *o)
{
    (void)v;
    (void)o;
}

int vb_cm_connect(struct vb *v, const cJSON *peer, int deadline_ms, struct fs_err *err)
{
    (void)peer;
    (void)deadline_ms;
    (void)v;
    return no_cm(err);
}

int vb_cm_established(struct vb *v, struct fs_err *err)
{
    (void)v;
    return no_cm(err);
}

void vb_cm_close_qp(struct vb *v, int i)
{
    (void)v;
    (void)i;
}

void vb_cm_close(struct vb *v) { (void)v; }

void vb_cm_free_devices(struct vb *v) { (void)v; }
