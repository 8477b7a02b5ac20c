"""Two "hosts" on one machine: network namespaces fs-a and fs-b, two veth links.

    fs-a                                fs-b
    fabric0 10.201.0.1/24 <---veth---> fabric0 10.201.0.2/24   (optionally tbf-shaped)
    mgmt0   10.202.0.1/24 <---veth---> mgmt0   10.202.0.2/24

Why two links: the byte counters of each link tell which one carried a run,
so the path verdict can be tested by sending over the "wrong" link on purpose
(bind to 10.201.0.1 and connect to 10.202.0.2: the kernel routes over mgmt0
with fabric0's source address).  Why tbf: it gives a known rate to measure
bandwidth accuracy against (netem is not available in the build kernel).

Usage::

    python -m fabscope.testbed.netns up [--shape 1gbit]
    python -m fabscope.testbed.netns status [--json]
    python -m fabscope.testbed.netns exec fs-a -- iperf3 -s
    python -m fabscope.testbed.netns down

Everything happens inside the two namespaces; no address or device of the
machine's own namespace is touched.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

NS_A = "fs-a"
NS_B = "fs-b"
NAMESPACES = (NS_A, NS_B)


@dataclass(frozen=True)
class Link:
    name: str  # the same device name on both ends
    addr_a: str  # with prefix, in fs-a
    addr_b: str  # with prefix, in fs-b

    @property
    def ip_a(self) -> str:
        return self.addr_a.split("/", 1)[0]

    @property
    def ip_b(self) -> str:
        return self.addr_b.split("/", 1)[0]


FABRIC = Link("fabric0", "10.201.0.1/24", "10.201.0.2/24")
MGMT = Link("mgmt0", "10.202.0.1/24", "10.202.0.2/24")
LINKS = (FABRIC, MGMT)

# tbf parameters: burst 256kb is enough for 1gbit at the kernel's timer
# granularity; latency 50ms bounds the queue so TCP does not bufferbloat.
TBF_BURST = "256kb"
TBF_LATENCY = "50ms"
_RATE_RE = re.compile(r"^[0-9]+(\.[0-9]+)?([kmgt]i?)?(bit|bps)$", re.IGNORECASE)


class TestbedError(RuntimeError):
    """A testbed step failed; the message says what, why, and how to fix it."""


# --------------------------------------------------------------------------
# running commands
# --------------------------------------------------------------------------


def _require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise TestbedError(
            f"the netns testbed needs {', '.join(missing)} (iproute2) but it is not on PATH; "
            "install it with `make setup` (or `apt-get install iproute2`)"
        )


def _require_root() -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            "creating network namespaces, veth links and qdiscs needs root "
            f"(CAP_NET_ADMIN); this process runs as uid {os.geteuid()}. "
            "Run it as root, e.g. `sudo fabscope testbed netns up`"
        )


def _run(
    args: Sequence[str], *, what: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        list(args), capture_output=True, text=True, timeout=30, check=False
    )
    if check and proc.returncode != 0:
        err = (proc.stderr or proc.stdout).strip() or f"exit code {proc.returncode}"
        raise TestbedError(f"{what} failed: `{' '.join(args)}` said: {err}")
    return proc


def _ns_exists(ns: str) -> bool:
    return os.path.exists(f"/run/netns/{ns}")


def _link_exists(ns: str, dev: str) -> bool:
    if not _ns_exists(ns):
        return False
    proc = _run(
        ["ip", "-n", ns, "link", "show", "dev", dev], what="look up a link", check=False
    )
    return proc.returncode == 0


def _json_out(args: Sequence[str], what: str) -> list[dict[str, Any]]:
    out = _run(args, what=what).stdout.strip()
    data = json.loads(out) if out else []
    return data if isinstance(data, list) else []


# --------------------------------------------------------------------------
# one user at a time
# --------------------------------------------------------------------------

# fs-a and fs-b are machine-wide names, and several people (or test runs)
# share a build machine: a `down` from one of them in the middle of another's
# measurement silently turns a shaped 1gbit link into an unshaped one.  So
# up/down take an exclusive lock, and a test run holds it for its whole
# duration with `session()`.
LOCK_PATH = "/run/lock/fabscope-netns.lock"
_lock_depth = 0
_lock_fd: int | None = None


@contextlib.contextmanager
def session(timeout_s: float = 600.0) -> Iterator[None]:
    """Hold the testbed: other fabscope processes' up/down wait until this ends.

    Re-entrant within a process.  Raises TestbedError naming the holder's pid
    when the lock is not free within ``timeout_s``.
    """
    global _lock_depth, _lock_fd
    if _lock_depth:
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
        return
    path = (
        LOCK_PATH
        if os.path.isdir(os.path.dirname(LOCK_PATH))
        else "/tmp/fabscope-netns.lock"
    )
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
                holder = (
                    os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                )
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
# up / down / status
# --------------------------------------------------------------------------


def _validate_rate(shape: str) -> str:
    if not _RATE_RE.match(shape):
        raise TestbedError(
            f"--shape {shape!r} is not a tc rate; use a number with a unit such as "
            "100mbit, 1gbit, 2.5gbit (tc units: bit, kbit, mbit, gbit, or bps for bytes/s)"
        )
    return shape


def _set_shape(shape: str | None) -> None:
    for ns in NAMESPACES:
        if shape is None:
            if _current_shape(ns) is not None:
                _run(
                    ["tc", "-n", ns, "qdisc", "del", "dev", FABRIC.name, "root"],
                    what=f"remove shaping from {FABRIC.name} in {ns}",
                )
            continue
        # `replace` makes `up --shape` idempotent and lets a second `up`
        # change the rate without tearing the links down.
        _run(
            [
                "tc", "-n", ns, "qdisc", "replace", "dev", FABRIC.name, "root",
                "tbf", "rate", shape, "burst", TBF_BURST, "latency", TBF_LATENCY,
            ],
            what=f"shape {FABRIC.name} in {ns} to {shape} with tbf",
        )  # fmt: skip


def _rate_bits(rate: object) -> float | None:
    # `tc -j` reports tbf rates in bytes per second.
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        return float(rate) * 8
    return None


def _current_shape(ns: str) -> dict[str, Any] | None:
    qdiscs = _json_out(
        ["tc", "-n", ns, "-j", "qdisc", "show", "dev", FABRIC.name], "read qdiscs"
    )
    for q in qdiscs:
        if q.get("kind") == "tbf" and q.get("root"):
            raw = q.get("options")
            opts: dict[str, Any] = raw if isinstance(raw, dict) else {}
            return {
                "kind": "tbf",
                "rate_bit_per_s": _rate_bits(opts.get("rate")),
                "burst": opts.get("burst"),
            }
    return None


def up(shape: str | None = None) -> dict[str, Any]:
    """Build (or repair) the testbed; with ``shape`` limit fabric0 both ways with tbf."""
    with session(timeout_s=120):
        return _up(shape)


def _up(shape: str | None) -> dict[str, Any]:
    _require_tools("ip")
    if shape is not None:
        _validate_rate(shape)
        _require_tools("tc")
    _require_root()
    for ns in NAMESPACES:
        if not _ns_exists(ns):
            _run(["ip", "netns", "add", ns], what=f"create network namespace {ns}")
        _run(["ip", "-n", ns, "link", "set", "lo", "up"], what=f"bring lo up in {ns}")
        # Loose reverse-path filtering: the deliberate misroute (source
        # 10.201.0.1 arriving on mgmt0) must be delivered, not dropped, even on
        # systems whose new namespaces inherit strict rp_filter.
        _run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "sh",
                "-c",
                "echo 2 > /proc/sys/net/ipv4/conf/all/rp_filter",
            ],
            what=f"set loose rp_filter in {ns}",
        )
    for link in LINKS:
        in_a, in_b = _link_exists(NS_A, link.name), _link_exists(NS_B, link.name)
        if in_a != in_b:
            # Half a veth pair cannot exist, so this is some other device with
            # our name (left by a crashed run): replace it with a clean pair.
            for ns, present in ((NS_A, in_a), (NS_B, in_b)):
                if present:
                    _run(
                        ["ip", "-n", ns, "link", "del", link.name],
                        what=f"remove stale {link.name} in {ns}",
                    )
        if not (in_a and in_b):
            _run(
                [
                    "ip",
                    "-n",
                    NS_A,
                    "link",
                    "add",
                    link.name,
                    "type",
                    "veth",
                    "peer",
                    "name",
                    link.name,
                    "netns",
                    NS_B,
                ],
                what=f"create veth link {link.name} between {NS_A} and {NS_B}",
            )
        for ns, addr in ((NS_A, link.addr_a), (NS_B, link.addr_b)):
            _run(
                ["ip", "-n", ns, "addr", "replace", addr, "dev", link.name],
                what=f"address {link.name} in {ns}",
            )
            _run(
                ["ip", "-n", ns, "link", "set", link.name, "up"],
                what=f"bring {link.name} up in {ns}",
            )
    # `up` is declarative: without --shape, shaping left by an earlier
    # `up --shape` is removed.
    if shape is not None:
        _set_shape(shape)
    elif shutil.which("tc") and any(_current_shape(ns) for ns in NAMESPACES):
        _set_shape(None)
    return status()


def down() -> dict[str, Any]:
    """Remove both namespaces (their veths go with them); absent is fine."""
    with session(timeout_s=120):
        return _down()


def _down() -> dict[str, Any]:
    _require_tools("ip")
    removed = []
    for ns in NAMESPACES:
        if _ns_exists(ns):
            _require_root()
            _run(["ip", "netns", "del", ns], what=f"delete network namespace {ns}")
            removed.append(ns)
    return {"removed": removed, "up": False}


def status() -> dict[str, Any]:
    """What exists now: namespaces, links with addresses and state, shaping."""
    _require_tools("ip")
    result: dict[str, Any] = {"namespaces": {}, "up": True}
    for ns in NAMESPACES:
        if not _ns_exists(ns):
            result["namespaces"][ns] = None
            result["up"] = False
            continue
        entry: dict[str, Any] = {"links": {}}
        addrs = _json_out(
            ["ip", "-n", ns, "-j", "addr", "show"], f"read addresses in {ns}"
        )
        by_name = {a.get("ifname"): a for a in addrs}
        for dev in ("lo",) + tuple(lk.name for lk in LINKS):
            a = by_name.get(dev)
            if a is None:
                entry["links"][dev] = None
                result["up"] = False
                continue
            up_flag = "UP" in (a.get("flags") or [])
            entry["links"][dev] = {
                "up": up_flag,
                "mtu": a.get("mtu"),
                "addresses": [
                    f"{i.get('local')}/{i.get('prefixlen')}"
                    for i in a.get("addr_info") or []
                    if i.get("family") == "inet"
                ],
            }
            if not up_flag:
                result["up"] = False
        for lk in LINKS:
            want = lk.addr_a if ns == NS_A else lk.addr_b
            got = entry["links"].get(lk.name)
            if got is not None and want not in got["addresses"]:
                result["up"] = False
        entry["shape"] = _current_shape(ns) if shutil.which("tc") else None
        result["namespaces"][ns] = entry
    return result


def ns_exec_argv(ns: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside namespace ``ns`` (with its own /sys)."""
    if ns not in NAMESPACES:
        raise TestbedError(
            f"namespace {ns!r} is not part of the testbed; use one of {', '.join(NAMESPACES)}"
        )
    if not argv:
        raise TestbedError(
            "nothing to run: give a command after `--`, e.g. `exec fs-a -- ip addr`"
        )
    return ["ip", "netns", "exec", ns, *argv]


