# SPDX-License-Identifier: BSD-3-Clause
"""N "hosts" on one machine: network namespaces fs-a, fs-b, ... on two switched networks.

    fs-a                      fs-switch (namespace)                      fs-b, fs-c, ...
    fabric0 10.201.0.1/24 --- a-fabric [br-fabric] b-fabric, ... --- fabric0 10.201.0.2/24, ...
    mgmt0   10.202.0.1/24 --- a-mgmt   [br-mgmt]   b-mgmt,   ... --- mgmt0   10.202.0.2/24, ...
                                       head-mgmt
                                           |
    this machine's namespace:         fs-head 10.202.0.254/24  (the "head node": launchers run here)

Host i (0-based) has fabric0 10.201.0.(i+1) and mgmt0 10.202.0.(i+1), so the default two hosts
keep the addresses the two-host testbed always had. The two bridges ("switches") live in a
namespace of their own (fs-switch), so bridged frames never meet this machine's firewall; the only
thing added to this machine's own namespace is ``fs-head`` with 10.202.0.254/24 (and its connected
route), because mpirun, mpiexec, srun and slurmctld run here and the processes they start inside the
hosts connect back to them over the management network.

Why two networks: the byte counters of each link tell which one carried a run, so the path verdict
can be tested by sending over the "wrong" network on purpose (bind to 10.201.0.1 and connect to
10.202.0.2: the kernel routes over mgmt0 with fabric0's source address). Why tbf/htb: known rates
to measure bandwidth against, and a slow host or a slow pair for the fabric matrix to find
(netem is not available in the build kernel); see netns_shape.py.

Processes run "on" a host with ``ns_exec_argv`` (``ip netns exec`` plus a UTS namespace named after
the host: gethostname() says fs-a); launchers use the agent and environment of netns_launch.py
(``fabscope testbed netns env``). Names resolve inside the hosts: fs-b -> its mgmt address,
fs-b-fabric -> its fabric address, fs-head -> 10.202.0.254.

Usage::

    fabscope testbed netns up [--hosts N] [--shape 1gbit] [--shape-host fs-c=250mbit] [--mtu 9000]
    fabscope testbed netns shape-pair fs-a fs-b 100mbit      # one slow link ("none" removes it)
    fabscope testbed netns status [--json]
    fabscope testbed netns exec fs-a -- iperf3 -s
    eval "$(fabscope testbed netns env)"; mpirun -H fs-a,fs-b -np 2 hostname
    fabscope testbed netns down

Python API (for tests, the suite and the fabric matrix): ``up()``, ``down()``, ``status()``,
``hosts_up()``, ``session()`` (hold the machine-wide lock around any use), ``ns_exec_argv()``,
``fabric_ip()``/``mgmt_ip()``, ``shape_pair()``, ``launcher_env()``, ``snapshot_ns()``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .. import argtypes
from . import netns_launch as launch
from . import netns_shape as shaping
from .netns_cmd import (
    ALL_HOSTS,
    MAX_HOSTS,
    TestbedError,
    host_index,
    json_out,
    link_exists,
    ns_exists,
    require_root,
    require_tools,
    run,
    sysctl,
)

__all__ = ["ALL_HOSTS", "MAX_HOSTS", "TestbedError"]

NS_A = "fs-a"
NS_B = "fs-b"
# The default two hosts (what `up` without --hosts makes).
NAMESPACES = (NS_A, NS_B)
DEFAULT_HOSTS = 2
SWITCH_NS = "fs-switch"
BRIDGES = {"fabric0": "br-fabric", "mgmt0": "br-mgmt"}
HEAD_DEV = launch.HEAD_DEV
HEAD_PEER = "head-mgmt"
HEAD_IP = launch.HEAD_IP


@dataclass(frozen=True)
class Link:
    """One of the two networks: the device name every host has, and fs-a's/fs-b's addresses."""

    name: str
    addr_a: str  # with prefix, in fs-a
    addr_b: str  # with prefix, in fs-b
    net: str  # the first three octets

    @property
    def ip_a(self) -> str:
        return self.addr_a.split("/", 1)[0]

    @property
    def ip_b(self) -> str:
        return self.addr_b.split("/", 1)[0]

    def ip(self, host: str) -> str:
        return f"{self.net}.{host_index(host) + 1}"

    def addr(self, host: str) -> str:
        return f"{self.ip(host)}/24"


FABRIC = Link("fabric0", "10.201.0.1/24", "10.201.0.2/24", "10.201.0")
MGMT = Link("mgmt0", "10.202.0.1/24", "10.202.0.2/24", "10.202.0")
LINKS = (FABRIC, MGMT)
# Kept for callers of the two-host module.
TBF_BURST = shaping.TBF_BURST
TBF_LATENCY = shaping.TBF_LATENCY


def fabric_ip(host: str) -> str:
    """``host``'s fabric0 address (10.201.0.i)."""
    return FABRIC.ip(host)


