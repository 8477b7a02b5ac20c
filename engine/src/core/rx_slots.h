/* SPDX-License-Identifier: BSD-3-Clause */
/* The receive slots of a backend that keeps receives posted ahead of the messages (mpi, ucx; ofi
 * keeps the same books and should use this too): which slots wait to be posted (again) and how many
 * are posted. A stack, so the slot that completed last is the next one posted. */
#ifndef FS_RX_SLOTS_H
#define FS_RX_SLOTS_H

#include <stdlib.h>

struct fs_rx_slots {
    int *free; /* slots waiting to be posted, the next one last */
    int nfree;
    int posted;
};

/* n slots, all waiting, slot 0 first. 0, or -1 when out of memory. */
static inline int fs_rx_slots_init(struct fs_rx_slots *s, int n)
{
    s->free = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->free);
    s->nfree = s->posted = 0;
    if (!s->free)
        return -1;
    for (int i = 0; i < n; i++)
        s->free[s->nfree++] = n - 1 - i;
    return 0;
}

/* The slot the next receive takes (nfree > 0); fs_rx_slots_posted once it is posted. */
static inline int fs_rx_slots_next(const struct fs_rx_slots *s) { return s->free[s->nfree - 1]; }

static inline void fs_rx_slots_posted(struct fs_rx_slots *s)
{
    s->nfree--;
    s->posted++;
}

/* A posted receive completed (or was cancelled): its slot waits to be posted again. */
static inline void fs_rx_slots_done(struct fs_rx_slots *s, int slot)
{
    s->free[s->nfree++] = slot;
    s->posted--;
}

static inline void fs_rx_slots_release(struct fs_rx_slots *s)
{
    free(s->free);
    s->free = NULL;
    s->nfree = s->posted = 0;
}

#endif
