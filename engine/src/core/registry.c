#include <string.h>

#include "backend.h"

extern const struct fs_backend_ops fs_backend_tcp;
#ifdef FS_HAVE_VERBS
extern const struct fs_backend_ops fs_backend_verbs;
#endif
#ifdef FS_HAVE_RSOCKET
extern const struct fs_backend_ops fs_backend_rsocket;
#endif
#ifdef FS_HAVE_UCX
extern const struct fs_backend_ops fs_backend_ucx;
#endif
#ifdef FS_HAVE_OFI
extern const struct fs_backend_ops fs_backend_ofi;
#endif
#ifdef FS_HAVE_MPI
extern const struct fs_backend_ops fs_backend_mpi;
#endif

/* Compiled-in backends: each one exists only where its library was found at build time. */
static const struct fs_backend_ops *const all[] = {
    &fs_backend_tcp,
#ifdef FS_HAVE_VERBS
    &fs_backend_verbs,
#endif
#ifdef FS_HAVE_RSOCKET
    &fs_backend_rsocket,
#endif
#ifdef FS_HAVE_UCX
    &fs_backend_ucx,
#endif
#ifdef FS_HAVE_OFI
    &fs_backend_ofi,
#endif
#ifdef FS_HAVE_MPI
    &fs_backend_mpi, /* only in fabscope-engine-mpi-*: MPI must be initialised by its main */
#endif
};

const struct fs_backend_ops *const *fs_backends(size_t *n)
{
    *n = sizeof all / sizeof all[0];
    return all;
}

const struct fs_backend_ops *fs_backend_by_name(const char *name)
{
    size_t n;
    const struct fs_backend_ops *const *b = fs_backends(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(b[i]->name, name) == 0)
            return b[i];
    return NULL;
}

int fs_backend_check(const struct fs_backend_ops *ops, struct fs_err *err)
{
    if (!ops || !ops->name || !*ops->name)
        return fs_fail(err, FS_EXIT_MEASURE, "backend without a name");
    if (ops->abi != FS_BACKEND_ABI)
        return fs_fail(err, FS_EXIT_MEASURE,
                       "backend %s was built for backend ABI %u, this engine speaks %u: rebuild it",
                       ops->name, ops->abi, FS_BACKEND_ABI);
    const char *missing = !ops->setup           ? "setup"
                          : !ops->local_address ? "local_address"
                          : !ops->connect       ? "connect"
                          : !ops->prepare       ? "prepare"
                          : !ops->post          ? "post"
                          : !ops->progress      ? "progress"
                          : !ops->describe      ? "describe"
                          : !ops->teardown      ? "teardown"
                                                : NULL;
    if (missing)
        return fs_fail(err, FS_EXIT_MEASURE, "backend %s lacks the required hook '%s'", ops->name,
                       missing);
    if (!ops->ops || !ops->patterns)
        return fs_fail(err, FS_EXIT_MEASURE, "backend %s declares no operations or patterns",
                       ops->name);
    if (ops->ops >> FS_OP_COUNT || ops->patterns >> FS_PAT_COUNT)
        return fs_fail(err, FS_EXIT_MEASURE, "backend %s declares unknown capability bits",
                       ops->name);
    if (ops->options && !ops->options_size)
        return fs_fail(err, FS_EXIT_MEASURE, "backend %s has option rows but no storage size",
                       ops->name);
    return 0;
}
