# SPDX-License-Identifier: BSD-3-Clause
"""The netns testbed itself: idempotent up/down, N hosts on two switches, tbf/htb shaping as ground
truth (every host, one host, one pair), host names inside the hosts, and launchers starting
processes on them through `fabscope testbed netns env`.

The goodput figures here are what the engine's TCP bandwidth must match on
the same testbed: TCP over a 1gbit tbf carries at most 956.4 Mbit/s of
payload (1448-byte segments in 1514-byte frames: 1e9 * 1448/1514), and 95.6
Mbit/s over 100mbit.  iperf3's receiver-side figure is the reference.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import netns_helpers as h

from fabscope.testbed import netns
from fabscope.testbed import netns_launch as launch
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
    # For tests whose child processes call up/down themselves: they share our hold of the lock
    # (netns.inherit_lock, in _wrapper), so nobody else can change the testbed in between.
    with netns.session():
        netns.down()
        try:
            yield
        finally:
            netns.down()


def _wrapper(*args: str) -> subprocess.CompletedProcess[str]:
    env, fds = netns.inherit_lock()
    return subprocess.run(
        [str(WRAPPER), *args], capture_output=True, text=True, timeout=60, check=False,
        env=dict(os.environ, **env), pass_fds=fds,
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
    assert r.returncode == 2 and "not a tc rate" in r.stderr  # bad usage
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
    # A loaded machine (8 runnable tasks on 2 cores, seen while building this) only ever LOWERS
    # goodput (measured at load 8: 75-96 Mbit/s at 100mbit, direct veth or bridge alike), so the
    # best of up to three runs is judged; no run may exceed the ceiling by more than 2%.
    runs: list[float] = []
    for _ in range(3):
        runs.append(_goodput_mbit(shape))
        assert runs[-1] <= 1.02 * ceiling, f"{shape}: {runs[-1]:.1f} Mbit/s is above the {ceiling} ceiling"
        if abs(runs[-1] - ceiling) <= 0.02 * ceiling:
            break
    assert abs(max(runs) - ceiling) <= 0.02 * ceiling, (
        f"{shape}: best of {runs} Mbit/s is not within 2% of {ceiling}"
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
    # A child we hand our hold to (netns.inherit_lock) goes straight in.
    extra, fds = netns.inherit_lock()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(env, **extra),
                       pass_fds=fds, check=False, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr


# --------------------------------------------------------------------------
# N hosts
# --------------------------------------------------------------------------


def _probe(src: str, *dsts: str) -> list[str]:
    """The destinations (addresses or names, resolved inside src) that did NOT answer from src."""
    code = (
        "import errno, socket, sys\n"
        "for d in sys.argv[1:]:\n"
        "    s = socket.socket(); s.settimeout(2)\n"
        "    if s.connect_ex((d, 9)) != errno.ECONNREFUSED: print(d)\n"
    )
    r = subprocess.run(netns.ns_exec_argv(src, [sys.executable, "-c", code, *dsts]), capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def _made_by_up() -> list[str]:
    """What `up` leaves on this machine outside the host namespaces: it must all go with `down`."""
    found = [ns for ns in ("fs-switch", *netns.ALL_HOSTS) if os.path.exists(f"/run/netns/{ns}")]
    if subprocess.run(["ip", "link", "show", "dev", netns.HEAD_DEV], capture_output=True, check=False).returncode == 0:
        found.append(netns.HEAD_DEV)
    found += [str(p) for p in Path("/etc/netns").glob("fs-*")]
    if launch.RUN_DIR.exists():
        found.append(str(launch.RUN_DIR))
    if "fabscope netns testbed" in Path("/etc/hosts").read_text():
        found.append("/etc/hosts (the testbed's block)")
    return found


def test_four_hosts_reach_each_other_over_both_networks_and_down_removes_everything(clean: None) -> None:
    etc_hosts = Path("/etc/hosts").read_text()
    st = netns.up(None, 4)
    assert st["up"] and st["hosts"] == ["fs-a", "fs-b", "fs-c", "fs-d"]
    for i, host in enumerate(st["hosts"]):
        links = st["namespaces"][host]["links"]
        assert links["fabric0"]["addresses"] == [f"10.201.0.{i + 1}/24"]
        assert links["mgmt0"]["addresses"] == [f"10.202.0.{i + 1}/24"]
    # Every pair, both networks, by address and by the names the hosts file gives.
    for src in st["hosts"]:
        others = [h for h in st["hosts"] if h != src]
        dsts = [a for h in others for a in (netns.fabric_ip(h), netns.mgmt_ip(h), h, f"{h}-fabric")]
        assert _probe(src, *dsts, "fs-head") == [], f"unreachable from {src}"
    # The head (this machine) reaches every host's management address, never its fabric.
    code = "import errno, socket, sys; s = socket.socket(); s.settimeout(1); print(s.connect_ex((sys.argv[1], 9)))"
    for host in st["hosts"]:
        out = subprocess.run([sys.executable, "-c", code, netns.mgmt_ip(host)], capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        assert out == str(errno.ECONNREFUSED)
    # Each host has its own name.
    r = subprocess.run(netns.ns_exec_argv("fs-c", ["hostname"]), capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "fs-c"
    # The head (where the launchers run) finds the names in its /etc/hosts, never asking DNS (whose
    # dropped queries cost mpirun 5 s here); a fresh process reads the file as it is now.
    lookup = "import socket, sys; print(' '.join(socket.gethostbyname(n) for n in sys.argv[1:]))"
    names = [n for h in st["hosts"] for n in (h, f"{h}-fabric")]
    got = subprocess.run([sys.executable, "-c", lookup, *names], capture_output=True, text=True, check=True,
                         timeout=10).stdout.split()
    assert got == [a for h in st["hosts"] for a in (netns.mgmt_ip(h), netns.fabric_ip(h))]
    # Declarative: fewer hosts removes the rest.
    st = netns.up(None, 3)
    assert st["hosts"] == ["fs-a", "fs-b", "fs-c"] and not os.path.exists("/run/netns/fs-d")
    assert "fs-d" not in Path("/etc/hosts").read_text() and Path("/etc/hosts").read_text().count("fs-c-fabric") == 1
    res = netns.down()
    assert res["removed"] == ["fs-a", "fs-b", "fs-c"]
    assert _made_by_up() == []
    assert Path("/etc/hosts").read_text() == etc_hosts  # what was there before, byte for byte


def test_more_than_sixteen_or_fewer_than_two_hosts_is_refused(clean: None) -> None:
    for n in (1, 17):
        with pytest.raises(netns.TestbedError, match="2 to 16"):
            netns.up(None, n)
    r = _wrapper("up", "--hosts", "17")
    assert r.returncode == 2 and "--hosts" in r.stderr


def _goodput(src: str, dst: str, expect: float, seconds: int = 2) -> float:
    """src -> dst over the fabric: the best of up to three iperf3 runs (load only lowers it),
    stopping at the first within 5% of ``expect``."""
    best = 0.0
    for _ in range(3):
        res = h.iperf3(src, dst, server_bind=netns.fabric_ip(dst), client_bind=netns.fabric_ip(src),
                       dst=netns.fabric_ip(dst), seconds=seconds)
        best = max(best, float(res["end"]["sum_received"]["bits_per_second"]) / 1e6)
        if best == pytest.approx(expect, rel=0.05):
            break
    return best


def test_one_slow_host_and_one_slow_pair(clean: None) -> None:
    """--shape-host slows one host both ways; shape-pair slows one pair only (the fabric matrix's
    'bad node' and 'bad link'). Ceilings: 1448-byte payloads in 1514-byte frames."""
    st = netns.up("400mbit", 3, shape_hosts={"fs-c": "100mbit"})
    assert st["namespaces"]["fs-c"]["shape"]["rate_bit_per_s"] == 1e8
    assert st["namespaces"]["fs-c"]["switch_port_shape"]["rate_bit_per_s"] == 1e8
    assert st["namespaces"]["fs-a"]["switch_port_shape"] is None
    assert _goodput("fs-a", "fs-c", 95.6) == pytest.approx(95.6, rel=0.05)  # towards the slow host
    assert _goodput("fs-c", "fs-b", 95.6) == pytest.approx(95.6, rel=0.05)  # and from it
    pairs = netns.shape_pair("fs-a", "fs-b", "50mbit")
    assert pairs == {"fs-a": {"fs-b": "50mbit"}, "fs-b": {"fs-a": "50mbit"}}
    assert _goodput("fs-a", "fs-b", 47.8) == pytest.approx(47.8, rel=0.05)
    assert _goodput("fs-b", "fs-a", 47.8) == pytest.approx(47.8, rel=0.05)
    assert _goodput("fs-a", "fs-c", 95.6) == pytest.approx(95.6, rel=0.05)  # fs-a's other traffic: its own rate
    assert netns.status()["namespaces"]["fs-a"]["pair_shapes"] == {"fs-b": "50mbit"}
    assert netns.shape_pair("fs-a", "fs-b", None) == {}
    assert netns.status()["namespaces"]["fs-a"]["shape"]["rate_bit_per_s"] == 4e8  # back to plain tbf


def test_shape_pair_cli_and_mtu(clean_unheld: None) -> None:
    r = _wrapper("up", "--hosts", "3", "--mtu", "9000", "--mtu-host", "fs-c=1500")
    assert r.returncode == 0, r.stderr
    st = netns.status()
    assert [st["namespaces"][x]["links"]["fabric0"]["mtu"] for x in ("fs-a", "fs-b", "fs-c")] == [9000, 9000, 1500]
    r = _wrapper("shape-pair", "fs-a", "fs-c", "20mbit", "--one-way")
    assert r.returncode == 0 and "fs-a -> fs-c: 20mbit" in r.stdout, r.stderr
    r = _wrapper("shape-pair", "fs-a", "fs-z", "20mbit")
    assert r.returncode in (1, 2) and "fs-z" in r.stderr
    r = _wrapper("shape-pair", "fs-a", "fs-a", "20mbit")
    assert r.returncode in (1, 2) and "two different hosts" in r.stderr


def test_launchers_start_processes_inside_the_hosts(clean: None) -> None:
    """`fabscope testbed netns env` makes plain `mpirun -H` / `mpiexec -hosts` start processes in
    the hosts (each reports its own host name)."""
    netns.up(None, 3)
    r = _wrapper("env")
    assert r.returncode == 0, r.stderr
    assert "export OMPI_MCA_plm_rsh_agent=" in r.stdout and "export HYDRA_LAUNCHER_EXEC=" in r.stdout
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    script = f'eval "$({WRAPPER} env)"; '
    for launcher, hosts in (("mpirun.openmpi -np 2 -H fs-a,fs-c --map-by node", ["fs-a", "fs-c"]),
                            ("mpiexec.hydra -n 2 -hosts fs-b,fs-c", ["fs-b", "fs-c"])):
        if shutil.which(launcher.split()[0]) is None:
            continue
        out = subprocess.run(["bash", "-c", script + f"{launcher} hostname"], capture_output=True, text=True,
                             timeout=60, env=env, check=False)
        assert out.returncode == 0, out.stderr
        assert sorted(out.stdout.split()) == hosts, out.stdout
    # The agent names a host that is not up, at once.
    agent = subprocess.run([str(launch.AGENT), "fs-e", "true"], capture_output=True, text=True, timeout=10, check=False)
    assert agent.returncode == 255 and "fs-e is not up" in agent.stderr
