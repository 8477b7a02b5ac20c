/* SPDX-License-Identifier: BSD-3-Clause */
/* Minimal assertions for the C unit tests: report every failure, exit non-zero at the end. */
#ifndef FS_CHECK_H
#define FS_CHECK_H
#include <math.h>
#include <stdio.h>

static int fs_check_failures;
static int fs_check_count;
#define CHECK(cond)                                                                         \
    do {                                                                                    \
        fs_check_count++;                                                                   \
        if (!(cond)) {                                                                      \
            fs_check_failures++;                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);        \
        }                                                                                   \
    } while (0)
#define CHECK_NEAR(a, b, tol) CHECK(fabs((double)(a) - (double)(b)) <= (tol))
#define CHECK_DONE()                                                                        \
    (printf("%d passed, %d failed\n", fs_check_count - fs_check_failures, fs_check_failures), \
     fs_check_failures ? 1 : 0)
/* A test that cannot run here returns this after saying why: engine/CMakeLists.txt makes it ctest's
 * SKIP_RETURN_CODE, so ctest reports the test as skipped, not passed. */
#define CHECK_SKIP 77
#endif
