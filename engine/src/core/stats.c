/* SPDX-License-Identifier: BSD-3-Clause */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int fs_samples_grow(struct fs_samples *s)
{
    size_t cap = s->cap ? s->cap * 2 : 4096;
    double *v = realloc(s->v, cap * sizeof *v);
    if (!v)
        return -1;
    s->v = v;
    s->cap = cap;
    return 0;
}

void fs_samples_clear(struct fs_samples *s) { s->n = 0; }

void fs_samples_free(struct fs_samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double fs_percentile_sorted(const double *v, size_t n, double q)
{
    if (n == 0)
        return NAN;
    double h = (double)(n - 1) * q;
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n)
        return v[n - 1];
    return v[lo] + (h - (double)lo) * (v[lo + 1] - v[lo]);
}

int fs_summarize(double *v, size_t n, struct fs_summary *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 0)
        return -1;
    qsort(v, n, sizeof *v, cmp_double);
    /* Two-pass mean/variance: samples are close together, so the naive sum of squares would
     * lose precision at n = 10^7. */
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    double mean = sum / (double)n;
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    out->min = v[0];
    out->max = v[n - 1];
    out->mean = mean;
    out->stdev_valid = n > 1;
    out->stdev = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
    out->p50 = fs_percentile_sorted(v, n, 0.50);
    out->p99 = fs_percentile_sorted(v, n, 0.99);
    out->p999 = fs_percentile_sorted(v, n, 0.999);

    double *dev = malloc(n * sizeof *dev);
    if (!dev)
        return -1;
    for (size_t i = 0; i < n; i++)
        dev[i] = fabs(v[i] - out->p50);
    qsort(dev, n, sizeof *dev, cmp_double);
    out->mad = fs_percentile_sorted(dev, n, 0.50);
    free(dev);
    /* With MAD = 0 (more than half the samples identical, common with coarse clocks) the z-score
     * is undefined; then only values away from the median by more than 1% count. */
    for (size_t i = 0; i < n; i++) {
        double d = fabs(v[i] - out->p50);
        int outlier = out->mad > 0 ? 0.6745 * d / out->mad > FS_OUTLIER_Z
                                   : d > 0.01 * fabs(out->p50);
        out->outliers += (size_t)outlier;
    }
    return 0;
}

long fs_hist_index(double ns)
{
    int e;
    double m = frexp(ns < 1.0 ? 1.0 : ns, &e); /* ns = m * 2^e, 0.5 <= m < 1 */
    long sub = (long)((2.0 * m - 1.0) * FS_HIST_SUB_BUCKETS);
    if (sub > FS_HIST_SUB_BUCKETS - 1)
        sub = FS_HIST_SUB_BUCKETS - 1;
    return (long)(e - 1) * FS_HIST_SUB_BUCKETS + sub;
}
