# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope exporter` against node_exporter scraping the same 64 RDMA ports (goal: fabscope <= node_exporter).

The sysfs tree is synthetic in count only: 64 copies of real fixture layouts (the rxe-qemu port
with its hw_counters and attributes, the PMA counters of mlx5-pma-counters, and rxe-qemu's eth0
statistics as the netdev behind each port), built in a temporary directory, plus the board_id and
hca_type files node_exporter's infiniband collector insists on (rxe has neither; without them it
refuses the devices). Next to it a history store with the saved records of tests/fixtures/records
(one run per file), so the scrape also carries the latest results, as an exporter on a host where
`fabscope run` keeps its history does.

The counters a busy port moves (data, packets, unicast packets; rxe's sent/received packets; the
netdev's bytes and packets: 12 files a port) are advanced on every port before each pair of
scrapes, so neither exporter meets a reading it had the scrape before; the other counters stay put,
as error counters mostly do.

Both exporters run as servers on that tree: `fabscope exporter --sysfs-root TREE --store STORE` and
node_exporter (Debian prometheus-node-exporter) with `--collector.disable-defaults
--collector.infiniband --collector.netclass`. Scrapes alternate between them, each an HTTP GET with
Prometheus' headers (OpenMetrics preferred, gzip), wall time to the last byte; medians of --scrapes.
The load average is printed with the result: on a shared machine the ratio is what compares.

Then the parts of a fabscope scrape, timed in this process on the same tree: the engine's snapshot
(the long-lived --counters-serve, and a one-shot --counters-json for comparison), the ports and
netdevs into series, the results (store and files), the text, and the whole exposition.

    .venv/bin/python bench/exporter_scrape.py [--ports 64] [--scrapes 40]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from fabscope import exporter  # noqa: E402
from fabscope.exporter.text import Exposition  # noqa: E402
from fabscope.launch.engine import engine_path  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "sysfs"
RXE = FIX / "rxe-qemu" / "sys" / "class"
PMA = FIX / "mlx5-pma-counters" / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters"
RECORDS = REPO / "tests" / "fixtures" / "records"
NODE_EXPORTER = "prometheus-node-exporter"
# What Prometheus 2.x sends with a scrape.
HEADERS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "Accept-Encoding": "gzip"}
START_S = 30.0
# The files a busy port's traffic moves, and by how much between two scrapes.
MOVING = {
    **{f"counters/{c}": 250_000_000 for c in ("port_xmit_data", "port_rcv_data")},  # 4-byte words: 1 GB
    **{f"counters/{c}": 250_000 for c in ("port_xmit_packets", "port_rcv_packets", "unicast_xmit_packets",
                                          "unicast_rcv_packets")},
    **{f"hw_counters/{c}": 250_000 for c in ("sent_pkts", "rcvd_pkts")},
}
MOVING_NET = {"statistics/tx_bytes": 1_000_000_000, "statistics/rx_bytes": 1_000_000_000,
              "statistics/tx_packets": 250_000, "statistics/rx_packets": 250_000}


def build(root: Path, ports: int) -> None:
    for i in range(ports):
        dev = root / "class" / "infiniband" / f"rxe{i}"
        shutil.copytree(RXE / "infiniband" / "rxe0", dev, symlinks=True)
        # node_exporter's infiniband collector fails a device without them; fabscope reads neither
        (dev / "board_id").write_text("QEMU0000001\n")
        (dev / "hca_type").write_text("rxe\n")
        port = dev / "ports" / "1"
        shutil.copytree(PMA, port / "counters")
        ndevs = port / "gid_attrs" / "ndevs"
        for slot in ndevs.iterdir() if ndevs.is_dir() else []:
            if slot.read_text().strip():
                slot.write_text(f"eth{i}\n")
        shutil.copytree(RXE / "net" / "eth0", root / "class" / "net" / f"eth{i}", symlinks=True)


