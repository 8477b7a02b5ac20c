#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope load` beside iperf3 on the netns testbed, alternated (peer, fabscope, peer per repeat):

- one pair, N flows: `iperf3 -c -P N` from fs-b to fs-a against `fabscope load incast --hosts
  fs-a,fs-b --flows N` (one sender: the same N connections over one link);
- incast 4 -> 1: four iperf3 clients (fs-b..fs-e) into four iperf3 servers on fs-a, started
  together, against `fabscope load incast --hosts fs-a,...,fs-e`.

Every host's fabric link is shaped (tbf) to --rate and so is the switch's port towards fs-a, with a
queue deep enough that nothing drops (8 MB): the ground truth is the port's rate. Ratios: fabscope's
total over the mean of the two iperf3 runs around it, and the same for the median flow's rate.
Goal (issue 48): within 5 %. Both tools warm up 1 s (iperf3 -O 1, fabscope --warmup-time 1) and
measure --duration seconds.

    sudo python3 bench/load_vs_iperf3.py [--repeats 3] [--duration 5] [--rate 200mbit]

Needs root (namespaces) and the testbed's lock; servers are waited for by their own "Server
listening" line and stopped by their PIDs. Exit 0 whatever the ratios (evidence, not a test).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from fabscope.testbed import netns  # noqa: E402
from fabscope.testbed.netns_queue import set_port_queue  # noqa: E402

BASE_PORT = 5301


def iperf3_server(host: str, port: int) -> subprocess.Popen[str]:
    # --forceflush: its "Server listening" line must come through the pipe now, not at exit.
    proc = subprocess.Popen(netns.ns_exec_argv(host, ["iperf3", "-s", "-1", "--forceflush", "-p", str(port), "-B",
                                                      netns.fabric_ip(host)]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    # A thread reads the lines: select() on the pipe cannot see a line already in the reader's buffer
    # (iperf3 writes its dashes and "Server listening" at once).
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout or ()], daemon=True).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if "Server listening" in line:
            return proc
    proc.kill()
    raise SystemExit(f"iperf3 server on {host}:{port} did not start")


def iperf3(clients: list[tuple[str, int]], server_host: str, duration: float) -> list[float]:
    """Per-stream receiver rates (Gb/s) of iperf3 clients started together, one server each."""
    servers = [iperf3_server(server_host, BASE_PORT + i) for i in range(len(clients))]
    procs = []
    try:
        for i, (host, streams) in enumerate(clients):
            procs.append(subprocess.Popen(netns.ns_exec_argv(host, [
                "iperf3", "-c", netns.fabric_ip(server_host), "-p", str(BASE_PORT + i), "-P", str(streams),
                "-t", f"{duration:g}", "-O", "1", "-J"]), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        rates: list[float] = []
        for p in procs:
            out, _ = p.communicate(timeout=duration + 30)
            doc = json.loads(out)
            rates += [s["receiver"]["bits_per_second"] / 1e9 for s in doc["end"]["streams"]]
        return rates
    finally:
        for s in servers:
            try:
                s.wait(timeout=10)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()


def fabscope_load(hosts: list[str], flows: int, duration: float) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **netns.launcher_env())
    out = subprocess.run([sys.executable, "-m", "fabscope", "load", "incast", "--hosts", ",".join(hosts),
                          "--receiver", hosts[0], "--flows", str(flows), "--device", "fabric0", "--duration",
                          f"{duration:g}", "--warmup-time", "1", "--sizes", "128K", "--format", "json"],
                         env=env, capture_output=True, text=True, timeout=duration * 4 + 120)
    if not out.stdout.strip():
        raise SystemExit(f"fabscope load failed (exit {out.returncode}): {out.stderr[-1500:]}")
    return [f["gbps"] for f in json.loads(out.stdout)["flows"]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--rate", default="200mbit")
    ap.add_argument("--flows", type=int, default=4)
    args = ap.parse_args()
    cases = {
        f"one pair, {args.flows} flows (iperf3 -P {args.flows} / --flows {args.flows})":
            (lambda: iperf3([("fs-b", args.flows)], "fs-a", args.duration),
             lambda: fabscope_load(["fs-a", "fs-b"], args.flows, args.duration)),
        "incast 4 -> 1 (4 iperf3 clients / load incast)":
            (lambda: iperf3([(h, 1) for h in ("fs-b", "fs-c", "fs-d", "fs-e")], "fs-a", args.duration),
             lambda: fabscope_load(["fs-a", "fs-b", "fs-c", "fs-d", "fs-e"], 1, args.duration)),
    }
    rows = []
    with netns.session():
        netns.up(args.rate, hosts=5)
        try:
            set_port_queue("fs-a", args.rate, 8_000_000)
            for name, (peer, ours) in cases.items():
                totals, medians = [], []
                for r in range(args.repeats):
                    before, mine, after = peer(), ours(), peer()
                    totals.append(sum(mine) / statistics.mean([sum(before), sum(after)]))
                    medians.append(statistics.median(mine) / statistics.mean(
                        [statistics.median(before), statistics.median(after)]))
                    print(f"{name} repeat {r + 1}: iperf3 {sum(before):.4f} / {sum(after):.4f} Gb/s, fabscope "
                          f"{sum(mine):.4f} Gb/s; per flow iperf3 {[round(x, 4) for x in before]}, fabscope "
                          f"{[round(x, 4) for x in mine]}", flush=True)
                rows.append((name, statistics.median(totals), min(totals), max(totals),
                             statistics.median(medians), min(medians), max(medians)))
        finally:
            netns.down()
    print("\n| case | total: fabscope / iperf3, median [min, max] | median flow: fabscope / iperf3 |")
    print("|---|---|---|")
    for name, t, tlo, thi, m, mlo, mhi in rows:
        print(f"| {name} | {t:.3f} [{tlo:.3f}, {thi:.3f}] | {m:.3f} [{mlo:.3f}, {mhi:.3f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
