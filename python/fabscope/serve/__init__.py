# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope serve`: answers `fabscope run --peer` (and `doctor --peer`) from other hosts, one run
at a time, on a network where not every client is honest.

- Handshakes run concurrently, each in its own thread with its own short deadline (independent of
  --timeout), so a silent, slow or garbage-sending connection never holds up an honest client.
- Connections that have not authenticated yet have a small budget of their own (--max-connections,
  --max-connections-per-source): when it is full, a new connection takes the slot of the oldest
  unauthenticated one (of its own address when that address holds its share, else of the address
  holding the most), and while more than half the slots are taken a handshake gets 1 s instead of
  3 s. So a flood of slow-loris connections, from any number of addresses, cannot keep an honest
  client (whose handshake takes milliseconds) from being served. Authenticated connections leave
  that budget.
- Off loopback a shared key is required (session/auth.py: HMAC-SHA256 challenge-response); --allow limits
  the source networks; serve_policy.py bounds what a client may ask (size, memory, time, rate).
- Each run is an engine (or a doctor child) handed the accepted, authenticated socket; a second
  run while one is in progress gets an immediate "busy".
- One JSON log line per run and per refusal (stderr, or --log FILE).
"""

