# SPDX-License-Identifier: BSD-3-Clause
"""An exclusive file lock with a deadline, for testbed steps that must not run twice at once
(building the Soft-RoCE image, starting or stopping the one-node Slurm)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import time
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(
    lock_path: Path,
    deadline_s: float,
    busy: Callable[[], Exception],
    waiting: Callable[[], None] | None = None,
    poll_s: float = 0.2,
) -> Iterator[None]:
    """Holds an exclusive flock on lock_path, waiting at most deadline_s for it. When the
    deadline passes, raises busy() (the caller's message says what held it and what to do);
    `waiting` is called once when the lock is found taken."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        end = time.monotonic() + deadline_s
        told = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > end:
                    raise busy() from None
                if waiting and not told:
                    waiting()
                    told = True
                time.sleep(poll_s)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
