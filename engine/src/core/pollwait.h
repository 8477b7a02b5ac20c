/* SPDX-License-Identifier: BSD-3-Clause */
/* A bounded wait on one descriptor that never hands a timeout to the poll function.
 *
 * librdmacm before v63 (Debian 12 ships v44) leaks its poll counter whenever rpoll() returns on
 * its timeout (fixed upstream by a1747742e "librdmacm: Fix rpoll in case of timeout"): from then
 * on every rpoll() with a timeout spins until its rsocket is ready and never times out. A
 * receiver that has all its messages and waits for the peer's count on the control channel then
 * never comes back (bw/bibw in block mode hung at the end of the warmup). The same rpoll runs
 * behind poll() under librspreload. So the deadline is a timerfd in the poll set and the poll
 * function waits without a timeout: rpoll returns when the timer fd is readable, through its
 * path that keeps the count right. For kernel sockets the wait is the same as poll(fd, ms). */
#ifndef FS_POLLWAIT_H
#define FS_POLLWAIT_H

#include <poll.h>

struct fs_pollwait {
    int tfd; /* CLOCK_MONOTONIC timerfd; -1 before fs_pollwait_open */
};

typedef int (*fs_poll_fn)(struct pollfd *fds, nfds_t nfds, int timeout);

/* 0, or -1 with errno (timerfd_create failed). */
int fs_pollwait_open(struct fs_pollwait *w);
void fs_pollwait_close(struct fs_pollwait *w);

/* Waits up to `ms` (>= 0) for `events` on `fd` through `pollfn` (poll, or rsocket's rpoll).
 * Returns fd's revents (> 0), 0 when the deadline passed first, -1 on an error of the poll. */
int fs_pollwait(struct fs_pollwait *w, fs_poll_fn pollfn, int fd, short events, int ms);

#endif
