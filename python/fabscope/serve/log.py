# SPDX-License-Identifier: BSD-3-Clause
"""serve's log: one JSON line per run and per refusal."""

from __future__ import annotations

import datetime
import json
import sys
import threading
import time
from typing import IO, Any

# Refusal log lines per second before they are counted instead of written (a flood stays one line).
REFUSAL_LOG_RATE = 20


class Log:
    """JSON lines, one per event, safe to call from any thread; refusals are rate limited so a flood
    of hostile connections costs a line a second, not a line each."""

    def __init__(self, path: str | None) -> None:
        self.stream: IO[str] = open(path, "a", encoding="utf-8") if path else sys.stderr
        self.lock = threading.Lock()
        self.window = 0.0
        self.in_window = 0
        self.suppressed = 0

    def event(self, event: str, message: str, **fields: Any) -> None:
        now = time.time()
        with self.lock:
            if event == "refused":
                if now - self.window >= 1.0:
                    self.window, self.in_window = now, 0
                self.in_window += 1
                if self.in_window > REFUSAL_LOG_RATE:
                    self.suppressed += 1
                    return
            line: dict[str, Any] = {
                "time": datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(timespec="milliseconds"),
                "event": event, **fields, "message": message,
            }
            if self.suppressed:
                line["refusals_not_logged"], self.suppressed = self.suppressed, 0
            try:
                self.stream.write(json.dumps(line, default=str) + "\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass  # a full disk or a closed stderr must not stop serve

    def close(self) -> None:
        if self.stream is not sys.stderr:
            self.stream.close()
