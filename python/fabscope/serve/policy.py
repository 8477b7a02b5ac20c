# SPDX-License-Identifier: BSD-3-Clause
"""What `fabscope serve` lets a client do: which sources may connect (--allow), how many connections
at once, and how big a run may be (size, memory, time, rate). Every refusal names the limit and the
serve option that raises it.

The run a client asks for arrives as the engine's "config" frame (each setting a string, formatted by
the engine's option table). It is read here before any engine starts; anything not in the exact form
the engine writes is refused, so what is checked here is what the server engine will apply."""

from __future__ import annotations

import ipaddress
import math
import re
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import EXIT_PEER, EXIT_USAGE, FabscopeError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The wire form of a size is exactly what the engine's fs_opt_format writes ("4K", "1M", "8"); the
# user-facing grammar (argtypes.byte_size) is wider, and anything outside this subset is refused.
_SIZE = re.compile(r"(\d{1,20})([KMG]?)")
_INT = re.compile(r"\d{1,19}")
_FLOAT = re.compile(r"\d{1,20}(\.\d{0,20})?([eE][+-]?\d{1,3})?")
_SHIFT = {"": 0, "K": 10, "M": 20, "G": 30}
# The engine's defaults when the client left a setting out (its option table; sizes: 64K for bw).
_DEFAULT_SIZE = 65536
# Backend options that size memory on both ends (shared options the server adopts).
_SHARED_BUFFER_OPTIONS = ("rsocket-sndbuf", "rsocket-rcvbuf")
MAX_SIZES = 64
# Latency samples kept per second of a --duration run, for the memory estimate: a round trip of
# 0.5 us, faster than any network a serve peer sits across (InfiniBand's is ~1.2 us).
_SAMPLES_PER_S = 2_000_000


def format_bytes(n: int) -> str:
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


@dataclass(frozen=True)
class Limits:
    max_size: int = 64 << 20
    max_memory: int = 1 << 30
    max_duration_s: float = 120.0
    max_iters: int = 10_000_000
    max_runs_per_minute: int = 60
    max_connections: int = 64
    max_connections_per_source: int = 16


@dataclass(frozen=True)
class RunRequest:
    """The parts of a client's config that the limits look at, and the whole config for the log."""

    sizes: list[int]
    pattern: str
    iters: int
    warmup: int
    duration_s: float
    warmup_time_s: float
    options: dict[str, Any]
    # Socket buffers the client asks both ends to use (--rsocket-sndbuf/--rsocket-rcvbuf: rsocket
    # registers them as RDMA memory on this host too).
    socket_buffers: int = 0

    @property
    def largest(self) -> int:
        return max(self.sizes)

    @property
    def seconds(self) -> float:
        """The run's time budget: every size's --duration (if any) plus its warmup bound."""
        return len(self.sizes) * (self.duration_s + self.warmup_time_s)

    @property
    def memory(self) -> int:
        """A send and a receive buffer of the largest size (every backend allocates those) plus
        8 bytes per kept latency sample (exact percentiles keep all of them; bw keeps none)."""
        if self.pattern != "lat":
            samples = 0
        else:
            samples = self.iters if self.duration_s <= 0 else int(self.duration_s * _SAMPLES_PER_S)
        return 2 * max(self.largest, _DEFAULT_SIZE) + 8 * samples + self.socket_buffers


class Refusal(FabscopeError):
    """A request this serve will not run; `reason` is a short tag for the log."""

    def __init__(self, message: str, exit_code: int, reason: str) -> None:
        super().__init__(message, exit_code)
        self.reason = reason


def _setting(core: dict[str, Any], name: str, default: str) -> str:
    value = core.get(name, default)
    if not isinstance(value, str):
        raise Refusal(f"setting '{name}' is not a string: not a fabscope engine of this version", EXIT_PEER, "protocol")
    return value


