# SPDX-License-Identifier: BSD-3-Clause
"""`run --capture FILE.pcap`: tcpdump on the netdev the run's bytes take, started before the engine
and ready before it measures (a missing privilege is a clear error first), bounded by a snap length
and a packet cap; the decoded summary is added when it stops (summary.py)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import hostport
from ..errors import EXIT_MEASURE, EXIT_USAGE, FabscopeError

SCHEMA = "fabscope.capture/1"


DEFAULT_SNAPLEN = 128  # Ethernet + IP + UDP + BTH + RETH/AETH/DETH, and no payload to speak of


# A connection manager MAD whole (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + DETH 8 + MAD 256 + ICRC 4,
# IPv6 20 more): Wireshark decodes a MAD only when all 256 bytes of it were captured.
CM_SNAPLEN = 352


DEFAULT_MAX_PACKETS = 200_000


_READY_S = 10.0


_STOP_S = 10.0


_SETTLE_S = 60.0


_QUIET_S = 2.0


ROCE_V2_PORT = 4791


_RDMA_BACKENDS = {"verbs", "rsocket"}


def netdev_for(device: str | None, sysfs: str = "/sys") -> str | None:
    """The netdev to capture on for --device: an RDMA device's (its port's ndevs), or the netdev itself."""
    if not device:
        return None
    if Path(sysfs, "class", "net", device).exists():
        return device
    base = Path(sysfs, "class", "infiniband", device, "ports")
    for port in sorted(base.glob("*")) if base.is_dir() else []:
        for nd in sorted((port / "gid_attrs" / "ndevs").glob("*")):
            try:
                name = nd.read_text().strip()
            except OSError:
                continue
            if name:
                return name
    return None


def default_snaplen(backend: str, preload: bool, cm: bool) -> int:
    """The snap length when --capture-snaplen is not given: the headers, or whole CM MADs where the
    connection is made through rdma_cm (rsocket and its preload, verbs --cm)."""
    return CM_SNAPLEN if backend == "rsocket" or preload or (backend == "verbs" and cm) else DEFAULT_SNAPLEN


def capture_filter(backend: str, preload: bool) -> str:
    """RDMA traffic is RoCE v2 (UDP 4791); the socket backends' connections are TCP."""
    return f"udp port {ROCE_V2_PORT}" if backend in _RDMA_BACKENDS or preload else "tcp"


@dataclass
class Capture:
    """A running tcpdump; ``stop()`` ends it and returns its counts."""

    path: Path
    netdev: str
    proc: subprocess.Popen[str]
    snaplen: int
    max_packets: int
    bpf: str
    counters_before: dict[str, Any] | None = None

    @staticmethod
    def start(path: Path, netdev: str, bpf: str, snaplen: int = DEFAULT_SNAPLEN,
              max_packets: int = DEFAULT_MAX_PACKETS) -> Capture:
        tcpdump = shutil.which("tcpdump") or next(
            (p for p in ("/usr/sbin/tcpdump", "/usr/bin/tcpdump") if os.access(p, os.X_OK)), None)
        if tcpdump is None:
            raise FabscopeError("--capture needs tcpdump, which is not installed here (Debian: apt-get install "
                                "tcpdump)", EXIT_USAGE)
        argv = [tcpdump, "-i", netdev, "-s", str(snaplen), "-c", str(max_packets), "-w", str(path), "-U",
                "-n", "--immediate-mode", *(["-Z", "root"] if os.geteuid() == 0 else []), bpf]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        assert proc.stderr is not None
        deadline = time.monotonic() + _READY_S
        said: list[str] = []
        from ..launch.runner import read_line_within

        while True:
            line = read_line_within(proc.stderr, deadline)
            if line is None:
                _stop(proc)
                raise FabscopeError(f"--capture: tcpdump on {netdev} did not start listening within {_READY_S:.0f} s",
                                    EXIT_MEASURE)
            if not line:  # tcpdump ended: it says why on stderr
                proc.wait()
                why = " ".join(s.strip() for s in said) or f"exit status {proc.returncode}"
                fix = ""
                if "permission" in why.lower() or "not permitted" in why.lower():
                    fix = (" (capturing needs CAP_NET_RAW: run as root, or grant it to tcpdump: "
                           "`setcap cap_net_raw,cap_net_admin+eip $(command -v tcpdump)`)")
                raise FabscopeError(f"--capture {path}: tcpdump cannot capture on {netdev}: {why}{fix}; "
                                    "nothing was measured", EXIT_USAGE)
            said.append(line)
            if line.startswith("listening on") or "listening on" in line:
                break
        return Capture(path, netdev, proc, snaplen, max_packets, bpf, _port_counters(netdev))

    def stop(self) -> dict[str, Any]:
        """SIGINT (tcpdump flushes and prints its counts), and the counts. First tcpdump catches up:
        on a busy host it can be seconds behind the packets the kernel gave it, and SIGINT drops
        what it has not written yet (counted in "received by filter" but not "captured")."""
        self._settle()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=_STOP_S)
        except subprocess.TimeoutExpired:
            _stop(self.proc)
            _, err = self.proc.communicate()
        counts = {key: int(n) for n, key in re.findall(r"(\d+) packets? (captured|received by filter|dropped by "
                                                        r"kernel)", err or "")}
        return {
            "file": str(self.path), "netdev": self.netdev, "filter": self.bpf, "snaplen": self.snaplen,
            "max_packets": self.max_packets, "captured": counts.get("captured"),
            "received_by_filter": counts.get("received by filter"), "dropped": counts.get("dropped by kernel"),
            "truncated_at_cap": counts.get("captured") == self.max_packets,
            # handed to tcpdump but not written when it stopped (it had not caught up): missing from the file
            "not_written": max((counts.get("received by filter") or 0) - (counts.get("captured") or 0), 0)
            if counts.get("captured") != self.max_packets else 0,
            "device_counters": _counter_window(self.counters_before, _port_counters(self.netdev)),
        }


    def _settle(self) -> None:
        """Waits (up to _SETTLE_S) until the file has not grown for _QUIET_S: with -U tcpdump writes
        each packet as it handles it, and after the run no new packets come."""
        deadline = time.monotonic() + _SETTLE_S
        size, since = -1, time.monotonic()
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                now_size = self.path.stat().st_size
            except OSError:
                return
            if now_size != size:
                size, since = now_size, time.monotonic()
            elif time.monotonic() - since >= _QUIET_S:
                return
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()