def mgmt_ip(host: str) -> str:
    """``host``'s mgmt0 address (10.202.0.i), what its name resolves to inside the testbed."""
    return MGMT.ip(host)


def host_names(n: int) -> list[str]:
    """The first ``n`` testbed host names (2 <= n <= 16)."""
    if not 2 <= n <= MAX_HOSTS:
        raise TestbedError(f"--hosts {n}: the testbed has 2 to {MAX_HOSTS} hosts")
    return list(ALL_HOSTS[:n])


def _port(host: str, link: Link) -> str:
    """The switch's port for ``host`` on ``link``: a-fabric, b-mgmt, ..."""
    return f"{host.removeprefix('fs-')}-{link.name.removesuffix('0')}"


# --------------------------------------------------------------------------
# one user at a time
# --------------------------------------------------------------------------

# The host names are machine-wide, and several people (or test runs) share a build machine: a
# `down` from one of them in the middle of another's measurement silently turns a shaped 1gbit
# link into an unshaped one. So up/down take an exclusive lock, and a test run holds it for its
# whole duration with `session()`.
LOCK_PATH = "/run/lock/fabscope-netns.lock"
_lock_depth = 0
_lock_fd: int | None = None


# A child process started while its parent holds the testbed (a test running `fabscope testbed
# netns up`) shares the parent's hold: the parent passes the locked descriptor (pass_fds) and its
# number in this variable (inherit_lock()); the flock belongs to that open file, which both have.
LOCK_FD_ENV = "FABSCOPE_NETNS_LOCK_FD"


def _lock_path() -> str:
    return LOCK_PATH if os.path.isdir(os.path.dirname(LOCK_PATH)) else "/tmp/fabscope-netns.lock"


def _inherited_lock() -> bool:
    fd_text = os.environ.get(LOCK_FD_ENV, "")
    if not fd_text.isdigit():
        return False
    try:
        mine, lock = os.fstat(int(fd_text)), os.stat(_lock_path())
    except OSError:
        return False
    return (mine.st_dev, mine.st_ino) == (lock.st_dev, lock.st_ino)


def inherit_lock() -> tuple[dict[str, str], tuple[int, ...]]:
    """(environment, pass_fds) for a child process that must use the testbed while this process
    holds it in ``session()``: the child's own up/down/session then share this hold instead of
    waiting for it. ({}, ()) when this process does not hold it."""
    if _lock_fd is None:
        return {}, ()
    return {LOCK_FD_ENV: str(_lock_fd)}, (_lock_fd,)


@contextlib.contextmanager
def session(timeout_s: float = 600.0) -> Iterator[None]:
    """Hold the testbed: other fabscope processes' up/down wait until this ends.

    Re-entrant within a process. Raises TestbedError naming the holder's pid when the lock is not
    free within ``timeout_s``.
    """
    global _lock_depth, _lock_fd
    if _lock_depth or _inherited_lock():
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
        return
    path = _lock_path()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise TestbedError(f"cannot open the testbed lock {path}: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise TestbedError(
                    f"the netns testbed is in use by another fabscope process (pid {holder}) "
                    f"and stayed so for {timeout_s:.0f} s; wait for it to finish, "
                    f"or end that process if it is stale"
                ) from None
            time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _lock_fd, _lock_depth = fd, 1
    try:
        yield
    finally:
        _lock_depth = 0
        _lock_fd = None
        os.ftruncate(fd, 0)
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# --------------------------------------------------------------------------
# up
# --------------------------------------------------------------------------


