# SPDX-License-Identifier: BSD-3-Clause
"""The engine's counter snapshot for the exporter: ``fabscope-engine --counters-json`` once, or one
long-lived ``--counters-serve`` per collector (SnapshotEngine), reading its loosely typed JSON, and
unwinding 32-bit wraps between scrapes."""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import EXIT_MEASURE, FabscopeError
from ..results.deltas import as_count, wrapped_at_32
from ..untyped import mapping

__all__ = [
    "U32",
    "CounterUnwrapper",
    "SnapshotEngine",
    "as_count",
    "as_list",
    "counters_snapshot",
    "int_text",
    "mtu_text",
    "rate_bytes",
    "state_code",
    "unit_info",
    "unit_table",
    "unwound_offset",
]

U32 = 1 << 32
_ENGINE_TIMEOUT_S = 5.0
_STATE_RE = re.compile(r"^\s*(\d+)\s*:")
_RATE_RE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")

# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# unwrapping 32-bit counters between scrapes
# ---------------------------------------------------------------------------------------------


def unwound_offset(last: int, offset: int, raw: int, bits: int | None, overflow: str | None) -> int:
    """What to add to ``raw``, a series' new reading, given its previous reading and offset: one more
    2^32 after a wrap, nothing after a reset. The rule for every series; CounterUnwrapper keeps the
    state by series name, the collector's port and netdev plans keep their own."""
    if raw >= last:
        return offset
    return offset + U32 if wrapped_at_32(last, raw, bits, overflow) else 0


class CounterUnwrapper:
    """Turns raw counter readings into monotonic values, one state per series.

    A reading below the previous one is a 32-bit wrap only by the run deltas' rule
    (:func:`fabscope.results.deltas.wrapped_at_32`: the engine says the counter wraps at 32 bits).
    Anything else going down is a reset: the output goes down with it, and Prometheus treats that
    as a counter reset.
    """

    def __init__(self) -> None:
        self._state: dict[tuple[str, tuple[str, ...]], tuple[int, int]] = {}
        self._seen: set[tuple[str, tuple[str, ...]]] = set()

    def value(self, key: tuple[str, tuple[str, ...]], raw: int, bits: int | None, overflow: str | None) -> int:
        self._seen.add(key)
        prev = self._state.get(key)
        offset = 0
        if prev is not None:
            last, offset = prev
            if raw == last:  # most counters between two scrapes: nothing to store
                return raw + offset
            offset = unwound_offset(last, offset, raw, bits, overflow)
        self._state[key] = (raw, offset)
        return raw + offset

    def forget_unseen(self) -> None:
        """End of a scrape: drop the state of series it did not see (a device that went away starts
        afresh if it comes back, as a re-created device's counters do)."""
        self._state = {k: v for k, v in self._state.items() if k in self._seen}
        self._seen = set()


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# the engine's snapshot
# ---------------------------------------------------------------------------------------------


