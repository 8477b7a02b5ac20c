# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope exporter`: the fabric's counters and fabscope's latest results for Prometheus.

Each scrape asks the collector's one long-lived ``fabscope-engine --counters-serve`` (the engine is the only
counter reader; it keeps the counter files open between scrapes) for the ``--counters-json`` snapshot and
writes it in the Prometheus text format (``text``: the series' label sets formatted once, not per scrape):

* every RDMA port (labels device, port, link_layer, netdev, node_guid): data bytes (IB
  ``port_{xmit,rcv}_data`` count 4-byte words; the words-to-bytes rule is the path verdict's own),
  packets, unicast/multicast packets, the PMA error counters, every ``hw_counters`` entry of every
  driver (per port, and device-wide where the driver keeps them there, as hfi1 does), state,
  physical state, rate in bytes/s, active MTU, and which counters are saturated or unreadable
  (iWARP ports have no PMA);
* every netdev (label netdev, and rdma_device when it backs an RDMA port): bytes, packets, errors,
  drops, and for those behind RDMA ports the pause/PFC/ECN/CNP entries of the driver's ethtool
  statistics;
* fabscope's latest result of each case (latency p50/p99, bandwidth, the path verdict as a labelled
  gauge) from the history store and ``--results`` files, and the newest fabric matrix's findings.

Counters that wrap at 32 bits are unwound between scrapes (state per series), so ``rate()`` never
sees a bogus reset; a counter the driver resets goes down in the output too, which Prometheus reads
as the reset it is, never as a negative rate.

Modules: ``snapshot`` (the engine's snapshot, reading it, unwinding wraps), ``collector`` (metric
names, help texts and series; active MTU from the inventory), ``text`` (the exposition format),
``results`` (the history store and report files); this one serves ``/metrics``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import EXIT_USAGE, FabscopeError
from .collector import ActiveMtu, FabscopeCollector, iter_metric_names, render
from .results import ResultsSource
from .snapshot import CounterUnwrapper, counters_snapshot
from .text import CONTENT_TYPE

__all__ = [
    "DEFAULT_LISTEN",
    "DEFAULT_PORT",
    "ActiveMtu",
    "CounterUnwrapper",
    "FabscopeCollector",
    "ResultsSource",
    "check_excludes",
    "check_sysfs_root",
    "counters_snapshot",
    "iter_metric_names",
    "render",
    "serve",
]

DEFAULT_PORT = 9730
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"


def _is_loopback(addr: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return addr == "localhost"


def _store_path(asked: Path | None) -> Path | None:
    """--store PATH must exist (a typo is not an empty history); without it, the default history
    file when there is one."""
    from ..store import default_path

    if asked is not None:
        if not asked.is_file():
            raise FabscopeError(
                f"--store {asked}: no such history file; `fabscope run` writes {default_path()} by default "
                "(give that, or the file its --store named)", EXIT_USAGE)
        return asked
    default = default_path()
    return default if default.is_file() else None


def check_sysfs_root(root: str | None) -> None:
    """--sysfs-root must look like /sys: a tree with class/infiniband or class/net. Anything else
    would be served as a host with no ports at all (zero port metrics, no error)."""
    if root is None:
        return
    base = Path(root)
    if (base / "class" / "infiniband").is_dir() or (base / "class" / "net").is_dir():
        return
    below = sorted(str(c.parent) for c in base.glob("*/class") if (c / "net").is_dir()
                   or (c / "infiniband").is_dir())
    hint = f"; did you mean {below[0]}?" if below else " (give the directory that holds class/, as /sys does)"
    raise FabscopeError(f"--sysfs-root {root}: neither {base / 'class' / 'infiniband'} nor {base / 'class' / 'net'} "
                        f"exists, so there would be no port to export{hint}", EXIT_USAGE)


def _listen_error(listen: str, addr: str, port: int, exc: OSError) -> FabscopeError:
    """Why --listen could not be bound, in the words that fit the cause."""
    import errno
    import socket

    if isinstance(exc, socket.gaierror):
        why = (f"{addr!r} is not an address or a host name that resolves here ({exc.strerror}); give an IP "
               f"address of this host, e.g. --listen 127.0.0.1:{port} or --listen 0.0.0.0:{port}")
    elif exc.errno == errno.EADDRINUSE:
        why = f"port {port} is in use; pick a free port (--listen {addr}:PORT) or stop what holds it"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"{addr} is not an address of this host; give one of its addresses, 127.0.0.1 or 0.0.0.0 (all)"
    elif exc.errno == errno.EACCES:
        why = f"port {port} is below 1024 and needs privileges; pick a port from 1024 up (default {DEFAULT_PORT})"
    else:
        why = f"{exc.strerror or exc}; pick another address or port"
    return FabscopeError(f"--listen {listen}: cannot listen there: {why}", EXIT_USAGE)


def check_excludes(engine: Path, sysfs_root: str | None, exclude: Sequence[str]) -> None:
    """An --exclude-devices name that matches nothing is a typo, not a no-op (no silent fallback)."""
    if not exclude:
        return
    snap = counters_snapshot(engine, sysfs_root)
    known = sorted({str(p.get("device")) for p in snap.get("rdma", [])} | {str(n.get("name")) for n in snap.get("net", [])})
    unknown = [d for d in exclude if d not in known]
    if unknown:
        raise FabscopeError(
            f"--exclude-devices names {', '.join(unknown)}, which this host does not have; it has "
            f"{', '.join(known) or 'no RDMA devices or netdevs'}. Fix the name(s) or drop them",
            EXIT_USAGE,
        )


def serve(
    listen: str,
    *,
    sysfs_root: str | None = None,
    exclude: Sequence[str] = (),
    results: Sequence[Path] = (),
    store: Path | None = None,
    engine: Path | None = None,
) -> int:
    """Serve /metrics until interrupted. Loopback by default, like `fabscope serve`."""
    import gzip
    import http.server
    import socket

    from ..launch.engine import engine_path
    from ..session.control import split_hostport

    addr, port = split_hostport(listen, DEFAULT_PORT)
    exe = engine or engine_path()
    missing = [str(f) for f in results if not Path(f).is_file()]
    if missing:
        raise FabscopeError(
            f"--results {', '.join(missing)}: no such file; give JSON-lines files written by "
            "`fabscope run --format json` or `fabscope suite`",
            EXIT_USAGE,
        )
    check_sysfs_root(sysfs_root)
    check_excludes(exe, sysfs_root, exclude)
    mtu = None
    if sysfs_root is None or os.environ.get("FABSCOPE_INVENTORY"):
        # Live libraries describe the live host only; a --sysfs-root copy needs its saved inventory.
        from ..inventory import from_env_or_query

        mtu = ActiveMtu(from_env_or_query)
        mtu.start()
    collector = FabscopeCollector(exe, sysfs_root=sysfs_root, exclude=exclude,
                                  results=ResultsSource(list(results), store=_store_path(store)), active_mtu=mtu)

    class TextMetricsHandler(http.server.BaseHTTPRequestHandler):
        """The Prometheus text format on any path, whatever the Accept header prefers, as node_exporter
        serves it by default: nothing here needs OpenMetrics (no exemplars, no created timestamps),
        and prometheus_client's encoders cost more than the rest of the scrape
        (bench/exporter_scrape.py). gzip when the client accepts it, as Prometheus does."""

        def do_GET(self) -> None:
            body = collector.exposition().text()
            accepted = self.headers.get("Accept-Encoding", "").split(",")
            gzipped = any(a.split(";")[0].strip().lower() == "gzip" for a in accepted)
            if gzipped:
                body = gzip.compress(body, compresslevel=1)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet, as prometheus_client's handler is: a scrape every few seconds is not news."""

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

    try:
        httpd = Server((addr, port), TextMetricsHandler)
    except OSError as exc:
        raise _listen_error(listen, addr, port, exc) from exc
    bound = httpd.server_address
    host = str(bound[0])
    url_host = f"[{host}]" if ":" in host else host
    print(f"fabscope exporter: serving http://{url_host}:{bound[1]}/metrics", file=sys.stderr, flush=True)
    if not _is_loopback(addr):
        print("fabscope exporter: /metrics is read-only and unauthenticated, as Prometheus exporters are; "
              "anyone who reaches this address sees the counters and results (limit it with a firewall)",
              file=sys.stderr, flush=True)
    try:
        httpd.serve_forever()
    finally:
        httpd.server_close()
    return 0
