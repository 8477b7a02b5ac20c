/* SPDX-License-Identifier: BSD-3-Clause */
#include "check.h"
#include "stats.h"

int main(void)
{
    /* n = 1: every percentile is the sample; no spread. */
    double one[] = {5.0};
    struct fs_summary s;
    CHECK(fs_summarize(one, 1, &s) == 0);
    CHECK(s.min == 5 && s.p50 == 5 && s.p99 == 5 && s.max == 5 && !s.stdev_valid);

    /* Linear interpolation between order statistics (numpy's default). */
    double v[] = {4, 1, 3, 2};
    CHECK(fs_summarize(v, 4, &s) == 0);
    CHECK_NEAR(s.p50, 2.5, 1e-12);
    CHECK_NEAR(s.p99, 3.97, 1e-12);
    CHECK_NEAR(s.mean, 2.5, 1e-12);
    CHECK_NEAR(s.stdev, 1.2909944487358056, 1e-12);

    /* Ties and one far outlier: MAD = 0 falls back to the 1 % rule. */
    double ties[] = {10, 10, 10, 10, 10, 10, 10, 10, 10, 500};
    CHECK(fs_summarize(ties, 10, &s) == 0);
    CHECK(s.mad == 0);
    CHECK(s.outliers == 1);

    /* Spread data: the outlier is found by modified z-score. */
    double spread[] = {1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98, 9.0};
    CHECK(fs_summarize(spread, 8, &s) == 0);
    CHECK(s.outliers == 1);
    CHECK(s.max == 9.0);

    CHECK(fs_summarize(one, 0, &s) == -1);

    /* Histogram buckets: [1, 2) ns is octave 0; 1000 ns is in octave 9
     * (1000 / 512 = 1.953: sub 30); 1024 ns starts octave 10; the bucket width stays below 1/32 of its lower bound. */
    CHECK(fs_hist_index(0.2) == 0 && fs_hist_index(1.0) == 0);
    CHECK(fs_hist_index(1.99) == FS_HIST_SUB_BUCKETS - 1);
    CHECK(fs_hist_index(1000.0) == 9 * FS_HIST_SUB_BUCKETS + 30);
    CHECK(fs_hist_index(1024.0) == 10 * FS_HIST_SUB_BUCKETS);
    CHECK(fs_hist_index(1056.0) == 10 * FS_HIST_SUB_BUCKETS + 1);
    CHECK(fs_hist_index(1055.9) == 10 * FS_HIST_SUB_BUCKETS);
    return CHECK_DONE();
}
