#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""fabscope's TCP backend against sockperf, qperf and iperf3 on loopback: alternated, medians, ratios.

    python3 bench/tcp_peers.py [--repeats 5] [--duration 3] [--json out.json]

Each repeat runs its pairs as sandwiches, the peer before and after fabscope, back to back:
sockperf, qperf tcp_lat, fabscope lat, qperf tcp_lat, sockperf; then qperf tcp_bw, fabscope bw,
qperf tcp_bw; then the informational runs (fabscope lat --poll block, fabscope bw with
--tcp-rcvlowat 1, iperf3). A goal's verdict
is the median over repeats of fabscope / (mean of the peer's two runs around it). A repeat whose
two peer runs differ by more than 15 %, or around which the CPUs' placement changed, is left out
of that median and counted as unstable: on this VM every tool jumps, from one run to the next,
between levels of loopback latency (about 3.9 and 5.6 us) and of bandwidth (about 2 and 5 GB/s),
so a median over repeats (shown as well, for information) compares levels, not tools, and only a
comparison within one level says which tool is faster. The levels are the hypervisor's placement
of the two vCPUs (bench/placement.py): a cache line crosses between CPU 0 and CPU 1 in about 45,
100 or 500 ns depending on the moment, while one CPU's own speed stays within 1 %. A probe of that
round trip (50 ms) runs before every measurement and after the last; a sandwich counts only when
every probe around it saw one placement. While either goal rests on fewer than 3 repeats that count,
another repeat runs, up to twice --repeats (bench/sandwich.py needs_more): decided by the peers' runs
and the probes alone, never by fabscope's figures.

Same conditions for everybody:
- servers on CPU 0 and clients on CPU 1 (`taskset`), as `fabscope run --loopback` pins its two
  engines;
- /dev/cpu_dma_latency held at 0 during every measurement: by this script around each peer run,
  by fabscope itself with --hold-cpu-latency (both verified: the script reads the PM QoS value
  back, fabscope echoes `cpu_dma_latency_held` in its result). Without it, a VM idling with
  haltpoll pays ~40 us of wake-up per blocking receive and the comparison measures the idle
  driver, not the tool;
- busy polling where the peer has it: sockperf --nonblocked (spins on recvfrom); qperf and iperf3
  only have blocking sockets, so fabscope bw uses its default (block) and an extra fabscope lat
  run with --poll block is the like-for-like row for qperf.

What differs and stays so, because it is what the tools are: fabscope's bw receiver sleeps until
the message it waits for is there (SO_RCVLOWAT, --tcp-rcvlowat 1M, its default), where qperf's and
iperf3's receivers wake on every arrival; the informational fabscope run with --tcp-rcvlowat 1 is
the like-for-like row for them. qperf's sender copies from a buffer it never wrote (the kernel's
zero page: one physical page, in the L1 cache), fabscope's and iperf3's from written memory
(bench/send_buffer_ab.c measures what that is worth within one connection).

Goals (issue 2, section 8): fabscope TCP 8-byte latency p50 <= the best peer's (ratio <= 1.0; in
each repeat the lower of the stable peers), and fabscope 1 MiB bandwidth >= qperf tcp_bw (ratio >=
1.0). PASS/MISS is printed; the exit status is 0 either way because a benchmark on a shared
machine is evidence, not a test. Exit 2 is only for a setup problem (a tool missing,
cpu_dma_latency not writable).

Only 127.0.0.1 is used. Every client has a timeout and every server is killed (its whole process
group) when its measurement ends, on error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from peer_output import BenchError, tail  # noqa: E402
from placement import SAME_PLACEMENT, ProbeError, build_probe, probe, same_placement  # noqa: E402
from sandwich import STABLE, needs_more, peer_runs_agree  # noqa: E402

HOST = "127.0.0.1"
SERVER_CPU = 0  # fabscope --loopback puts the server engine here ...
CLIENT_CPU = 1  # ... and the initiator here
LAT_SIZE = 8
SOCKPERF_MIN_SIZE = 14  # sockperf refuses smaller messages: its header is 14 bytes
BW_SIZE = 1 << 20
GOAL_LAT = 1.0  # fabscope p50 / best peer, at most
GOAL_BW = 1.0  # fabscope / qperf tcp_bw, at least
DMA_LATENCY = "/dev/cpu_dma_latency"
MIN_SAMPLES = 1000  # fewer latency samples than this in a run is flagged in the report

# Metric keys: (tool, metric). Latency in microseconds (one-way = half round trip for all four
# tools), bandwidth in MB/s with MB = 10^6 bytes (qperf and fabscope print decimal units;
# iperf3's bits/s is converted).
FAB_LAT = ("fabscope", "lat_p50_us")
FAB_LAT_MEAN = ("fabscope", "lat_mean_us")
FAB_LAT_BLOCK = ("fabscope --poll block", "lat_p50_us")
FAB_BW = ("fabscope", "bw_MBps")
FAB_BW_EVERY = ("fabscope --tcp-rcvlowat 1", "bw_MBps")
SOCKPERF_LAT = ("sockperf", "lat_p50_us")
QPERF_LAT = ("qperf tcp_lat", "lat_mean_us")
QPERF_BW = ("qperf tcp_bw", "bw_MBps")
IPERF_BW = ("iperf3", "bw_MBps")


