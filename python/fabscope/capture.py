# SPDX-License-Identifier: BSD-3-Clause
"""`run --capture FILE.pcap`: the run's packets, taken by tcpdump on the device's netdev, and a
summary per InfiniBand BTH opcode decoded by tshark (Wireshark's maintained dissector; no packet
parsing here: tshark gives the fields; the opcode names are its own, in capture_opcodes.py).

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

from . import hostport
from .capture_opcodes import BTH_OPCODE_NAMES
from .errors import EXIT_MEASURE, EXIT_USAGE, FabscopeError

__all__ = ["Capture", "capture_filter", "netdev_for", "render_summary", "summarise"]

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
# One tshark pass reads every field the summary needs, the connection manager's MAD fields included
# (tshark's start-up is most of its cost: seconds per call inside an emulated guest).
_FIELDS = ("infiniband.bth.opcode", "frame.len", "infiniband.bth.destqp", "infiniband.bth.psn",
           "infiniband.aeth.syndrome", "infiniband.mad.mgmtclass", "infiniband.mad.attributeid")


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


def _tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        raise FabscopeError("--capture: the summary is decoded with tshark, which is not installed here (Debian: "
                            "apt-get install tshark); the capture file was kept", EXIT_USAGE)
    return path


def summarise(path: Path, timeout_s: float = 600.0) -> dict[str, Any]:
    """Packets and bytes per BTH opcode, PSN gaps and repeats per destination QP, NAK syndromes;
    the RC request streams read as their responder reads them (``sequence``); where packets went
    to QP1 (the connection manager of rdma_cm: `--backend verbs --cm`, rsocket), its MADs (REQ,
    REP, RTU, ...) in the order they were sent (``cm``)."""
    tshark = _tshark()
    argv = [tshark, "-r", str(path), "-n", "-Y", "infiniband.bth",  # RoCE v2 is dissected on UDP 4791 by default
            "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]
    for f in _FIELDS:
        argv += ["-e", f]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    if out.returncode != 0:
        raise FabscopeError(f"--capture: tshark could not read {path}: {out.stderr.strip()[:300]}", EXIT_MEASURE)
    names = BTH_OPCODE_NAMES
    per_opcode: dict[int, dict[str, int]] = {}
    last_psn: dict[str, int] = {}
    gaps = repeats = 0
    naks: dict[str, int] = {}
    responder = _Responder()
    cm = _CmExchange()
    for line in out.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) < len(_FIELDS) or not cols[0]:
            continue
        op, flen, qp, psn, syndrome, mgmt_class, attribute = (c.strip() for c in cols[: len(_FIELDS)])
        code = int(op, 0)
        row = per_opcode.setdefault(code, {"packets": 0, "bytes": 0})
        row["packets"] += 1
        row["bytes"] += int(flen or 0)
        if syndrome and (int(syndrome, 0) >> 5) == 3:  # AETH syndrome 011xxxxx: NAK (IBTA 9.7.5.2.9)
            key = names.get(code, str(code)) + f" syndrome {syndrome}"
            naks[key] = naks.get(key, 0) + 1
        if qp and int(qp, 0) == 1:
            cm.packet(mgmt_class, attribute)
        if not qp or not psn or _is_response(names.get(code, "")) or code >> 5 not in (0, 1):
            continue  # only RC and UC requests carry a sequence (UD's PSNs, CNPs: none to follow)
        p = int(psn, 0)
        if code >> 5 == 0:
            responder.packet(qp, p, code & 0x1F)
        prev = last_psn.get(qp)
        if prev is not None:
            step = (p - prev) % (1 << 24)
            if step == 0 or step > (1 << 23):
                repeats += 1
            elif step > 1:
                gaps += 1
        last_psn[qp] = p
    summary: dict[str, Any] = {
        "schema": SCHEMA,
        "decoder": "tshark",
        "opcodes": [{"opcode": code, "name": names.get(code, f"opcode {code}"), **per_opcode[code]}
                    for code in sorted(per_opcode)],
        "psn_gaps": gaps,
        "psn_repeats": repeats,
        "naks": naks,
        "sequence": responder.result(),
    }
    summary["per_message"] = per_message(summary["opcodes"])
    if cm.seen:
        summary["cm"] = cm.result()
    return summary


# Multi-packet messages by BTH opcode name (Wireshark's): First, Middle..., Last, or one Only packet.
_MESSAGE_KINDS = ("SEND", "RDMA WRITE", "RDMA READ Response")


def per_message(opcodes: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Packets per message of each kind on RC and UC (the path MTU's segmentation: 8 KiB at MTU 1024
    is First + 6 Middle + Last, 8 packets): messages are the First and Only packets, packets all of
    the kind's. UD's one-packet sends (the CM's MADs) are not messages of the run."""
    out: dict[str, dict[str, float]] = {}
    for kind in _MESSAGE_KINDS:
        rows = [r for r in opcodes if re.search(rf"\((RC|UC)\) - {kind} (First|Middle|Last|Only)\b", str(r.get("name")))]
        messages = sum(int(r["packets"]) for r in rows if re.search(r" (First|Only)\b", str(r["name"])))
        if messages:
            packets = sum(int(r["packets"]) for r in rows)
            out[kind] = {"messages": messages, "packets": packets, "packets_per_message": round(packets / messages, 2)}
    return out


