/* SPDX-License-Identifier: BSD-3-Clause */
/* verbs backend: --verify, the payload pattern of each message and its check. */
#define _GNU_SOURCE
#include "verbs_int.h"

void vb_fill_pat(uint8_t *p, uint64_t n, uint64_t seq)
{
    for (uint64_t i = 0; i < n; i++)
        p[i] = pat(seq, i);
}

int vb_check_pat(const uint8_t *p, uint64_t n, uint64_t seq, const char *what,
                     struct fs_err *err)
{
    for (uint64_t i = 0; i < n; i++)
        if (p[i] != pat(seq, i))
            return fs_fail(err, FS_EXIT_MEASURE,
                           "verbs --verify: %s #%" PRIu64 " is corrupt at byte %" PRIu64
                           " of %" PRIu64 ": expected 0x%02x, found 0x%02x",
                           what, seq, i, n, pat(seq, i), p[i]);
    return 0;
}
