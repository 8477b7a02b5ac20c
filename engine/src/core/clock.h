/* The only clock the engine reads. clock_gettime(CLOCK_MONOTONIC) through the vDSO: it needs no
 * CPU frequency (perftest's "Conflicting CPU frequency values" cannot happen) and its cost is
 * measured at start and reported with every result. */
#ifndef FS_CLOCK_H
#define FS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t fs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct fs_clock_info {
    const char *source;
    double overhead_ns;  /* mean cost of one read */
    double resolution_ns;
};

void fs_clock_calibrate(struct fs_clock_info *info);

#endif