def snapshot_ns(ns: str) -> dict[str, Any]:
    """Counters of every device in ``ns`` (``fabscope.path.snapshot`` run inside it).

    Runs a fresh interpreter under ``ip netns exec`` because only there is
    /sys remounted for the namespace; reading /sys from here would show this
    process's own namespace.
    """
    python_dir = os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    )
    code = (
        "import json; from fabscope.path import snapshot; print(json.dumps(snapshot()))"
    )
    env = dict(os.environ, PYTHONPATH=python_dir)
    argv = ns_exec_argv(ns, [sys.executable, "-c", code])
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=30, check=False, env=env
    )
    if proc.returncode != 0:
        raise TestbedError(f"reading counters in {ns} failed: {proc.stderr.strip()}")
    data = json.loads(proc.stdout)
    if not isinstance(data, dict):
        raise TestbedError(
            f"reading counters in {ns} gave {proc.stdout[:80]!r}, not an object"
        )
    return data


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------


def _render_status(st: dict[str, Any]) -> str:
    lines = [f"netns testbed: {'up' if st.get('up') else 'not (fully) up'}"]
    for ns, entry in st["namespaces"].items():
        if entry is None:
            lines.append(f"  {ns}: absent")
            continue
        shape = entry.get("shape")
        shape_txt = "unshaped"
        if shape:
            rate = shape.get("rate_bit_per_s")
            shape_txt = (
                f"tbf {rate / 1e6:.1f} Mbit/s"
                if isinstance(rate, (int, float))
                else "tbf"
            )
        lines.append(f"  {ns}: fabric0 {shape_txt}")
        for name, link in entry["links"].items():
            if link is None:
                lines.append(f"    {name:8} missing")
            else:
                state = "up" if link["up"] else "DOWN"
                lines.append(
                    f"    {name:8} {state:4} mtu {link['mtu']} {' '.join(link['addresses'])}"
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 ok; 1 a step failed (message on stderr); 2 usage; 3 status: not up.

    ``exec`` returns the command's own exit code.
    """
    args_in = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="fabscope testbed netns",
        description="Two network namespaces (fs-a, fs-b) joined by veth links fabric0 and mgmt0.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="create (or repair) the testbed")
    p_up.add_argument(
        "--shape",
        metavar="RATE",
        help="limit fabric0 both ways with tc tbf, e.g. 1gbit, 100mbit",
    )
    p_up.add_argument(
        "--json", action="store_true", help="print the resulting status as JSON"
    )
    sub.add_parser("down", help="remove the testbed (fine when absent)")
    p_st = sub.add_parser("status", help="show what exists; exit code 3 when not up")
    p_st.add_argument("--json", action="store_true")
    p_ex = sub.add_parser(
        "exec", help="run a command in a namespace: exec fs-a -- CMD ..."
    )
    p_ex.add_argument("ns", choices=NAMESPACES)
    p_ex.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(args_in)
    try:
        if args.cmd == "up":
            st = up(args.shape)
            print(json.dumps(st, indent=2) if args.json else _render_status(st))
            return 0
        if args.cmd == "down":
            res = down()
            print(
                "removed " + ", ".join(res["removed"])
                if res["removed"]
                else "netns testbed was not up"
            )
            return 0
        if args.cmd == "status":
            st = status()
            print(json.dumps(st, indent=2) if args.json else _render_status(st))
            return 0 if st["up"] else 3
        # exec
        command = list(args.command)
        if command and command[0] == "--":
            command = command[1:]
        _require_tools("ip")
        _require_root()
        argv_ns = ns_exec_argv(args.ns, command)
        sys.stdout.flush()
        return subprocess.run(argv_ns, check=False).returncode
    except TestbedError as exc:
        print(f"fabscope testbed netns: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
