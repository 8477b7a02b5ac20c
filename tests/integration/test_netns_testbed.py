"""The netns testbed itself: idempotent up/down, and tbf shaping as ground truth.

The goodput figures here are what the engine's TCP bandwidth must match on
the same testbed: TCP over a 1gbit tbf carries at most 956.4 Mbit/s of
payload (1448-byte segments in 1514-byte frames: 1e9 * 1448/1514), and 95.6
Mbit/s over 100mbit.  iperf3's receiver-side figure is the reference.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import netns_helpers as h

from fabscope.testbed import netns
from fabscope.testbed.netns import FABRIC, MGMT, NS_A, NS_B

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(
        os.geteuid() != 0,
        reason="netns tests need root (CAP_NET_ADMIN) to create network namespaces and veth links",
    ),
]

WRAPPER = h.REPO / "testbed" / "netns" / "netns"


@pytest.fixture
def clean() -> Iterator[None]:
    # Hold the testbed for the test, so a colleague's `down` cannot unshape
    # the link in the middle of a measurement; start and end with it absent.
    with netns.session():
        netns.down()
        try:
            yield
        finally:
            netns.down()


@pytest.fixture
def clean_unheld() -> Iterator[None]:
    # For tests whose child processes call up/down themselves (they would
    # wait for our lock).
    netns.down()
    try:
        yield
    finally:
        netns.down()


def _wrapper(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WRAPPER), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_up_and_down_are_idempotent(clean: None) -> None:
    assert netns.down()["removed"] == []  # absent is fine
    st1 = netns.up()
    st2 = netns.up()
    assert st1["up"] and st2["up"]
    for ns, side in ((NS_A, "a"), (NS_B, "b")):
        links = st2["namespaces"][ns]["links"]
        assert links["lo"]["up"]
        for lk in (FABRIC, MGMT):
            assert links[lk.name]["addresses"] == [
                lk.addr_a if side == "a" else lk.addr_b
            ]
        assert st2["namespaces"][ns]["shape"] is None
    assert netns.down()["removed"] == [NS_A, NS_B]
    assert netns.down()["removed"] == []
    assert not netns.status()["up"]


def test_shape_is_applied_changed_and_removed(clean: None) -> None:
    st = netns.up("1gbit")
    for ns in (NS_A, NS_B):
        assert st["namespaces"][ns]["shape"]["rate_bit_per_s"] == 1e9
    st = netns.up("100mbit")  # a second up changes the rate in place
    assert all(
        st["namespaces"][ns]["shape"]["rate_bit_per_s"] == 1e8 for ns in (NS_A, NS_B)
    )
    st = netns.up()  # declarative: no --shape means unshaped
    assert all(st["namespaces"][ns]["shape"] is None for ns in (NS_A, NS_B))


# Connecting to a closed port: an RST (ECONNREFUSED) proves the peer
# namespace answered over that link; a timeout would mean it is not wired.
_PROBE = (
    "import errno, socket, sys; s = socket.socket(); s.settimeout(2); "
    "sys.exit(0 if s.connect_ex((sys.argv[1], 9)) == errno.ECONNREFUSED else 1)"
)


def test_both_links_connect_the_namespaces(clean: None) -> None:
    netns.up()
    for dst in (FABRIC.ip_b, MGMT.ip_b):
        argv = netns.ns_exec_argv(NS_A, [sys.executable, "-c", _PROBE, dst])
        r = subprocess.run(argv, check=False, timeout=10)
        assert r.returncode == 0, f"{dst} did not answer from {NS_B}"


def test_wrapper_cli(clean_unheld: None) -> None:
    r = _wrapper("status")
    assert r.returncode == 3 and "absent" in r.stdout
    r = _wrapper("up", "--shape", "100mbit")
    assert r.returncode == 0, r.stderr
    assert "tbf 100.0 Mbit/s" in r.stdout
    r = _wrapper("exec", NS_B, "--", "cat", "/sys/class/net/mgmt0/address")
    assert r.returncode == 0 and r.stdout.count(":") == 5
    r = _wrapper("up", "--shape", "fast")
    assert r.returncode == 1 and "not a tc rate" in r.stderr
    r = _wrapper("down")
    assert r.returncode == 0 and "removed fs-a, fs-b" in r.stdout


def _goodput_mbit(shape: str) -> float:
    netns.up(shape)
    res = h.iperf3(
        NS_A,
        NS_B,
        server_bind=FABRIC.ip_b,
        client_bind=FABRIC.ip_a,
        dst=FABRIC.ip_b,
        seconds=3,
    )
    mbit = float(res["end"]["sum_received"]["bits_per_second"]) / 1e6
    print(f"\nshape {shape}: iperf3 receiver goodput {mbit:.1f} Mbit/s")
    return mbit


@pytest.mark.parametrize(("shape", "ceiling"), [("1gbit", 956.0), ("100mbit", 95.6)])
def test_shaping_accuracy(clean: None, shape: str, ceiling: float) -> None:
    mbit = _goodput_mbit(shape)
    assert abs(mbit - ceiling) <= 0.02 * ceiling, (
        f"{shape}: {mbit:.1f} Mbit/s is not within 2% of {ceiling}"
    )


def test_byte_counters_separate_the_links(clean: None) -> None:
    netns.up("1gbit")
    before = h.snapshots(NS_A)
    h.socket_run(
        "bulk",
        NS_A,
        NS_B,
        server_bind=MGMT.ip_b,
        client_bind=MGMT.ip_a,
        dst=MGMT.ip_b,
        size=64 * 1024,
        count=32,
    )
    after = h.snapshots(NS_A)
    tx = {
        dev: after[NS_A]["net"][dev]["tx_bytes"] - before[NS_A]["net"][dev]["tx_bytes"]
        for dev in ("fabric0", "mgmt0")
    }
    assert tx["mgmt0"] >= 2 * 1024 * 1024
    # Not == 0: a freshly raised link sends IPv6 router solicitations and
    # neighbour discovery (~100 bytes) on its own.  That is the noise the path
    # verdict must tolerate; the run's megabytes are all on mgmt0.
    assert tx["fabric0"] < 0.001 * tx["mgmt0"]


def test_second_user_waits_then_is_told_who_holds_it(clean: None) -> None:
    # We hold the lock (clean); another process asking for it must not barge in.
    code = (
        "import sys; from fabscope.testbed import netns\n"
        "try:\n"
        "    with netns.session(timeout_s=0.5): pass\n"
        "except netns.TestbedError as e:\n"
        "    print(e); sys.exit(7)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(h.REPO / "python"))
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert r.returncode == 7, r.stderr
    assert f"pid {os.getpid()}" in r.stdout