def counters_snapshot(engine: Path, sysfs_root: str | None, timeout_s: float = _ENGINE_TIMEOUT_S) -> dict[str, Any]:
    """One ``fabscope.counters/1`` snapshot from the engine (raw values, and the units table)."""

    env = dict(os.environ)
    if sysfs_root is not None:
        env["FABSCOPE_SYSFS_ROOT"] = sysfs_root
    try:
        out = subprocess.run(
            [str(engine), "--counters-json"], capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise FabscopeError(
            f"{engine} --counters-json did not answer within {timeout_s:.0f} s (a hung sysfs read?)", EXIT_MEASURE
        ) from exc
    except OSError as exc:
        raise FabscopeError(f"{engine} could not run ({exc.strerror}); rebuild it: `make setup`", EXIT_MEASURE) from exc
    if out.returncode != 0:
        raise FabscopeError(f"{engine} --counters-json failed ({out.returncode}): {out.stderr.strip()}", EXIT_MEASURE)
    return _parsed(engine, "--counters-json", out.stdout)


def _parsed(engine: Path, mode: str, text: str | bytes) -> dict[str, Any]:
    snap: dict[str, Any] = json.loads(text)
    if snap.get("schema") != "fabscope.counters/1":
        raise FabscopeError(
            f"{engine} {mode} printed schema {snap.get('schema')!r}, expected 'fabscope.counters/1'; "
            "rebuild the engine (`make setup`)",
            EXIT_MEASURE,
        )
    return snap


class SnapshotEngine:
    """One long-lived ``fabscope-engine --counters-serve`` for the exporter's lifetime.

    A snapshot is one line written to its stdin and one JSON line read back. The engine keeps the
    counter files open between snapshots (re-reading a sysfs file is a fraction of opening it), and
    the process start is paid once. Every read has a deadline: an engine that does not answer in
    ``timeout_s`` is killed and the scrape fails naming it; one that died is started again, once
    per snapshot, so a crash costs no scrape and a crash loop costs each scrape one attempt.
    """

    def __init__(self, engine: Path, sysfs_root: str | None, timeout_s: float = _ENGINE_TIMEOUT_S) -> None:
        self.engine = engine
        self.sysfs_root = sysfs_root
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = bytearray()

    def snapshot(self) -> dict[str, Any]:
        """The next ``fabscope.counters/1`` snapshot (raises FabscopeError, exit code EXIT_MEASURE)."""
        fresh = self._proc is None
        try:
            return self._ask()
        except _EngineGone as gone:
            self.close()
            if fresh:
                raise FabscopeError(f"{self.engine} --counters-serve ended ({gone}); rebuild it: `make setup`",
                                    EXIT_MEASURE) from None
        try:  # it had worked before: a fresh engine gets one try
            return self._ask()
        except _EngineGone as gone:
            self.close()
            raise FabscopeError(f"{self.engine} --counters-serve ended twice in a row ({gone})", EXIT_MEASURE) from None

    @property
    def pid(self) -> int | None:
        """The running engine's process id (None before the first snapshot or after a failure)."""
        return self._proc.pid if self._proc is not None else None

    def close(self, *, kill: bool = False) -> None:
        """End the engine (end of input, then a kill after a second; at once with ``kill``): ours,
        by its process object."""
        proc, self._proc = self._proc, None
        self._buf.clear()
        if proc is None:
            return
        try:
            if kill:
                proc.kill()
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f:
                f.close()

    def _start(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        if self.sysfs_root is not None:
            env["FABSCOPE_SYSFS_ROOT"] = self.sysfs_root
        try:
            self._proc = subprocess.Popen(
                [str(self.engine), "--counters-serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=env,
            )
        except OSError as exc:
            raise FabscopeError(f"{self.engine} could not run ({exc.strerror}); rebuild it: `make setup`",
                                EXIT_MEASURE) from exc
        return self._proc

    def _ask(self) -> dict[str, Any]:
        proc = self._proc or self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(b"\n")
            proc.stdin.flush()
        except OSError as exc:
            raise _EngineGone(self._why(proc)) from exc
        return _parsed(self.engine, "--counters-serve", self._line(proc))

    def _line(self, proc: subprocess.Popen[bytes]) -> bytes:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + self.timeout_s
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while (end := self._buf.find(b"\n")) < 0:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.close(kill=True)
                    raise FabscopeError(
                        f"{self.engine} --counters-serve did not answer within {self.timeout_s:.0f} s "
                        "(a hung sysfs read?); it was stopped and starts afresh at the next scrape", EXIT_MEASURE)
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise _EngineGone(self._why(proc))
                self._buf += chunk
        line = bytes(self._buf[:end])
        del self._buf[: end + 1]
        return line

    @staticmethod
    def _why(proc: subprocess.Popen[bytes]) -> str:
        try:
            rc = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "its output closed"
        err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
        return f"exit status {rc}" + (f": {err[:300]}" if err else "")


class _EngineGone(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# reading the snapshot
# ---------------------------------------------------------------------------------------------


def state_code(text: object) -> int | None:
    m = _STATE_RE.match(text) if isinstance(text, str) else None
    return int(m.group(1)) if m else None


def rate_bytes(text: object) -> float | None:
    """``"100 Gb/sec (4X EDR)"`` -> 12.5e9 bytes/s (the kernel prints Gb/sec = 10^9 bit/s)."""
    m = _RATE_RE.match(text) if isinstance(text, str) else None
    return float(m.group(1)) * 1e9 / 8 if m else None


def as_list(v: object) -> list[Any]:
    return v if isinstance(v, list) else []


def unit_table(snap: Mapping[str, Any], directory: str, driver: str) -> Mapping[str, Any]:
    """The engine's units[dir][driver]: {counter: {unit, bits, overflow}}."""
    return mapping(mapping(mapping(snap.get("units")).get(directory)).get(driver))


def unit_info(table: Mapping[str, Any], name: str) -> tuple[int | None, str | None, str | None]:
    info = table.get(name)
    if not isinstance(info, dict):
        return None, None, None
    bits = info.get("bits")
    return (bits if isinstance(bits, int) else None, info.get("overflow"), info.get("unit"))


def int_text(v: object) -> int | None:
    try:
        return int(str(v).strip())
    except ValueError:
        return None


def mtu_text(v: object) -> int | None:
    """``"4096"`` or ``"4096 (5)"`` (the ibv_devinfo style) -> 4096."""
    m = re.match(r"^\s*(\d+)", v) if isinstance(v, str) else None
    return int(m.group(1)) if m else None
