# SPDX-License-Identifier: BSD-3-Clause
"""Explain the number (issue 20), proven on real runs: plant a cause, see it named; run clean, see
nothing named. Loopback TCP for segmentation (the MSS the engine reports), the netns testbed with a
queue too small for the burst for TCP retransmissions. No timing is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import netns_helpers as nh
import pytest
from test_netns_engine import PORT, run_against_serve, run_in, serve_in

from conftest import fabscope, json_lines
from fabscope.testbed import netns


def seen(rec: dict[str, Any]) -> list[str]:
    return [c["cause"] for c in rec["explanation"]["causes"] if c["seen"]]


def loopback_bw(sizes: str) -> list[dict[str, Any]]:
    out = fabscope("run", "--loopback", "--no-store", "--format", "json", "--pattern", "bw", "--sizes", sizes,
                   "--iters", "300")
    assert out.returncode == 0, out.stderr
    return json_lines(out.stdout)


def test_loopback_64k_names_segmentation_and_32k_and_one_mss_name_nothing() -> None:
    small, big = loopback_bw("32K,64K")
    mss = big["transport"]["local"]["mss"]
    # 64 KiB over loopback's MSS (65,483 B with timestamps): one full segment and a tiny tail.
    assert 65536 - 65536 // 8 < mss < 65536
    assert seen(big) == ["segmentation"], big["explanation"]
    seg = big["explanation"]["causes"][0]
    assert seg["state"] == "seen" and f"MSS {mss:,} B" in seg["evidence"] and f"{65536 - mss:,} B" in seg["evidence"]
    assert seg["fix"] and seg["cost"]
    assert seen(small) == [], small["explanation"]
    # Every cause is accounted for, none silent: checked, or unchecked with its reason.
    for rec in (small, big):
        states = {c["cause"]: c["state"] for c in rec["explanation"]["causes"]}
        assert states["retransmission"] == "clear" and states["mtu"] == "clear", states
        assert all(c["evidence"] for c in rec["explanation"]["causes"])
    # A message of exactly one MSS is one packet: nothing to name.
    (one,) = loopback_bw(str(mss))
    assert one["transport"]["local"]["mss"] == mss
    assert seen(one) == [], one["explanation"]


def test_loopback_cpu_hog_on_the_client_cpu_is_named_and_a_clean_run_names_nothing() -> None:
    """A busy loop pinned on the client engine's CPU (loopback pins the server to the first allowed
    CPU and the client to the second): the client engine runs a fraction of the phase and is
    taken off its CPU again and again; the explanation names cpu for that side only."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs: one per loopback engine")

    def lat() -> dict[str, Any]:
        # 2 s: long enough for the scheduler to take a shared CPU away tens of times
        out = fabscope("run", "--loopback", "--no-store", "--format", "json", "--sizes", "8", "--duration", "2")
        assert out.returncode == 0, out.stderr
        (rec,) = json_lines(out.stdout)
        return rec

    clean = lat()
    assert "cpu" not in seen(clean), clean["explanation"]
    cpu = {c["cause"]: c for c in clean["explanation"]["causes"]}["cpu"]
    assert cpu["state"] == "clear" and f"local engine on CPU {cpus[1]}" in cpu["evidence"], cpu
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=lambda: os.sched_setaffinity(0, {cpus[1]}))
    try:
        rec = lat()
    finally:
        hog.kill()
        hog.wait()
    assert "cpu" in seen(rec), rec["explanation"]
    cause = {c["cause"]: c for c in rec["explanation"]["causes"]}["cpu"]
    assert f"local engine on CPU {cpus[1]}" in cause["evidence"] and "peer engine" not in cause["evidence"], cause
    assert rec["cpu_use"]["local"]["involuntary_switches"] > rec["cpu_use"]["peer"]["involuntary_switches"]
    assert cause["fix"] and "--cpu" in cause["fix"]


def test_loopback_twenty_clean_runs_name_nothing() -> None:
    """No false alarms: 10 latency and 10 bandwidth runs on loopback, each its own `fabscope run`,
    nothing planted (sizes within one MSS): no cause seen in any, cpu included. The cpu cause fires
    with its evidence only (an engine that ran a small share of its phase): where it does here, the
    load came from outside the suite, whose stage runs one test at a time; it is no false alarm."""
    recs: list[dict[str, Any]] = []
    for i in range(20):
        args = ("--sizes", "8", "--iters", "3000") if i % 2 == 0 else ("--pattern", "bw", "--sizes", "32K",
                                                                          "--iters", "2000")
        out = fabscope("run", "--loopback", "--no-store", "--format", "json", *args)
        assert out.returncode == 0, out.stderr
        recs += json_lines(out.stdout)
    assert len(recs) == 20
    assert {i: (r["pattern"], seen(r)) for i, r in enumerate(recs) if seen(r)} == {}, \
        [r["explanation"] for r in recs if seen(r)]