class SetupError(Exception):
    """Something missing before any measurement can be fair (tool, permission)."""


@dataclass
class Measurement:
    tool: str
    repeat: int
    command: str
    seconds: float
    values: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    slot: str = ""  # a peer's run in a sandwich: "before" or "after" fabscope; "" otherwise
    # The CPU-to-CPU round trip (bench/placement.py) just before and just after this run, in ns:
    # None when the probe failed.
    placement_before: float | None = None
    placement_after: float | None = None


# --------------------------------------------------------------------------------------------
# Machine state


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def machine_state() -> dict[str, Any]:
    model = ""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    gov = _read("/sys/devices/system/cpu/cpuidle/current_governor") or _read(
        "/sys/devices/system/cpu/cpuidle/current_governor_ro"
    )
    states = []
    for d in sorted(Path("/sys/devices/system/cpu/cpu0/cpuidle").glob("state*")):
        states.append(f"{_read(str(d / 'name'))} ({_read(str(d / 'latency'))} us)")
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "cpuidle_driver": _read("/sys/devices/system/cpu/cpuidle/current_driver"),
        "cpuidle_governor": gov,
        "cpuidle_states_cpu0": states,
        "net_core_busy_read": _read("/proc/sys/net/core/busy_read"),
        "net_core_busy_poll": _read("/proc/sys/net/core/busy_poll"),
        "loadavg": _read("/proc/loadavg"),
    }


def qos_value() -> int | None:
    """The current PM QoS CPU latency target in us (2000000000 = no request)."""
    try:
        with open(DMA_LATENCY, "rb") as f:
            raw = f.read(4)
        return int(struct.unpack("i", raw)[0]) if len(raw) == 4 else None
    except OSError:
        return None


