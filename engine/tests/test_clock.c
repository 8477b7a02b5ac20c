/* SPDX-License-Identifier: BSD-3-Clause */
/* The engine's clock: which source it picks and why, and that the TSC path keeps CLOCK_MONOTONIC's
 * time line and rate. The live checks run on this machine's real /proc and /sys; the refusal
 * cases use copies of them with one thing changed. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
}

/* A copy of this machine's cpuinfo flags line with `drop` removed, and `clocksource`. */
static void fake_root(const char *root, const char *drop, const char *clocksource)
{
    char path[512], line[8192], flags[8192] = "flags\t\t: fpu tsc constant_tsc nonstop_tsc\n";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            snprintf(flags, sizeof flags, "%s", line);
            break;
        }
    if (f)
        fclose(f);
    if (drop) {
        char *p = strstr(flags, drop);
        if (p)
            memmove(p, p + strlen(drop), strlen(p + strlen(drop)) + 1);
    }
    const char *dirs[] = {"/proc", "/sys", "/sys/devices", "/sys/devices/system",
                          "/sys/devices/system/clocksource",
                          "/sys/devices/system/clocksource/clocksource0"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(path, sizeof path, "%s%s", root, dirs[i]);
        mkdir(path, 0755);
    }
    snprintf(path, sizeof path, "%s/proc/cpuinfo", root);
    write_file(path, flags);
    snprintf(path, sizeof path, "%s/sys/devices/system/clocksource/clocksource0/current_clocksource",
             root);
    snprintf(line, sizeof line, "%s\n", clocksource);
    write_file(path, line);
}

/* fs_now_ns() and CLOCK_MONOTONIC read together: the tightest of several tries, so that a
 * preemption between the two reads (a loaded CI machine) does not count as clock error. */
static void read_both(uint64_t *now, uint64_t *mono)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 100; i++) {
        uint64_t a = fs_monotonic_ns(), n = fs_now_ns(), b = fs_monotonic_ns();
        if (b - a < best) {
            best = b - a;
            *now = n;
            *mono = a + (b - a) / 2;
        }
    }
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&t, &t) != 0)
        ;
}

int main(void)
{
    struct fs_clock_info ci;
    struct fs_err err = {0};

    CHECK(fs_clock_setup("monotonic", "", &ci, &err) == 0);
    CHECK(strcmp(ci.source, "clock_gettime(CLOCK_MONOTONIC)") == 0);
    CHECK(ci.tsc_ghz == 0 && ci.why_not_tsc[0] == '\0' && ci.overhead_ns > 0);

    /* auto: the TSC exactly when this machine allows it, and otherwise the reason. */
    const char *why = fs_tsc_unusable("");
    CHECK(fs_clock_setup("auto", "", &ci, &err) == 0);
    if (why) {
        printf("this machine: no TSC clock (%s)\n", why);
        CHECK(strcmp(ci.why_not_tsc, why) == 0);
        CHECK(fs_clock_setup("tsc", "", &ci, &err) == -1 && err.code == FS_EXIT_USAGE);
    } else {
        CHECK(strncmp(ci.source, "tsc", 3) == 0 && ci.tsc_ghz > 0.1);
        /* Same time line as CLOCK_MONOTONIC, and the same rate over 200 ms to 1e-4. */
        uint64_t t0, m0, t1, m1;
        read_both(&t0, &m0);
        CHECK(llabs((long long)(t0 - m0)) < 50000);
        sleep_ms(200);
        read_both(&t1, &m1);
        double dt = (double)(t1 - t0), dm = (double)(m1 - m0);
        printf("tsc %.6f GHz; 200 ms: tsc %.0f ns, monotonic %.0f ns\n", ci.tsc_ghz, dt, dm);
        CHECK(dm > 1.9e8 && fabs(dt - dm) < 1e-4 * dm + 2000);
        CHECK(ci.overhead_ns > 0 && ci.overhead_ns < 1000);
    }

    /* Refusals, on copies of this machine's files with one thing changed. */
    char root[] = "/tmp/fs-clock-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    fake_root(root, NULL, "tsc");
#if defined(__x86_64__)
    const int live_ok = why == NULL;
    if (live_ok) /* this machine's own flags, with clocksource tsc: accepted */
        CHECK(fs_tsc_unusable(root) == NULL);
    fake_root(root, " nonstop_tsc", "tsc");
    why = fs_tsc_unusable(root);
    CHECK(why && strstr(why, "not invariant"));
    fake_root(root, NULL, "kvm-clock");
    why = fs_tsc_unusable(root);
    CHECK(why && strstr(why, "'kvm-clock'"));
    err.code = 0;
    CHECK(fs_clock_setup("tsc", root, &ci, &err) == -1 && err.code == FS_EXIT_USAGE);
    CHECK(strstr(err.msg, "--clock tsc") && strstr(err.msg, "kvm-clock") &&
          strstr(err.msg, "--clock monotonic"));
    CHECK(fs_clock_setup("auto", root, &ci, &err) == 0);
    CHECK(strcmp(ci.source, "clock_gettime(CLOCK_MONOTONIC)") == 0 &&
          strstr(ci.why_not_tsc, "kvm-clock"));
#endif
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    return CHECK_DONE();
}
