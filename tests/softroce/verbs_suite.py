#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Guest-side verbs suite: runs inside ONE Soft-RoCE guest boot (boots are slow under TCG).

Usage (in the guest): python3 verbs_suite.py OUTDIR [SECTION...]
Sections: functional, errors, bench, wire-client (two-guest mode, client side), bench-server
(two-guest mode, server side: starts the server half of each bench case when the client guest
asks; with it running, the client's bench section runs every server in the other guest).

Every case appends one JSON line to OUTDIR/<section>.jsonl; the host-side pytest module
(tests/softroce/test_verbs.py) asserts on them after the guest powered off. Nothing here
decides pass/fail: it records exit codes, the engine's JSON records, stderr and timings.

Server and client run in the same guest (rxe loops its own traffic back). The server engine
is started on 127.0.0.1 port 0 and the client only once the server printed its "listening"
line, so no fixed head start is needed.
"""
from __future__ import annotations

import json
import os
import re
import resource
import select
import shlex
import socket
import subprocess
import sys
import time

from placement_client import write_placement  # same directory

# bench/ beside this directory, or the repo's, read-only at /fabscope in every guest (a test's boot
# runs this file from its own share)
_BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, _BENCH if os.path.isfile(os.path.join(_BENCH, "sandwich.py")) else "/fabscope/bench")
from sandwich import run_chain  # noqa: E402  (bench/: the benches' one sandwich rule)

ENGINE = os.environ.get("FS_ENGINE", "fabscope-engine")
TIMEOUT = "30"  # engine --timeout: TCG is slow, a slow peer is not a dead one
DEV = os.environ.get("FS_RDMA_DEV", "rxe0")


def log(msg: str) -> None:
    print(f"[verbs-suite] {msg}", flush=True)


def parse_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def start_server(args: list[str], prefix: list[str] | None = None,
                 listen: str = "127.0.0.1:0") -> tuple[subprocess.Popen, int]:
    argv = (prefix or []) + [ENGINE, "--listen", listen, "--backend", "verbs",
                             "--timeout", TIMEOUT] + args
    cpu0 = guest_cpu()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p.guest_cpu = cpu0  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    line = ""
    while time.monotonic() < deadline:
        r, _, _ = select.select([p.stdout], [], [], 1.0)
        if r:
            line = p.stdout.readline()
            break
        if p.poll() is not None:
            break
    try:
        port = int(json.loads(line)["port"])
    except (ValueError, KeyError, TypeError) as e:
        p.kill()
        raise RuntimeError(f"server did not report a port: {line!r} {p.stderr.read()[:500]!r}") from e
    return p, port


def engine_case(section: str, name: str, args: list[str], server_args: list[str] | None = None,
                expect_rc: int = 0, prefix: list[str] | None = None,
                server_prefix: list[str] | None = None, out=None, tag: dict | None = None,
                remote: bool = False) -> dict:
    """One client/server engine pair; returns and records the outcome."""
    t0 = time.monotonic()
    rec: dict = {"section": section, "case": name, "args": args, "server_args": server_args or [],
                 "expect_rc": expect_rc}
    if tag:
        rec.update(tag)
    srv = None
    if remote:
        started = bench_ctl({"cmd": "start", "kind": "fabscope", "timeout": SERVER_READY_S,
                             "argv": server_args or []})
        if not started.get("ok"):
            rec.update(rc=None, error=f"server guest: {started.get('error')}")
            out.write(json.dumps(rec) + "\n")
            out.flush()
            return rec
        host, port = "peer", int(started["port"])
    else:
        try:
            srv, port = start_server(server_args or [], server_prefix)
        except RuntimeError as e:
            rec.update(rc=None, error=str(e))
            out.write(json.dumps(rec) + "\n")
            out.flush()
            return rec
        host = "127.0.0.1"
    argv = (prefix or []) + [ENGINE, "--peer", f"{host}:{port}", "--backend", "verbs",
                             "--timeout", TIMEOUT] + (["--device", DEV] if remote else []) + args
    try:
        c = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        rc, so, se = c.returncode, c.stdout, c.stderr
    except subprocess.TimeoutExpired as e:
        partial = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, so, se = None, partial, "client timed out after 300 s"
    if srv is None:
        done = bench_ctl({"cmd": "wait", "timeout": 40})
        srv_rc, srv_err, cost = done.get("rc"), done.get("output", ""), done.get("cost")
    else:
        # A client refused for bad usage (exit 2) may never have connected: its server would wait
        # out its whole --timeout for a client (30 s a case). One that did connect ends at once.
        _, srv_err, cost = reap(srv, timeout=5 if rc == 2 else 40)
        srv_rc = srv.returncode
    rec.update(rc=rc, records=parse_lines(so), stderr=se[-3000:], server_rc=srv_rc, server_cost=cost,
               server_stderr=srv_err[-2000:], elapsed_s=round(time.monotonic() - t0, 2),
               argv=shlex.join(argv))
    out.write(json.dumps(rec) + "\n")
    out.flush()
    log(f"{section}/{name}: rc={rc} (expect {expect_rc}) {rec['elapsed_s']} s")
    return rec


# ---- functional and error cases ------------------------------------------------------------
# Plain data, so the host-side test can parametrize over the same list it asserts on.

IT_LAT = ["--iters", "200", "--warmup", "20"]
IT_BW = ["--iters", "400", "--warmup", "50"]  # TCG: ~1 s per 100 x 64 KiB; 2000 took 9-20 s a case
SUPPORTED = {
    "rc": ["send", "write", "write_imm", "read", "fadd", "cswap"],
    "uc": ["send", "write", "write_imm"],
    "ud": ["send"],
}
UNSUPPORTED = [("uc", "read"), ("uc", "fadd"), ("uc", "cswap"), ("ud", "write"), ("ud", "read"),
               ("ud", "write_imm"), ("ud", "fadd")]
# root has CAP_IPC_LOCK, with which the kernel pins past RLIMIT_MEMLOCK; drop it (a normal user
# has none) so the limit is the one that applies
DROP_IPC_LOCK = ["setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--",
                 "sh", "-c", 'ulimit -l 64 && exec "$@"', "sh"]


def case(section: str, name: str, args: list[str], expect_rc: int = 0, **kw) -> dict:
    return {"section": section, "name": name, "args": args, "expect_rc": expect_rc, **kw}


def functional_cases() -> list[dict]:
    cs = []
    for svc, ops in SUPPORTED.items():
        for op in ops:
            for pat in ("lat", "bw"):
                size = "8" if op in ("fadd", "cswap") else (
                    "64" if pat == "lat" else "1024" if svc == "ud" else "65536")
                cs.append(case("functional", f"{svc}-{op}-{pat}",
                               ["--qp-type", svc, "--op", op, "--pattern", pat, "--sizes", size]
                               + (IT_LAT if pat == "lat" else IT_BW),
                               svc=svc, op=op, pattern=pat))
    # what the service cannot do: exit 6, never substituted
    for svc, op in UNSUPPORTED:
        sz = "8" if op in ("fadd", "cswap") else "64"
        cs.append(case("functional", f"{svc}-{op}-unsupported",
                       ["--qp-type", svc, "--op", op, "--sizes", sz] + IT_LAT, 6, svc=svc, op=op))
    cs += [
        case("functional", "ud-send-larger-than-mtu",
             ["--qp-type", "ud", "--op", "send", "--sizes", "4096"] + IT_LAT, 6),
        case("functional", "rc-send-bibw", ["--op", "send", "--pattern", "bibw"] + IT_BW),
        case("functional", "rc-write-bibw", ["--op", "write", "--pattern", "bibw"] + IT_BW),
        case("functional", "rc-write-bw-qps4", ["--op", "write", "--pattern", "bw", "--qps", "4"] + IT_BW),
        # beyond perftest: per-interval bandwidth with its lowest interval (--report-min, perftest
        # PR #214) and per-interval figures in duration mode (perftest #234), on a one-sided op
        # (timed at the initiator) and a two-sided one (at the receiver), the latter over 3 QPs
        case("functional", "rc-read-bw-duration-intervals",
             ["--op", "read", "--pattern", "bw", "--duration", "1.5", "--interval", "0.25", "--warmup", "20"]),
        case("functional", "rc-send-bw-qps3-intervals",
             ["--op", "send", "--pattern", "bw", "--qps", "3", "--sizes", "4096", "--iters", "3000",
              "--interval", "0.1", "--warmup", "30"]),
        case("functional", "uc-send-bw-qps2", ["--qp-type", "uc", "--op", "send", "--pattern", "bw",
                                               "--qps", "2", "--sizes", "4096"] + IT_BW),
        case("functional", "rc-write-bw-cqmod16",
             ["--op", "write", "--pattern", "bw", "--cq-mod", "16", "--iters", "1001"]),
        # UD has no RDMA write: its unsignaled tail is closed by a zero-length send, which the
        # receiver must not count as a message
        case("functional", "ud-send-bw-cqmod16",
             ["--qp-type", "ud", "--op", "send", "--pattern", "bw", "--sizes", "1024", "--cq-mod", "16",
              "--iters", "1001"]),
        case("functional", "rc-send-bw-cqmod16-sweep",
             ["--op", "send", "--pattern", "bw", "--cq-mod", "16", "--sizes", "1K,64K", "--iters", "1001"]),
        case("functional", "rc-send-lat-inline64", ["--op", "send", "--sizes", "64", "--inline", "64"] + IT_LAT),
        # a ping-pong posts its consumed receive again after its next send (verbs data.c, defer_rx):
        # with two receives, one missed repost empties the queue within two messages (RC waits
        # on RNR for ever, UD drops), and a size's last receive is owed across the phase change
        case("functional", "rc-send-lat-rxdepth2", ["--op", "send", "--rx-depth", "2", "--verify",
                                                    "--sizes", "8,4K"] + IT_LAT),
        case("functional", "ud-send-lat-rxdepth2", ["--qp-type", "ud", "--op", "send", "--rx-depth", "2",
                                                    "--verify", "--sizes", "8,1024"] + IT_LAT),
        case("functional", "rc-write-bw-mtu512", ["--op", "write", "--pattern", "bw", "--mtu", "512"] + IT_BW),
        case("functional", "rc-send-lat-block", ["--op", "send", "--poll", "block"] + IT_LAT),
        case("functional", "rc-send-bw-block", ["--op", "send", "--pattern", "bw", "--poll", "block"] + IT_BW),
        case("functional", "rc-send-lat-sweep", ["--op", "send", "--sizes", "2:16K", "--iters", "50",
                                                 "--warmup", "5"]),
        case("functional", "rc-read-bw-sweep", ["--op", "read", "--pattern", "bw", "--sizes", "8,4K,1M",
                                                "--iters", "200", "--warmup", "10"]),
    ]
    # payload verification, and rdma_cm (--cm --op send --verify is fabscope's rping)
    for op in ("send", "write", "write_imm", "read"):
        cs.append(case("functional", f"rc-{op}-verify", ["--op", op, "--verify", "--sizes", "1,4K,10000"] + IT_LAT))
    cs += [
        case("functional", "uc-write-verify", ["--qp-type", "uc", "--op", "write", "--verify", "--sizes", "3000"]
             + IT_LAT),
        case("functional", "ud-send-verify", ["--qp-type", "ud", "--op", "send", "--verify", "--sizes", "1,1024"]
             + IT_LAT),
        case("functional", "cm-rping", ["--cm", "--op", "send", "--verify", "--sizes", "64,4K"] + IT_LAT),
        case("functional", "cm-send-lat", ["--cm", "--op", "send"] + IT_LAT),
        case("functional", "cm-write-bw", ["--cm", "--op", "write", "--pattern", "bw"] + IT_BW),
        case("functional", "cm-read-lat-verify", ["--cm", "--op", "read", "--verify", "--sizes", "4K"] + IT_LAT),
        case("functional", "cm-fadd-bw", ["--cm", "--op", "fadd", "--pattern", "bw", "--sizes", "8"] + IT_BW),
        case("functional", "cm-uc-refused", ["--cm", "--qp-type", "uc", "--op", "send"] + IT_LAT, 2),
    ]
    return cs


def error_cases() -> list[dict]:
    base = ["--iters", "20", "--warmup", "2"]
    return [
        case("errors", "bad-device", ["--device", "mlx5_9"] + base, 2),
        case("errors", "bad-port", ["--ib-port", "2"] + base, 2),
        case("errors", "bad-gid-index", ["--gid-index", "1000"] + base, 2),
        case("errors", "mtu-above-active", ["--mtu", "4096"] + base, 2),
        case("errors", "cq-mod-above-depth", ["--pattern", "bw", "--cq-mod", "100", "--tx-depth", "16"] + base, 2),
        case("errors", "memlock-too-low", ["--pattern", "bw", "--op", "write", "--sizes", "4M"] + base, 2,
             prefix=DROP_IPC_LOCK),
        # client on the link-local GID, server on the IPv4 one: the classic "-x" mismatch
        case("errors", "gid-kind-mismatch", ["--gid-index", "0", "--op", "send", "--timeout", "15"] + base, 2),
        # the same limit with CAP_IPC_LOCK (root): the kernel does not enforce it, nor do we
        case("errors", "memlock-low-but-cap-ipc-lock", ["--pattern", "bw", "--op", "write", "--sizes", "4M"] + base,
             0, prefix=["sh", "-c", 'ulimit -l 64 && exec "$@"', "sh"]),
    ]


def run_cases(cases: list[dict], out) -> None:
    # debugging: a subset; NAME matches as a substring, =NAME exactly
    only = [x for x in os.environ.get("FS_CASES", "").split(",") if x]
    for c in cases:
        if only and not any(c["name"] == o[1:] if o.startswith("=") else o in c["name"] for o in only):
            continue
        tag = {k: v for k, v in c.items() if k not in ("section", "name", "args", "expect_rc", "prefix")}
        engine_case(c["section"], c["name"], c["args"], expect_rc=c["expect_rc"], prefix=c.get("prefix"),
                    out=out, tag=tag)


# ---- bench: perftest vs fabscope ------------------------------------------------------------

PERFTEST_PORT = 18515


def gid_index() -> int:
    """The RoCE v2 IPv4 GID perftest needs as -x: read only the first few entries (1024 sysfs
    files take minutes under TCG)."""
    base = f"/sys/class/infiniband/{DEV}/ports/1"
    for i in range(16):
        try:
            gid = open(f"{base}/gids/{i}").read().strip()
            typ = open(f"{base}/gid_attrs/types/{i}").read().strip()
        except OSError:
            continue
        if gid.startswith("0000:0000:0000:0000:0000:ffff:") and "v2" in typ:
            return i
    return 1


def port_listening(port: int, cm: bool = False) -> bool:
    """Whether something listens on the port: a TCP socket (`ss`), or with cm an rdma_cm id in
    LISTEN (`rdma res show cm_id`: perftest -R and rsockets have no TCP socket)."""
    argv = ["rdma", "res", "show", "cm_id"] if cm else ["ss", "-ltnH"]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    if cm:
        return any(" LISTEN " in ln + " " and re.search(rf"src-addr \S*:{port}(\s|$)", ln) for ln in out.splitlines())
    return any(re.search(rf":{port}\s", ln + " ") for ln in out.splitlines())


def parse_perftest(text: str, lat: bool) -> dict:
    res: dict = {}
    m = re.search(r"TX depth\s*:\s*(\d+)", text)
    if m:
        res["tx_depth"] = int(m.group(1))
    m = re.search(r"CQ Moderation\s*:\s*(\d+)", text)
    if m:
        res["cq_mod"] = int(m.group(1))
    m = re.search(r"Max inline data\s*:\s*(\d+)", text) or re.search(r"Inline data is used up to (\d+) bytes", text)
    res["inline"] = int(m.group(1)) if m else 0
    m = re.search(r"Mtu\s*:\s*(\d+)", text)
    if m:
        res["mtu"] = int(m.group(1))
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0].isdigit() and f[1].isdigit():
            try:
                nums = [float(x) for x in f]
            except ValueError:
                continue
            if lat and len(nums) >= 9:
                res.update(size=int(nums[0]), iters=int(nums[1]), t_min=nums[2], t_max=nums[3],
                           t_typical=nums[4], t_avg=nums[5], t_stdev=nums[6], p99=nums[7], p999=nums[8])
            elif lat and len(nums) >= 6:
                res.update(size=int(nums[0]), iters=int(nums[1]), t_min=nums[2], t_max=nums[3],
                           t_typical=nums[4], t_avg=nums[5])
            elif not lat:
                res.update(size=int(nums[0]), iters=int(nums[1]), bw_peak_MBps=nums[2],
                           bw_avg_MBps=nums[3], msg_rate_mpps=nums[4])
    return res


# A perftest client has no deadline: `ib_send_lat -e` waited for ever for a completion event in 2 of
# 7 runs between the guests (every run takes 1-4 s here), and each hang cost the old 300 s.
PERFTEST_CLIENT_S = 60
SERVER_READY_S = 60


def start_perftest_server(argv: list[str]) -> subprocess.Popen:
    """A perftest server, returned once it accepts a client: its TCP port listens, or with -R
    (rdma_cm, no TCP socket) its rdma_cm id listens on the port. A server that exits first, or
    does not listen within SERVER_READY_S, is a RuntimeError that says so with its output (and a
    listener already on the port one that names it: the client would reach that one instead)."""
    cm = "-R" in argv
    port = int(argv[argv.index("-p") + 1])
    what = f"{'rdma_cm' if cm else 'TCP'} port {port}"
    if port_listening(port, cm):
        raise RuntimeError(f"{shlex.join(argv)}: something already listens on {what} (a server of an earlier case?)")
    cpu0 = guest_cpu()
    srv = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    end = time.monotonic() + SERVER_READY_S
    while not port_listening(port, cm):
        if srv.poll() is not None or time.monotonic() > end:
            ended = srv.poll() is not None
            srv.kill()
            so, _ = srv.communicate()
            why = f"ended (exit {srv.returncode}) before it listened" if ended else \
                f"did not listen within {SERVER_READY_S} s (stopped)"
            raise RuntimeError(f"{shlex.join(argv)} {why} on {what}: {so[-500:]}")
        time.sleep(0.1)
    srv.guest_cpu = cpu0  # type: ignore[attr-defined]
    return srv


CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq")


def guest_cpu() -> dict[str, float]:
    """The guest's CPU time so far (s): /proc/stat's split, and what ksoftirqd ran. Where the
    kernel's packet work for rxe lands (in the busy poller's time slice, or in ksoftirqd
    competing with it) decides a receiver's rate on one vCPU."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    try:
        with open("/proc/stat") as f:
            ticks = f.readline().split()[1:1 + len(CPU_FIELDS)]
        out.update({k: int(v) / hz for k, v in zip(CPU_FIELDS, ticks, strict=True)})
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        st = f.read()
                except OSError:
                    continue
                if "(ksoftirqd/" in st:
                    fields = st.rsplit(")", 1)[1].split()
                    out["ksoftirqd"] = out.get("ksoftirqd", 0) + (int(fields[11]) + int(fields[12])) / hz
    except OSError:
        pass
    return out