@contextlib.contextmanager
def hold_cpu_latency(enabled: bool) -> Iterator[bool]:
    """Keep /dev/cpu_dma_latency at 0 for the duration (the request lasts while the fd is open)."""
    if not enabled:
        yield False
        return
    fd = os.open(DMA_LATENCY, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, struct.pack("i", 0))
        yield qos_value() == 0
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# Processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    """Whether some socket listens on the port (read from /proc: probing with connect() would
    count as a client for servers that serve one connection, like iperf3 -1)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in _read(table).splitlines()[1:]:
            cols = line.split()
            if len(cols) > 3 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """Ends the process and whatever it started (fabscope's engines): it runs in its own group."""
    if proc.poll() is not None:
        return
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_client(argv: Sequence[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int, str, str, float]:
    """Runs one client to completion or kills it (and its children) at the deadline."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        raise BenchError(f"timed out after {timeout:.0f} s: {shlex.join(argv)}\n{tail(out)}\n{tail(err)}") from None
    finally:
        _kill_group(proc)
    return proc.returncode, out, err, time.monotonic() - t0


@contextlib.contextmanager
def server(argv: Sequence[str], port: int, ready_timeout: float = 5.0) -> Iterator[None]:
    """A peer's server, pinned to SERVER_CPU, killed on exit whatever happens."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(
            ["taskset", "-c", str(SERVER_CPU), *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + ready_timeout
            while not listening(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise BenchError(
                        f"server not listening on {HOST}:{port} after {ready_timeout:.0f} s "
                        f"(exit {proc.poll()}): {shlex.join(argv)}\n{tail(log.read())}"
                    )
                time.sleep(0.02)
            yield
        finally:
            _kill_group(proc)


def client_argv(argv: Sequence[str]) -> list[str]:
    return ["taskset", "-c", str(CLIENT_CPU), *argv]


# --------------------------------------------------------------------------------------------
# Parsers (checked against sockperf 3.7, qperf 0.4.11, iperf 3.12 and fabscope 0.1.0 output)

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def fabscope_values(rec: dict[str, Any], pattern: str) -> tuple[dict[str, float], Any]:
    """The figures the benches compare from one fabscope record, and where bandwidth was measured."""
    values: dict[str, float] = {}
    if pattern == "lat":
        lat = rec.get("latency_us") or {}
        for k in ("p50", "mean", "min", "p99", "max"):
            if isinstance(lat.get(k), int | float):
                values[f"lat_{k}_us"] = float(lat[k])
        if "lat_p50_us" not in values:
            raise BenchError("fabscope lat record without latency_us.p50")
        values["samples"] = float(lat.get("samples") or rec.get("iterations") or 0)
        return values, None
    if not isinstance(rec.get("bandwidth_MBps"), int | float):
        raise BenchError("fabscope bw record without bandwidth_MBps")
    values["bw_MBps"] = float(rec["bandwidth_MBps"])
    if isinstance(rec.get("sender_bandwidth_MBps"), int | float):
        values["sender_bw_MBps"] = float(rec["sender_bandwidth_MBps"])
    return values, rec.get("bandwidth_measured_at")


def parse_fabscope(stdout: str, size: int) -> dict[str, Any]:
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("schema") == "fabscope.result/1" and rec.get("size") == size:
            if rec.get("status", "ok") != "ok":
                raise BenchError(f"fabscope result status {rec.get('status')!r}")
            return rec
    raise BenchError(f"no fabscope.result/1 record for size {size} in:\n{tail(stdout)}")


def parse_sockperf(text: str) -> dict[str, float]:
    """sockperf prints percentiles of one-way latency (half round trip) in usec."""
    text = ANSI.sub("", text)
    if "ERROR" in text:
        raise BenchError("sockperf reported an error:\n" + tail(text))
    pats = {
        "lat_p50_us": r"percentile\s+50\.000\s*=\s*([0-9.]+)",
        "lat_p99_us": r"percentile\s+99\.000\s*=\s*([0-9.]+)",
        "lat_min_us": r"<MIN>\s+observation\s*=\s*([0-9.]+)",
        "lat_max_us": r"<MAX>\s+observation\s*=\s*([0-9.]+)",
        "lat_mean_us": r"avg-latency\s*=\s*([0-9.]+)",
        "samples": r"Total\s+(\d+)\s+observations",
    }
    out: dict[str, float] = {}
    for key, pat in pats.items():
        m = re.search(pat, text)
        if m:
            out[key] = float(m.group(1))
    if "lat_p50_us" not in out or not re.search(r"Latency is [0-9.]+ usec", text):
        raise BenchError("no 'percentile 50.000' / 'Latency is ... usec' in sockperf output:\n" + tail(text))
    return out


_QPERF_TIME = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6}
_QPERF_RATE = {"bytes/sec": 1e-6, "KB/sec": 1e-3, "MB/sec": 1.0, "GB/sec": 1e3, "TB/sec": 1e6}


def parse_qperf(text: str) -> dict[str, float]:
    """qperf prints one block per test: 'tcp_lat:' then indented 'name = value unit' lines.
    latency is the MEAN one-way time (run time / messages / 2); bw counts bytes at the receiver.
    Units vary with the magnitude (ns/us/ms, KB/MB/GB per sec, decimal)."""
    out: dict[str, float] = {}
    test = ""
    for line in text.splitlines():
        head = re.match(r"^(\w+):\s*$", line)
        if head:
            test = head.group(1)
            continue
        m = re.match(r"^\s+(\w+)\s*=\s*([0-9.,]+)\s*(\S+)", line)
        if not m or not test:
            continue
        name, val, unit = m.group(1), float(m.group(2).replace(",", "")), m.group(3)
        if test == "tcp_lat" and name == "latency":
            if unit not in _QPERF_TIME:
                raise BenchError(f"qperf tcp_lat: unknown unit {unit!r} in {line.strip()!r}")
            out["lat_mean_us"] = val * _QPERF_TIME[unit]
        elif test == "tcp_bw" and name == "bw":
            if unit not in _QPERF_RATE:
                raise BenchError(f"qperf tcp_bw: unknown unit {unit!r} in {line.strip()!r}")
            out["bw_MBps"] = val * _QPERF_RATE[unit]
    return out


def parse_iperf3(stdout: str) -> dict[str, float]:
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as e:
        raise BenchError(f"iperf3 -J printed no JSON ({e}):\n{tail(stdout)}") from None
    if not isinstance(doc, dict):
        raise BenchError("iperf3 -J: not a JSON object")
    if doc.get("error"):
        raise BenchError(f"iperf3: {doc['error']}")
    end = doc.get("end") or {}
    rx, tx = end.get("sum_received") or {}, end.get("sum_sent") or {}
    if "bits_per_second" not in rx:
        raise BenchError("iperf3 -J: no end.sum_received.bits_per_second")
    return {
        "bw_MBps": float(rx["bits_per_second"]) / 8e6,
        "sender_bw_MBps": float(tx.get("bits_per_second", 0.0)) / 8e6,
        "seconds": float(rx.get("seconds", 0.0)),
        "retransmits": float(tx.get("retransmits", 0)),
    }


# --------------------------------------------------------------------------------------------
# One measurement per tool


@dataclass
class Config:
    fabscope: str
    duration: float
    hold: bool
    engine: str | None = None  # FABSCOPE_ENGINE for fabscope runs: A/B of a patched engine
    timeout_margin: float = 20.0


Figures = tuple[dict[str, float], dict[str, Any], float]


def measure(tool: str, repeat: int, argv: Sequence[str], fn: Callable[[], Figures]) -> Measurement:
    """Runs fn() -> (values, details, seconds) and turns any failure into an error entry."""
    m = Measurement(tool=tool, repeat=repeat, command=shlex.join(argv), seconds=0.0)
    try:
        m.values, m.details, m.seconds = fn()
    except BenchError as e:
        m.error = str(e)
    return m


def run_fabscope(cfg: Config, repeat: int, pattern: str, size: int, poll: str, tool: str,
                 extra: Sequence[str] = ()) -> Measurement:
    argv = [
        cfg.fabscope,
        "run",
        "--loopback",
        "--format",
        "json",
        "--pattern",
        pattern,
        "--sizes",
        str(size),
        "--duration",
        str(cfg.duration),
        "--poll",
        poll,
        *extra,
    ]
    if cfg.hold:
        argv.append("--hold-cpu-latency")

    def go() -> Figures:
        env = {**os.environ, "FABSCOPE_ENGINE": cfg.engine} if cfg.engine else None
        rc, out, err, secs = run_client(argv, cfg.duration + cfg.timeout_margin, env)
        if rc != 0:
            raise BenchError(f"exit {rc}: {tail(err)}")
        rec = parse_fabscope(out, size)
        host, peer = rec.get("host") or {}, rec.get("peer_host") or {}
        details = {
            "iterations": rec.get("iterations"),
            "poll": (rec.get("transport") or {}).get("poll"),
            "cpus": [host.get("cpu"), peer.get("cpu")],
            "cpu_dma_latency_held": [host.get("cpu_dma_latency_held"), peer.get("cpu_dma_latency_held")],
            "cpuidle_driver": host.get("cpuidle_driver"),
            "cpuidle_governor": host.get("cpuidle_governor"),
            "warnings": rec.get("warnings"),
        }
        values, measured_at = fabscope_values(rec, pattern)
        if pattern != "lat":
            details["measured_at"] = measured_at
        return values, details, secs

    return measure(tool, repeat, argv, go)


def run_sockperf(cfg: Config, repeat: int) -> Measurement:
    port = free_port()
    # --nonblocked on both sides: recvfrom() on a non-blocking socket in a loop, i.e. busy
    # polling, like fabscope's lat default. -m 14 is sockperf's smallest message.
    srv = ["sockperf", "server", "-i", HOST, "-p", str(port), "--tcp", "--nonblocked"]
    cli = [
        "sockperf",
        "ping-pong",
        "-i",
        HOST,
        "-p",
        str(port),
        "--tcp",
        "--nonblocked",
        "-m",
        str(SOCKPERF_MIN_SIZE),
        "-t",
        str(max(1, round(cfg.duration))),
    ]

    def go() -> Figures:
        with server(srv, port), hold_cpu_latency(cfg.hold) as held:
            rc, out, err, secs = run_client(client_argv(cli), cfg.duration + cfg.timeout_margin)
        if rc != 0:
            raise BenchError(f"sockperf exit {rc}: {tail(out + err)}")
        return parse_sockperf(out + err), {"cpu_dma_latency_held": held, "size": SOCKPERF_MIN_SIZE}, secs

    return measure("sockperf", repeat, cli, go)


def run_qperf(cfg: Config, repeat: int, test: str) -> Measurement:
    """One qperf test (tcp_lat or tcp_bw) against its own server, so a failure of one keeps the other."""
    port = free_port()
    # qperf's server has no bind-address option: it listens on every address for the run, but
    # the client only ever connects to 127.0.0.1. It has no busy-poll mode for sockets (-cp is
    # for RDMA completion queues only). -to 15: its default 5 s exchange timeout fails under the
    # CPU starvation this shared machine sees ("failed to receive synchronization after test").
    srv = ["qperf", "-lp", str(port)]
    size, metric = (LAT_SIZE, "lat_mean_us") if test == "tcp_lat" else (BW_SIZE, "bw_MBps")
    cli = ["qperf", HOST, "-lp", str(port), "-to", "15", "-t", str(max(1, round(cfg.duration))), "-m", str(size), test]

    def go() -> Figures:
        with server(srv, port), hold_cpu_latency(cfg.hold) as held:
            rc, out, err, secs = run_client(client_argv(cli), cfg.duration + cfg.timeout_margin)
        if rc != 0:
            raise BenchError(f"qperf exit {rc}: {tail(out + err)}")
        values = parse_qperf(out)
        if metric not in values:
            raise BenchError(f"qperf {test}: no result in:\n{tail(out + err, 12)}")
        return values, {"cpu_dma_latency_held": held}, secs

    return measure(f"qperf {test}", repeat, cli, go)


def run_iperf3(cfg: Config, repeat: int) -> Measurement:
    port = free_port()
    srv = ["iperf3", "-s", "-1", "-B", HOST, "-p", str(port)]
    cli = ["iperf3", "-c", HOST, "-p", str(port), "-l", str(BW_SIZE), "-t", str(max(1, round(cfg.duration))), "-J"]

    def go() -> Figures:
        with server(srv, port), hold_cpu_latency(cfg.hold) as held:
            rc, out, err, secs = run_client(client_argv(cli), cfg.duration + cfg.timeout_margin)
        values = parse_iperf3(out)  # -J reports errors in the JSON, with a non-zero exit
        if rc != 0:
            raise BenchError(f"iperf3 exit {rc}: {tail(err)}")
        details: dict[str, Any] = {"cpu_dma_latency_held": held, "retransmits": values.pop("retransmits")}
        details["window_s"] = values.pop("seconds")
        return values, details, secs

    return measure("iperf3", repeat, cli, go)


# --------------------------------------------------------------------------------------------
# Report


Series = dict[tuple[str, str], dict[int, float]]  # (tool, metric) -> {repeat: value}
# (peer tool, metric) -> {repeat: (run before fabscope, run after)}
Sandwiches = dict[tuple[str, str], dict[int, tuple[float, float]]]
# (peer tool, metric) -> {repeat: the placement probes from before its first run to after its last}
Placements = dict[tuple[str, str], dict[int, list[float | None]]]
KEYS = {  # tool name of a Measurement -> (series key, metric)
    "fabscope lat": [(FAB_LAT, "lat_p50_us"), (FAB_LAT_MEAN, "lat_mean_us")],
    "fabscope lat block": [(FAB_LAT_BLOCK, "lat_p50_us")],
    "fabscope bw": [(FAB_BW, "bw_MBps")],
    "fabscope bw every arrival": [(FAB_BW_EVERY, "bw_MBps")],
    "sockperf": [(SOCKPERF_LAT, "lat_p50_us")],
    "qperf tcp_lat": [(QPERF_LAT, "lat_mean_us")],
    "qperf tcp_bw": [(QPERF_BW, "bw_MBps")],
    "iperf3": [(IPERF_BW, "bw_MBps")],
}


def collect(ms: list[Measurement]) -> tuple[Series, Sandwiches, Placements]:
    """Each tool's figure per repeat (a sandwiched peer: the mean of its two runs), each
    sandwiched peer's two runs, and the placement probes around each sandwich (before every run
    from the peer's first to its second, and after that one)."""
    series: Series = {}
    halves: dict[tuple[str, str], dict[int, dict[str, tuple[float, int]]]] = {}
    for at, m in enumerate(ms):
        if m.error is not None:
            continue
        for key, metric in KEYS.get(m.tool, []):
            if metric not in m.values:
                continue
            if m.slot:
                halves.setdefault(key, {}).setdefault(m.repeat, {})[m.slot] = (m.values[metric], at)
            else:
                series.setdefault(key, {})[m.repeat] = m.values[metric]
    sandwiches: Sandwiches = {}
    placements: Placements = {}
    for key, reps in halves.items():
        for rep, got in reps.items():
            series.setdefault(key, {})[rep] = statistics.mean(v for v, _ in got.values())
            if "before" in got and "after" in got:
                (before, first), (after, last) = got["before"], got["after"]
                sandwiches.setdefault(key, {})[rep] = (before, after)
                probes = [ms[i].placement_before for i in range(first, last + 1)] + [ms[last].placement_after]
                placements.setdefault(key, {})[rep] = probes
    return series, sandwiches, placements


def usable(sandwiches: Sandwiches, placements: Placements, key: tuple[str, str], rep: int) -> bool:
    """A sandwich counts when the peer's two runs agree (`peer_runs_agree`) and every probe around it saw
    one placement of the CPUs (bench/placement.py): otherwise the machine changed under it."""
    pair = sandwiches.get(key, {}).get(rep)
    return pair is not None and peer_runs_agree(*pair) and same_placement(placements.get(key, {}).get(rep, [None]))


def counted(ms: list[Measurement]) -> int:
    """How many repeats each goal's verdict rests on so far, the fewer of the two: repeats in which
    fabscope measured and a peer's sandwich around it counts (`usable`). Nothing of fabscope's
    figures but that it has one."""
    series, sandwiches, placements = collect(ms)
    return min(
        sum(1 for rep in series.get(fab, {}) if any(usable(sandwiches, placements, p, rep) for p in peers))
        for fab, peers in ((FAB_LAT, (SOCKPERF_LAT, QPERF_LAT)), (FAB_BW, (QPERF_BW,)))
    )


def _paired(series: Series, sandwiches: Sandwiches, placements: Placements, a: tuple[str, str],
            peers: Sequence[tuple[str, str]]) -> tuple[float | None, int, list[int]]:
    """Median over repeats of a / (the best peer's sandwich in the SAME repeat: the mean of its run
    before and after a), with the repeats used and those left out (no peer's sandwich usable).
    "Best" = lowest for latency, highest for bandwidth."""
    lat = a[1].startswith("lat")
    ratios, unstable = [], []
    for rep, va in sorted(series.get(a, {}).items()):
        refs = [sum(sandwiches[p][rep]) / 2 for p in peers if usable(sandwiches, placements, p, rep)]
        if not refs:
            unstable.append(rep)
            continue
        ref = min(refs) if lat else max(refs)
        ratios.append(va / ref)
    return (statistics.median(ratios) if ratios else None), len(ratios), unstable


def summarize(series: Series, sandwiches: Sandwiches, placements: Placements) -> dict[str, Any]:
    med = {k: statistics.median(v.values()) for k, v in series.items() if v}

    def ratio(a: tuple[str, str], b: tuple[str, str]) -> float | None:
        return med[a] / med[b] if a in med and b in med and med[b] > 0 else None

    def paired(a: tuple[str, str], peers: Sequence[tuple[str, str]]) -> float | None:
        return _paired(series, sandwiches, placements, a, peers)[0]

    lat_ratio, lat_used, lat_unstable = _paired(series, sandwiches, placements, FAB_LAT, [SOCKPERF_LAT, QPERF_LAT])
    bw_ratio, bw_used, bw_unstable = _paired(series, sandwiches, placements, FAB_BW, [QPERF_BW])
    return {
        "medians": {f"{t} {m}": v for (t, m), v in med.items()},
        "sandwiches": {f"{t} {m}": {str(r): list(p) for r, p in reps.items()} for (t, m), reps in sandwiches.items()},
        "placement_probes_ns": {f"{t} {m}": {str(r): p for r, p in reps.items()} for (t, m), reps in placements.items()},
        "ratios": {
            "lat fabscope/sockperf": ratio(FAB_LAT, SOCKPERF_LAT),
            "lat fabscope/qperf": ratio(FAB_LAT, QPERF_LAT),
            "lat fabscope/best peer": ratio(FAB_LAT, min((k for k in (SOCKPERF_LAT, QPERF_LAT) if k in med),
                                                         key=lambda k: med[k], default=SOCKPERF_LAT)),
            "lat fabscope(block)/qperf": ratio(FAB_LAT_BLOCK, QPERF_LAT),
            "bw fabscope/qperf": ratio(FAB_BW, QPERF_BW),
            "bw fabscope/iperf3": ratio(FAB_BW, IPERF_BW),
            "bw fabscope(rcvlowat 1)/qperf": ratio(FAB_BW_EVERY, QPERF_BW),
        },
        "paired_ratios": {
            "lat fabscope/sockperf": paired(FAB_LAT, [SOCKPERF_LAT]),
            "lat fabscope/qperf": paired(FAB_LAT, [QPERF_LAT]),
            "lat fabscope/best peer": lat_ratio,
            "lat fabscope(block)/qperf": paired(FAB_LAT_BLOCK, [QPERF_LAT]),
            "bw fabscope/qperf": bw_ratio,
        },
        "goals": {
            "lat": {
                "ratio": lat_ratio,
                "repeats_used": lat_used,
                "unstable_repeats": lat_unstable,
                "goal": f"<= {GOAL_LAT}",
                "verdict": "n/a" if lat_ratio is None else "PASS" if lat_ratio <= GOAL_LAT else "MISS",
            },
            "bw": {
                "ratio": bw_ratio,
                "repeats_used": bw_used,
                "unstable_repeats": bw_unstable,
                "goal": f">= {GOAL_BW}",
                "verdict": "n/a" if bw_ratio is None else "PASS" if bw_ratio >= GOAL_BW else "MISS",
            },
        },
    }


def fmt(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def render(series: Series, sandwiches: Sandwiches, placements: Placements, summary: dict[str, Any], repeats: int,
           out: TextIO) -> None:
    """Markdown tables: readable in a terminal, pasteable into RESULTS.md."""
    rows = [
        ("8 B latency p50, busy poll (us)", FAB_LAT),
        ("8 B latency mean, busy poll (us)", FAB_LAT_MEAN),
        ("8 B latency p50, --poll block (us)", FAB_LAT_BLOCK),
        ("14 B latency p50, --nonblocked = busy (us)", SOCKPERF_LAT),
        ("8 B latency MEAN, blocking (us)", QPERF_LAT),
        ("1 MiB bw at receiver, --poll block (MB/s)", FAB_BW),
        ("1 MiB bw at receiver, --poll block, woken by every arrival (MB/s)", FAB_BW_EVERY),
        ("1 MiB bw at receiver (MB/s)", QPERF_BW),
        ("1 MiB bw at receiver (MB/s)", IPERF_BW),
    ]

    def cell(key: tuple[str, str], rep: int) -> str:
        pair = sandwiches.get(key, {}).get(rep)
        if pair:  # a peer's run before and after fabscope; * = more than STABLE apart, ^ = placement moved
            mark = "*" if not peer_runs_agree(*pair) else "" if usable(sandwiches, placements, key, rep) else "^"
            return f"{fmt(pair[0], 1)}/{fmt(pair[1], 1)}{mark}"
        return fmt(series.get(key, {}).get(rep), 1)

    out.write("| tool | measure | per repeat (a peer: before/after fabscope) | median |\n|---|---|---|---|\n")
    for label, key in rows:
        vals = series.get(key, {})
        per = " · ".join(cell(key, r) for r in range(1, repeats + 1))
        med = fmt(statistics.median(vals.values()), 2) if vals else "n/a"
        out.write(f"| {key[0]} | {label} | {per} | {med} |\n")
    out.write(f"\n\\* the peer's two runs differ by more than {STABLE:.0%}; ^ the CPUs' placement changed during the "
              f"sandwich (probes more than {SAME_PLACEMENT}x apart): that repeat is left out of the ratio\n")
    r, p, g = summary["ratios"], summary["paired_ratios"], summary["goals"]
    out.write("\n| ratio | median of sandwich ratios (repeats used) | of medians (info) | goal | verdict |\n"
              "|---|---|---|---|---|\n")

    def used(goal: dict[str, Any]) -> str:
        return f" ({goal['repeats_used']} of {repeats})"

    lines = [
        ("lat fabscope p50 / sockperf p50", fmt(p["lat fabscope/sockperf"]), r["lat fabscope/sockperf"], "", ""),
        ("lat fabscope p50 / qperf tcp_lat (mean)", fmt(p["lat fabscope/qperf"]), r["lat fabscope/qperf"], "", ""),
        ("**lat fabscope p50 / best peer**", fmt(g["lat"]["ratio"]) + used(g["lat"]), r["lat fabscope/best peer"],
         f"<= {GOAL_LAT}", f"**{g['lat']['verdict']}**"),
        ("lat fabscope --poll block p50 / qperf (info)", fmt(p["lat fabscope(block)/qperf"]),
         r["lat fabscope(block)/qperf"], "", ""),
        ("**bw fabscope / qperf tcp_bw**", fmt(g["bw"]["ratio"]) + used(g["bw"]), r["bw fabscope/qperf"],
         f">= {GOAL_BW}", f"**{g['bw']['verdict']}**"),
        ("bw fabscope / iperf3 (info, not sandwiched)", "", r["bw fabscope/iperf3"], "", ""),
        ("bw fabscope --tcp-rcvlowat 1 / qperf tcp_bw (info, not sandwiched)", "", r["bw fabscope(rcvlowat 1)/qperf"],
         "", ""),
    ]
    for name, paired, of_medians, goal, verdict in lines:
        out.write(f"| {name} | {paired} | {fmt(of_medians)} | {goal} | {verdict} |\n")


# --------------------------------------------------------------------------------------------


def preflight(cfg: Config) -> None:
    missing = [t for t in ("sockperf", "qperf", "iperf3", "taskset") if shutil.which(t) is None]
    if not Path(cfg.fabscope).exists() and shutil.which(cfg.fabscope) is None:
        missing.append(cfg.fabscope)
    if missing:
        raise SetupError(
            f"missing: {', '.join(missing)}. Install the peers with `apt-get install sockperf qperf "
            "iperf3 util-linux` and fabscope with `make setup`."
        )
    if (os.cpu_count() or 1) < 2:
        raise SetupError("needs 2 CPUs: servers are pinned to CPU 0 and clients to CPU 1")
    check_placement_probe()
    if cfg.hold:
        try:
            with hold_cpu_latency(True) as ok:
                if not ok:
                    raise SetupError(f"wrote 0 to {DMA_LATENCY} but it reads back {qos_value()}")
        except OSError as e:
            raise SetupError(
                f"cannot hold {DMA_LATENCY} at 0 ({e.strerror}): run as root, or pass "
                "--no-hold-cpu-latency to compare every tool WITHOUT it (the results then depend "
                "on the idle driver; see RESULTS.md)"
            ) from None


def check_placement_probe() -> None:
    """Before any measurement: the probe builds and runs on the two CPUs the benches use."""
    try:
        probe(SERVER_CPU, CLIENT_CPU, 5, build_probe())
    except (ProbeError, OSError, subprocess.TimeoutExpired) as e:
        raise SetupError(f"the placement probe (bench/core_to_core.c, needs cc) does not run: {e}") from None


def placement_probe() -> float | None:
    """The CPU-to-CPU round trip between the servers' and the clients' CPUs now (None: the probe
    failed, and the sandwiches around it are left out)."""
    try:
        return probe(SERVER_CPU, CLIENT_CPU)
    except ProbeError as e:
        print(f"tcp_peers: placement probe: {e}", file=sys.stderr)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=5, help="rounds of all tools (>= 3; default 5)")
    ap.add_argument("--duration", type=float, default=3.0, help="seconds per measurement (default 3)")
    ap.add_argument("--fabscope", default=str(REPO / ".venv" / "bin" / "fabscope"), help="fabscope CLI")
    ap.add_argument("--engine", help="fabscope-engine binary to use (sets FABSCOPE_ENGINE), e.g. a patched build")
    ap.add_argument("--json", type=Path, help="write every raw figure, command and the machine state here")
    ap.add_argument(
        "--no-hold-cpu-latency", dest="hold", action="store_false", help="do not hold /dev/cpu_dma_latency at 0 (for any tool)"
    )
    ap.add_argument(
        "--no-block-lat", dest="block_lat", action="store_false", help="skip the informational fabscope --poll block latency run"
    )
    args = ap.parse_args(argv)
    if args.repeats < 3:
        ap.error("--repeats must be at least 3: a median of fewer runs on a shared machine means little")
    if not 1 <= args.duration <= 60:
        ap.error("--duration must be between 1 and 60 seconds")
    cfg = Config(fabscope=args.fabscope, duration=args.duration, hold=args.hold, engine=args.engine)
    # SIGTERM unwinds like Ctrl-C, so the `finally` blocks kill every server we started.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    try:
        preflight(cfg)
    except SetupError as e:
        print(f"tcp_peers: {e}", file=sys.stderr)
        return 2

    started = datetime.datetime.now(datetime.UTC)
    before = machine_state()
    ms: list[Measurement] = []
    t0 = time.monotonic()
    # One repeat: the latency sandwich (each peer before and after fabscope, nearest first), the
    # bandwidth sandwich, then the informational runs. slot marks a peer's run in a sandwich.
    Step = tuple[str, Callable[[int], Measurement]]
    fab_lat: Step = ("", lambda rep: run_fabscope(cfg, rep, "lat", LAT_SIZE, "busy", "fabscope lat"))
    fab_bw: Step = ("", lambda rep: run_fabscope(cfg, rep, "bw", BW_SIZE, "block", "fabscope bw"))

    def peer(slot: str, fn: Callable[[int], Measurement]) -> Step:
        return (slot, fn)

    steps: list[Step] = [
        peer("before", lambda rep: run_sockperf(cfg, rep)),
        peer("before", lambda rep: run_qperf(cfg, rep, "tcp_lat")),
        fab_lat,
        peer("after", lambda rep: run_qperf(cfg, rep, "tcp_lat")),
        peer("after", lambda rep: run_sockperf(cfg, rep)),
        peer("before", lambda rep: run_qperf(cfg, rep, "tcp_bw")),
        fab_bw,
        peer("after", lambda rep: run_qperf(cfg, rep, "tcp_bw")),
    ]
    if args.block_lat:
        steps.append(("", lambda rep: run_fabscope(cfg, rep, "lat", LAT_SIZE, "block", "fabscope lat block")))
    steps.append(("", lambda rep: run_fabscope(cfg, rep, "bw", BW_SIZE, "block", "fabscope bw every arrival",
                                               ["--tcp-rcvlowat", "1"])))
    steps.append(("", lambda rep: run_iperf3(cfg, rep)))
    # The repeats asked for, then more while either goal rests on fewer than 3 sandwiches that
    # count (bench/sandwich.py needs_more: up to twice --repeats).
    rep = 0
    while needs_more(counted(ms), args.repeats, rep):
        rep += 1
        for slot, step in steps:
            placed = placement_probe()
            if ms:
                ms[-1].placement_after = placed
            m = step(rep)
            m.slot = slot
            m.placement_before = placed
            ms.append(m)
            shown = ", ".join(f"{k}={v:.2f}" for k, v in m.values.items())
            status = f"ERROR {m.error.splitlines()[0] if m.error else ''}" if m.error else shown
            label = f"{m.tool} ({slot})" if slot else m.tool
            print(f"[{rep}/{max(rep, args.repeats)}] {label:<24} {status}", file=sys.stderr, flush=True)
    if ms:
        ms[-1].placement_after = placement_probe()
    elapsed = time.monotonic() - t0
    after = machine_state()

    series, sandwiches, placements = collect(ms)
    summary = summarize(series, sandwiches, placements)
    print(
        f"\nfabscope vs TCP peers on {HOST}, {rep} repeats ({args.repeats} asked for) x {args.duration:g} s, "
        f"{started:%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s"
    )
    print(
        f"idle: cpuidle {before['cpuidle_driver']}/{before['cpuidle_governor']}, cpu_dma_latency held at 0: "
        f"{'yes' if cfg.hold else 'NO'}; CPU {before['cpu_model']} x{before['cpus']}; kernel {before['kernel']}"
    )
    print(f"load average before: {before['loadavg']}; after: {after['loadavg']}\n")
    render(series, sandwiches, placements, summary, rep, sys.stdout)
    g = summary["goals"]
    for name, goal in (("latency p50 <= best peer", g["lat"]), ("1 MiB bandwidth >= qperf tcp_bw", g["bw"])):
        left = goal["unstable_repeats"]
        note = f"; {len(left)} unstable repeat(s) left out" if left else ""
        print(f"GOAL {name}: {goal['verdict']}  (ratio {fmt(goal['ratio'])} over {goal['repeats_used']} "
              f"repeat(s){note})")
    # A 3 s ping-pong should collect >100k samples; a few hundred means the process was starved
    # of CPU for most of the run and its p50 is close to meaningless.
    thin = [m for m in ms if m.error is None and 0 < m.values.get("samples", MIN_SAMPLES) < MIN_SAMPLES]
    for m in thin:
        print(
            f"note: {m.tool} repeat {m.repeat} has only {m.values['samples']:.0f} samples "
            f"(max {m.values.get('lat_max_us', 0) / 1e3:.0f} ms): starved of CPU; read its figure with care"
        )
    failed = [m for m in ms if m.error]
    for m in failed:
        print(f"\nfailed: {m.tool} (repeat {m.repeat}): {m.command}\n{m.error}", file=sys.stderr)

    if args.json:
        doc = {
            "schema": "fabscope.bench.tcp_peers/1",
            "started_utc": started.isoformat(timespec="seconds"),
            "elapsed_s": round(elapsed, 1),
            "argv": [sys.argv[0], *(sys.argv[1:] if argv is None else argv)],
            "repeats": args.repeats,
            "repeats_run": rep,
            "duration_s": args.duration,
            "cpu_dma_latency_held": cfg.hold,
            "engine": cfg.engine or "default (FABSCOPE_ENGINE unset: the .venv install)",
            "pinning": {"server_cpu": SERVER_CPU, "client_cpu": CLIENT_CPU},
            "machine_before": before,
            "machine_after": after,
            "measurements": [m.__dict__ for m in ms],
            **summary,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