# RC request opcodes (the low 5 bits of the BTH opcode) that begin a message: SEND First/Only (with
# immediate, with invalidate), RDMA WRITE First/Only (with immediate), READ request, the atomics.
# The others (Middle, Last) continue one (IBTA 9.2.3, table 38).
_OPENING_RC_OPCODES = frozenset({0x00, 0x04, 0x05, 0x06, 0x0A, 0x0B, 0x0C, 0x13, 0x14, 0x17})


class _Responder:
    """An RC responder's reading of the request stream of each destination QP (IBTA 9.7.5.1.2, as
    rxe's check_psn does it): the next expected PSN is accepted; a later one is out of sequence
    (a PSN sequence error NAK is sent for the first one, the rest are dropped until the expected
    PSN comes: counted once, like rxe's out_of_seq_request); an earlier one is a duplicate
    (rxe's duplicate_request). Read on the receiver's side, the counts are what its responder saw;
    an RDMA READ request (which consumes one PSN per response packet) makes them approximate.

    A stream whose first packet continues a message (a Middle or a Last) began earlier: its first
    packets were lost on the way (or came before the capture). Until a packet below it arrives, the
    PSN the responder expected is not known; when one does (go-back-N resends from the PSN the
    responder NAKed), that was it: the packets seen so far were one sequence error (one NAK, the rest
    dropped), whatever was counted for them is replaced by that one, and the reading goes on from the
    resent packet."""

    def __init__(self) -> None:
        self.expected: dict[str, int] = {}
        self.nak_sent: dict[str, bool] = {}
        self.out_of_sequence = 0
        self.duplicates = 0
        # a stream that began mid-message: its lowest PSN so far, and the [out of sequence,
        # duplicates] counted for it since
        self.unsure: dict[str, tuple[int, list[int]]] = {}

    def packet(self, qp: str, psn: int, opcode: int | None = None) -> None:
        """``opcode``: the BTH opcode's low 5 bits (an RC request); None where unknown."""
        want = self.expected.get(qp)
        if want is None:  # the first packet of this stream in the capture
            self.expected[qp] = (psn + 1) % (1 << 24)
            if opcode is not None and opcode not in _OPENING_RC_OPCODES:
                self.unsure[qp] = (psn, [0, 0])
            return
        unsure = self.unsure.get(qp)
        if unsure is not None and (psn - unsure[0]) % (1 << 24) > (1 << 23):  # below every PSN seen so far
            del self.unsure[qp]
            self.out_of_sequence += 1 - unsure[1][0]
            self.duplicates -= unsure[1][1]
            self.expected[qp] = (psn + 1) % (1 << 24)
            self.nak_sent[qp] = False
            return
        diff = (psn - want) % (1 << 24)
        if diff == 0:
            self.expected[qp] = (psn + 1) % (1 << 24)
            self.nak_sent[qp] = False
            if unsure is not None and opcode in _OPENING_RC_OPCODES:
                del self.unsure[qp]  # a new message in sequence: the stream's start is behind us
        elif diff < (1 << 23):
            if not self.nak_sent.get(qp):
                self.nak_sent[qp] = True
                self.out_of_sequence += 1
                if unsure is not None:
                    unsure[1][0] += 1
        else:
            self.duplicates += 1
            if unsure is not None:
                unsure[1][1] += 1

    def result(self) -> dict[str, int]:
        return {"streams": len(self.expected), "out_of_sequence": self.out_of_sequence,
                "duplicates": self.duplicates}


# The connection manager's attributes (IBTA vol. 1, 12.6: CM MAD attribute IDs, management class 0x07).
CM_CLASS = 0x07
CM_ATTRIBUTES = {0x0010: "REQ", 0x0011: "MRA", 0x0012: "REJ", 0x0013: "REP", 0x0014: "RTU", 0x0015: "DREQ",
                 0x0016: "DREP", 0x0017: "SIDR_REQ", 0x0018: "SIDR_REP", 0x0019: "LAP", 0x001A: "APR"}
class _CmExchange:
    """The connection manager's MADs (UD to QP1, RoCE v2's CM over UDP 4791): how many of each, and
    the order of the first ones (REQ, REP, RTU for an rdma_cm connect)."""

    def __init__(self) -> None:
        self.seen = False
        self.counts: dict[str, int] = {}
        self.order: list[str] = []

    def packet(self, mgmt_class: str, attribute: str) -> None:
        self.seen = True
        if not mgmt_class or not attribute or int(mgmt_class, 0) != CM_CLASS:
            return
        attr = int(attribute, 0)
        name = CM_ATTRIBUTES.get(attr, f"attribute {attr:#06x}")
        self.counts[name] = self.counts.get(name, 0) + 1
        if len(self.order) < 16:
            self.order.append(name)

    def result(self) -> dict[str, Any]:
        return {"messages": self.counts, "order": self.order}


