#!/usr/bin/env python3
"""Guest-side cases of UCX and libfabric over rxe between two Soft-RoCE guests (issue 27).

Runs in the CLIENT guest of ONE two-guest boot (the server guest runs the testbed's default
`fabscope serve`), usage: python3 middleware_cases.py OUTDIR. First the peer tools, their server
half started in the server guest over the testbed's ssh (the launcher's way in); then fabscope
against the serve. Each case appends one JSON line to OUTDIR/cases.jsonl: argv, exit status,
stdout's JSON records, stderr's tail. Nothing here decides pass/fail: the host-side test
(test_middleware_two_guests.py) asserts on these lines after the guests powered off.
"""
from __future__ import annotations

import json
import os
import select
import shlex
import subprocess
import sys
import time

OUT = sys.argv[1] if len(sys.argv) > 1 else "/out"
RUN = ["fabscope", "run", "--format", "json", "--no-store", "--sizes", "8,64K", "--iters", "100", "--warmup", "10"]
PEER = ["--peer", "peer"]

# name, fabscope arguments after RUN, extra environment for the client. What works is in the suite
# run below (SUITE); these are what the suite does not show.
FABSCOPE: list[tuple[str, list[str], dict[str, str]]] = [
    ("ucx_rc_alone", [*PEER, "--backend", "ucx", "--op", "tag", "--ucx-tls", "rc_verbs", "--device", "rxe0:1",
                      "--timeout", "20"], {}),
    ("ofi_msg", [*PEER, "--backend", "ofi", "--provider", "verbs", "--ofi-ep", "msg", "--device", "rxe0",
                 "--timeout", "60"], {}),
    # Last: this client fails before it connects, so serve's engine waits out its deadline.
    ("ofi_rxm_universe_256", [*PEER, "--backend", "ofi", "--provider", "verbs;ofi_rxm", "--device", "rxe0",
                              "--timeout", "20"], {"FI_UNIVERSE_SIZE": "256"}),
]
# The two-host suite on rxe0: verbs, UCX (rc_verbs with ud_verbs:aux, ud_verbs), libfabric (verbs, RDM
# through ofi_rxm) against the serve, and the MPI rows across the guests (Open MPI's default, which the
# field report is about, Open MPI pml ucx, MPICH ch4:ucx), each asked for rxe0 (UCX: rxe0:1).
SUITE = ["fabscope", "suite", "--peer", "peer", "--hosts", "client,server", "--quick", "--no-store",
         "--timeout", "60", "--device", "rxe0", "--backends", "verbs,ucx,ofi,mpi"]
# The same transports over TCP on the same two hosts (the field report's comparison: MPI/UCX over
# RoCE against TCP), each asked for eth0 and verified there.
SUITE_TCP = [*SUITE[:SUITE.index("--device")], "--device", "eth0", "--backends", "ucx,ofi,mpi"]

# name, server command (in the server guest, over ssh), client command
PEERS: list[tuple[str, str, list[str]]] = [
    ("ucx_perftest_rc_ud", "UCX_TLS=rc_verbs,ud_verbs UCX_NET_DEVICES=rxe0:1 ucx_perftest -p 13337",
     ["env", "UCX_TLS=rc_verbs,ud_verbs", "UCX_NET_DEVICES=rxe0:1", "ucx_perftest", "-p", "13337", "server",
      "-t", "tag_lat", "-n", "200", "-s", "8"]),
    ("fi_pingpong_rxm", 'fi_pingpong -p "verbs;ofi_rxm" -e rdm -I 100 -S 8',
     ["fi_pingpong", "-p", "verbs;ofi_rxm", "-e", "rdm", "-I", "100", "-S", "8", "server"]),
]


def record(out, rec: dict) -> None:
    out.write(json.dumps(rec) + "\n")
    out.flush()
    print(f"[middleware] {rec['case']}: rc={rec['rc']} {rec['elapsed_s']} s", flush=True)


# Starts the server half and says when it listens (both guests see the repo at /fabscope).
PEER_SERVER = "/fabscope/tests/softroce/peer_server.sh"
LISTENING = b"fabscope-peer: listening"