def reap(srv: subprocess.Popen, timeout: float = 40) -> tuple[str, str, dict]:
    """Waits for a server; returns its stdout, stderr and what it cost: CPU seconds and context
    switches (voluntary = it slept), the children's rusage across its reaping (every other child
    was reaped before)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        so, se = srv.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        srv.kill()
        so, se = srv.communicate()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cost = {"utime_s": round(after.ru_utime - before.ru_utime, 3), "stime_s": round(after.ru_stime - before.ru_stime, 3),
            "nvcsw": after.ru_nvcsw - before.ru_nvcsw, "nivcsw": after.ru_nivcsw - before.ru_nivcsw}
    cpu0 = getattr(srv, "guest_cpu", None)
    if cpu0:
        cpu1 = guest_cpu()
        cost["guest_cpu_s"] = {k: round(cpu1[k] - cpu0.get(k, 0), 2) for k in cpu1}
    return so or "", se or "", cost


def finish_server(srv: subprocess.Popen, timeout: float = 40) -> tuple[int | None, str, dict]:
    so, se, cost = reap(srv, timeout)
    return srv.returncode, so + se, cost


def perftest_figure(res: dict, lat: bool) -> float | None:
    """The figure of one perftest run that the benches compare: its typical latency (ib_*_lat's
    t_typical, us) or its message rate (Mpps), None when the run failed."""
    if res.get("rc") != 0:
        return None
    v = res.get("t_typical") if lat else res.get("msg_rate_mpps")
    return float(v) if isinstance(v, (int, float)) else None


def perftest_run(tool: str, args: list[str], lat: bool, remote: bool = False) -> dict:
    """One perftest pair: the server here (single guest) or in the server guest (remote)."""
    common = ["-d", DEV, "-x", str(gid_index()), "-p", str(PERFTEST_PORT)] + args
    t0 = time.monotonic()
    if remote:
        started = bench_ctl({"cmd": "start", "kind": "perftest", "timeout": SERVER_READY_S,
                             "argv": [tool, "-d", DEV, "-x", "{gid}", "-p", str(PERFTEST_PORT)] + args})
        if not started.get("ok"):
            return {"rc": None, "raw": f"server guest: {started.get('error')}", "elapsed_s": 0}
        srv = None
    else:
        try:
            srv = start_perftest_server([tool] + common)
        except RuntimeError as e:
            return {"rc": None, "raw": str(e), "elapsed_s": round(time.monotonic() - t0, 2)}
    try:
        c = subprocess.run([tool] + common + ["peer" if remote else "127.0.0.1"], capture_output=True, text=True,
                           timeout=PERFTEST_CLIENT_S)
        text, rc = c.stdout + c.stderr, c.returncode
    except subprocess.TimeoutExpired:
        text, rc = f"client timed out after {PERFTEST_CLIENT_S} s (perftest has no deadline of its own)", None
    if remote:
        done = bench_ctl({"cmd": "wait", "timeout": 40})
        srv_text, cost = done.get("output", ""), done.get("cost")
    else:
        _, srv_text, cost = finish_server(srv)
    res = parse_perftest(text, lat)
    res.update(rc=rc, elapsed_s=round(time.monotonic() - t0, 2), raw=text[-2500:], server_raw=srv_text[-800:],
               server_cost=cost)
    return res


# Bandwidth rows of small messages (8-byte atomics, 1 KiB UD sends) take SMALL_BW_FACTOR times the
# messages of the 64 KiB rows: at ~0.01 Mpps, 300 of them are a 30 ms run, shorter than one of the
# emulator's hiccups, and both tools' repeats then spread by up to 65 %; 3000 are ~0.3 s.
SMALL_BW_FACTOR = 10
LAT_P = ["-s", "8", "-n", "{lat_n}"]
BW_P = ["-s", "65536", "-n", "{bw_n}"]
BW_F = ["--pattern", "bw", "--sizes", "65536"]
BENCH = [
    # name, perftest tool, perftest args, fabscope args, lat?
    ("send_lat", "ib_send_lat", LAT_P, ["--op", "send", "--sizes", "8"], True),
    ("write_lat", "ib_write_lat", LAT_P, ["--op", "write", "--sizes", "8"], True),
    ("read_lat", "ib_read_lat", LAT_P, ["--op", "read", "--sizes", "8"], True),
    ("send_bw", "ib_send_bw", BW_P, ["--op", "send", *BW_F], False),
    ("write_bw", "ib_write_bw", BW_P, ["--op", "write", *BW_F], False),
    ("read_bw", "ib_read_bw", BW_P, ["--op", "read", *BW_F], False),
    ("atomic_bw", "ib_atomic_bw", ["-n", "{bw_small_n}"], ["--op", "fadd", "--pattern", "bw", "--sizes", "8"], False),
]
# With server and client on the guest's single vCPU, two busy-polling processes take turns by
# scheduler tick, which hides the transport; completion events (perftest -e, fabscope --poll
# block) show it. Extra rows, same method.
BENCH_EVENT = [
    ("send_lat_event", "ib_send_lat", [*LAT_P, "-e"], ["--op", "send", "--sizes", "8"], True),
    ("send_bw_event", "ib_send_bw", [*BW_P, "-e"], ["--op", "send", *BW_F], False),
]
# What else perftest has: UC/UD services, atomic latency, and rdma_cm connections (-R against
# fabscope --cm). UD messages are one packet: at most the MTU (1024 on the guests' eth0).
UD_BW_P = ["-s", "1024", "-n", "{bw_small_n}"]
BENCH_MORE = [
    ("atomic_lat", "ib_atomic_lat", ["-n", "{lat_n}"], ["--op", "fadd", "--sizes", "8"], True),
    ("uc_send_lat", "ib_send_lat", ["-c", "UC", *LAT_P], ["--qp-type", "uc", "--op", "send", "--sizes", "8"], True),
    ("uc_write_lat", "ib_write_lat", ["-c", "UC", *LAT_P], ["--qp-type", "uc", "--op", "write", "--sizes", "8"],
     True),
    ("ud_send_lat", "ib_send_lat", ["-c", "UD", *LAT_P], ["--qp-type", "ud", "--op", "send", "--sizes", "8"], True),
    ("uc_send_bw", "ib_send_bw", ["-c", "UC", *BW_P], ["--qp-type", "uc", "--op", "send", *BW_F], False),
    ("uc_write_bw", "ib_write_bw", ["-c", "UC", *BW_P], ["--qp-type", "uc", "--op", "write", *BW_F], False),
    ("ud_send_bw", "ib_send_bw", ["-c", "UD", *UD_BW_P],
     ["--qp-type", "ud", "--op", "send", "--pattern", "bw", "--sizes", "1024"], False),
    ("cm_send_lat", "ib_send_lat", ["-R", *LAT_P], ["--cm", "--op", "send", "--sizes", "8"], True),
    ("cm_write_lat", "ib_write_lat", ["-R", *LAT_P], ["--cm", "--op", "write", "--sizes", "8"], True),
    ("cm_read_lat", "ib_read_lat", ["-R", *LAT_P], ["--cm", "--op", "read", "--sizes", "8"], True),
]
ALL_BENCH = BENCH + BENCH_EVENT + BENCH_MORE


def fabscope_args(name: str, fargs: list[str], lat: bool, n: int, settings: dict) -> list[str]:
    """fabscope with the settings perftest printed: same depth, moderation and inline."""
    extra = ["--iters", str(n), "--poll", "block" if name.endswith("_event") else "busy"]
    if not lat:
        depth = settings.get("tx_depth", 128)
        extra += ["--tx-depth", str(depth), "--cq-mod", str(min(settings.get("cq_mod", 1), depth))]
    if "read" not in name and "atomic" not in name:
        extra += ["--inline", str(settings.get("inline", 0))]
    return fargs + extra


def bench_chain(out, name: str, tool: str, pargs: list[str], fargs: list[str], lat: bool, n: int,
                repeats: int, remote: bool) -> None:
    """One case's chain, P F P F ... P, driven by bench/sandwich.py's run_chain: `repeats` fabscope
    runs, and more while fewer than three sandwiches have two perftest runs that agree. The host
    probes where its CPUs are before each run and after the last (write_placement, by position in
    the chain)."""
    settings: dict = {}
    seq = 0

    def run_perftest(rep: int) -> float | None:
        nonlocal settings, seq
        write_placement(out, name, seq)
        seq += 1
        pres = perftest_run(tool, pargs, lat, remote=remote)
        if not settings and pres.get("rc") == 0:
            settings = pres  # the very first run's printed settings are fabscope's
        out.write(json.dumps({"section": "bench", "bench": name, "tool": "perftest", "rep": rep,
                              "cmd": tool, "args": pargs, **pres}) + "\n")
        out.flush()
        figure = perftest_figure(pres, lat)
        log(f"bench/{name} perftest rep {rep}: {figure} rc={pres['rc']}")
        return figure

    def run_fabscope(rep: int) -> bool:
        nonlocal seq
        write_placement(out, name, seq)
        seq += 1
        rec = engine_case("bench-fabscope", f"{name}-{rep}", fabscope_args(name, fargs, lat, n, settings),
                          out=out, tag={"section": "bench", "bench": name, "tool": "fabscope", "rep": rep},
                          remote=remote)
        return rec.get("rc") == 0

    run_chain(run_perftest, run_fabscope, repeats)
    write_placement(out, name, seq)


def bench(out, repeats: int = 3, lat_n: int = 1000, bw_n: int = 2000, only: list[str] | None = None,
          remote: bool = False, more: bool = False) -> None:
    """perftest and fabscope, at least `repeats` fabscope runs per case, as a chain that starts
    and ends with perftest (bench_chain): each fabscope run has a perftest run right before and
    right after it (bench/softroce_vs_perftest.py's sandwiches). remote: every server runs in the
    server guest (bench-server section there), so each busy poller has a vCPU of its own."""
    cases = ALL_BENCH if more else BENCH + BENCH_EVENT
    if remote:
        info = bench_ctl({"cmd": "info"})
        out.write(json.dumps({"section": "bench-info", "server": info, "client": guest_info()}) + "\n")
        out.flush()
    for name, tool, pargs, fargs, lat in cases:
        if only and name not in only:
            continue
        pargs = [a.format(lat_n=lat_n, bw_n=bw_n, bw_small_n=bw_n * SMALL_BW_FACTOR) for a in pargs]
        n = int(pargs[pargs.index("-n") + 1])  # the same count for both tools
        bench_chain(out, name, tool, pargs, fargs, lat, n, repeats, remote)
    if remote:
        bench_ctl({"cmd": "quit"})


# ---- bench in two guests: the server guest serves, the client guest drives ----------------------

BENCH_CTL_PORT = 18600


def guest_info() -> dict:
    def read(path: str) -> str:
        try:
            return open(path).read().strip()
        except OSError as e:
            return f"? ({e})"
    return {"nproc": os.cpu_count(), "loadavg": read("/proc/loadavg"),
            "clocksource": read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            "kernel": os.uname().release}


def bench_ctl(req: dict, deadline_s: float = 120.0) -> dict:
    """One request to the server guest's bench_server: a JSON line each way. Retries the
    connection while the server guest may still be starting; every read has a deadline."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            s = socket.create_connection(("peer", BENCH_CTL_PORT), timeout=5)
            break
        except OSError as e:
            if time.monotonic() > end:
                return {"ok": False, "error": f"cannot reach the server guest's bench_server: {e}"}
            time.sleep(1)
    # connected: the request goes once (a retry would start a second server)
    try:
        with s:
            s.settimeout(float(req.get("timeout", SERVER_READY_S)) + 60)
            s.sendall((json.dumps(req) + "\n").encode())
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            return json.loads(buf.decode() or "{}")
    except (OSError, ValueError) as e:
        return {"ok": False, "error": f"no answer from the server guest's bench_server to {req.get('cmd')}: {e}"}


def bench_server(out) -> None:
    """Server guest: start the server half of each bench case on request (perftest or the fabscope
    engine), report its port once it accepts a client, and hand back its output when it ends.
    Exits on "quit", or after 15 minutes without a request (the client guest died)."""
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("0.0.0.0", BENCH_CTL_PORT))
    lsock.listen(4)
    lsock.settimeout(900)
    proc: subprocess.Popen | None = None
    log(f"bench-server listening on {BENCH_CTL_PORT}")
    while True:
        try:
            conn, _ = lsock.accept()
        except TimeoutError:
            log("bench-server: no request for 15 minutes; stopping")
            break
        with conn:
            conn.settimeout(30)
            buf = b""
            try:
                while not buf.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                req = json.loads(buf.decode())
            except (OSError, ValueError):
                continue
            cmd = req.get("cmd")
            reply: dict = {"ok": True}
            if cmd == "info":
                reply.update(guest_info())
            elif cmd == "start":
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
                argv = [a.replace("{gid}", str(gid_index())) for a in req.get("argv", [])]
                try:
                    if req.get("kind") == "perftest":
                        proc = start_perftest_server(argv)
                    else:
                        proc, port = start_server(argv + ["--device", DEV], listen="0.0.0.0:0")
                        reply["port"] = port
                except (OSError, RuntimeError) as e:
                    reply = {"ok": False, "error": str(e)}
            elif cmd == "wait":
                if proc is None:
                    reply = {"ok": False, "error": "nothing was started"}
                else:
                    rc, text, cost = finish_server(proc, float(req.get("timeout", 40)))
                    reply.update(rc=rc, output=text[-3000:], cost=cost)
                    proc = None
            elif cmd == "quit":
                conn.sendall((json.dumps(reply) + "\n").encode())
                break
            else:
                reply = {"ok": False, "error": f"unknown request {cmd!r}"}
            try:
                conn.sendall((json.dumps(reply) + "\n").encode())
            except OSError as e:
                log(f"bench-server: could not answer {cmd}: {e}")
            out.write(json.dumps({"section": "bench-server", "request": req, "reply": reply}) + "\n")
            out.flush()
    lsock.close()


