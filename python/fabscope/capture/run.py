# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope run --capture FILE.pcap` from the command line's options: where tcpdump listens and with
what filter and snap length (tcpdump.py), the peer's serve capturing too (peer.py), and the summary
written after the results (summary.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..errors import FabscopeError


def start(ns: argparse.Namespace) -> Any:
    """--capture: tcpdump listening before any engine starts (capture/tcpdump.py), or None."""
    if not ns.capture:
        return None
    from pathlib import Path

    from .tcpdump import DEFAULT_MAX_PACKETS, Capture, capture_filter, choose_netdev

    netdev = choose_netdev(getattr(ns, "eng:device", None), ns.peer, bool(ns.loopback))
    bpf = capture_filter(str(getattr(ns, "eng:backend", "tcp")), bool(ns.preload))
    return Capture.start(Path(ns.capture), netdev, bpf, _snaplen(ns), ns.capture_max_packets or DEFAULT_MAX_PACKETS)


def _snaplen(ns: argparse.Namespace) -> int:
    from .tcpdump import default_snaplen

    cm = str(getattr(ns, "eng:cm", "false")).lower() in ("true", "yes", "1", "on")
    return int(ns.capture_snaplen or default_snaplen(str(getattr(ns, "eng:backend", "tcp")), bool(ns.preload), cm))


def start_on_peer(ns: argparse.Namespace, key: Any, local: Any) -> Any:
    """--capture with --peer: the peer's serve captures too (capture/peer.py); if it cannot, this
    side's capture is stopped and nothing is measured."""
    if local is None or not ns.peer:
        return None
    from .peer import PeerCapture
    from .tcpdump import DEFAULT_MAX_PACKETS

    try:
        return PeerCapture.start(ns.peer, key, str(getattr(ns, "eng:backend", "tcp")), bool(ns.preload),
                                 _snaplen(ns), ns.capture_max_packets or DEFAULT_MAX_PACKETS)
    except FabscopeError as exc:
        local.stop()
        local.path.unlink(missing_ok=True)  # nothing was measured: no file either
        said = str(exc)
        raise FabscopeError(said if "nothing was measured" in said else f"{said}; nothing was measured",
                            exc.exit_code) from exc


def report(ns: argparse.Namespace, captured: dict[str, Any], streaming: bool) -> None:
    """The summary: a JSON line after the results (--format json), else lines under the table; and
    always FILE.pcap.json beside the capture."""
    import json
    from pathlib import Path

    from .summary import render_summary

    Path(f"{ns.capture}.json").write_text(json.dumps(captured, indent=1) + "\n")
    sys.stdout.write(json.dumps(captured) + "\n" if streaming else render_summary(captured))
    sys.stdout.flush()