def route_netdev(host: str) -> str | None:
    """The netdev the kernel routes ``host`` through (`ip -j route get`)."""
    import json
    import socket

    try:
        addr = socket.getaddrinfo(host, None)[0][4][0]
        out = subprocess.run(["ip", "-j", "route", "get", str(addr)], capture_output=True, text=True, timeout=10,
                             check=False)
        routes = json.loads(out.stdout or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired, IndexError):
        return None
    dev = routes[0].get("dev") if routes and isinstance(routes[0], dict) else None
    return str(dev) if dev else None


def choose_netdev(device: str | None, peer: str | None, loopback: bool) -> str:
    nd = netdev_for(device)
    if nd:
        return nd
    if device:
        raise FabscopeError(f"--capture with --device {device}: no netdev of that name, and no RDMA device with a "
                            "netdev, to capture on", EXIT_USAGE)
    if loopback:
        return "lo"
    host = hostport.host_of(peer)
    nd = route_netdev(host) if host else None
    if not nd:
        raise FabscopeError(f"--capture: cannot tell which netdev reaches {host}; name the device with --device",
                            EXIT_USAGE)
    return nd


def args_device(args: Sequence[str]) -> str | None:
    for a in args:
        if a.startswith("--device="):
            return a.split("=", 1)[1]
    return None


def _port_counters(netdev: str) -> dict[str, Any] | None:
    """The hw_counters of the RDMA port behind ``netdev`` (the engine's --counters-json: the engine
    is the one counter reader), or None where it has none (a plain netdev, loopback)."""
    import json

    from ..launch.engine import engine_path

    try:
        out = subprocess.run([str(engine_path()), "--counters-json"], capture_output=True, text=True, timeout=30,
                             check=False)
        snap = json.loads(out.stdout) if out.returncode == 0 else {}
    except (FabscopeError, OSError, ValueError, subprocess.TimeoutExpired):
        return None
    for port in snap.get("rdma") or []:
        if isinstance(port, dict) and netdev in (port.get("ndevs") or []):
            hw = port.get("hw_counters")
            values = {k: v for k, v in (hw.items() if isinstance(hw, dict) else []) if isinstance(v, int)}
            return {"port": f"{port.get('device')}/{port.get('port')}", "values": values}
    return None


def _counter_window(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What the port's loss and retransmission counters (rxe, mlx5) did while the capture ran."""
    if not before or not after or before.get("port") != after.get("port"):
        return None
    from ..results.explain import RDMA_LOSS_COUNTERS

    b, a = before["values"], after["values"]
    keys = [k for k in (*RDMA_LOSS_COUNTERS, "sent_pkts", "rcvd_pkts") if k in a and k in b]
    return {"port": after["port"], "delta": {k: a[k] - b[k] for k in keys}}