def advance(root: Path, ports: int, step: int) -> None:
    """The busy counters of every port, ``step`` scrape intervals on (files rewritten in place)."""
    for i in range(ports):
        for base, moving in ((root / "class" / "infiniband" / f"rxe{i}" / "ports" / "1", MOVING),
                             (root / "class" / "net" / f"eth{i}", MOVING_NET)):
            for rel, per in moving.items():
                (base / rel).write_text(f"{(i + 1) * 1_000_000_000_000 + step * per}\n")


def build_store(db: Path) -> int:
    """A history store with one run per saved record file; returns the number of results."""
    from fabscope.results import parse_record
    from fabscope.store import open_store

    n = 0
    with open_store(db) as st:
        for f in sorted(RECORDS.glob("*.jsonl")):
            recs = [parse_record(json.loads(line)) for line in f.read_text().splitlines() if line.strip()]
            st.add_run("run", ["fabscope", "run"], recs)
            n += len(recs)
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=64)
    ap.add_argument("--scrapes", type=int, default=40)
    ap.add_argument("--fabscope-python", type=Path, default=REPO / "python", metavar="DIR",
                    help="the fabscope package to serve (default this checkout's; an older tree to compare)")
    ns = ap.parse_args()
    node_exporter = shutil.which(NODE_EXPORTER)
    if node_exporter is None:
        print(f"exporter_scrape: {NODE_EXPORTER} is not installed; it is the peer this bench compares with: "
              f"apt-get install {NODE_EXPORTER} (scripts/setup.sh installs deps/apt-packages.txt)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root, db = Path(tmp) / "sys", Path(tmp) / "history.db"
        build(root, ns.ports)
        results = build_store(db)
        fs_port, ne_port = _free_port(), _free_port()
        # -S: no .pth files, so the editable install's import hook cannot put this checkout's package
        # in front of --fabscope-python; the libraries come from this interpreter's site-packages.
        fabscope = subprocess.Popen(
            [sys.executable, "-S", "-m", "fabscope", "exporter", "--listen", f"127.0.0.1:{fs_port}", "--sysfs-root",
             str(root), "--store", str(db)],
            env=dict(os.environ, PYTHONPATH=f"{ns.fabscope_python}{os.pathsep}{sysconfig.get_paths()['purelib']}",
                     FABSCOPE_ENGINE=str(engine_path())),  # -S also hides the venv, where the engine is
            stderr=subprocess.PIPE, text=True)
        node = subprocess.Popen(
            [node_exporter, f"--web.listen-address=127.0.0.1:{ne_port}", f"--path.sysfs={root}",
             "--collector.disable-defaults", "--collector.infiniband", "--collector.netclass"],
            stderr=subprocess.PIPE, text=True)
        try:
            servers = {"fabscope": (fabscope, fs_port), "node_exporter": (node, ne_port)}
            bodies = {name: _first_scrape(name, proc, port) for name, (proc, port) in servers.items()}
            for body in bodies.values():
                _check(body, ns.ports)
            for _ in range(3):  # warm both (the fabscope engine's file cache, node_exporter's heap)
                for _name, (_proc, port) in servers.items():
                    _get(port)
            wall: dict[str, list[float]] = {name: [] for name in servers}
            advance(root, ns.ports, -1)
            cpu0 = {name: _cpu_tree(proc.pid) for name, (proc, _port) in servers.items()}
            for step in range(ns.scrapes):
                advance(root, ns.ports, step)
                for name, (_proc, port) in servers.items():
                    t = time.perf_counter()
                    _get(port)
                    wall[name].append(time.perf_counter() - t)
            cpu = {name: (_cpu_tree(proc.pid) - cpu0[name]) / ns.scrapes for name, (proc, _port) in servers.items()}
            load = os.getloadavg()
        finally:
            for proc in (fabscope, node):
                proc.terminate()
                proc.wait(timeout=10)
        parts = _parts(root, db, ns.scrapes)
    med = {name: statistics.median(v) * 1000 for name, v in wall.items()}
    samples = {name: sum(1 for line in body.splitlines() if line and not line.startswith("#"))
               for name, body in bodies.items()}
    ratio = med["fabscope"] / med["node_exporter"]
    print(f"{ns.ports} ports, {ns.scrapes} alternating scrapes each over HTTP, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    for name in servers:
        print(f"  {name:13s} wall median {med[name]:6.1f} ms (max {max(wall[name]) * 1000:6.1f}), CPU "
              f"{cpu[name] * 1000:5.1f} ms a scrape, {samples[name]} samples, {len(bodies[name]) / 1024:.0f} KiB")
    print(f"  fabscope / node_exporter: wall {ratio:.2f}x, CPU {cpu['fabscope'] / cpu['node_exporter']:.2f}x "
          f"(history store: {results} results); goal <= 1.0: {'PASS' if ratio <= 1.0 else 'MISS'}")
    print("  fabscope parts (wall medians, in process): " + ", ".join(f"{k} {v:.1f} ms" for k, v in parts.items()))
    return 0  # evidence, not a test (bench/README.md)


def _parts(root: Path, db: Path, scrapes: int) -> dict[str, float]:
    collector = exporter.FabscopeCollector(engine_path(), sysfs_root=str(root),
                                           results=exporter.ResultsSource([], store=db))
    try:
        exporter.render(collector)  # starts the engine, plans the series, reads the store
        snap = collector.snapshots.snapshot()
        out = Exposition()
        steps: dict[str, Callable[[], object]] = {
            "engine snapshot (--counters-serve)": collector.snapshots.snapshot,
            "one-shot --counters-json": lambda: exporter.counters_snapshot(engine_path(), str(root)),
            "ports and netdevs into series (no counter moved)": lambda: _series(collector, snap),
            "results (store unchanged)": lambda: collector._results(Exposition()),
            "text": out.text,
            "whole scrape": lambda: exporter.render(collector),
        }
        collector._ports(snap, out)
        collector._nets(snap, out)
        times: dict[str, list[float]] = {k: [] for k in steps}
        for _ in range(scrapes):
            for name, step in steps.items():
                t = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - t)
        return {k: statistics.median(v) * 1000 for k, v in times.items()}
    finally:
        collector.snapshots.close()


def _series(collector: exporter.FabscopeCollector, snap: dict[str, Any]) -> Exposition:
    out = Exposition()
    collector._ports(snap, out)
    collector._nets(snap, out)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(port: int) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=HEADERS)
    with urllib.request.urlopen(req, timeout=10) as resp:
        body: bytes = resp.read()
        return gzip.decompress(body) if resp.headers.get("Content-Encoding") == "gzip" else body