def parse_config(msg: dict[str, Any]) -> RunRequest:
    """The client's "config" frame -> the request; Refusal when it is not what an engine sends."""
    if msg.get("type") != "config":
        raise Refusal(f"expected the run's 'config' message, got '{msg.get('type')}'", EXIT_PEER, "protocol")
    core, backend = msg.get("core"), msg.get("backend")
    if not isinstance(core, dict) or not isinstance(backend, dict):
        raise Refusal("the 'config' message lacks its core/backend settings", EXIT_PEER, "protocol")
    sizes_text = _setting(core, "sizes", "")
    sizes: list[int] = []
    if sizes_text:
        tokens = sizes_text.split(",")
        if len(tokens) > MAX_SIZES:
            raise Refusal(f"--sizes: more than {MAX_SIZES} sizes", EXIT_USAGE, "protocol")
        for tok in tokens:
            m = _SIZE.fullmatch(tok)
            if not m:
                raise Refusal(f"--sizes '{sizes_text[:80]}' is not in the form the engine sends", EXIT_PEER, "protocol")
            sizes.append(int(m.group(1)) << _SHIFT[m.group(2)])
    else:
        sizes = [_DEFAULT_SIZE]
    ints: dict[str, int] = {}
    for name, default in (("iters", "1000"), ("warmup", "100")):
        text = _setting(core, name, default)
        if not _INT.fullmatch(text):
            raise Refusal(f"--{name} '{text[:40]}' is not a whole number", EXIT_PEER, "protocol")
        ints[name] = int(text)
    floats: dict[str, float] = {}
    for name, default in (("duration", "0"), ("warmup-time", "1")):
        text = _setting(core, name, default)
        if not _FLOAT.fullmatch(text) or not math.isfinite(float(text)):
            raise Refusal(f"--{name} '{text[:40]}' is not a number of seconds", EXIT_PEER, "protocol")
        floats[name] = float(text)
    buffers = 0
    for name in _SHARED_BUFFER_OPTIONS:
        text = _setting(backend, name, "0")
        m = _SIZE.fullmatch(text)
        if not m:
            raise Refusal(f"--{name} '{text[:40]}' is not in the form the engine sends", EXIT_PEER, "protocol")
        buffers += int(m.group(1)) << _SHIFT[m.group(2)]
    return RunRequest(sizes=sizes, pattern=_setting(core, "pattern", "lat"), iters=ints["iters"], warmup=ints["warmup"],
                      duration_s=floats["duration"], warmup_time_s=floats["warmup-time"],
                      options={"core": core, "backend": backend}, socket_buffers=buffers)


def check_request(req: RunRequest, limits: Limits) -> None:
    """Raises a Refusal naming the limit and the serve option that raises it."""
    if req.largest > limits.max_size:
        raise Refusal(
            f"--sizes: the largest message, {format_bytes(req.largest)}, exceeds this serve's limit of "
            f"{format_bytes(limits.max_size)}; ask for smaller sizes, or start serve with "
            f"--max-size {format_bytes(req.largest)}",
            EXIT_USAGE, "max-size",
        )
    for name, value in (("iters", req.iters), ("warmup", req.warmup)):
        if value > limits.max_iters:
            raise Refusal(
                f"--{name} {value} exceeds this serve's limit of {limits.max_iters} messages per size; ask for "
                f"fewer, or start serve with --max-iters {value}",
                EXIT_USAGE, "max-iters",
            )
    if req.seconds > limits.max_duration_s:
        raise Refusal(
            f"the run asks for up to {req.seconds:.0f} s ({len(req.sizes)} size(s) x (--duration {req.duration_s:g} s "
            f"+ --warmup-time {req.warmup_time_s:g} s)), more than this serve's limit of {limits.max_duration_s:g} s "
            f"per run; ask for fewer sizes or less time, or start serve with --max-duration {math.ceil(req.seconds)}",
            EXIT_USAGE, "max-duration",
        )
    if req.memory > limits.max_memory:
        need = format_bytes(1 << max(0, (req.memory - 1).bit_length()))
        raise Refusal(
            f"the run needs about {req.memory / 2**20:.0f} MiB of buffers and samples (2 x the largest size "
            f"+ 8 bytes per latency sample + socket buffers asked for both ends), more than this serve's limit of "
            f"{format_bytes(limits.max_memory)}; ask for "
            f"smaller sizes or fewer --iters/--duration, or start serve with --max-memory {need}",
            EXIT_USAGE, "max-memory",
        )


def source_allowed(host: str, allow: Iterable[Network] | None) -> bool:
    if allow is None:
        return True
    try:
        addr = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # an IPv4 client of a dual-stack (::) listener
    return any(addr in net for net in allow)


@dataclass
class RateLimiter:
    """Runs per minute per client address (a sliding 60 s window)."""

    per_minute: int
    window_s: float = 60.0
    starts: dict[str, deque[float]] = field(default_factory=dict)

    def admit(self, host: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        q = self.starts.setdefault(host, deque())
        while q and now - q[0] >= self.window_s:
            q.popleft()
        if len(q) >= self.per_minute:
            wait = self.window_s - (now - q[0])
            raise Refusal(
                f"this serve allows {self.per_minute} runs per minute from each client and {host} has had them; "
                f"wait {wait:.0f} s, or start serve with --max-runs-per-minute {2 * self.per_minute}",
                EXIT_PEER, "max-runs-per-minute",
            )
        q.append(now)
        # Forget idle clients so a scan from many addresses cannot grow this table forever.
        if len(self.starts) > 4096:
            for h in [h for h, d in self.starts.items() if not d or now - d[-1] >= self.window_s]:
                del self.starts[h]
