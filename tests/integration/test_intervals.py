# SPDX-License-Identifier: BSD-3-Clause
"""Per-interval bandwidth (--interval): the core's accounting, for every backend, checked with the
tcp backend on loopback (two real engines).

The intervals come from the side that measures the rate (the receiver for send), start at its
first arrival, and add up to the record's bandwidth; a receiver that stalls for a while must show
as a low interval (perftest's --report-min request, PR #214), which a whole-run average hides.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from engine_pair import engine_path, free_port, parse_lines, run_pair


def _check_consistent(rec: dict[str, Any], length_s: float, partition_rel: float = 1e-3) -> dict[str, Any]:
    iv: dict[str, Any] = rec["intervals"]
    assert iv["length_s"] == length_s
    n = len(iv["messages"])
    assert n == len(iv["seconds"]) == len(iv["bandwidth_gbps"]) and n >= 1
    # every interval but the last is whole; the last ends at the last arrival
    assert all(s == length_s for s in iv["seconds"][:-1]), iv["seconds"]
    assert 0 <= iv["seconds"][-1] <= length_s
    assert iv["whole"] == n - 1
    whole = iv["bandwidth_gbps"][:-1]
    assert rec["bandwidth_min_gbps"] == min(whole) and rec["bandwidth_peak_gbps"] == max(whole)
    assert iv["min_index"] == whole.index(min(whole))
    # the intervals partition the timed arrivals: together they give the record's bandwidth
    total = sum(iv["messages"]) * rec["size"] * 8 / sum(iv["seconds"]) / 1e9
    assert total == pytest.approx(rec["bandwidth_gbps"], rel=partition_rel)
    for m, s, g in zip(iv["messages"], iv["seconds"], iv["bandwidth_gbps"], strict=True):
        if s > 0:
            # "seconds" is rounded to the microsecond: the last interval can be a few microseconds
            # long (a burst after a stall), where that rounding alone moves the rate by per cent.
            bits = m * rec["size"] * 8
            lo, hi = bits / (s + 5e-7) / 1e9, bits / max(s - 5e-7, 1e-9) / 1e9
            assert lo * (1 - 1e-6) - 1e-6 <= g <= hi * (1 + 1e-6) + 1e-6, (m, s, g)
    return iv


def test_intervals_partition_the_measurement() -> None:
    res = run_pair(["--backend", "tcp", "--pattern", "bw", "--sizes", "64K", "--duration", "1.3",
                    "--interval", "0.25", "--warmup", "10"])
    assert res.rc == 0, res.stderr
    rec = res.records[0]
    iv = _check_consistent(rec, 0.25)
    assert iv["measured_at"].startswith("receiver")
    assert iv["whole"] >= 4  # 1.3 s of sending, timed from the first arrival
    assert rec["config"]["interval"] == 0.25


def test_auto_interval_is_one_second_in_duration_mode_and_off_for_iters() -> None:
    res = run_pair(["--backend", "tcp", "--pattern", "bw", "--sizes", "64K", "--duration", "1.2",
                    "--warmup", "10"])
    assert res.rc == 0, res.stderr
    rec = res.records[0]
    assert rec["config"]["interval"] == -1
    _check_consistent(rec, 1.0)
    res = run_pair(["--backend", "tcp", "--pattern", "bw", "--sizes", "64K", "--iters", "200",
                    "--warmup", "10"])
    assert res.rc == 0, res.stderr
    assert "intervals" not in res.records[0] and "bandwidth_min_gbps" not in res.records[0]


def test_bibw_adds_both_receivers() -> None:
    res = run_pair(["--backend", "tcp", "--pattern", "bibw", "--sizes", "64K", "--duration", "1.0",
                    "--interval", "0.25", "--warmup", "10"])
    assert res.rc == 0, res.stderr
    rec = res.records[0]
    iv: dict[str, Any] = rec["intervals"]
    assert iv["whole"] >= 2 and len(iv["messages"]) == len(iv["bandwidth_gbps"])
    assert rec["bandwidth_min_gbps"] is not None and rec["bandwidth_min_gbps"] <= rec["bandwidth_peak_gbps"]


def _loopback_bytes() -> int:
    return int(open("/sys/class/net/lo/statistics/rx_bytes").read())


def test_a_stalled_receiver_shows_as_the_lowest_interval() -> None:
    """SIGSTOP the receiving engine for ~1 s early in a 3 s run: at least one 0.25 s interval then
    carries (almost) nothing, while the run's average stays high. The stall starts once 64 MB
    more have crossed the loopback (the warm-up is 10 x 64 KiB), so it falls inside the
    measurement however slowly the engines start: a fixed delay from the start once landed in the
    set-up under load, and no interval was low."""
    exe = str(engine_path())
    port = free_port()
    server = subprocess.Popen([exe, "--listen", f"127.0.0.1:{port}", "--backend", "tcp", "--timeout", "10",
                               "--cpu", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped: list[float] = []

    def stall() -> None:
        deadline = time.monotonic() + 20
        before = _loopback_bytes()
        while _loopback_bytes() - before < 64 << 20:
            if time.monotonic() > deadline or server.poll() is not None:
                return
            time.sleep(0.002)
        os.kill(server.pid, signal.SIGSTOP)
        stopped.append(time.monotonic())
        time.sleep(1.0)
        os.kill(server.pid, signal.SIGCONT)

    try:
        assert server.stdout is not None
        server.stdout.readline()  # {"port": ...}: listening
        t = threading.Thread(target=stall)
        t.start()
        client = subprocess.run([exe, "--peer", f"127.0.0.1:{port}", "--backend", "tcp", "--timeout", "10",
                                 "--pattern", "bw", "--sizes", "64K", "--duration", "3", "--interval", "0.25",
                                 "--warmup", "10", "--cpu", "1"], capture_output=True, text=True, timeout=60)
        t.join()
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGCONT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert stopped, "the stall did not happen"
    assert client.returncode == 0, client.stderr
    records, _ = parse_lines(client.stdout)
    rec = records[0]
    _check_consistent(rec, 0.25)
    assert rec["bandwidth_min_gbps"] < 0.25 * rec["bandwidth_peak_gbps"], rec["intervals"]
    assert rec["bandwidth_min_gbps"] < 0.5 * rec["bandwidth_gbps"], rec["intervals"]


@pytest.mark.parametrize("args, text", [
    (["--pattern", "lat", "--interval", "1"], "--interval 1: per-interval bandwidth applies to --pattern bw"),
    (["--pattern", "bw", "--interval", "0.0001"], "the shortest interval is 0.001 s"),
    (["--pattern", "bw", "--duration", "100", "--interval", "0.01"], "at most 4096 are kept"),
])
def test_interval_usage_errors(args: list[str], text: str) -> None:
    out = subprocess.run([str(engine_path()), "--peer", "127.0.0.1:1", "--backend", "tcp", *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert text in out.stderr


def test_a_receiver_asleep_in_recv_gives_up_on_a_stopped_sender_within_its_timeout() -> None:
    """--poll block: the receiver of a TCP stream sleeps in recv() between arrivals (SO_RCVTIMEO
    bounds each sleep, so the deadline is still checked). A sender stopped mid-stream (SIGSTOP)
    sends nothing, not even heartbeats: the receiver must end with the stopped peer named, within
    its --timeout and a few seconds, not sleep on."""
    exe = str(engine_path())
    port = free_port()
    server = subprocess.Popen([exe, "--listen", f"127.0.0.1:{port}", "--backend", "tcp", "--timeout", "2",
                               "--cpu", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        assert server.stdout is not None
        server.stdout.readline()  # {"port": ...}: listening
        client = subprocess.Popen([exe, "--peer", f"127.0.0.1:{port}", "--backend", "tcp", "--timeout", "2",
                                   "--pattern", "bw", "--sizes", "64K", "--duration", "20", "--poll", "block",
                                   "--warmup", "10", "--cpu", "1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        before, deadline = _loopback_bytes(), time.monotonic() + 20
        while _loopback_bytes() - before < 64 << 20:  # inside the measurement, however slow the start
            assert time.monotonic() < deadline and client.poll() is None, "the stream did not start"
            time.sleep(0.002)
        os.kill(client.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = server.communicate(timeout=20)
        took = time.monotonic() - stopped
    finally:
        if client is not None and client.poll() is None:
            os.kill(client.pid, signal.SIGCONT)
            client.kill()
            client.wait()
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 3, err
    assert "no progress for 2.0 s" in err and "stopped answering" in err, err
    assert took < 2 + 4, f"the receiver took {took:.1f} s to give up on a 2 s timeout"
