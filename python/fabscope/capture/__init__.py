# SPDX-License-Identifier: BSD-3-Clause
"""`run --capture FILE.pcap`: the run's packets, taken by tcpdump on the device's netdev
(tcpdump.py), and a summary per InfiniBand BTH opcode decoded by tshark (summary.py; the opcode
names are Wireshark's own, opcodes.py); with --peer, the peer's serve captures on its side too
(peer.py).

tcpdump starts before the engine and must say it is listening, so a missing privilege
(CAP_NET_RAW) is a clear error before anything is measured; a snap length and a packet cap keep a
long run from filling the disk; the kernel's drop count comes back in the summary.
"""
