# SPDX-License-Identifier: BSD-3-Clause
"""Every exit code of fabscope (docs/exit-codes.md is their table) and the one exception type the CLI
turns into a message (never a traceback). A command's rule for combining many runs' codes is
plan.rows_exit_code; no other module defines an exit code."""

from __future__ import annotations

EXIT_OK = 0
EXIT_WARN = 1  # `fabscope doctor`: a warning (works, but slower than it should)
EXIT_USAGE = 2
EXIT_PEER = 3
EXIT_MEASURE = 4
EXIT_MISROUTED = 5
EXIT_UNSUPPORTED = 6
EXIT_DOCTOR_ERROR = 7  # `fabscope doctor`: an error finding
EXIT_BAD_FABRIC = 8  # `fabscope matrix` found a bad node or a bad link
EXIT_REGRESSION = 9  # `fabscope compare`: at least one case is a regression
EXIT_INCONCLUSIVE = 10  # ... none is, but a change beyond the threshold lacks the evidence to call it
EXIT_CHECK_FAILED = 11  # `fabscope check`: an expectation failed; `fabscope health`: the node is unhealthy
EXIT_WRONG_DATA = 12  # a collective's result differs from what the operation must give (engine's FS_EXIT_WRONG_DATA)
EXIT_CONGESTED = 13  # `fabscope load` named congestion: loss, unfair or starved flows
EXIT_TIMEOUT = 124  # a testbed guest run that did not end in time (timeout(1)'s code)
EXIT_TESTBED_FAILURE = 125  # the testbed itself failed (no guest, no image)
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT


class FabscopeError(Exception):
    """A failure the user can act on: the message says what was asked, found, and the fix."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
