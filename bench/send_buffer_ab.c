/* SPDX-License-Identifier: BSD-3-Clause */
/* send_buffer_ab SECONDS SEGMENT_MS [A B]: one loopback TCP connection, a receiver thread on CPU 0 that
 * reads 1 MiB messages with blocking reads (as qperf's tcp_bw server does) and a sender thread on
 * CPU 1 that writes 1 MiB messages with blocking writes, switching every SEGMENT_MS between two
 * source buffers A and B (default: never_written written), each one of
 *   never_written  malloc'd and only read: every page but the first is the kernel's shared zero
 *                  page, as qperf's client buffer is;
 *   written        written with a pattern: 256 distinct pages of real memory, as fabscope's and an
 *                  application's buffer is;
 *   one_page       one written 4 KiB page mapped 256 times over the 1 MiB: real memory with the
 *                  zero page's footprint (what the sender's copy reads fits in the L1 cache).
 * Prints one JSON object: every segment's buffer, bytes and nanoseconds, and the median of the
 * ratios B/A over adjacent segments.
 *
 * Why within one connection: loopback TCP bandwidth on this VM moves by 20-50 % from one
 * connection to the next at the same CPU placement (bench/RESULTS.md), so two tools, or one tool
 * with two buffers, compared run against run resolve 10 % effects at best. Adjacent segments of one
 * connection share its level; what differs between them is only the buffer the sender copies from.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench_cpu.h"

#define MSG (1u << 20)
#define MAX_SEGMENTS 100000

static void pin_or_exit(int cpu)
{
    if (pin(cpu) != 0) {
        fprintf(stderr, "send_buffer_ab: cannot run on CPU %d\n", cpu);
        exit(1);
    }
}

static int receiver_fd = -1;

static void *receive(void *arg)
{
    (void)arg;
    pin_or_exit(0);
    char *buf = malloc(MSG);
    if (!buf)
        exit(1);
    memset(buf, 0, MSG); /* the receiver's buffer is real memory in every tool */
    for (;;) {
        size_t got = 0;
        while (got < MSG) {
            ssize_t n = read(receiver_fd, buf + got, MSG - got);
            if (n <= 0)
                return NULL;
            got += (size_t)n;
        }
    }
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

#define PAGE 4096u

/* One of the buffer kinds above, or NULL for an unknown name. */
static char *make_buffer(const char *kind)
{
    if (strcmp(kind, "never_written") == 0)
        /* glibc serves 1 MiB from a fresh mmap, and reading untouched anonymous pages maps the
         * shared zero page (qperf's client buffer; its Rss during a run is 16 kB). */
        return malloc(MSG);
    if (strcmp(kind, "written") == 0) {
        char *b = malloc(MSG);
        if (b)
            for (size_t i = 0; i < MSG; i++)
                b[i] = (char)(0xa5 ^ (i >> 12));
        return b;
    }
    if (strcmp(kind, "one_page") == 0) {
        FILE *f = tmpfile();
        char page[PAGE];
        memset(page, 0xa5, sizeof page);
        if (!f || fwrite(page, 1, sizeof page, f) != sizeof page || fflush(f))
            return NULL;
        char *b = mmap(NULL, MSG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b == MAP_FAILED)
            return NULL;
        for (size_t off = 0; off < MSG; off += PAGE)
            if (mmap(b + off, PAGE, PROT_READ, MAP_SHARED | MAP_FIXED, fileno(f), 0) == MAP_FAILED)
                return NULL;
        return b;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: send_buffer_ab SECONDS SEGMENT_MS [A B] (never_written, written, one_page)\n");
        return 2;
    }
    const char *kind_a = argc == 5 ? argv[3] : "never_written", *kind_b = argc == 5 ? argv[4] : "written";
    char *buf_a = make_buffer(kind_a), *buf_b = make_buffer(kind_b);
    if (!buf_a || !buf_b) {
        fprintf(stderr, "send_buffer_ab: a buffer is never_written, written or one_page (or it could not be made)\n");
        return 2;
    }
    uint64_t total_ns = (uint64_t)(atof(argv[1]) * 1e9), seg_ns = (uint64_t)(atof(argv[2]) * 1e6);
    if (total_ns == 0 || seg_ns == 0 || total_ns / seg_ns > MAX_SEGMENTS) {
        fprintf(stderr, "send_buffer_ab: SECONDS and SEGMENT_MS must be > 0 and make at most %d segments\n",
                MAX_SEGMENTS);
        return 2;
    }
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&a, &alen)) {
        perror("send_buffer_ab: listen");
        return 1;
    }
    int sfd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(sfd, (struct sockaddr *)&a, sizeof a)) {
        perror("send_buffer_ab: connect");
        return 1;
    }
    receiver_fd = accept(lfd, NULL, NULL);
    pthread_t rt;
    pthread_create(&rt, NULL, receive, NULL);
    pin_or_exit(1);

    static uint64_t bytes[MAX_SEGMENTS], ns[MAX_SEGMENTS];
    size_t segs = 0;
    uint64_t start = now_ns();
    while (now_ns() - start < total_ns && segs < MAX_SEGMENTS) {
        const char *src = segs % 2 ? buf_b : buf_a;
        uint64_t t0 = now_ns(), t = t0, b = 0;
        while (t - t0 < seg_ns) {
            if (write_all(sfd, src, MSG)) {
                perror("send_buffer_ab: write");
                return 1;
            }
            b += MSG;
            t = now_ns();
        }
        bytes[segs] = b;
        ns[segs] = t - t0;
        segs++;
    }
    shutdown(sfd, SHUT_WR);
    pthread_join(rt, NULL);

    /* Segment 0 is the connection's start (slow start, cold caches): left out of the ratios. */
    static double ratios[MAX_SEGMENTS];
    size_t nr = 0;
    for (size_t i = 2; i < segs; i++) {
        double r_prev = (double)bytes[i - 1] / (double)ns[i - 1], r_this = (double)bytes[i] / (double)ns[i];
        ratios[nr++] = i % 2 ? r_this / r_prev : r_prev / r_this; /* B / A */
    }
    qsort(ratios, nr, sizeof ratios[0], cmp_double);
    printf("{\"a\": \"%s\", \"b\": \"%s\", \"segment_ms\": %g, \"median_ratio_b_over_a\": %.4f, \"pairs\": %zu, "
           "\"segments\": [", kind_a, kind_b, (double)seg_ns / 1e6, nr ? ratios[nr / 2] : 0.0, nr);
    for (size_t i = 0; i < segs; i++)
        printf("%s{\"buffer\": \"%s\", \"bytes\": %llu, \"ns\": %llu}", i ? ", " : "",
               i % 2 ? kind_b : kind_a, (unsigned long long)bytes[i], (unsigned long long)ns[i]);
    printf("]}\n");
    return 0;
}
