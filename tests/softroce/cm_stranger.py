# SPDX-License-Identifier: BSD-3-Clause
"""Runs in the client guest (tests/softroce/test_rsocket_capture.py, case key-cm-stranger): a verbs
`--cm` run of a keyed session through a control relay that, on seeing the server engine's rdma_cm
address go by, first sends a foreign rdma_cm connection request there (`rping -c`: no token in its
private data) and only then lets the client hear of the address.

    python3 cm_stranger.py SERVER PORT OUT -- ARGS...   (ARGS: `fabscope run` without --peer)

The run's stdout/stderr/exit status are this script's; rping's exit status and output go to OUT."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
from frame_relay import FrameRelay


def main() -> int:
    server, port, out = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    args = sys.argv[sys.argv.index("--") + 1:]
    strangers: list[subprocess.Popen[str]] = []

    def stranger(body: dict[str, Any]) -> None:
        address = body.get("address") or {}
        if "cm_port" in address and not strangers:
            strangers.append(subprocess.Popen(
                ["rping", "-c", "-a", str(address["cm_addr"]), "-p", str(address["cm_port"]), "-C", "1", "-v"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            time.sleep(3)  # rping's request is out (seconds under TCG) before the client hears of the address

    relay = FrameRelay((server, port), on_server_frame=stranger)
    run = subprocess.run(["fabscope", "run", "--peer", f"127.0.0.1:{relay.port}", *args], text=True,
                         capture_output=True, timeout=300)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if strangers:
        said, _ = strangers[0].communicate(timeout=60)
        out.write_text(f"{strangers[0].returncode}\n{said}")
    else:
        out.write_text("no rdma_cm address went by\n")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
