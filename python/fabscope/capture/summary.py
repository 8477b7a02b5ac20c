# SPDX-License-Identifier: BSD-3-Clause
"""A capture decoded: packets and bytes per InfiniBand BTH opcode read by tshark (Wireshark's
maintained dissector: no packet parsing here), PSN gaps and repeats per QP, NAK syndromes, the
responder's view of RC request streams, the connection manager's MADs, and the port counters
beside them; rendered as text."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import EXIT_MEASURE, EXIT_USAGE, FabscopeError
from .opcodes import BTH_OPCODE_NAMES
from .tcpdump import SCHEMA, Capture

# One tshark pass reads every field the summary needs, the connection manager's MAD fields included
# (tshark's start-up is most of its cost: seconds per call inside an emulated guest).
_FIELDS = ("infiniband.bth.opcode", "frame.len", "infiniband.bth.destqp", "infiniband.bth.psn",
           "infiniband.aeth.syndrome", "infiniband.mad.mgmtclass", "infiniband.mad.attributeid")


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