# ---- netns: loss planted with a queue too small for the burst ------------------------------


@pytest.fixture(scope="module")
def plain_testbed() -> Iterator[None]:
    yield from nh.testbed(None)


def bw_over_fabric(*extra: str) -> dict[str, Any]:
    rc, recs, err = run_against_serve("--peer", f"10.201.0.2:{PORT}", "--device", "fabric0", "--pattern", "bw",
                                      "--sizes", "64K", "--timeout", "30", *(extra or ("--iters", "3000")))
    assert rc == 0, err
    (rec,) = recs
    return rec


@pytest.mark.netns
@nh.needs_root
def test_netns_tcp_names_retransmissions_under_loss_and_nothing_clean(plain_testbed: None) -> None:
    clean = bw_over_fabric()
    assert seen(clean) == [], clean["explanation"]
    # The switch's port toward the receiver (fs-b) drops what does not fit a 20,000 B queue: ~25 % of
    # the packets at this burst (measured), and the run still completes (it dies at limit 3000).
    port = "b-fabric"
    subprocess.run(["tc", "-n", netns.SWITCH_NS, "qdisc", "replace", "dev", port, "root", "tbf", "rate", "100mbit",
                    "burst", "20000", "limit", "20000"], check=True, timeout=10)
    try:
        lossy = bw_over_fabric()
    finally:
        subprocess.run(["tc", "-n", netns.SWITCH_NS, "qdisc", "del", "dev", port, "root"], check=False, timeout=10)
    assert "retransmission" in seen(lossy), lossy["explanation"]
    (cause,) = [c for c in lossy["explanation"]["causes"] if c["cause"] == "retransmission"]
    assert lossy["transport"]["local"]["phase_retransmitted_segments"] > 0
    assert "retransmitted" in cause["evidence"] and "TCP_INFO" in cause["evidence"] and cause["fix"]


def cause(rec: dict[str, Any], name: str) -> dict[str, Any]:
    (c,) = [c for c in rec["explanation"]["causes"] if c["cause"] == name]
    return c


@pytest.mark.netns
@nh.needs_root
def test_netns_small_send_buffer_is_named_and_autotuned_or_big_buffers_name_nothing(plain_testbed: None) -> None:
    """The testbed's veth path has no added delay (no netem on this kernel), but its round trip (tens
    of microseconds through two veths, a bridge and the schedulers) times the multi-Gb/s it carries
    is far more than a 4 KiB buffer holds: --tcp-sndbuf 4096 caps the window. Autotuned buffers, and
    a fixed 4 MiB one, leave room to spare: nothing named."""
    clean = bw_over_fabric()
    # Nothing seen, cpu included, as in the twenty clean runs: the cpu cause is seen only where an
    # engine really ran a small share of its phase (a run beside the load of 21 others on this 2-CPU
    # machine: "ran 9 % of the 3.68 s phase, taken off its CPU 111 times"), which the suite's own
    # stage of one test at a time never causes. Such a failure is load from outside the suite.
    assert seen(clean) == [], clean["explanation"]
    assert cause(clean, "buffers")["state"] == "clear" and "autotuned" in cause(clean, "buffers")["evidence"]
    big = bw_over_fabric("--iters", "3000", "--tcp-sndbuf", "4M")
    assert seen(big) == [], big["explanation"]
    assert "--tcp-sndbuf 4,194,304 B" in cause(big, "buffers")["evidence"] and "TCP_INFO" in cause(big, "buffers")["evidence"]
    small = bw_over_fabric("--iters", "1000", "--tcp-sndbuf", "4096")
    assert "buffers" in seen(small), small["explanation"]
    buf = cause(small, "buffers")
    assert small["transport"]["local"]["rtt_us"] > 0
    assert "the client's send buffer fixed by --tcp-sndbuf 4,096 B" in buf["evidence"] and "in flight" in buf["evidence"]
    assert buf["fix"] and "--tcp-sndbuf" in buf["fix"] and "net.core.wmem_max" in buf["fix"]