def wait_listening(srv: subprocess.Popen, limit_s: float) -> bytes:
    """What the server half printed until peer_server.sh said it listens, its end, or limit_s."""
    got = b""
    end = time.monotonic() + limit_s
    fd = srv.stdout.fileno()
    while LISTENING not in got and time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        got += chunk
    return got


def run_peer(server: str, client: list[str], client_timeout: float = 120) -> dict:
    """The server half in the server guest (over ssh), then the client half here once the server
    half listens; a client refused all the same tries again. Both outputs and exit statuses."""
    t0 = time.monotonic()
    # The testbed's own environment (UCX_IB_GID_INDEX, FI_UNIVERSE_SIZE) does not cross ssh: the
    # server half gets this guest's values, as mpirun's -x does for the ranks.
    fwd = " ".join(f"{k}={os.environ[k]}" for k in ("UCX_IB_GID_INDEX", "FI_UNIVERSE_SIZE") if k in os.environ)
    srv = subprocess.Popen(["ssh", "server", f"{fwd} sh {PEER_SERVER} {int(client_timeout)} {shlex.quote(server)}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # Under TCG ssh and the library's start-up take seconds: wait for the listener (at most 60 s).
    head = wait_listening(srv, 60)
    give_up = time.monotonic() + 60
    while True:
        try:
            c = subprocess.run(client, capture_output=True, text=True, timeout=client_timeout)
            rc, text = c.returncode, c.stdout + c.stderr
        except subprocess.TimeoutExpired:
            rc, text = None, f"client timed out after {client_timeout:g} s"
        refused = rc != 0 and ("Connection refused" in text or "connect() failed" in text)
        if not refused or time.monotonic() > give_up or srv.poll() is not None:
            break
        time.sleep(1)
    try:
        rest, _ = srv.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        rest, _ = srv.communicate()
    srv_out = (head + rest).decode("utf-8", "replace")
    return {"argv": client, "rc": rc, "server_rc": srv.returncode, "output": text[-3000:],
            "server_output": srv_out[-2000:], "elapsed_s": round(time.monotonic() - t0, 1)}


def peer_case(out, name: str, server: str, client: list[str]) -> None:
    record(out, {"case": name, "kind": "peer", **run_peer(server, client)})


def fabscope_case(out, name: str, args: list[str], env: dict[str, str]) -> None:
    t0 = time.monotonic()
    argv = RUN + args
    try:
        c = subprocess.run(argv, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
        rc, so, se = c.returncode, c.stdout, c.stderr
    except subprocess.TimeoutExpired:
        rc, so, se = None, "", "client timed out after 300 s"
    recs = []
    for line in so.splitlines():
        if line.startswith("{"):
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass
    record(out, {"case": name, "kind": "fabscope", "argv": argv, "env": env, "rc": rc, "records": recs,
                 "stderr": se[-3000:], "elapsed_s": round(time.monotonic() - t0, 1)})


def suite_case(out, name: str = "suite", suite: list[str] = SUITE) -> None:
    """The suite writes its own report (suite.json, hosts.jsonl) into OUT/<name>; MPI ranks of its
    rows start in the server guest over the testbed's ssh."""
    t0 = time.monotonic()
    argv = [*suite, "--out", os.path.join(OUT, name)]
    try:
        c = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        rc, so, se = c.returncode, c.stdout, c.stderr
    except subprocess.TimeoutExpired:
        rc, so, se = None, "", "suite timed out after 900 s"
    record(out, {"case": name, "kind": "suite", "argv": argv, "rc": rc, "stdout": so[-6000:],
                 "stderr": se[-8000:], "elapsed_s": round(time.monotonic() - t0, 1)})


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "cases.jsonl"), "a") as out:
        for name, server, client in PEERS:
            peer_case(out, name, server, client)
        suite_case(out)
        suite_case(out, "suite-eth0", SUITE_TCP)
        for name, args, env in FABSCOPE:
            fabscope_case(out, name, args, env)
    # bench/softroce_vs_middleware_peers.py in its smallest mode, in this boot (the test passes its plan)
    plan = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_plan.json")
    if os.path.exists(plan):
        from middleware_bench import run_plan

        with open(plan) as f:
            run_plan(json.load(f), OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
