"""`run --capture FILE.pcap`: the run's packets, taken by tcpdump on the device's netdev, and a
summary per InfiniBand BTH opcode decoded by tshark (Wireshark's maintained dissector; no packet
parsing here: tshark gives the fields, ``tshark -G values`` the opcode names).

tcpdump starts before the engine and must say it is listening, so a missing privilege
(CAP_NET_RAW) is a clear error before anything is measured; a snap length and a packet cap keep a
long run from filling the disk; the kernel's drop count comes back in the summary.
"""

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

from .errors import EXIT_MEASURE, EXIT_USAGE, FabscopeError

__all__ = ["Capture", "capture_filter", "netdev_for", "render_summary", "summarise"]

SCHEMA = "fabscope.capture/1"
DEFAULT_SNAPLEN = 128  # Ethernet + IP + UDP + BTH + RETH/AETH/DETH, and no payload to speak of
DEFAULT_MAX_PACKETS = 200_000
_READY_S = 10.0
_STOP_S = 10.0
ROCE_V2_PORT = 4791
_RDMA_BACKENDS = {"verbs", "rsocket"}
_FIELDS = ("infiniband.bth.opcode", "frame.len", "infiniband.bth.destqp", "infiniband.bth.psn",
           "infiniband.aeth.syndrome")


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
        from .runner import read_line_within

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
        return Capture(path, netdev, proc, snaplen, max_packets, bpf)

    def stop(self) -> dict[str, Any]:
        """SIGINT (tcpdump flushes and prints its counts), and the counts."""
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
        }


def _stop(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        raise FabscopeError("--capture: the summary is decoded with tshark, which is not installed here (Debian: "
                            "apt-get install tshark); the capture file was kept", EXIT_USAGE)
    return path


def _opcode_names(tshark: str) -> dict[int, str]:
    """Wireshark's own names of the BTH opcodes (``tshark -G values``)."""
    out = subprocess.run([tshark, "-G", "values"], capture_output=True, text=True, timeout=120, check=False)
    names: dict[int, str] = {}
    for line in out.stdout.splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0] == "V" and parts[1] == "infiniband.bth.opcode":
            try:
                names[int(parts[2], 0)] = parts[3]
            except ValueError:
                continue
    return names


def summarise(path: Path, timeout_s: float = 600.0) -> dict[str, Any]:
    """Packets and bytes per BTH opcode, PSN gaps and repeats per destination QP, NAK syndromes."""
    tshark = _tshark()
    argv = [tshark, "-r", str(path), "-n", "-Y", "infiniband.bth",  # RoCE v2 is dissected on UDP 4791 by default
            "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]
    for f in _FIELDS:
        argv += ["-e", f]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if out.returncode != 0:
        raise FabscopeError(f"--capture: tshark could not read {path}: {out.stderr.strip()[:300]}", EXIT_MEASURE)
    names = _opcode_names(tshark)
    per_opcode: dict[int, dict[str, int]] = {}
    last_psn: dict[str, int] = {}
    gaps = repeats = 0
    naks: dict[str, int] = {}
    for line in out.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) < len(_FIELDS) or not cols[0]:
            continue
        op, flen, qp, psn, syndrome = (c.strip() for c in cols[: len(_FIELDS)])
        code = int(op, 0)
        row = per_opcode.setdefault(code, {"packets": 0, "bytes": 0})
        row["packets"] += 1
        row["bytes"] += int(flen or 0)
        if syndrome and (int(syndrome, 0) >> 5) == 3:  # AETH syndrome 011xxxxx: NAK (IBTA 9.7.5.2.9)
            key = names.get(code, str(code)) + f" syndrome {syndrome}"
            naks[key] = naks.get(key, 0) + 1
        if not qp or not psn or _is_response(names.get(code, "")):
            continue
        p = int(psn, 0)
        prev = last_psn.get(qp)
        if prev is not None:
            step = (p - prev) % (1 << 24)
            if step == 0 or step > (1 << 23):
                repeats += 1
            elif step > 1:
                gaps += 1
        last_psn[qp] = p
    return {
        "schema": SCHEMA,
        "decoder": "tshark",
        "opcodes": [{"opcode": code, "name": names.get(code, f"opcode {code}"), **per_opcode[code]}
                    for code in sorted(per_opcode)],
        "psn_gaps": gaps,
        "psn_repeats": repeats,
        "naks": naks,
    }


def _is_response(name: str) -> bool:
    """ACKs and read responses carry the responder's PSNs, not the requester's sequence."""
    low = name.lower()
    return "acknowledge" in low or "response" in low


def count(summary: Mapping[str, Any], fragment: str) -> int:
    """Packets of the opcodes whose name contains ``fragment`` (e.g. "SEND Middle")."""
    rows = summary.get("opcodes")
    return sum(int(r.get("packets", 0)) for r in rows if fragment in str(r.get("name"))) if isinstance(rows, list) else 0


def render_summary(capture: Mapping[str, Any]) -> str:
    """The lines printed under the table."""
    lines = [f"# capture: {capture.get('file')} on {capture.get('netdev')} ({capture.get('filter')}, snaplen "
             f"{capture.get('snaplen')}, cap {capture.get('max_packets')} packets): {capture.get('captured')} captured, "
             f"{capture.get('dropped')} dropped by the kernel"
             + (" -- the packet cap was reached, later packets are missing" if capture.get("truncated_at_cap") else "")]
    summary = capture.get("summary")
    if isinstance(summary, Mapping):
        for row in summary.get("opcodes") or []:
            lines.append(f"#   {row['name']:<60} {row['packets']:>9} packets {row['bytes']:>12} bytes")
        lines.append(f"#   PSN gaps {summary.get('psn_gaps')}, repeated PSNs (retransmissions) "
                     f"{summary.get('psn_repeats')}" + (f", NAKs {summary['naks']}" if summary.get("naks") else ""))
    elif capture.get("summary_error"):
        lines.append(f"#   no summary: {capture['summary_error']}")
    return "\n".join(lines) + "\n"


def finish(cap: Capture) -> dict[str, Any]:
    """Stop the capture and decode it; a decoding problem is reported in the object, the file stays."""
    info = cap.stop()
    try:
        info["summary"] = summarise(cap.path)
    except FabscopeError as exc:
        info["summary_error"] = str(exc)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        info["summary_error"] = f"tshark: {exc}"
    info["schema"] = SCHEMA
    return info


def peer_host(peer: str | None) -> str | None:
    if not peer:
        return None
    return peer.rsplit(":", 1)[0].strip("[]") if peer.count(":") <= 1 or peer.startswith("[") else peer


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
    host = peer_host(peer)
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