@pytest.mark.netns
@nh.needs_root
def test_netns_carrier_flap_during_a_run_is_named_as_a_link_event(plain_testbed: None) -> None:
    """The switch's port toward the receiver goes down for a second and up again while a bw run is
    in its measured phase: the receiver's fabric0 loses its carrier twice over (down, up), and the
    explanation names the link with the counter that moved. A clean run reads the same counters."""
    clean_link = cause(bw_over_fabric(), "link")
    assert clean_link["state"] == "clear" and "counters read" in clean_link["evidence"], clean_link
    # The flap waits for the run's traffic on the port (not a fixed delay: starting the engines on
    # a loaded machine takes seconds), then lets the 0.5 s warm-up pass, so it falls in the phase.
    tx = f"ip netns exec {netns.SWITCH_NS} cat /sys/class/net/b-fabric/statistics/tx_bytes"
    flap = subprocess.Popen(["sh", "-c", f"base=$({tx}); i=0; while [ $(( $({tx}) - base )) -lt 10000000 ] && "
                                         "[ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; sleep 2; "
                                         f"ip -n {netns.SWITCH_NS} link set b-fabric down; sleep 1; "
                                         f"ip -n {netns.SWITCH_NS} link set b-fabric up"])
    try:
        rec = bw_over_fabric("--duration", "8", "--warmup-time", "0.5")
    finally:
        flap.wait(timeout=90)
        subprocess.run(["ip", "-n", netns.SWITCH_NS, "link", "set", "b-fabric", "up"], check=False, timeout=10)
    assert "link" in seen(rec), rec["explanation"]
    link = cause(rec, "link")
    assert "carrier_changes +2 on fabric0" in link["evidence"] and link["fix"], link


@pytest.mark.netns
@nh.needs_root
def test_netns_twenty_clean_runs_name_nothing(plain_testbed: None) -> None:
    """No false alarms: 10 latency and 10 bandwidth runs from fs-a over the fabric to one serve on
    fs-b, each its own `fabscope run`, nothing planted: no cause seen in any, cpu included. Half of
    them over UCX's tcp transport, whose loss is judged from the library's own sockets."""
    server = serve_in("fs-b", "0.0.0.0")
    recs: list[dict[str, Any]] = []
    try:
        for i in range(20):
            args = ("--sizes", "8", "--iters", "3000") if i % 2 == 0 else ("--pattern", "bw", "--sizes", "64K",
                                                                              "--iters", "1000")
            ucx = ("--backend", "ucx", "--ucx-tls", "tcp") if i % 4 >= 2 else ()
            rc, got, err = run_in("fs-a", "--no-store", "--peer", f"10.201.0.2:{PORT}", "--device", "fabric0",
                                  "--timeout", "30", *ucx, *args)
            assert rc == 0, err
            recs += got
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert len(recs) == 20 and all(r["path"]["verdict"] == "verified" for r in recs)
    assert [r["backend"] for r in recs].count("ucx") == 10
    assert {i: (r["backend"], r["pattern"], seen(r)) for i, r in enumerate(recs) if seen(r)} == {}, \
        [r["explanation"] for r in recs if seen(r)]


@pytest.mark.netns
@nh.needs_root
def test_netns_ucx_over_tcp_names_its_own_sockets_retransmissions_under_loss(plain_testbed: None) -> None:
    """UCX's tcp transport opens its own sockets, so the tcp backend's TCP_INFO is not there: the
    engine reads TCP_INFO of the library's sockets from its own file descriptors (the control
    connection left out), so neither the host's other sockets nor the mgmt network count. The same
    20,000 B queue toward the receiver as the tcp case above."""
    args = ("--backend", "ucx", "--ucx-tls", "tcp", "--iters", "1000")
    clean = bw_over_fabric(*args)
    assert clean["transport"]["local"]["transports"] == ["tcp"] and clean["path"]["verdict"] == "verified"
    assert cause(clean, "retransmission")["state"] == "clear", clean["explanation"]
    assert "TCP_INFO of the library's sockets" in cause(clean, "retransmission")["evidence"]
    assert seen(clean) == [], clean["explanation"]  # cpu included (see the send-buffer test)
    socks = clean["counters"]["local"]["tcp_sockets"]
    # 1,000 x 64 KiB is at least 45,000 data segments at fabric0's MSS of 1,448 B.
    assert socks["sockets"] >= 1 and socks["data_segs_out"] >= 45000, socks
    port = "b-fabric"
    subprocess.run(["tc", "-n", netns.SWITCH_NS, "qdisc", "replace", "dev", port, "root", "tbf", "rate", "100mbit",
                    "burst", "20000", "limit", "20000"], check=True, timeout=10)
    try:
        lossy = bw_over_fabric(*args)
    finally:
        subprocess.run(["tc", "-n", netns.SWITCH_NS, "qdisc", "del", "dev", port, "root"], check=False, timeout=10)
    assert "retransmission" in seen(lossy), lossy["explanation"]
    loss = cause(lossy, "retransmission")
    assert loss["evidence"].startswith("UCX's tcp transport: the client sent "), loss
    assert "data segments again on its" in loss["evidence"] and loss["fix"]
    assert lossy["counters"]["local"]["tcp_sockets"]["total_retrans"] >= 20

