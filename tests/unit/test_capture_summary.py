"""capture.py's reading of a request stream as an RC responder reads it (what rxe counts as
out_of_seq_request and duplicate_request), and the lines printed under the table for both sides.
The decoding itself is tshark's, run for real in the Soft-RoCE guests."""

from __future__ import annotations

from fabscope.capture import _Responder, per_message, render_summary


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