def _parse_host_values(items: dict[str, str] | None, n_hosts: int, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    allowed = host_names(n_hosts)
    for host, value in (items or {}).items():
        if host not in allowed:
            raise TestbedError(f"{flag} {host}={value}: {host} is not one of the hosts ({', '.join(allowed)})")
        out[host] = value
    return out


def up(
    shape: str | None = None,
    hosts: int = DEFAULT_HOSTS,
    *,
    shape_hosts: dict[str, str] | None = None,
    mtu: int | None = None,
    mtu_hosts: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Build (or repair) the testbed with ``hosts`` hosts; declarative: hosts beyond that, shaping
    not asked for and pair shaping from ``shape_pair`` are removed.

    ``shape``: tbf on every host's fabric0. ``shape_hosts``: {host: rate} for hosts whose fabric
    link is different (both directions). ``mtu``/``mtu_hosts``: fabric0's MTU everywhere / on some
    hosts (default 1500). Returns ``status()``."""
    with session(timeout_s=120):
        return _up(shape, hosts, shape_hosts or {}, mtu, mtu_hosts or {})


def _up(
    shape: str | None, n_hosts: int, shape_hosts: dict[str, str], mtu: int | None, mtu_hosts: dict[str, int]
) -> dict[str, Any]:
    require_tools("ip", "unshare")
    names = host_names(n_hosts)
    host_rates = _host_rates(shape, n_hosts, shape_hosts)
    mtus = {h: int(v) for h, v in _parse_host_values({k: str(v) for k, v in mtu_hosts.items()}, n_hosts,
                                                     "--mtu-host").items()}
    for value in [mtu, *mtus.values()]:
        if value is not None and not 68 <= value <= 65535:
            raise TestbedError(f"--mtu {value}: an Ethernet MTU is between 68 and 65535 (9000 for jumbo frames)")
    if any(host_rates.values()):
        require_tools("tc")
    require_root()
    _switch_up()
    for host in names:
        _host_up(host, mtus.get(host, mtu))
    _head_up()
    for host in ALL_HOSTS[n_hosts:]:
        if ns_exists(host):
            run(["ip", "netns", "del", host], what=f"delete network namespace {host} (not in --hosts {n_hosts})")
    launch.write_files({h: mgmt_ip(h) for h in names}, {h: fabric_ip(h) for h in names}, ALL_HOSTS)
    launch.write_head_hosts({h: mgmt_ip(h) for h in names}, {h: fabric_ip(h) for h in names})
    shaping.clear_pairs(launch.RUN_DIR)
    if shutil.which("tc"):
        for host in names:
            shaping.set_tbf(host, FABRIC.name, host_rates[host])
            # A host shaped on its own is slow both ways: its switch port too.
            shaping.set_tbf(SWITCH_NS, _port(host, FABRIC), shape_hosts.get(host))
    return status()


def _host_rates(shape: str | None, n_hosts: int, shape_hosts: dict[str, str]) -> dict[str, str | None]:
    if shape is not None:
        shaping.validate_rate(shape)
    per_host = _parse_host_values(shape_hosts, n_hosts, "--shape-host")
    for rate in per_host.values():
        shaping.validate_rate(rate, "--shape-host")
    return {h: per_host.get(h, shape) for h in host_names(n_hosts)}


def _switch_up() -> None:
    if not ns_exists(SWITCH_NS):
        run(["ip", "netns", "add", SWITCH_NS], what=f"create the switch namespace {SWITCH_NS}")
    # No IPv6 chatter from the switch ports (they have no addresses to announce), and bridged
    # frames never go through netfilter even where br_netfilter is loaded.
    for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
        sysctl(SWITCH_NS, key, "1", check=False)
    for key in ("net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
                "net.bridge.bridge-nf-call-arptables"):
        sysctl(SWITCH_NS, key, "0", check=False)
    run(["ip", "-n", SWITCH_NS, "link", "set", "lo", "up"], what=f"bring lo up in {SWITCH_NS}")
    for bridge in BRIDGES.values():
        if not link_exists(SWITCH_NS, bridge):
            # forward_delay 0 and no STP: a port forwards as soon as it is up.
            run(["ip", "-n", SWITCH_NS, "link", "add", bridge, "type", "bridge", "forward_delay", "0",
                 "stp_state", "0"], what=f"create bridge {bridge} in {SWITCH_NS}")
        run(["ip", "-n", SWITCH_NS, "link", "set", bridge, "up"], what=f"bring {bridge} up")


def _host_up(host: str, mtu: int | None) -> None:
    if not ns_exists(host):
        run(["ip", "netns", "add", host], what=f"create network namespace {host}")
    run(["ip", "-n", host, "link", "set", "lo", "up"], what=f"bring lo up in {host}")
    # Loose reverse-path filtering: the deliberate misroute (source 10.201.0.1 arriving on
    # mgmt0) must be delivered, not dropped, even where new namespaces inherit strict rp_filter.
    sysctl(host, "net.ipv4.conf.all.rp_filter", "2")
    for link in LINKS:
        port = _port(host, link)
        in_host, in_switch = link_exists(host, link.name), link_exists(SWITCH_NS, port)
        if not (in_host and in_switch):
            # A device of ours without its switch port is left from a crashed run or from the
            # two-host testbed (a veth straight to the other host): replace it with a clean pair.
            if in_host:
                run(["ip", "-n", host, "link", "del", link.name], what=f"remove stale {link.name} in {host}")
            if in_switch:
                run(["ip", "-n", SWITCH_NS, "link", "del", port], what=f"remove stale {port} in {SWITCH_NS}")
            run(["ip", "-n", SWITCH_NS, "link", "add", port, "type", "veth", "peer", "name", link.name, "netns",
                 host], what=f"create veth {port} <-> {host}:{link.name}")
        run(["ip", "-n", SWITCH_NS, "link", "set", port, "master", BRIDGES[link.name], "up"],
            what=f"plug {port} into {BRIDGES[link.name]}")
        want_mtu = str(mtu if (mtu is not None and link is FABRIC) else 1500)
        run(["ip", "-n", SWITCH_NS, "link", "set", port, "mtu", want_mtu], what=f"set the MTU of {port}")
        run(["ip", "-n", host, "link", "set", link.name, "mtu", want_mtu], what=f"set the MTU of {link.name}")
        have = [f"{i.get('local')}/{i.get('prefixlen')}"
                for a in json_out(["ip", "-n", host, "-j", "addr", "show", "dev", link.name], "read addresses")
                for i in a.get("addr_info") or [] if i.get("family") == "inet"]
        if have != [link.addr(host)]:
            run(["ip", "-n", host, "addr", "flush", "dev", link.name, "scope", "global"],
                what=f"clear old addresses of {link.name} in {host}")
            run(["ip", "-n", host, "addr", "add", link.addr(host), "dev", link.name], what=f"address {link.name}")
        run(["ip", "-n", host, "link", "set", link.name, "up"], what=f"bring {link.name} up in {host}")
    # The head is reachable from every host over mgmt0 (its connected route covers 10.202.0.254).


def _head_up() -> None:
    if not (link_exists(None, HEAD_DEV) and link_exists(SWITCH_NS, HEAD_PEER)):
        if link_exists(None, HEAD_DEV):
            run(["ip", "link", "del", HEAD_DEV], what=f"remove stale {HEAD_DEV}")
        if link_exists(SWITCH_NS, HEAD_PEER):
            run(["ip", "-n", SWITCH_NS, "link", "del", HEAD_PEER], what=f"remove stale {HEAD_PEER}")
        run(["ip", "link", "add", HEAD_DEV, "type", "veth", "peer", "name", HEAD_PEER, "netns", SWITCH_NS],
            what=f"create the head's link {HEAD_DEV} to the mgmt switch")
    run(["ip", "-n", SWITCH_NS, "link", "set", HEAD_PEER, "master", BRIDGES[MGMT.name], "up"],
        what=f"plug {HEAD_PEER} into {BRIDGES[MGMT.name]}")
    run(["ip", "addr", "replace", f"{HEAD_IP}/24", "dev", HEAD_DEV], what=f"address {HEAD_DEV}")
    run(["ip", "link", "set", HEAD_DEV, "up"], what=f"bring {HEAD_DEV} up")


# --------------------------------------------------------------------------
# pair shaping
# --------------------------------------------------------------------------


def shape_pair(a: str, b: str, rate: str | None, both_ways: bool = True) -> dict[str, dict[str, str]]:
    """Make the fabric between hosts ``a`` and ``b`` run at ``rate`` (an htb class for that
    destination on ``a``, and on ``b`` towards ``a`` unless ``both_ways`` is False); None removes
    it. The hosts' other traffic keeps their own rate. Returns {host: {dest: rate}} now in force;
    ``up`` clears them."""
    with session(timeout_s=120):
        require_tools("tc")
        require_root()
        names = hosts_up()
        rates: dict[str, str | None] = {}
        for h in names:
            q = shaping.root_qdisc(h)
            bits = q.get("rate_bit_per_s") if q else None
            rates[h] = f"{int(bits)}bit" if isinstance(bits, float) and bits < 1e11 else None
        return shaping.shape_pair(launch.RUN_DIR, a, b, rate, rates, {h: fabric_ip(h) for h in names}, both_ways)


# --------------------------------------------------------------------------
# down / status
# --------------------------------------------------------------------------


def down() -> dict[str, Any]:
    """Remove everything ``up`` made: the hosts' and the switch's namespaces (their veths and
    bridges go with them), fs-head, the hosts files and the run directory. Absent is fine.
    ``removed`` lists the host namespaces; ``also_removed`` the rest; ``lingering`` processes
    still running inside a host (they keep its namespace alive, without links)."""
    with session(timeout_s=120):
        return _down()


def _down() -> dict[str, Any]:
    require_tools("ip")
    removed: list[str] = []
    also: list[str] = []
    lingering: dict[str, list[int]] = {}
    for ns in ALL_HOSTS:
        if ns_exists(ns):
            require_root()
            pids = run(["ip", "netns", "pids", ns], what=f"list processes in {ns}", check=False).stdout.split()
            if pids:
                lingering[ns] = [int(p) for p in pids if p.isdigit()]
            run(["ip", "netns", "del", ns], what=f"delete network namespace {ns}")
            removed.append(ns)
        also += launch.remove_host_files(ns)
    if ns_exists(SWITCH_NS):
        require_root()
        run(["ip", "netns", "del", SWITCH_NS], what=f"delete the switch namespace {SWITCH_NS}")
        also.append(SWITCH_NS)
    # Its peer went with the switch namespace, which takes the pair down; a leftover is removed.
    # (The kernel tears the pair down asynchronously: a "Cannot find device" here is that.)
    if link_exists(None, HEAD_DEV):
        gone = run(["ip", "link", "del", HEAD_DEV], what=f"remove {HEAD_DEV}", check=False)
        if gone.returncode != 0 and link_exists(None, HEAD_DEV):
            raise TestbedError(f"remove {HEAD_DEV} failed: {gone.stderr.strip()}")
        also.append(HEAD_DEV)
    also += launch.remove_run_dir()
    also += launch.remove_head_hosts()
    return {"removed": removed, "also_removed": also, "lingering": lingering, "up": False}


def hosts_up() -> list[str]:
    """The testbed hosts whose namespaces exist now, in order (fs-a, fs-b, ...)."""
    return [h for h in ALL_HOSTS if ns_exists(h)]


def status() -> dict[str, Any]:
    """What exists now: per host its links (state, MTU, addresses) and shaping, the switch, the
    head, and ``up``: every host up to the last one present is complete."""
    require_tools("ip")
    present = hosts_up()
    n = max(DEFAULT_HOSTS, host_index(present[-1]) + 1) if present else DEFAULT_HOSTS
    pairs = shaping.read_pairs(launch.RUN_DIR)
    result: dict[str, Any] = {"namespaces": {}, "up": True, "hosts": list(ALL_HOSTS[:n])}
    for ns in ALL_HOSTS[:n]:
        entry = _host_status(ns)
        if entry is None or not entry.pop("complete"):
            result["up"] = False
        if entry is not None and ns in pairs:
            entry["pair_shapes"] = pairs[ns]
        result["namespaces"][ns] = entry
    result["switch"] = {"namespace": SWITCH_NS, "present": ns_exists(SWITCH_NS),
                        "bridges": {lk: br for lk, br in BRIDGES.items()}}
    head = _json_out_or_empty(["ip", "-j", "addr", "show", "dev", HEAD_DEV]) if link_exists(None, HEAD_DEV) else []
    head_addrs = [f"{i.get('local')}/{i.get('prefixlen')}" for h in head for i in h.get("addr_info") or []
                  if i.get("family") == "inet"]
    result["head"] = {"device": HEAD_DEV, "addresses": head_addrs}
    if not result["switch"]["present"] or f"{HEAD_IP}/24" not in head_addrs:
        result["up"] = False
    if result["up"]:
        result["launcher_env"] = launch.launcher_env()
    return result


def _json_out_or_empty(args: Sequence[str]) -> list[dict[str, Any]]:
    try:
        return json_out(args, "read addresses")
    except (TestbedError, ValueError):
        return []


def _host_status(ns: str) -> dict[str, Any] | None:
    if not ns_exists(ns):
        return None
    entry: dict[str, Any] = {"links": {}, "complete": True}
    by_name = {a.get("ifname"): a for a in json_out(["ip", "-n", ns, "-j", "addr", "show"], f"read addresses in {ns}")}
    for dev in ("lo",) + tuple(lk.name for lk in LINKS):
        a = by_name.get(dev)
        if a is None:
            entry["links"][dev] = None
            entry["complete"] = False
            continue
        up_flag = "UP" in (a.get("flags") or [])
        entry["links"][dev] = {
            "up": up_flag,
            "mtu": a.get("mtu"),
            "addresses": [f"{i.get('local')}/{i.get('prefixlen')}" for i in a.get("addr_info") or []
                          if i.get("family") == "inet"],
        }
        if not up_flag:
            entry["complete"] = False
    for lk in LINKS:
        got = entry["links"].get(lk.name)
        if got is not None and lk.addr(ns) not in got["addresses"]:
            entry["complete"] = False
    have_tc = shutil.which("tc") is not None
    entry["shape"] = shaping.root_qdisc(ns) if have_tc else None
    port = _port(ns, FABRIC)
    entry["switch_port_shape"] = shaping.root_qdisc(SWITCH_NS, port) if have_tc and link_exists(SWITCH_NS, port) else None
    return entry


def ns_exec_argv(ns: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` on testbed host ``ns``: inside its network namespace (with its
    own /sys and /etc/hosts) and a UTS namespace whose host name is ``ns``. The process started is
    the command itself (every wrapper execs), so its pid is the one to signal."""
    host_index(ns)
    if not argv:
        raise TestbedError("nothing to run: give a command after `--`, e.g. `exec fs-a -- ip addr`")
    return launch.exec_argv(ns, argv)


def launcher_env() -> dict[str, str]:
    """The environment for mpirun/mpiexec to start ranks on the hosts (netns_launch.launcher_env)."""
    return launch.launcher_env()


def snapshot_ns(ns: str) -> dict[str, Any]:
    """Counters of every device in ``ns`` (``fabscope.testbed.sysfs_counters.snapshot`` run inside it).

    Runs a fresh interpreter under ``ip netns exec`` because only there is /sys remounted for the
    namespace; reading /sys from here would show this process's own namespace.
    """
    python_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = "import json; from fabscope.testbed.sysfs_counters import snapshot; print(json.dumps(snapshot()))"
    env = dict(os.environ, PYTHONPATH=python_dir)
    argv = ns_exec_argv(ns, [sys.executable, "-c", code])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, env=env)
    if proc.returncode != 0:
        raise TestbedError(f"reading counters in {ns} failed: {proc.stderr.strip()}")
    data = json.loads(proc.stdout)
    if not isinstance(data, dict):
        raise TestbedError(f"reading counters in {ns} gave {proc.stdout[:80]!r}, not an object")
    return data


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------


def _shape_text(shape: dict[str, Any] | None) -> str:
    if not shape:
        return "unshaped"
    rate = shape.get("rate_bit_per_s")
    return f"{shape['kind']} {rate / 1e6:.1f} Mbit/s" if isinstance(rate, (int, float)) else str(shape["kind"])


def _render_status(st: dict[str, Any]) -> str:
    lines = [f"netns testbed: {'up' if st.get('up') else 'not (fully) up'}"]
    for ns, entry in st["namespaces"].items():
        if entry is None:
            lines.append(f"  {ns}: absent")
            continue
        extra = ""
        if entry.get("switch_port_shape"):
            extra += f"; towards it {_shape_text(entry['switch_port_shape'])}"
        for dest, rate in (entry.get("pair_shapes") or {}).items():
            extra += f"; to {dest} {rate}"
        lines.append(f"  {ns}: fabric0 {_shape_text(entry.get('shape'))}{extra}")
        for name, link in entry["links"].items():
            if link is None:
                lines.append(f"    {name:8} missing")
            else:
                state = "up" if link["up"] else "DOWN"
                lines.append(f"    {name:8} {state:4} mtu {link['mtu']} {' '.join(link['addresses'])}")
    head = st.get("head") or {}
    if st.get("up"):
        lines.append(f"  head (this machine): {HEAD_DEV} {' '.join(head.get('addresses') or [])}; "
                     f"launchers: eval \"$(fabscope testbed netns env)\"")
    return "\n".join(lines)


def _host_value_pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        host, sep, value = item.partition("=")
        if not sep or not host or not value:
            raise TestbedError(f"{flag} {item!r}: expected HOST=VALUE, e.g. {flag} fs-c=250mbit")
        out[host] = value
    return out


class _Parser(argtypes.ArgumentParser):
    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _rate_arg(value: str) -> str:
    """argparse type for --shape: a tc rate (a usage error, exit 2, when it is not one)."""
    try:
        if not value.isprintable():
            raise TestbedError(f"{argtypes.shown(value)} contains control characters")
        return shaping.validate_rate(value, "")
    except TestbedError as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from None


def _host_arg(value: str) -> str:
    """argparse type for a testbed host name (fs-a ... fs-p)."""
    try:
        host_index(value)
    except TestbedError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace(repr(value), argtypes.shown(value))) from None
    return value


