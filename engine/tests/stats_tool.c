/* SPDX-License-Identifier: BSD-3-Clause */
/* stdin: one sample a line. stdout: the engine's summary of them as JSON. */
#include <stdio.h>
#include <stdlib.h>

#include "stats.h"

int main(void)
{
    struct fs_samples s = {0};
    double x;
    while (scanf("%lf", &x) == 1)
        if (fs_samples_push(&s, x))
            return 1;
    struct fs_summary m;
    if (fs_summarize(s.v, s.n, &m)) {
        puts("{\"n\": 0}");
        return 0;
    }
    printf("{\"n\": %zu, \"min\": %.17g, \"p50\": %.17g, \"mean\": %.17g, \"stdev\": %s%.17g, "
           "\"p99\": %.17g, \"p999\": %.17g, \"max\": %.17g, \"mad\": %.17g, \"outliers\": %zu}\n",
           m.n, m.min, m.p50, m.mean, m.stdev_valid ? "" : "null, \"_stdev_raw\": ", m.stdev,
           m.p99, m.p999, m.max, m.mad, m.outliers);
    fs_samples_free(&s);
    return 0;
}