# ---- wire (two guests, client side) ---------------------------------------------------------

def capturing(cap: subprocess.Popen, netdev: str, deadline_s: float = SERVER_READY_S) -> str | None:
    """None once the capture process has its packet socket on netdev (in /proc/net/packet: libpcap
    opened the interface; dumpcap's "Capturing on" line comes before that); else why not by deadline_s."""
    ifindex = open(f"/sys/class/net/{netdev}/ifindex").read().strip()
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and cap.poll() is None:
        try:
            mine = {os.readlink(f"/proc/{cap.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{cap.pid}/fd")}
            with open("/proc/net/packet") as f:
                # sk RefCnt Type Proto Iface R Rmem User Inode
                bound = [ln.split() for ln in f.read().splitlines()[1:]]
        except OSError:
            mine, bound = set(), []
        if any(len(c) >= 9 and c[4] == ifindex and f"socket:[{c[8]}]" in mine for c in bound):
            return None
        time.sleep(0.1)
    return f"the capture did not open {netdev} within {deadline_s:g} s (exit {cap.poll()})"


def remote_listening(host: str, port: int, deadline_s: float = SERVER_READY_S) -> str | None:
    """None once the other guest (host, over the testbed's ssh: its sshd may still be starting)
    has a TCP socket listening on port; else what was seen by deadline_s."""
    end = time.monotonic() + deadline_s
    last = ""
    while time.monotonic() < end:
        try:
            c = subprocess.run(["ssh", host, f"ss -Hltn 'sport = :{port}'"], capture_output=True, text=True,
                               timeout=max(1.0, end - time.monotonic()))
            if c.returncode == 0 and c.stdout.strip():
                return None
            last = (c.stdout + c.stderr).strip()[-300:] or "no listener yet"
        except subprocess.TimeoutExpired:
            last = "ssh did not answer"
        time.sleep(0.5)
    return f"{host} did not listen on TCP port {port} within {deadline_s:g} s ({last})"


