# SPDX-License-Identifier: BSD-3-Clause
"""Where the hypervisor has put this VM's CPUs, as seen from inside: the round trip of a cache line
between two CPUs (bench/core_to_core.c), probed before every measurement of a bench.

On this machine that round trip moves between levels (about 45, 100 and 500 ns) every few seconds
to minutes while the speed of one CPU stays the same within 1 %: the hypervisor moves the two
vCPUs between physical cores that share a cache and cores that do not. Loopback TCP and shared
memory between a client on one CPU and a server on the other change speed with it (qperf tcp_bw
2.0 against 5.2 GB/s in one bench run), so a comparison of two tools is only fair between runs
made on the same placement: `same_placement` says whether the probes around a sandwich agree.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE_SRC = REPO / "bench" / "core_to_core.c"
PROBE_SOURCES = (PROBE_SRC, REPO / "bench" / "bench_cpu.h")  # the program and the header it includes
PROBE_BIN = REPO / "build" / "bench" / "core_to_core"
PROBE_MS = 50  # 250-1000 batches: a steady median, short next to a measurement of seconds
# Probes farther apart than this factor are different placements. The levels seen here differ by
# 2x or more; one placement's probes agree within 10 %.
SAME_PLACEMENT = 1.5


class ProbeError(Exception):
    """The probe could not be built or run; the message says what was run and what it printed."""


def build_probe(dest: Path = PROBE_BIN) -> Path:
    """Builds bench/core_to_core.c into `dest` when that is missing or older than its sources."""
    if dest.exists() and dest.stat().st_mtime >= max(src.stat().st_mtime for src in PROBE_SOURCES):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-o", str(dest), str(PROBE_SRC)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if p.returncode != 0:
        raise ProbeError(f"{' '.join(cmd)} failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")
    return dest


def probe(cpu_a: int, cpu_b: int, ms: int = PROBE_MS, binary: Path = PROBE_BIN) -> float:
    """The median round trip, in ns, of a cache line bounced between the two CPUs for `ms`, by the
    probe `build_probe` made (built once, before the first probe, not checked again on each)."""
    argv = [str(binary), str(cpu_a), str(cpu_b), str(ms)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=ms / 1000 + 10, check=False)
    if p.returncode != 0:
        raise ProbeError(f"{' '.join(argv)} failed (exit {p.returncode}): {p.stderr.strip()}")
    return float(json.loads(p.stdout)["rtt_ns"])


def same_placement(rtts: Sequence[float | None]) -> bool:
    """Whether every probe was taken on one placement (a missing probe proves nothing: False)."""
    got = [r for r in rtts if r is not None and r > 0]
    return len(got) == len(rtts) and bool(got) and max(got) / min(got) <= SAME_PLACEMENT


class GuestAgent:
    """Answers the Soft-RoCE guests' placement requests while a bench runs in them.

    The guests are pinned to two host CPUs and their packets cross between those CPUs, so their
    speed moves with the placement as the host's loopback does. Only the host can probe it, and
    only between runs (the probe spins both CPUs for PROBE_MS): the client guest's chain
    (tests/softroce/placement_client.py) writes `req-N` into `share/placement/` before each run
    and after the last, and waits for `ans-N`, which this thread writes with the probe's result.
    `agent` in that directory tells the guest someone answers; without it the guest skips the
    probes and its records carry none."""

    def __init__(self, share: Path, cpus: tuple[int, int], poll_s: float = 0.005) -> None:
        self.dir = share / "placement"
        self.cpus = cpus
        self.poll_s = poll_s
        self.answered = 0
        self.binary = PROBE_BIN
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="placement-agent", daemon=True)

    def __enter__(self) -> GuestAgent:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.binary = build_probe()
        (self.dir / "agent").write_text(json.dumps({"cpus": list(self.cpus), "probe_ms": PROBE_MS}) + "\n")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        while not self._stop.is_set():
            for req in sorted(self.dir.glob("req-*")):
                seq = req.name.removeprefix("req-")
                try:
                    answer: dict[str, object] = {"rtt_ns": probe(*self.cpus, binary=self.binary)}
                except (ProbeError, OSError, subprocess.TimeoutExpired, ValueError) as e:
                    answer = {"error": str(e)}
                tmp = self.dir / f".ans-{seq}"
                tmp.write_text(json.dumps(answer) + "\n")
                tmp.rename(self.dir / f"ans-{seq}")
                req.unlink()
                self.answered += 1
            self._stop.wait(self.poll_s)
