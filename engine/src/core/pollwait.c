/* SPDX-License-Identifier: BSD-3-Clause */
/* See pollwait.h. */
#define _GNU_SOURCE
#include "pollwait.h"

#include <errno.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <unistd.h>

int fs_pollwait_open(struct fs_pollwait *w)
{
    w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    return w->tfd < 0 ? -1 : 0;
}

void fs_pollwait_close(struct fs_pollwait *w)
{
    if (w->tfd >= 0)
        close(w->tfd);
    w->tfd = -1;
}

int fs_pollwait(struct fs_pollwait *w, fs_poll_fn pollfn, int fd, short events, int ms)
{
    struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = w->tfd, .events = POLLIN}};
    if (ms <= 0) { /* a look without waiting returns before rpoll's counting starts */
        int rc = pollfn(p, 1, 0);
        return rc < 0 ? -1 : rc > 0 ? p[0].revents : 0;
    }
    if (w->tfd < 0) {
        errno = EBADF;
        return -1;
    }
    /* Arming also clears an expiry left from an earlier wait (timerfd_settime resets the count),
     * so the timer needs no read afterwards. */
    struct itimerspec its = {.it_value = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L}};
    if (timerfd_settime(w->tfd, 0, &its, NULL))
        return -1;
    int rc;
    do
        rc = pollfn(p, 2, -1); /* bounded by the timer, which is in the set */
    while (rc < 0 && errno == EINTR);
    return rc < 0 ? -1 : p[0].revents;
}