def _is_response(name: str) -> bool:
    """ACKs and read responses carry the responder's PSNs, not the requester's sequence."""
    low = name.lower()
    return "acknowledge" in low or "response" in low


def count(summary: Mapping[str, Any], fragment: str) -> int:
    """Packets of the opcodes whose name contains ``fragment`` (e.g. "SEND Middle")."""
    rows = summary.get("opcodes")
    return sum(int(r.get("packets", 0)) for r in rows if fragment in str(r.get("name"))) if isinstance(rows, list) else 0


def _port_counters(netdev: str) -> dict[str, Any] | None:
    """The hw_counters of the RDMA port behind ``netdev`` (the engine's --counters-json: the engine
    is the one counter reader), or None where it has none (a plain netdev, loopback)."""
    import json

    from .engine import engine_path

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
    from .results.explain import RDMA_LOSS_COUNTERS

    b, a = before["values"], after["values"]
    keys = [k for k in (*RDMA_LOSS_COUNTERS, "sent_pkts", "rcvd_pkts") if k in a and k in b]
    return {"port": after["port"], "delta": {k: a[k] - b[k] for k in keys}}


def _render_side(capture: Mapping[str, Any], who: str) -> list[str]:
    lines = [f"# capture{who}: {capture.get('file')} on {capture.get('netdev')} ({capture.get('filter')}, snaplen "
             f"{capture.get('snaplen')}, cap {capture.get('max_packets')} packets): {capture.get('captured')} captured, "
             f"{capture.get('dropped')} dropped by the kernel"
             + (" -- the packet cap was reached, later packets are missing" if capture.get("truncated_at_cap") else "")
             + (f" -- {capture['not_written']} packets tcpdump received were not written (it was stopped before it "
                "caught up): the counts below miss them" if capture.get("not_written") else "")]
    summary = capture.get("summary")
    if isinstance(summary, Mapping):
        for row in summary.get("opcodes") or []:
            lines.append(f"#   {row['name']:<60} {row['packets']:>9} packets {row['bytes']:>12} bytes")
        naks = summary.get("naks") or {}
        lines.append(f"#   PSN gaps {summary.get('psn_gaps')}, repeated PSNs (retransmissions) "
                     f"{summary.get('psn_repeats')}" + "".join(f", {n} x {_nak_name(k)}" for k, n in naks.items()))
        per = summary.get("per_message") or {}
        if per:
            lines.append("#   packets per message: " + ", ".join(
                f"{kind} {v['packets_per_message']:g} ({v['messages']} messages, resent ones included)"
                for kind, v in per.items()))
        seq = summary.get("sequence")
        if isinstance(seq, Mapping) and (seq.get("out_of_sequence") or seq.get("duplicates")):
            lines.append(f"#   as a responder reads the RC requests: {seq.get('out_of_sequence')} out of sequence "
                         f"(a PSN sequence error NAK each), {seq.get('duplicates')} duplicates")
        cm = summary.get("cm")
        if isinstance(cm, Mapping):
            order = cm.get("order") or []
            lines.append("#   connection manager: " + (" -> ".join(str(o) for o in order) if order else
                                                         str(cm.get("error") or "no CM MAD decoded")))
    elif capture.get("summary_error"):
        lines.append(f"#   no summary: {capture['summary_error']}")
    counters = capture.get("device_counters")
    if isinstance(counters, Mapping):
        moved = {k: v for k, v in (counters.get("delta") or {}).items() if v}
        lines.append(f"#   {counters.get('port')} counters over the capture: "
                     + (", ".join(f"{k} {v}" for k, v in moved.items()) or "none moved"))
    return lines


# AETH NAK codes (IBTA vol. 1, 9.7.5.2.9, syndrome 011xxxxx).
NAK_CODES = {0: "PSN sequence error", 1: "invalid request", 2: "remote access error", 3: "remote operational error",
             4: "invalid RD request"}


def _nak_name(key: str) -> str:
    """"Reliable Connection (RC) - Acknowledge syndrome 96" -> "... NAK syndrome 96 (PSN sequence error)"."""
    name, _, syndrome = key.rpartition(" syndrome ")
    try:
        what = NAK_CODES.get(int(syndrome, 0) & 0x1F, "reserved")
    except ValueError:
        return key
    return f"{name.replace('Acknowledge', 'NAK')} syndrome {syndrome} ({what})"


def render_summary(capture: Mapping[str, Any]) -> str:
    """The lines printed under the table: this host's capture, then the peer's (--peer)."""
    lines = _render_side(capture, "")
    server = capture.get("server")
    if isinstance(server, Mapping):
        lines += _render_side(server, " (server)") if not server.get("error") else \
            [f"# capture (server): {server['error']}"]
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
