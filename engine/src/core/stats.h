/* SPDX-License-Identifier: BSD-3-Clause */
/* Statistics over every sample: exact order statistics, no ring buffer. Records also carry a
 * compact log-linear histogram of the samples (for comparing two runs' distributions), never
 * used for the percentiles themselves. */
#ifndef FS_STATS_H
#define FS_STATS_H

#include <stddef.h>

struct fs_samples {
    double *v;
    size_t n, cap;
};

int fs_samples_grow(struct fs_samples *s);
/* Inline: it runs between two iterations of a latency loop, on the measured path. */
static inline int fs_samples_push(struct fs_samples *s, double x)
{
    if (s->n == s->cap && fs_samples_grow(s))
        return -1;
    s->v[s->n++] = x;
    return 0;
}
void fs_samples_clear(struct fs_samples *s);
void fs_samples_free(struct fs_samples *s);

struct fs_summary {
    size_t n;
    double min, p50, mean, stdev, p99, p999, max;
    int stdev_valid; /* 0 when n < 2: a single sample has no spread */
    size_t outliers;  /* modified z-score (median/MAD) above FS_OUTLIER_Z */
    double mad;
};

/* Iglewicz & Hoaglin: |0.6745 (x - median) / MAD| > 3.5 marks an outlier. */
#define FS_OUTLIER_Z 3.5

/* Sorts v in place. Percentiles interpolate linearly between order statistics (numpy's default),
 * so tests can compare against numpy exactly. */
int fs_summarize(double *v, size_t n, struct fs_summary *out);
double fs_percentile_sorted(const double *v, size_t n, double q);

/* Log-linear histogram ("log2-linear" in the record): each power of two of nanoseconds is cut into
 * FS_HIST_SUB_BUCKETS equal buckets, so a bucket is at most 1/32 of its lower bound wide and its
 * midpoint is within 1.6 % of any sample in it. x < 1 ns counts as 1 ns. The front end decodes
 * it (python/fabscope/results/histogram.py) with the same formula. */
#define FS_HIST_SUB_BUCKETS 32
long fs_hist_index(double ns);

#endif