def wire_client(out, peer: str = "peer", port: int = 18515) -> None:
    """Capture eth0 while fabscope writes 3 x MTU and MTU-sized messages to the server guest,
    then decode the capture with tshark (BTH opcodes)."""
    pcap = "/tmp/verbs-wire.pcapng"
    cap = subprocess.Popen(["dumpcap", "-q", "-i", "eth0", "-f", "udp port 4791", "-w", pcap],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    argv = [ENGINE, "--peer", f"{peer}:{port}", "--backend", "verbs", "--device", "rxe0", "--timeout", TIMEOUT,
            "--op", "write", "--pattern", "bw", "--sizes", "1024,3072", "--iters", "20", "--warmup", "0"]
    # dumpcap captures (seconds under TCG) and the server guest's bare engine listens (asked of that
    # guest over the testbed's ssh): the client starts after both.
    not_ready = capturing(cap, "eth0") or remote_listening(peer, port)
    if not_ready:
        c = subprocess.CompletedProcess(argv, None, "", f"client not started: {not_ready}")  # type: ignore[arg-type]
    else:
        c = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    time.sleep(2)  # the last packets reach the capture
    cap.terminate()
    try:
        cap.wait(timeout=20)
    except subprocess.TimeoutExpired:
        cap.kill()
    # frame.protocols shows whether tshark decoded the BTH (RoCE v2 = InfiniBand over UDP 4791);
    # the Info column names the opcode ("RC RDMA Write First QP=...")
    dec = subprocess.run(["tshark", "-r", pcap, "-T", "fields", "-e", "frame.protocols", "-e", "udp.dstport",
                          "-e", "frame.len", "-e", "_ws.col.Info"],
                         capture_output=True, text=True, timeout=300)
    rec = {"section": "wire", "case": "write-3mtu", "rc": c.returncode, "records": parse_lines(c.stdout),
           "stderr": c.stderr[-2000:], "tshark_rc": dec.returncode, "tshark": dec.stdout[-60000:],
           "tshark_err": dec.stderr[-2000:]}
    out.write(json.dumps(rec) + "\n")
    out.flush()
    log(f"wire: engine rc={c.returncode}, tshark rc={dec.returncode}, {len(dec.stdout.splitlines())} packets")


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    sections = sys.argv[2:] or ["functional", "errors", "bench"]
    env_only = os.environ.get("FS_BENCH_ONLY")
    for s in sections:
        with open(os.path.join(outdir, f"{s}.jsonl"), "a") as out:
            t0 = time.monotonic()
            if s == "functional":
                run_cases(functional_cases(), out)
            elif s == "errors":
                run_cases(error_cases(), out)
            elif s == "bench":
                bench(out, repeats=int(os.environ.get("FS_BENCH_REPEATS", "3")),
                      lat_n=int(os.environ.get("FS_BENCH_LAT_N", "1000")),
                      bw_n=int(os.environ.get("FS_BENCH_BW_N", "2000")),
                      only=env_only.split(",") if env_only else None,
                      remote=os.environ.get("FS_BENCH_REMOTE") == "1",
                      more=os.environ.get("FS_BENCH_MORE") == "1")
            elif s == "bench-server":
                bench_server(out)
            elif s == "wire-client":
                # FS_WIRE_PORT: the server guest's bare engine (`fabscope-engine --listen`)
                wire_client(out, port=int(os.environ.get("FS_WIRE_PORT", "18515")))
            else:
                log(f"unknown section {s}")
                return 2
            log(f"section {s} done in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
