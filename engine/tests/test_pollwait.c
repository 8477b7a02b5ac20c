/* SPDX-License-Identifier: BSD-3-Clause */
/* fs_pollwait: a bounded wait that never gives the poll function a timeout (librdmacm's rpoll
 * before v63 stops honouring timeouts after its first one; see pollwait.h). The poll function here
 * is poll(2) behind a recorder that fails the test on any timeout other than 0 or -1. */
#include <poll.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "clock.h"
#include "pollwait.h"

static int calls, bad_timeouts, last_nfds, last_timeout;

static int recording_poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    calls++;
    last_nfds = (int)nfds;
    last_timeout = timeout;
    if (timeout != 0 && timeout != -1)
        bad_timeouts++;
    if (timeout == -1 && nfds < 2)
        bad_timeouts++; /* no deadline at all: this would wait forever */
    return poll(fds, nfds, timeout);
}

int main(void)
{
    struct fs_pollwait w = {.tfd = -1};
    int p[2];
    CHECK(pipe(p) == 0);

    /* Without a timer, a wait with a deadline is refused rather than made unbounded. */
    CHECK(fs_pollwait(&w, recording_poll, p[0], POLLIN, 20) == -1 && calls == 0);
    CHECK(fs_pollwait_open(&w) == 0 && w.tfd >= 0);

    /* Nothing to read: the deadline ends the wait (the timer, not a poll timeout), not before it. */
    uint64_t t0 = fs_now_ns();
    CHECK(fs_pollwait(&w, recording_poll, p[0], POLLIN, 20) == 0);
    CHECK(fs_now_ns() - t0 >= 19000000ull);
    CHECK(last_nfds == 2 && last_timeout == -1);

    /* Again, right away: an expiry left by the last wait does not end this one early. */
    t0 = fs_now_ns();
    CHECK(fs_pollwait(&w, recording_poll, p[0], POLLIN, 20) == 0);
    CHECK(fs_now_ns() - t0 >= 19000000ull);

    /* Ready: the descriptor's own events come back. */
    CHECK(write(p[1], "x", 1) == 1);
    CHECK((fs_pollwait(&w, recording_poll, p[0], POLLIN, 1000) & POLLIN) != 0);

    /* A look without waiting: one descriptor, timeout 0 (rpoll returns before its counting). */
    CHECK((fs_pollwait(&w, recording_poll, p[0], POLLIN, 0) & POLLIN) != 0);
    CHECK(last_nfds == 1 && last_timeout == 0);
    char c;
    CHECK(read(p[0], &c, 1) == 1);
    CHECK(fs_pollwait(&w, recording_poll, p[0], POLLIN, 0) == 0);

    CHECK(bad_timeouts == 0);
    fs_pollwait_close(&w);
    CHECK(w.tfd == -1);
    close(p[0]);
    close(p[1]);
    return CHECK_DONE();
}
