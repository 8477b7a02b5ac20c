/* SPDX-License-Identifier: BSD-3-Clause */
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

/* The build system names the package of each backend (FS_PACKAGE_*, engine/CMakeLists.txt). */
#if !defined(FS_PACKAGE_VERBS) || !defined(FS_PACKAGE_RSOCKET) || !defined(FS_PACKAGE_UCX) ||      \
    !defined(FS_PACKAGE_OFI) || !defined(FS_PACKAGE_MPI)
#error "FS_PACKAGE_* not defined: build registry.c through engine/CMakeLists.txt"
#endif

#ifdef FS_HAVE_VERBS
#define FS_OPS_VERBS (&fs_backend_verbs)
#else
#define FS_OPS_VERBS NULL
#endif
#ifdef FS_HAVE_RSOCKET
#define FS_OPS_RSOCKET (&fs_backend_rsocket)
#else
#define FS_OPS_RSOCKET NULL
#endif
#ifdef FS_HAVE_UCX
#define FS_OPS_UCX (&fs_backend_ucx)
#else
#define FS_OPS_UCX NULL
#endif
#ifdef FS_HAVE_OFI
#define FS_OPS_OFI (&fs_backend_ofi)
#else
#define FS_OPS_OFI NULL
#endif
#ifdef FS_HAVE_MPI
#define FS_OPS_MPI (&fs_backend_mpi)
#else
#define FS_OPS_MPI NULL
#endif

static const struct fs_backend_known known[] = {
    {"tcp", "", &fs_backend_tcp},
    {"verbs", FS_PACKAGE_VERBS, FS_OPS_VERBS},
    {"rsocket", FS_PACKAGE_RSOCKET, FS_OPS_RSOCKET},
    {"ucx", FS_PACKAGE_UCX, FS_OPS_UCX},
    {"ofi", FS_PACKAGE_OFI, FS_OPS_OFI},
    {"mpi", FS_PACKAGE_MPI, FS_OPS_MPI},
};

const struct fs_backend_known *fs_backends_known(size_t *n)
{
    *n = sizeof known / sizeof known[0];
    return known;
}

const struct fs_backend_known *fs_backend_known_by_name(const char *name)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i].name, name) == 0)
            return &known[i];
    return NULL;
}

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
