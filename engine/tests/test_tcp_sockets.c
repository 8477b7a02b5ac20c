/* SPDX-License-Identifier: BSD-3-Clause */
/* tcp_sockets.c on real loopback sockets of this process: a connection the library would have
 * opened is found and its data segments counted from the first snapshot on; the socket passed as
 * the control connection, listening sockets and non-TCP sockets are left out; a socket opened
 * after the first snapshot counts from zero. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "tcp_sockets.h"

/* A connected loopback pair; the listening socket stays open in *lfd. */
static int pair(int *lfd, int *a, int *b)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    *lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (*lfd < 0 || bind(*lfd, (struct sockaddr *)&sa, sizeof sa) || listen(*lfd, 4) ||
        getsockname(*lfd, (struct sockaddr *)&sa, &len))
        return -1;
    *a = socket(AF_INET, SOCK_STREAM, 0);
    if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof sa))
        return -1;
    *b = accept(*lfd, NULL, NULL);
    return *b < 0 ? -1 : 0;
}

/* `n` writes of 1000 B from a to b, each read before the next: n data segments. */
static void talk(int a, int b, int n)
{
    char buf[1000];
    memset(buf, 7, sizeof buf);
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        if (write(a, buf, sizeof buf) != (ssize_t)sizeof buf)
            return;
        while (got < sizeof buf) {
            ssize_t r = read(b, buf, sizeof buf - got);
            if (r <= 0)
                return;
            got += (size_t)r;
        }
    }
}

static double num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

int main(void)
{
    int lfd, a, b, ctl_l, ctl_a, ctl_b;
    CHECK(pair(&lfd, &a, &b) == 0);
    CHECK(pair(&ctl_l, &ctl_a, &ctl_b) == 0);
    int udp = socket(AF_INET, SOCK_DGRAM, 0);
    CHECK(udp >= 0);
    /* The control pair: its client end is "the control connection"; its server end is another
     * TCP socket of this process, as a library's would be. */
    struct fs_tcp_socks before, after;
    fs_tcp_socks_snap(&before, ctl_a);
    CHECK(before.read == 1);
    CHECK(before.n == 3); /* a, b, ctl_b: no listener, no UDP, not the control connection */
    talk(a, b, 50);
    talk(ctl_a, ctl_b, 40); /* the control connection's segments must not count */
    int l2, c, d;
    CHECK(pair(&l2, &c, &d) == 0);
    talk(c, d, 10); /* opened during the run: from zero */
    fs_tcp_socks_snap(&after, ctl_a);
    CHECK(after.n == 5);
    /* The counts are raw JSON numbers (u64 exactly): read them as the front end does, printed. */
    cJSON *made = fs_tcp_socks_json(&before, &after);
    CHECK(made != NULL);
    char *text = cJSON_PrintUnformatted(made);
    cJSON_Delete(made);
    cJSON *o = cJSON_Parse(text);
    cJSON_free(text);
    CHECK(num(o, "sockets") == 5);
    /* 50 from a, 10 from c; ctl_b only received (its data segments: 0); c's SYN is no data. */
    CHECK(num(o, "data_segs_out") == 60);
    CHECK(num(o, "total_retrans") == 0);
    CHECK(cJSON_GetObjectItemCaseSensitive(o, "not_read") == NULL);
    cJSON_Delete(o);
    struct fs_tcp_socks unread = {0};
    CHECK(fs_tcp_socks_json(&unread, &after) == NULL);
    int fds[] = {lfd, a, b, ctl_l, ctl_a, ctl_b, udp, l2, c, d};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
        close(fds[i]);
    return CHECK_DONE();
}
