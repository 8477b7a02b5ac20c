# SPDX-License-Identifier: BSD-3-Clause
"""A CPU hog on the engine's CPU, and loopback runs beside it, for test_compare_cpu_hog.py.

``python cpu_hog.py runs CPU ITERS SPIN_MS ROUNDS`` (the caller starts it in a session of its own):
raise this session's scheduling weight (its autogroup and its processes to nice -20), then ROUNDS
times a run tagged ``base``, one ``hog``, one ``again``, each printed as one JSON line
``{"tag": ..., "record": ...}``. A run is the two engines over loopback, the client engine on CPU
(TCP latency at 8 B, busy polling); for ``hog`` the hog is started pinned on CPU first, waited for
until it says it spins, and stopped by its PID after the run. Interleaved, so the machine's load
falls on the three tags alike; one process, so no run waits for an interpreter to start.

The raised weight makes the base runs' tail the engine's own on a shared 2-CPU machine: with
autogroups, nice alone does not reach beyond the session; without the raise a spinning loop here
was off its CPU 700 ms of a second (others' guests and busy loops), with it about 25 ms. The hog
runs at the engine's own weight: it takes the CPU by turns, not by rank.

``python cpu_hog.py hog CPU SPIN_MS``: the hog itself: pinned on CPU, it spins SPIN_MS, sleeps
0.1 ms, and starts again; its wake-ups cut the busy-polling engine's time into short windows, so
well over 1 % of the round trips wait out a spin (the p99 moves by milliseconds, not only the
p99.9). It ends when its parent is gone.

Exit status of ``runs``: 0 with every record; 3: the priority could not be raised (the line says
why: CAP_SYS_NICE is needed); 1: a run failed (stderr says which and why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXIT_NO_PRIORITY = 3


def raise_weight() -> str | None:
    """This session's autogroup and this process to nice -20; None, or why not."""
    try:
        autogroup = Path("/proc/self/autogroup")
        if autogroup.exists() and Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1":
            autogroup.write_text("-20")
        os.setpriority(os.PRIO_PROCESS, 0, -20)
    except OSError as exc:
        return f"cannot raise the scheduling priority (needs CAP_SYS_NICE): {exc}"
    return None


def hog(cpu: int, spin_ms: float) -> None:
    parent = os.getppid()
    os.sched_setaffinity(0, {cpu})
    print("spinning", flush=True)
    spin_s = spin_ms / 1000.0
    while os.getppid() == parent:
        time.sleep(0.0001)
        until = time.perf_counter() + spin_s
        while time.perf_counter() < until:
            pass


def one_run(cpu: int, iters: int, spin_ms: float) -> dict[str, Any] | str:
    """One loopback run with the client engine on ``cpu``, beside the hog when ``spin_ms`` > 0:
    its record, or why it failed."""
    from fabscope.launch import runner

    spinner: subprocess.Popen[str] | None = None
    if spin_ms > 0:
        spinner = subprocess.Popen([sys.executable, __file__, "hog", str(cpu), str(spin_ms)], stdout=subprocess.PIPE,
                                   text=True)
        assert spinner.stdout is not None
        if runner.read_line_within(spinner.stdout, time.monotonic() + 30.0) != "spinning\n":
            spinner.kill()
            spinner.wait()
            return "the hog did not start within 30 s"
    try:
        outcome = runner.run_loopback(["--pattern=lat", "--sizes=8", f"--iters={iters}", "--warmup=100",
                                       "--poll=busy", "--format=json", f"--cpu={cpu}"], 20.0)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    if outcome.error is not None or len(outcome.records) != 1:
        return f"the run failed: {outcome.error}"
    return outcome.records[0].to_json()


def runs(cpu: int, iters: int, spin_ms: float, rounds: int) -> int:
    sys.path.insert(0, str(REPO / "python"))
    why = raise_weight()
    if why:
        print(why, flush=True)
        return EXIT_NO_PRIORITY
    for _ in range(rounds):
        for tag, spin in (("base", 0.0), ("hog", spin_ms), ("again", 0.0)):
            got = one_run(cpu, iters, spin)
            if isinstance(got, str):
                print(f"{tag}: {got}", file=sys.stderr)
                return 1
            print(json.dumps({"tag": tag, "record": got}), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "hog":
        hog(int(argv[1]), float(argv[2]))
        return 0
    if len(argv) == 5 and argv[0] == "runs":
        return runs(int(argv[1]), int(argv[2]), float(argv[3]), int(argv[4]))
    print("usage: cpu_hog.py runs CPU ITERS SPIN_MS ROUNDS | cpu_hog.py hog CPU SPIN_MS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