def _host_value_arg(value_name: str, example: str, check_value: Callable[[str], object]) -> Callable[[str], str]:
    """argparse type for HOST=<value_name> (kept as text: _host_value_pairs splits it); check_value
    rejects a bad value the way argparse expects (ArgumentTypeError)."""

    def parse(value: str) -> str:
        host, sep, rest = value.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{argtypes.shown(value)} is not HOST={value_name}, e.g. {example}")
        _host_arg(host)
        check_value(rest)
        return value

    return parse


_host_rate_arg = _host_value_arg("RATE", "fs-c=250mbit", _rate_arg)  # --shape-host
_host_mtu_arg = _host_value_arg("BYTES", "fs-c=9000", argtypes.int_range(68, 65535))  # --mtu-host


def _pair_rate_arg(value: str) -> str:
    return value if value == "none" else _rate_arg(value)


def main(argv: Sequence[str] | None = None, parse_only: bool = False) -> int:
    """Exit codes: 0 ok; 1 a step failed (message on stderr); 2 usage; 3 status: not up.

    ``exec`` returns the command's own exit code. parse_only: check the arguments, do nothing.
    """
    args_in = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(args_in)
    if parse_only:
        return 0
    return _execute(args)


def parser() -> argparse.ArgumentParser:
    """`fabscope testbed netns` on its own (``python -m fabscope.testbed.netns``)."""
    parser = _Parser(prog="fabscope testbed netns")
    fill_parser(parser)
    return parser


