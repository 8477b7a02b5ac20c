#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Work per message and per empty poll turn, counted in instructions: fabscope against its peer tools
on loopback (callgrind; this VM exposes no PMU, so `perf stat -e instructions:u` says "not supported").

    python3 bench/instr.py [--pairs tcp,ucx,ofi,mpi] [--sides client,server] [--json out.json]
    make bench-instr

What one count is: the instructions the measured process executes in user space (valgrind's
callgrind: the kernel's share of a system call is not in it, for either tool) and how often it called
the library function both tools call once per poll turn (the `turn` function: recv/recvfrom for
TCP, ucp_worker_progress, the provider's fi_cq_read, opal_progress). The other side of the pair runs
natively on the other CPU ("fast") or also under callgrind ("slow": it answers later, so the
measured side spins many more empty turns per message). Each configuration runs at two lengths.
Over those four runs the instructions are fitted (least squares) as

    Ir = c + a * messages + e * turns

so start-up and reporting (c) cancel, e is the cost of one poll turn and a the work per message
beyond its turns. Reported: per message = a + e (the post, the completion with the one turn that
finds it, the repost and the record), per empty turn = e. A tool that sleeps in the kernel for its
data (qperf) makes as many turns as messages: then e cannot be told from a and the row says so
(per message = the slope over messages, turns included).

Load does not move a count the way it moves a time, but it moves the turns: the per-turn counts
repeat within a few %, the busy rows' per-message counts do not while the native peer is starved
(20-300 empty turns a message; bench/RESULTS.md "Work per message, counted"). The guards below
(--poll block clients) are checked by tests/integration/test_instr_counts.py against
bench/instr_counts.json.

Goals (issue 53): per message at most 1.0x the peer's, per empty turn at most 1.25x.
Exit status 0 whatever the verdicts; 2 when a tool is missing or a run fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peer_output import BenchError, tail
from tcp_peers import HOST, REPO, free_port, listening

GOAL_MESSAGE = 1.0  # fabscope / peer, per message, at most
GOAL_TURN = 1.25  # fabscope / peer, per empty poll turn, at most
COUNTS = REPO / "bench" / "instr_counts.json"
SERVER_CPU, CLIENT_CPU = 0, 1
TIMEOUT = 300.0  # one run under callgrind
READY = 60.0  # a server under callgrind starts in seconds
OSU_BIN = REPO / "build" / "bench" / "osu_pingpong"
MPIRUN = "mpirun.openmpi"


def engine() -> str:
    return os.environ.get("FABSCOPE_ENGINE") or str(REPO / "build" / "engine" / "fabscope-engine")


def mpi_engine() -> str:
    return str(Path(engine()).parent / "fabscope-engine-mpi-openmpi")


# --------------------------------------------------------------------------------------------
# callgrind


@dataclass(frozen=True)
class Count:
    instructions: int
    turns: int
    messages: int


def read_callgrind(path: Path, turn_fns: Sequence[str]) -> tuple[int, int]:
    """(total instructions, calls of any of `turn_fns`) from a callgrind file written with
    --compress-strings=no (every cfn= line names its function)."""
    total = 0
    calls = 0
    target = ""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("cfn="):
            target = line[4:].strip()
        elif line.startswith("calls="):
            if target in turn_fns:
                calls += int(line[6:].split()[0])
        elif line.startswith(("totals:", "summary:")):
            total = int(line.split()[1])
    if not total:
        raise BenchError(f"no totals in {path}")
    return total, calls


def callgrind(out: Path, collect: str = "") -> list[str]:
    """valgrind running callgrind; with `collect` (function name patterns joined by "|") only the
    instructions inside the first are counted, less those inside the others (nested toggles)."""
    return ["valgrind", "--tool=callgrind", "--compress-strings=no", "--compress-pos=no",
            f"--callgrind-out-file={out}", *[f"--toggle-collect={f}" for f in collect.split("|") if f]]


# --------------------------------------------------------------------------------------------
# Tools: how to start each side at a given length, and how many messages it moved


@dataclass(frozen=True)
class Tool:
    label: str
    server: Callable[[int, int], list[str]]  # (port, length) -> argv
    client: Callable[[int, int], list[str]]
    turn_fns: tuple[str, ...]
    lengths: tuple[int, int]  # iterations, or seconds for the time-bound tools
    messages: Callable[[str, int], int] = lambda _out, n: n  # (client stdout, length) -> messages
    mpi: bool = False  # both sides are ranks of one mpirun (argv from `client`, rank 0 = client)
    env: dict[str, str] = field(default_factory=dict)
    server_exits: bool = True  # serves one run and exits (else SIGINT after the client)
    # What is counted, per side (client, server): "" the whole process, else the function holding
    # the measured loop (fabscope's fs_phase_run: the percentiles, sorted after it, are reporting)
    collect: tuple[str, str] = ("", "")
    no_server: str = ""  # why the server side is not counted


@dataclass(frozen=True)
class Pair:
    name: str  # e.g. "tcp lat"
    group: str  # tcp | ucx | ofi | mpi (--pairs)
    fabscope: Tool
    peers: tuple[Tool, ...]


# fabscope's measured loop (loop.c: warmup and measured phase), less its housekeeping passes: they
# run every 100 ms of wall time (control channel, deadline, heartbeat), and under callgrind a run's
# wall time follows the machine's load, not its messages or turns (it made the fitted per-message
# count move by +-30 % between identical runs)
PHASE = "fs_phase_run|housekeep_pass"


def fab_tool(label: str, args: Sequence[str], turn_fns: tuple[str, ...], lengths: tuple[int, int],
             poll: str = "busy") -> Tool:
    common = ["--timeout", str(int(TIMEOUT)), "--poll", poll, *args]
    return Tool(
        label=label,
        server=lambda port, n: [engine(), "--listen", f"{HOST}:{port}", *common, "--iters", str(n)],
        client=lambda port, n: [engine(), "--peer", f"{HOST}:{port}", *common, "--iters", str(n)],
        turn_fns=turn_fns,
        lengths=lengths,
        collect=(PHASE, PHASE),
    )


def _count_after(key: str) -> Callable[[str, int], int]:
    def messages(out: str, _n: int) -> int:
        m = re.search(rf"{key}\s*=\s*([\d,]+)", out)
        if not m:
            raise BenchError(f"no {key} in:\n{tail(out, 12)}")
        return int(m.group(1).replace(",", ""))

    return messages


def sockperf_tool() -> Tool:
    def srv(port: int, _n: int) -> list[str]:
        return ["sockperf", "server", "-i", HOST, "-p", str(port), "--tcp", "--nonblocked"]

    def cli(port: int, n: int) -> list[str]:
        return ["sockperf", "ping-pong", "-i", HOST, "-p", str(port), "--tcp", "--nonblocked", "-m", "14",
                "-t", str(n), "--dontwarmup"]

    # [Total Run] counts every message of the run (the valid-duration line leaves some out)
    # Its loop functions: the client's run also memsets a sample buffer sized by the run's time
    return Tool("sockperf", srv, cli, ("recvfrom",), (2, 4), _count_after(r"\[Total Run\].*?SentMessages"),
                server_exits=False, collect=("*doSendThenReceiveLoop*", "*server_receive_then_send*"))


def qperf_tool(test: str, size: int) -> Tool:
    def srv(port: int, _n: int) -> list[str]:
        return ["qperf", "-lp", str(port)]

    def cli(port: int, n: int) -> list[str]:
        return ["qperf", HOST, "-lp", str(port), "-to", "60", "-t", str(n), "-m", str(size), "-vv", test]

    key = r"\bsend_msgs" if test == "tcp_bw" else "loc_recv_msgs"  # tcp_bw prints send_msgs / recv_msgs
    return Tool(f"qperf {test}", srv, cli, ("recv", "read"), (2, 4), _count_after(key), server_exits=False,
                no_server="qperf's server forks a child per test, which callgrind would follow as another process")


def ucx_perftest_tool(test: str, size: int, window: int, tls: str) -> Tool:
    env = {"UCX_TLS": tls}

    def srv(port: int, _n: int) -> list[str]:
        return ["ucx_perftest", "-p", str(port)]

    def cli(port: int, n: int) -> list[str]:
        argv = ["ucx_perftest", HOST, "-p", str(port), "-t", test, "-s", str(size), "-n", str(n), "-w", "100"]
        return argv + (["-O", str(window)] if window else [])

    return Tool(f"ucx_perftest {test}", srv, cli, ("ucp_worker_progress",), (2000, 6000), env=env)


def fi_pingpong_tool(prov: str, ep: str) -> Tool:
    common = ["fi_pingpong", "-p", prov, "-e", ep, "-S", "8"]

    def srv(port: int, n: int) -> list[str]:
        return [*common, "-I", str(n), "-B", str(port)]

    def cli(port: int, n: int) -> list[str]:
        return [*common, "-I", str(n), "-P", str(port), HOST]

    return Tool("fi_pingpong", srv, cli, OFI_TURN, (200, 600))


# A turn of libfabric's tcp provider: fi_cq_read is an inline call through the ops table into the
# provider, whose symbols Debian strips; each read progresses the endpoint with one poll() (seen
# in callgrind's call counts of fi_pingpong and of fabscope alike)
OFI_TURN = ("poll",)


def osu_tool(kind: str, size: int, window: int) -> Tool:
    def cli(_port: int, n: int) -> list[str]:
        args = ["lat", str(size), str(n), "100"] if kind == "lat" else ["bw", str(size), str(n), "5", str(window)]
        return [str(OSU_BIN), *args]

    lengths = (2000, 6000) if kind == "lat" else (20, 60)
    return Tool(f"osu_pingpong {kind}", cli, cli, ("opal_progress",), lengths, mpi=True,
                messages=(lambda _o, n: n) if kind == "lat" else (lambda _o, n: n * window))


def fab_mpi_tool(pattern: str, size: int, window: int) -> Tool:
    args = ["--backend", "mpi", "--pattern", pattern, "--sizes", str(size), "--poll", "busy",
            "--timeout", str(int(TIMEOUT)), "--warmup", "100"]
    if window:
        args += ["--tx-depth", str(window)]

    def cli(_port: int, n: int) -> list[str]:
        return [mpi_engine(), *args, "--iters", str(n * window if window else n)]

    lengths = (2000, 6000) if pattern == "lat" else (20, 60)
    return Tool(f"fabscope mpi {pattern}", cli, cli, ("opal_progress",), lengths, mpi=True, collect=(PHASE, PHASE),
                messages=(lambda _o, n: n) if not window else (lambda _o, n: n * window))


def pairs() -> list[Pair]:
    lat8 = ["--pattern", "lat", "--sizes", "8"]
    tcp_lat = ["--backend", "tcp", *lat8, "--warmup", "100"]
    tcp_bw = ["--backend", "tcp", "--pattern", "bw", "--sizes", "65536", "--warmup", "100"]
    ucx = ["--backend", "ucx", "--ucx-tls", "sm", "--op", "tag", "--warmup", "100"]
    return [
        Pair("tcp lat 8 B, busy", "tcp", fab_tool("fabscope tcp lat", tcp_lat, ("recv",), (2000, 6000)),
             (sockperf_tool(),)),
        # qperf sleeps in recv(): compared with fabscope's --poll block (like for like, as tcp_peers.py)
        Pair("tcp lat 8 B, block", "tcp",
             fab_tool("fabscope tcp lat block", tcp_lat, ("recv",), (2000, 6000), poll="block"),
             (qperf_tool("tcp_lat", 8),)),
        Pair("tcp bw 64 KiB, block", "tcp",
             fab_tool("fabscope tcp bw block", tcp_bw, ("recv",), (4000, 12000), poll="block"),
             (qperf_tool("tcp_bw", 65536),)),
        Pair("ucx tag lat 8 B sm", "ucx",
             fab_tool("fabscope ucx lat", [*ucx, *lat8], ("ucp_worker_progress",), (2000, 6000)),
             (ucx_perftest_tool("tag_lat", 8, 0, "sm"),)),
        Pair("ucx tag bw 64 KiB sm", "ucx",
             fab_tool("fabscope ucx bw", [*ucx, "--pattern", "bw", "--sizes", "65536", "--tx-depth", "32"],
                      ("ucp_worker_progress",), (2000, 6000)),
             (ucx_perftest_tool("tag_bw", 65536, 32, "sm"),)),
        # fi_pingpong's tcp rdm client fails under valgrind (inject(): -99, EADDRNOTAVAIL): msg
        Pair("ofi send lat 8 B tcp msg", "ofi",
             fab_tool("fabscope ofi lat", ["--backend", "ofi", "--provider", "tcp", "--ofi-ep", "msg", "--op",
                                           "send", *lat8, "--warmup", "100"], OFI_TURN, (200, 600)),
             (fi_pingpong_tool("tcp", "msg"),)),
        Pair("mpi lat 8 B ob1+vader", "mpi", fab_mpi_tool("lat", 8, 0), (osu_tool("lat", 8, 0),)),
        Pair("mpi bw 64 KiB ob1+vader", "mpi", fab_mpi_tool("bw", 65536, 64), (osu_tool("bw", 65536, 64),)),
    ]


# The guards of tests/integration/test_instr_counts.py: fabscope's clients with --poll block, where
# every turn sleeps until its message (turns = messages), so that the per-message count is a plain
# difference of two run lengths and does not carry the busy fit's uncertainty (its empty turns
# outnumber the messages 20-130 to 1 on this loaded machine, and an error of 1 % in the per-turn
# count moves the per-message one by 20-130 %).
def guards() -> dict[str, Tool]:
    lat8 = ["--pattern", "lat", "--sizes", "8", "--warmup", "100"]
    return {
        "tcp lat 8 B, block, client": fab_tool("fabscope tcp", ["--backend", "tcp", *lat8], ("recv",), (300, 900),
                                               poll="block"),
        "ucx tag lat 8 B sm, block, client": fab_tool(
            "fabscope ucx", ["--backend", "ucx", "--ucx-tls", "sm", "--op", "tag", *lat8], ("ucp_worker_progress",),
            (300, 900), poll="block"),
    }


def per_message_block(tool: Tool, work: Path) -> tuple[float, float]:
    """(instructions, turns) per message of `tool`'s client between its two lengths, turns included.
    What noise adds is turns (a wait that outlasts a block slice under load), never work taken away:
    the least of a few measurements is the closest to the work."""
    a, b = (count_once(tool, "client", n, False, work) for n in tool.lengths)
    dn = b.messages - a.messages
    return (b.instructions - a.instructions) / dn, (b.turns - a.turns) / dn


# --------------------------------------------------------------------------------------------
# Runs


def _env(tool: Tool) -> dict[str, str]:
    env = {**os.environ, **tool.env}
    if tool.mpi and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def _stop(proc: subprocess.Popen[str], sig: signal.Signals, grace: float) -> None:
    """Ends one process group we started: `sig`, then SIGKILL. tcp_peers._kill_group with the first
    signal and its grace chosen: a server under callgrind writes its file on SIGINT, and slowly."""
    if proc.poll() is not None:
        return
    for s, g in ((sig, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, s)
        try:
            proc.wait(g)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def _server(argv: list[str], port: int, env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    log = tempfile.TemporaryFile("w+")
    proc = subprocess.Popen(["taskset", "-c", str(SERVER_CPU), *argv], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + READY
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise BenchError(f"server not listening on {HOST}:{port} within {READY:.0f} s "
                                 f"(exit {proc.poll()}): {' '.join(argv)}\n{tail(log.read())}")
            time.sleep(0.05)
        yield proc
    finally:
        _stop(proc, signal.SIGINT, 30.0)
        log.close()


def _run(argv: list[str], env: dict[str, str], timeout: float) -> str:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc, signal.SIGTERM, 5.0)
        raise BenchError(f"timed out after {timeout:.0f} s: {' '.join(argv)}") from None
    finally:
        _stop(proc, signal.SIGTERM, 5.0)
    if proc.returncode != 0:
        raise BenchError(f"exit {proc.returncode}: {' '.join(argv)}\n{tail(out)}")
    return out


def count_once(tool: Tool, side: str, length: int, slow: bool, work: Path) -> Count:
    """One run with `side` (client|server) under callgrind; the other natively, or under callgrind
    too when `slow`."""
    mine, other = work / "measured.cg", work / "other.cg"
    for f in (mine, other):
        f.unlink(missing_ok=True)
    env = _env(tool)
    wrap_client = callgrind(mine if side == "client" else other, tool.collect[0]) if side == "client" or slow else []
    wrap_server = callgrind(mine if side == "server" else other, tool.collect[1]) if side == "server" or slow else []
    if tool.mpi:
        cmd = tool.client(0, length)
        argv = ["timeout", "--kill-after=5", str(int(TIMEOUT)), MPIRUN, "--bind-to", "core",
                "-np", "1", *wrap_client, *cmd, ":", "-np", "1", *wrap_server, *cmd]
        out = _run(argv, env, TIMEOUT + 10)
    else:
        port = free_port()
        with _server([*wrap_server, *tool.server(port, length)], port, env) as srv:
            out = _run(["taskset", "-c", str(CLIENT_CPU), *wrap_client, *tool.client(port, length)], env, TIMEOUT)
            if tool.server_exits:
                try:
                    srv.wait(TIMEOUT)
                except subprocess.TimeoutExpired:
                    raise BenchError(f"{tool.label} server did not exit after its client") from None
    instructions, turns = read_callgrind(mine, tool.turn_fns)
    return Count(instructions, turns, tool.messages(out, length))


@dataclass
class Fit:
    per_message: float  # a + e, or the slope over messages when turns cannot be told apart
    per_turn: float | None  # e
    turns_per_message: float  # in the fast runs
    runs: list[Count]
    note: str = ""


def _solve(rows: Sequence[Sequence[float]], y: Sequence[float]) -> list[float]:
    """Least squares (normal equations, Gauss-Jordan with pivoting): the few runs here need no numpy."""
    k = len(rows[0])
    m = [[sum(r[i] * r[j] for r in rows) for j in range(k)] + [sum(r[i] * v for r, v in zip(rows, y, strict=True))]
         for i in range(k)]
    for col in range(k):
        piv = max(range(col, k), key=lambda i: abs(m[i][col]))
        m[col], m[piv] = m[piv], m[col]
        if m[col][col] == 0:
            raise BenchError("the runs cannot separate messages from turns")
        for i in range(k):
            if i != col:
                f = m[i][col] / m[col][col]
                m[i] = [a - f * b for a, b in zip(m[i], m[col], strict=True)]
    return [m[i][k] / m[i][i] for i in range(k)]


def fit(runs: Sequence[Count]) -> Fit:
    """Least squares of Ir = c + a*messages + e*turns (see the module's text); runs[:2] are the fast ones."""
    fast = runs[:2]
    tpm = (fast[1].turns - fast[0].turns) / max(1, fast[1].messages - fast[0].messages)
    ratios = [r.turns / max(1, r.messages) for r in runs]
    y = [float(r.instructions) for r in runs]
    if max(ratios) - min(ratios) < 0.05 * max(max(ratios), 1.0):
        _c, a = _solve([(1.0, float(r.messages)) for r in runs], y)
        return Fit(a, None, tpm, list(runs), "turns = messages: a sleeping receive, no empty turns")
    _c, a, e = _solve([(1.0, float(r.messages), float(r.turns)) for r in runs], y)
    return Fit(a + e, e, tpm, list(runs))


def measure(tool: Tool, side: str, work: Path) -> Fit:
    runs = [count_once(tool, side, length, slow, work) for slow in (False, True) for length in tool.lengths]
    return fit(runs)


# --------------------------------------------------------------------------------------------
# Report


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def render(table: dict[str, Any]) -> str:
    lines = [
        "| pair | side | tool | instr / message | instr / empty turn | turns / message (fast) "
        "| fabscope / peer: message (goal <= 1.0), turn (goal <= 1.25) |",
        "|---|---|---|---|---|---|---|",
    ]
    for pair, sides in table["pairs"].items():
        for side, tools in sides.items():
            fab = tools.get("fabscope")
            for label, row in tools.items():
                if "error" in row:
                    lines.append(f"| {pair} | {side} | {label} | error: {row['error'][:80]} | | | |")
                    continue
                verdict = ""
                if label != "fabscope" and fab and "error" not in fab:
                    rm = ratio(fab["per_message"], row["per_message"])
                    rt = ratio(fab["per_turn"], row["per_turn"])
                    verdict = (f"{rm:.2f} {'PASS' if rm is not None and rm <= GOAL_MESSAGE else 'MISS'}"
                               if rm is not None else "n/a")
                    verdict += ", " + (f"{rt:.2f} {'PASS' if rt <= GOAL_TURN else 'MISS'}" if rt is not None
                                       else "n/a (" + (row.get("note") or fab.get("note") or "no turns") + ")")
                turn = f"{row['per_turn']:,.0f}" if row["per_turn"] is not None else "-"
                lines.append(f"| {pair} | {side} | {label} | {row['per_message']:,.0f} | {turn} | "
                             f"{row['turns_per_message']:.1f} | {verdict} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="tcp,ucx,ofi,mpi", help="groups to count (tcp,ucx,ofi,mpi)")
    ap.add_argument("--sides", default="client,server")
    ap.add_argument("--only", default="", help="a pair name substring to restrict to")
    ap.add_argument("--json", help="write the table as JSON here")
    args = ap.parse_args(argv)
    for prog in ("valgrind", "taskset"):
        if not shutil.which(prog):
            print(f"instr.py: {prog} is not installed (deps/apt-packages.txt; make setup)", file=sys.stderr)
            return 2
    groups = set(args.pairs.split(","))
    table: dict[str, Any] = {"tool": "callgrind (valgrind " + _valgrind_version() + ")", "pairs": {}}
    failed = 0
    with tempfile.TemporaryDirectory(prefix="fabscope-instr-") as tmp:
        for pair in pairs():
            if pair.group not in groups or args.only not in pair.name:
                continue
            if any(t.mpi for t in (pair.fabscope, *pair.peers)) and not OSU_BIN.exists():
                _build_osu()
            for side in args.sides.split(","):
                for tool in (pair.fabscope, *pair.peers):
                    label = "fabscope" if tool is pair.fabscope else tool.label
                    row: dict[str, Any]
                    if side == "server" and tool.no_server:
                        row = {"error": f"not counted: {tool.no_server}"}
                    else:
                        try:
                            f = measure(tool, side, Path(tmp))
                            row = {"per_message": round(f.per_message), "per_turn":
                                   None if f.per_turn is None else round(f.per_turn),
                                   "turns_per_message": round(f.turns_per_message, 2), "note": f.note,
                                   "runs": [vars(r) for r in f.runs]}
                        except BenchError as exc:
                            failed += 1
                            row = {"error": str(exc)}
                    table["pairs"].setdefault(pair.name, {}).setdefault(side, {})[label] = row
                    print(f"{pair.name} / {side} / {label}: "
                          + (row.get("error") or f"{row['per_message']} per message, {row['per_turn']} per turn"),
                          file=sys.stderr, flush=True)
    print(render(table))
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1) + "\n")
    return 2 if failed else 0


def _valgrind_version() -> str:
    out = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, check=False).stdout
    return out.strip().removeprefix("valgrind-")


def _build_osu() -> None:
    from middleware_peers import build_osu  # the shared OSU-style peer, built once

    build_osu()


if __name__ == "__main__":
    sys.exit(main())
