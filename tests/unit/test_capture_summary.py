# SPDX-License-Identifier: BSD-3-Clause
"""capture/summary.py's reading of a request stream as an RC responder reads it (what rxe counts as
out_of_seq_request and duplicate_request), and the lines printed under the table for both sides.
The decoding itself is tshark's, run for real in the Soft-RoCE guests."""

from __future__ import annotations

from fabscope.capture.summary import _Responder, per_message, render_summary


def _read(psns: list[int]) -> dict[str, int]:
    r = _Responder()
    for p in psns:
        r.packet("0x000011", p)
    return r.result()


def test_in_order_stream_has_nothing_to_count() -> None:
    assert _read(list(range(100, 140))) == {"streams": 1, "out_of_sequence": 0, "duplicates": 0}


def test_a_lost_packet_is_one_nak_however_many_follow_it() -> None:
    # 3 lost: 4..9 arrive out of sequence (one NAK, the rest dropped), then go-back-N from 3
    assert _read([1, 2, 4, 5, 6, 7, 8, 9, 3, 4, 5, 6, 7, 8, 9, 10]) == {"streams": 1, "out_of_sequence": 1,
                                                                          "duplicates": 0}


def test_two_losses_in_one_episode_and_a_timeout_resend() -> None:
    # 3 and 6 lost: one NAK (6's gap falls while the first is outstanding); after 3..5 the next
    # gap (7 instead of 6) is a new episode; then a timeout resends 5..8, which were received
    got = _read([1, 2, 4, 5, 7, 3, 4, 5, 7, 6, 7, 8, 5, 6, 7, 8, 9])
    assert got == {"streams": 1, "out_of_sequence": 2, "duplicates": 4}


def test_psn_wraps_at_24_bits() -> None:
    top = (1 << 24) - 2
    assert _read([top, top + 1, 0, 1, 2]) == {"streams": 1, "out_of_sequence": 0, "duplicates": 0}
    assert _read([top, 0, top + 1, 0]) == {"streams": 1, "out_of_sequence": 1, "duplicates": 0}


FIRST, MIDDLE, LAST, ONLY = 0x00, 0x01, 0x02, 0x04  # RC SEND opcodes (low 5 bits of the BTH opcode)


def _read_ops(packets: list[tuple[str, int, int]]) -> dict[str, int]:
    r = _Responder()
    for qp, psn, op in packets:
        r.packet(qp, psn, op)
    return r.result()


def _message(psn: int, qp: str = "0x1e") -> list[tuple[str, int, int]]:
    """One 8-packet SEND from ``psn`` (First, 6 Middle, Last)."""
    return [(qp, psn, FIRST), *((qp, psn + i, MIDDLE) for i in range(1, 7)), (qp, psn + 7, LAST)]


def test_the_first_packet_of_the_run_lost_is_one_nak_and_no_duplicates() -> None:
    """Seen in the Soft-RoCE guests under netem loss: the run's very first packet (a SEND First) was
    lost, so the server's capture begins with a Middle. rxe NAKed it (expecting the First) and
    dropped the rest; go-back-N resent the whole message. rxe counted out_of_seq_request 1 and
    duplicate_request 0; read from the first packet seen, the resent packets were 8 duplicates."""
    first, *rest = _message(101)
    got = _read_ops([*rest, first, *rest, *_message(109)])
    assert got == {"streams": 1, "out_of_sequence": 1, "duplicates": 0}


def test_a_capture_that_begins_mid_message_without_loss_counts_nothing() -> None:
    tail = _message(101)[5:]  # Middle, Middle, Last
    assert _read_ops([*tail, *_message(109), *_message(117)]) == {"streams": 1, "out_of_sequence": 0,
                                                                  "duplicates": 0}


def test_a_stream_that_began_mid_message_keeps_the_other_streams_counts() -> None:
    """While one QP's start is unknown, another QP's sequence error stays counted."""
    first, *rest = _message(101, "0x1e")
    other = [p for p in _message(500, "0x2a") if p[1] != 503]  # 503 lost, then go-back-N from it
    other += [("0x2a", psn, op) for _, psn, op in _message(500, "0x2a")[3:]]
    got = _read_ops([*rest[:3], *other, *rest[3:], first, *rest])
    assert got == {"streams": 2, "out_of_sequence": 2, "duplicates": 0}


def test_both_sides_are_rendered_with_cm_sequence_and_counters() -> None:
    side = {"file": "/out/c.pcap", "netdev": "eth0", "filter": "udp port 4791", "snaplen": 128, "max_packets": 9,
            "captured": 9, "dropped": 0, "truncated_at_cap": True,
            "summary": {"opcodes": [{"name": "Reliable Connection (RC) - SEND Only", "packets": 5, "bytes": 500}],
                        "psn_gaps": 1, "psn_repeats": 1, "naks": {"Reliable Connection (RC) - Acknowledge syndrome 96": 1},
                        "sequence": {"streams": 1, "out_of_sequence": 1, "duplicates": 0},
                        "cm": {"messages": {"REQ": 1, "REP": 1, "RTU": 1}, "order": ["REQ", "REP", "RTU"]}},
            "device_counters": {"port": "rxe0/1", "delta": {"rcvd_seq_err": 1, "duplicate_request": 0}}}
    text = render_summary({**side, "server": {**side, "file": "/out/c.server.pcap"}})
    assert text.count("# capture: /out/c.pcap on eth0") == 1 and "# capture (server): /out/c.server.pcap" in text
    assert "the packet cap was reached" in text
    assert text.count("connection manager: REQ -> REP -> RTU") == 2
    assert "1 out of sequence (a PSN sequence error NAK each), 0 duplicates" in text
    assert "1 x Reliable Connection (RC) - NAK syndrome 96 (PSN sequence error)" in text
    assert "rxe0/1 counters over the capture: rcvd_seq_err 1" in text and "duplicate_request" not in text
    lost = render_summary({**side, "server": {"error": "the peer's capture was lost: timeout"}})
    assert "# capture (server): the peer's capture was lost: timeout" in lost


def test_packets_per_message_from_first_middle_last_only() -> None:
    """Wireshark's opcode names; 8 KiB sends at MTU 1024 (First + 6 Middle + Last), and rsocket's
    writes (some split, some Only with Immediate); UD's "SEND only" is a one-packet message."""
    rc = "Reliable Connection (RC) - "
    opcodes = [{"name": rc + "SEND First", "packets": 60}, {"name": rc + "SEND Middle", "packets": 360},
               {"name": rc + "SEND Last", "packets": 60}, {"name": rc + "Acknowledge", "packets": 60},
               {"name": rc + "RDMA WRITE First", "packets": 10}, {"name": rc + "RDMA WRITE Middle", "packets": 20},
               {"name": rc + "RDMA WRITE Last with Immediate", "packets": 10},
               {"name": rc + "RDMA WRITE Only with Immediate", "packets": 10},
               {"name": "Unreliable Datagram (UD) - SEND only", "packets": 5}]
    got = per_message(opcodes)
    assert got["SEND"] == {"messages": 60, "packets": 480, "packets_per_message": 8.0}
    assert got["RDMA WRITE"] == {"messages": 20, "packets": 50, "packets_per_message": 2.5}
    assert "RDMA READ Response" not in got
