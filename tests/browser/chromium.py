# SPDX-License-Identifier: BSD-3-Clause
"""Open a local HTML file in real headless Chromium, offline, and report what a person would see.

Talks the DevTools protocol over --remote-debugging-pipe (fd 3 in, fd 4 out, NUL-terminated JSON),
so one browser process gives: every console message and uncaught exception, every network request
the page tried (with the network emulated offline and DNS mapped to nothing), the rendered size of
each chart, and a full-page screenshot. Every read has a deadline; the browser's PID is kept and
only that process group is ended.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
    "--disable-extensions", "--mute-audio", "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-pipe", "--window-size=1280,2000",
]

MEASURE_SVGS = """JSON.stringify([...document.querySelectorAll('svg')].map(s => {
  const r = s.getBoundingClientRect(); return [r.width, r.height]; }))"""


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class PageReport:
    console: list[str] = field(default_factory=list)  # error/warning console lines and exceptions
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    svg_sizes: list[tuple[float, float]] = field(default_factory=list)
    screenshot_png: bytes = b""


class _Pipe:
    def __init__(self, to_browser: int, from_browser: int) -> None:
        self.to_browser, self.from_browser = to_browser, from_browser
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("chromium did not answer on the DevTools pipe in time")
            ready, _, _ = select.select([self.from_browser], [], [], left)
            if ready:
                chunk = os.read(self.from_browser, 1 << 20)
                if not chunk:
                    raise EOFError("chromium closed the DevTools pipe")
                self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 20.0) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            got = self._read_message(deadline)
            if got.get("id") == self.next_id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                result: dict[str, Any] = got.get("result", {})
                return result
            self.events.append(got)

    def wait_event(self, method: str, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        for i, ev in enumerate(self.events):
            if ev.get("method") == method:
                return self.events.pop(i)
        while True:
            got = self._read_message(deadline)
            if got.get("method") == method:
                return got
            self.events.append(got)

    def drain(self, seconds: float) -> None:
        """Collect the events that arrive within `seconds` (late console messages)."""
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._read_message(deadline))
        except TimeoutError:
            pass


def open_offline(page: Path, profile_dir: Path, timeout: float = 60.0) -> PageReport:
    """Load `page` offline in headless Chromium; return console errors, requests, SVG sizes, a screenshot."""
    binary = chromium_binary()
    assert binary, "chromium is not installed (deps/apt-packages.txt lists it; `make setup`)"
    to_browser_r, to_browser_w = os.pipe()
    from_browser_r, from_browser_w = os.pipe()

    def child_fds() -> None:  # runs in the child: the pipe ends become fd 3 and 4 (via fds above 9,
        # so that moving one cannot overwrite the other)
        high_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
        high_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
        os.dup2(high_r, 3)
        os.dup2(high_w, 4)

    proc = subprocess.Popen(  # close_fds runs after child_fds: keep 3 and 4, close the rest
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=child_fds, pass_fds=(3, 4),
        start_new_session=True,
    )
    os.close(to_browser_r)
    os.close(from_browser_w)
    pipe = _Pipe(to_browser_w, from_browser_r)
    report = PageReport()
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for method in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
            pipe.call(method, session=session)
        pipe.call("Network.emulateNetworkConditions",
                  {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}, session=session)
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": False}, session=session)
        pipe.call("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
        pipe.wait_event("Page.loadEventFired", timeout=timeout)
        pipe.drain(0.5)
        sizes = pipe.call("Runtime.evaluate", {"expression": MEASURE_SVGS, "returnByValue": True}, session=session)
        report.svg_sizes = [(float(w), float(h)) for w, h in json.loads(sizes["result"]["value"])]
        shot = pipe.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                         session=session, timeout=timeout)
        report.screenshot_png = base64.b64decode(shot["data"])
        for ev in pipe.events:
            method, params = ev.get("method"), ev.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                report.console.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                report.console.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                report.console.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
            elif method == "Network.requestWillBeSent":
                report.requests.append(str(params.get("request", {}).get("url")))
        try:
            pipe.call("Browser.close", timeout=5)
        except (TimeoutError, EOFError):
            pass
    finally:
        os.close(to_browser_w)
        os.close(from_browser_r)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the group this test started (its own session), nothing else
            proc.wait()
    return report