def fill_parser(parser: argparse.ArgumentParser) -> None:
    """`fabscope testbed netns`'s arguments, on the parser the CLI's tree gives it (also the source
    of its man page and shell completion)."""
    parser.description = "N network namespaces (fs-a, fs-b, ...) on a fabric switch and a management switch."
    parser.set_defaults(func=_execute)
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    p_up = sub.add_parser("up", help="create (or repair) the testbed")
    p_up.add_argument("--hosts", type=argtypes.int_range(2, MAX_HOSTS), default=DEFAULT_HOSTS, metavar="N",
                      help=f"number of hosts, 2..{MAX_HOSTS} (default 2: fs-a, fs-b)")
    p_up.add_argument("--shape", metavar="RATE", type=_rate_arg,
                      help="limit every host's fabric0 with tc tbf, e.g. 1gbit, 100mbit")
    p_up.add_argument("--shape-host", action="append", metavar="HOST=RATE", type=_host_rate_arg,
                      help="one host's fabric link at its own rate, both directions (repeatable)")
    p_up.add_argument("--mtu", type=argtypes.int_range(68, 65535), metavar="BYTES",
                      help="fabric0's MTU on every host (default 1500)")
    p_up.add_argument("--mtu-host", action="append", metavar="HOST=BYTES", type=_host_mtu_arg,
                      help="one host's fabric0 MTU (repeatable)")
    p_up.add_argument("--json", action="store_true", help="print the resulting status as JSON")
    p_pair = sub.add_parser("shape-pair", help="limit the fabric between two hosts: shape-pair fs-a fs-b 100mbit")
    p_pair.add_argument("a", type=_host_arg)
    p_pair.add_argument("b", type=_host_arg)
    p_pair.add_argument("rate", type=_pair_rate_arg, help="a tc rate, or `none` to remove this pair's shaping")
    p_pair.add_argument("--one-way", action="store_true", help="only a -> b (default: both directions)")
    sub.add_parser("down", help="remove the testbed (fine when absent)")
    p_st = sub.add_parser("status", help="show what exists; exit code 3 when not up")
    p_st.add_argument("--json", action="store_true")
    p_env = sub.add_parser("env", help="print the environment for mpirun/mpiexec -H fs-a,fs-b (eval it)")
    p_env.add_argument("--json", action="store_true")
    p_ex = sub.add_parser("exec", help="run a command on a host: exec fs-a -- CMD ...")
    p_ex.add_argument("ns", metavar="HOST", type=_host_arg)
    p_ex.add_argument("command", nargs=argparse.REMAINDER)


