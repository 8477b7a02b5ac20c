# SPDX-License-Identifier: BSD-3-Clause
"""Coverage-guided fuzz target for `fabscope serve`'s Python control path (atheris, libFuzzer's
engine for Python), the counterpart of engine/fuzz/fuzz_ctl.c for the C parser.

Every input is bytes off the wire, fed through a socket pair into the real functions:
  mode 0/1: the server's hello + authentication (with / without a key), then the run's config
            (peek, parse, limits) when the hello passed;
  mode 2/3: the client's handshake against a hostile server (with / without a key);
  mode 4:   the config frame's parser and the limits on their own.
Anything but a refusal (FabscopeError) or a socket error is a bug: atheris reports it with the input.

  python tests/fuzz/fuzz_control.py -max_total_time=45 -max_len=4096 CORPUS_DIR tests/fuzz/corpus
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))

try:
    import atheris
except ImportError:  # the hypothesis test (test_fuzz_control.py) drives one_input without it
    atheris = None

if atheris is not None:
    with atheris.instrument_imports(include=["fabscope"]):
        from fabscope.errors import FabscopeError
        from fabscope.serve import conn as serve
        from fabscope.serve import policy as serve_policy
        from fabscope.session import auth, control
else:
    from fabscope.errors import FabscopeError
    from fabscope.serve import conn as serve
    from fabscope.serve import policy as serve_policy
    from fabscope.session import auth, control

KEY = auth.Key(b"fuzz-key-0123456789abcdef", auth.key_id(b"fuzz-key-0123456789abcdef"), "fuzz")
LIMITS = serve_policy.Limits()


def _server(sock: socket.socket, key: auth.Key | None) -> None:
    hs = serve.server_handshake(sock, "fuzz", key, time.monotonic() + 0.2)
    control.send(sock, hs.welcome, 0.2)
    if hs.service == "engine":
        msg = serve.peek_frame(sock, time.monotonic() + 0.01, "fuzz")
        serve_policy.check_request(serve_policy.parse_config(msg), LIMITS)


def one_input(data: bytes) -> None:
    if not data:
        return
    mode, payload = data[0] % 5, data[1:]
    if mode == 4:
        try:
            msg = json.loads(payload)
        except (ValueError, RecursionError):
            return
        if isinstance(msg, dict):
            try:
                serve_policy.check_request(serve_policy.parse_config(msg), LIMITS)
            except FabscopeError:
                pass
        return
    ours, theirs = socket.socketpair()
    try:
        theirs.sendall(payload)
        theirs.shutdown(socket.SHUT_WR)
        try:
            if mode in (0, 1):
                _server(ours, KEY if mode == 0 else None)
            else:
                control.client_handshake(ours, "fuzz", "engine", KEY if mode == 2 else None, 0.2)
        except (FabscopeError, OSError):
            pass
    finally:
        ours.close()
        theirs.close()


def main() -> None:
    if atheris is None:
        sys.exit("atheris is not installed (`pip install atheris`; deps/python-requirements.txt lists it)")
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