def _first_scrape(name: str, proc: subprocess.Popen[str], port: int) -> str:
    deadline = time.monotonic() + START_S
    while True:
        try:
            return _get(port).decode()
        except OSError:
            if proc.poll() is not None:
                err = proc.stderr.read() if proc.stderr else ""
                raise SystemExit(f"exporter_scrape: {name} ended (exit {proc.returncode}) before answering: "
                                 f"{err[-500:]}") from None
            if time.monotonic() > deadline:
                raise SystemExit(f"exporter_scrape: {name} did not answer on 127.0.0.1:{port} within {START_S:.0f} s"
                                 ) from None
            time.sleep(0.1)


def _check(body: str, ports: int) -> None:
    """Both must have seen every port, or the comparison is of different work."""
    for needle in ("fabscope_rdma_port_transmit_bytes_total{", "node_infiniband_port_data_transmitted_bytes_total{"):
        seen = sum(1 for line in body.splitlines() if line.startswith(needle))
        if seen and seen != ports:
            raise SystemExit(f"exporter_scrape: {needle[:-1]} has {seen} series, expected {ports} (one per port)")
    if "transmitted_bytes_total{" not in body and "transmit_bytes_total{" not in body:
        raise SystemExit(f"exporter_scrape: an exporter served no port counters: {body[:300]}")


def _cpu_tree(pid: int) -> float:
    """CPU seconds of a server and its live children (fabscope's engine): the scrape's cost without
    the time other processes on a shared machine took."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, IndexError, ValueError):
            continue
    return total


if __name__ == "__main__":
    sys.exit(main())
