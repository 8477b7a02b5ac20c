"""Exit codes and the one exception type the CLI turns into a message (never a traceback)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_PEER = 3
EXIT_MEASURE = 4
EXIT_MISROUTED = 5
EXIT_UNSUPPORTED = 6
EXIT_WRONG_DATA = 11  # a collective's result differs from what the operation must give (engine's FS_EXIT_WRONG_DATA)


class FabscopeError(Exception):
    """A failure the user can act on: the message says what was asked, found, and the fix."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
