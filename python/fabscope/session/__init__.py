# SPDX-License-Identifier: BSD-3-Clause
"""The session both ends of a connection speak, whichever starts it (run --peer and serve, the
matrix's coordinator and its agents, the capture service): control.py frames the JSON messages and
does the hello, auth.py proves the shared key (HMAC-SHA256 challenge-response) and keys each frame's
MAC."""