def _execute(args: argparse.Namespace) -> int:
    try:
        if args.cmd == "up":
            mtu_hosts = {h: _int(v, "--mtu-host") for h, v in _host_value_pairs(args.mtu_host, "--mtu-host").items()}
            st = up(args.shape, args.hosts, shape_hosts=_host_value_pairs(args.shape_host, "--shape-host"),
                    mtu=args.mtu, mtu_hosts=mtu_hosts)
            print(json.dumps(st, indent=2) if args.json else _render_status(st))
            return 0
        if args.cmd == "shape-pair":
            rate = None if args.rate == "none" else args.rate
            pairs = shape_pair(args.a, args.b, rate, both_ways=not args.one_way)
            shown = [f"{h} -> {d}: {r}" for h, ds in sorted(pairs.items()) for d, r in sorted(ds.items())]
            print("pair shaping: " + ("; ".join(shown) if shown else "none"))
            return 0
        if args.cmd == "down":
            res = down()
            print("removed " + ", ".join(res["removed"]) if res["removed"] else "netns testbed was not up")
            for ns, pids in res["lingering"].items():
                print(f"warning: processes {', '.join(map(str, pids))} still ran in {ns}; they keep its "
                      f"namespace alive (without links) until they end", file=sys.stderr)
            return 0
        if args.cmd == "status":
            st = status()
            print(json.dumps(st, indent=2) if args.json else _render_status(st))
            return 0 if st["up"] else 3
        if args.cmd == "env":
            st = status()
            if not st["up"]:
                raise TestbedError("the netns testbed is not up; start it with `fabscope testbed netns up --hosts N`")
            env = launcher_env()
            print(json.dumps(env, indent=2) if args.json else launch.render_env(env), end="" if not args.json else "\n")
            return 0
        # exec
        command = list(args.command)
        if command and command[0] == "--":
            command = command[1:]
        require_tools("ip")
        require_root()
        if not ns_exists(args.ns):
            host_index(args.ns)
            raise TestbedError(f"host {args.ns} is not up (hosts up: {', '.join(hosts_up()) or 'none'})")
        argv_ns = ns_exec_argv(args.ns, command)
        sys.stdout.flush()
        return subprocess.run(argv_ns, check=False).returncode
    except TestbedError as exc:
        print(f"fabscope testbed netns: error: {exc}", file=sys.stderr)
        return 1


def _int(value: str, flag: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise TestbedError(f"{flag}: {value!r} is not a number of bytes") from None


if __name__ == "__main__":
    sys.exit(main())
