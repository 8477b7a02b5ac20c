/* SPDX-License-Identifier: BSD-3-Clause */
/* Registration refuses a backend built for another ABI, one missing a hook, or one with unknown
 * capability bits; every built-in backend passes. */
#include <string.h>

#include "backend.h"
#include "check.h"

static int dummy_setup(const struct fs_be_ctx *c, void **b, struct fs_err *e)
{
    (void)c, (void)b, (void)e;
    return 0;
}
static int dummy_addr(void *b, struct cJSON *o, struct fs_err *e) { (void)b, (void)o, (void)e; return 0; }
static int dummy_connect(void *b, const struct cJSON *p, int d, struct fs_err *e)
{
    (void)b, (void)p, (void)d, (void)e;
    return 0;
}
static int dummy_prepare(void *b, enum fs_op o, uint64_t s, struct fs_err *e)
{
    (void)b, (void)o, (void)s, (void)e;
    return 0;
}
static int dummy_post(void *b, enum fs_op o, uint64_t s, struct fs_err *e)
{
    (void)b, (void)o, (void)s, (void)e;
    return 1;
}
static int dummy_progress(void *b, int w, struct fs_events *ev, struct fs_err *e)
{
    (void)b, (void)w, (void)ev, (void)e;
    return 0;
}
static void dummy_describe(void *b, struct cJSON *o) { (void)b, (void)o; }
static void dummy_teardown(void *b) { (void)b; }

static struct fs_backend_ops good(void)
{
    struct fs_backend_ops ops = {
        .abi = FS_BACKEND_ABI, .name = "dummy", .summary = "test",
        .ops = FS_BIT(FS_OP_SEND), .patterns = FS_BIT(FS_PAT_LAT),
        .setup = dummy_setup, .local_address = dummy_addr, .connect = dummy_connect,
        .prepare = dummy_prepare, .post = dummy_post, .progress = dummy_progress,
        .describe = dummy_describe, .teardown = dummy_teardown,
    };
    return ops;
}

int main(void)
{
    struct fs_err err = {0};
    struct fs_backend_ops ops = good();
    CHECK(fs_backend_check(&ops, &err) == 0);

    ops.abi = FS_BACKEND_ABI + 1;
    CHECK(fs_backend_check(&ops, &err) == -1 && strstr(err.msg, "ABI") && strstr(err.msg, "rebuild"));

    ops = good();
    ops.progress = NULL;
    CHECK(fs_backend_check(&ops, &err) == -1 && strstr(err.msg, "'progress'"));

    ops = good();
    ops.ops = FS_BIT(FS_OP_COUNT);
    CHECK(fs_backend_check(&ops, &err) == -1 && strstr(err.msg, "capability"));

    ops = good();
    ops.patterns = 0;
    CHECK(fs_backend_check(&ops, &err) == -1);

    ops = good();
    ops.options = (const struct fs_option[]){{0}};
    ops.options_size = 0;
    CHECK(fs_backend_check(&ops, &err) == -1 && strstr(err.msg, "storage"));

    size_t n;
    const struct fs_backend_ops *const *all = fs_backends(&n);
    CHECK(n >= 1 && strcmp(all[0]->name, "tcp") == 0);
    for (size_t i = 0; i < n; i++)
        CHECK(fs_backend_check(all[i], &err) == 0);
    return CHECK_DONE();
}
