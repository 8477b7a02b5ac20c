"""How long one `fabscope exporter` scrape of 64 RDMA ports takes (goal: under 100 ms).

The sysfs tree is synthetic in count only: 64 copies of real fixture layouts (the rxe-qemu port
with its hw_counters and attributes, the PMA counters of mlx5-pma-counters, and rxe-qemu's eth0
statistics as the netdev behind each port), built in a temporary directory. Each scrape is what
Prometheus triggers: a snapshot from the collector's long-lived engine (--counters-serve), the
collector, the text exposition. The parts are then timed on their own: the engine's snapshot (the
long-lived one, and a one-shot --counters-json for comparison), the conversion into metric
families, and prometheus_client's text and OpenMetrics expositions of the same families.

    .venv/bin/python bench/exporter_scrape.py [--ports 64] [--scrapes 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.core import Metric  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest  # noqa: E402

from fabscope import exporter  # noqa: E402
from fabscope.engine import engine_path  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "sysfs"
RXE = FIX / "rxe-qemu" / "sys" / "class"
PMA = FIX / "mlx5-pma-counters" / "class" / "infiniband" / "mlx5_1" / "ports" / "1" / "counters"


def build(root: Path, ports: int) -> None:
    for i in range(ports):
        dev = root / "class" / "infiniband" / f"rxe{i}"
        shutil.copytree(RXE / "infiniband" / "rxe0", dev, symlinks=True)
        port = dev / "ports" / "1"
        shutil.copytree(PMA, port / "counters")
        ndevs = port / "gid_attrs" / "ndevs"
        for slot in ndevs.iterdir() if ndevs.is_dir() else []:
            if slot.read_text().strip():
                slot.write_text(f"eth{i}\n")
        shutil.copytree(RXE / "net" / "eth0", root / "class" / "net" / f"eth{i}", symlinks=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ports", type=int, default=64)
    ap.add_argument("--scrapes", type=int, default=30)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root, ns.ports)
        collector = exporter.FabscopeCollector(engine_path(), sysfs_root=str(root))
        exporter.render(collector)  # the first scrape starts the engine and opens the files
        times: list[float] = []
        cpu: list[float] = []
        size = 0
        for _ in range(ns.scrapes):
            engine_pid = collector.snapshots.pid
            t, c = time.perf_counter(), _cpu(engine_pid)
            size = len(exporter.render(collector))
            times.append(time.perf_counter() - t)
            cpu.append(_cpu(engine_pid) - c)
        parts: dict[str, list[float]] = {"serve": [], "oneshot": [], "convert": [], "text": [], "openmetrics": []}
        for _ in range(ns.scrapes):
            t = time.perf_counter()
            snap = collector.snapshots.snapshot()
            parts["serve"].append(time.perf_counter() - t)
            t = time.perf_counter()
            exporter.counters_snapshot(engine_path(), str(root))
            parts["oneshot"].append(time.perf_counter() - t)
            t = time.perf_counter()
            families = _Fixed(collector._port_families(snap) + collector._net_families(snap))
            parts["convert"].append(time.perf_counter() - t)
            t = time.perf_counter()
            generate_latest(families)
            parts["text"].append(time.perf_counter() - t)
            t = time.perf_counter()
            openmetrics_latest(families)  # type: ignore[no-untyped-call]
            parts["openmetrics"].append(time.perf_counter() - t)
        collector.snapshots.close()
    med, worst, med_cpu = statistics.median(times), max(times), statistics.median(cpu)
    load = os.getloadavg()[0]
    ms = {k: statistics.median(v) * 1000 for k, v in parts.items()}
    print(f"{ns.ports} ports, {ns.scrapes} scrapes, exposition {size / 1024:.0f} KiB, load average {load:.1f} "
          f"on {os.cpu_count()} CPUs: wall median {med * 1000:.1f} ms (max {worst * 1000:.1f}); CPU median "
          f"{med_cpu * 1000:.1f} ms (exporter and its engine); goal < 100 ms: "
          f"{'PASS' if med < 0.1 else 'PASS in CPU time' if med_cpu < 0.1 else 'MISS'}")
    print(f"  parts (wall medians): engine snapshot {ms['serve']:.1f} ms (--counters-serve; one-shot --counters-json "
          f"{ms['oneshot']:.1f} ms), families {ms['convert']:.1f} ms, text exposition {ms['text']:.1f} ms "
          f"(OpenMetrics, what a Prometheus server asks for first: {ms['openmetrics']:.1f} ms)")
    return 0  # evidence, not a test (bench/README.md)


class _Fixed:
    """The same families for each exposition (a collector that only hands them over)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _cpu(engine_pid: int | None) -> float:
    """CPU seconds of this process, its finished children and the long-lived engine: the scrape's cost
    without the time other processes on a shared machine took."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    engine = 0.0
    if engine_pid is not None:
        try:
            fields = Path(f"/proc/{engine_pid}/stat").read_text().rsplit(")", 1)[1].split()
            engine = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + engine


if __name__ == "__main__":
    sys.exit(main())
