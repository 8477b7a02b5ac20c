# SPDX-License-Identifier: BSD-3-Clause
"""serve's options and the checks that run before it listens: everything that can be wrong is exit 2
then (the key, the engine options, --log)."""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import argtypes
from ..errors import EXIT_USAGE, FabscopeError
from ..launch.engine import backends, engine_option, validate_args
from ..session import auth
from .policy import (
    Limits,
    Network,
    format_bytes,
)


def add_arguments(srv: argparse.ArgumentParser) -> None:
    """serve's options beyond --bind/--port/--device/--timeout (cli.py defines those)."""
    srv.add_argument("--preload", metavar="rsocket|PATH", default=None,
                     help="start every engine under this LD_PRELOAD library (`rsocket`: librdmacm's librspreload.so): "
                          "the peer of `fabscope run --backend tcp --preload rsocket`; run a second serve on another "
                          "--port for plain runs")
    sec = srv.add_argument_group("who may connect")
    sec.add_argument("--key-file", metavar="FILE", default=None,
                     help="shared key clients must prove they hold (HMAC-SHA256 challenge-response); required "
                          f"unless --bind is loopback. Make one: `{auth.MAKE_KEY}`")
    sec.add_argument("--insecure-no-auth", action="store_true",
                     help="listen off loopback without a key: anyone who reaches the port can run measurements")
    sec.add_argument("--allow", metavar="CIDR[,CIDR...]", type=argtypes.cidr_list, default=None,
                     help="accept connections only from these networks (default: any)")
    sec.add_argument("--max-connections", metavar="N", type=argtypes.int_range(1, 4096), default=Limits.max_connections,
                     help="unauthenticated connections (in their handshake) at once; when full, a new one takes the "
                          f"oldest one's slot (default {Limits.max_connections})")
    sec.add_argument("--max-connections-per-source", metavar="N", type=argtypes.int_range(1, 4096),
                     default=Limits.max_connections_per_source,
                     help="unauthenticated connections at once from one address; when full, its oldest gives way "
                          f"(default {Limits.max_connections_per_source})")
    lim = srv.add_argument_group("what a client may ask")
    lim.add_argument("--max-size", metavar="SIZE", type=argtypes.byte_size(1, 1 << 40), default=Limits.max_size,
                     help=f"largest message size (default {format_bytes(Limits.max_size)})")
    lim.add_argument("--max-memory", metavar="SIZE", type=argtypes.byte_size(1 << 20, 1 << 50), default=Limits.max_memory,
                     help="buffers and samples of one run: 2 x the largest size + 8 bytes per latency sample "
                          f"(default {format_bytes(Limits.max_memory)})")
    lim.add_argument("--max-duration", metavar="S", type=argtypes.finite_float(1, 7 * 86400, unit="s"),
                     default=Limits.max_duration_s,
                     help="seconds one run may take: sizes x (--duration + --warmup-time); a run that outlives "
                          f"it by far is stopped (default {Limits.max_duration_s:g})")
    lim.add_argument("--max-iters", metavar="N", type=argtypes.int_range(1, 10**9), default=Limits.max_iters,
                     help=f"largest --iters / --warmup per size (default {Limits.max_iters})")
    lim.add_argument("--max-runs-per-minute", metavar="N", type=argtypes.int_range(1, 10**6), default=Limits.max_runs_per_minute,
                     help=f"runs per minute from one client address (default {Limits.max_runs_per_minute})")
    srv.add_argument("--log", metavar="FILE", default=None, type=argtypes.file_to_use_or_create,
                     help="append the JSON log lines (one per run and per refusal) to FILE instead of stderr")


# ---- start-time checks: everything that can be wrong is exit 2 before serve listens ----------


def is_loopback(bind: str) -> bool:
    """A loopback address (127/8, ::1) or `localhost`; any other name counts as reachable from the
    network (no DNS lookup decides whether a key is needed)."""
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def check_engine_args(engine_args: Sequence[str]) -> None:
    """The engine options serve passes to every run, checked by the engine itself. --device names a
    device of whichever backend a client asks for, so it is valid when any backend here knows it
    (the tcp netdevs, an RDMA device, a UCX or libfabric device)."""
    try:
        validate_args(engine_args)
        return
    except FabscopeError as first:
        device = engine_option(engine_args, "device")
        if not device or first.exit_code != EXIT_USAGE:  # '' is refused as it is, by every backend
            raise
        from ..devices import discover

        rdma = [d.name for d in discover().rdma_devices]
        if all(name in rdma for name in device.split(",")):
            return  # one RDMA device, or several for verbs (its queue pairs spread over them)
        for name in backends():
            if name in ("tcp", "verbs"):
                continue
            try:
                validate_args([*engine_args, f"--backend={name}"])
                return
            except FabscopeError:
                continue
        raise FabscopeError(
            f"serve --device {argtypes.shown(device)}: no backend here knows that device. {first.message}; "
            f"RDMA devices: {', '.join(rdma) or 'none'}",
            EXIT_USAGE,
        ) from first


def check_auth(bind: str, port: int, key_file: str | None, insecure: bool) -> auth.Key | None:
    if key_file and insecure:
        raise FabscopeError("serve: --key-file and --insecure-no-auth contradict each other; give one", EXIT_USAGE)
    if key_file:
        return auth.load_key(key_file)
    if not insecure and not is_loopback(bind):
        raise FabscopeError(
            f"serve --bind {bind} would let anyone who reaches port {port} run measurements on this host. Give it "
            f"a shared key: `{auth.MAKE_KEY.replace('KEYFILE', '/etc/fabscope/key')}`, copy the file to the client "
            "hosts, and pass --key-file /etc/fabscope/key to serve and to `fabscope run --peer`. To listen without "
            "a key anyway, say --insecure-no-auth",
            EXIT_USAGE,
        )
    return None


@dataclass
class ServeConfig:
    bind: str
    port: int
    engine_args: list[str]
    key: auth.Key | None
    allow: list[Network] | None
    limits: Limits
    timeout_s: float = 10.0
    log_path: str | None = None
    max_runs: int | None = None
    engine_env: dict[str, str] | None = None  # --preload: the engines' environment


def _check_log_path(path: str) -> None:
    """--log must be appendable; checked without creating it (a check has no side effects)."""
    target = Path(path)
    try:
        where = target if target.exists() else target.parent
        if target.exists() and not target.is_file():
            why = "not a regular file"
        elif not where.is_dir() and not target.exists():
            why = f"no directory {argtypes.shown(str(where))}"
        elif not os.access(where, os.W_OK):
            why = "not writable by this user"
        else:
            return
    except OSError as exc:  # a name too long for the file system, a loop of links, ...
        why = exc.strerror or str(exc)
    raise FabscopeError(f"serve --log {argtypes.shown(path)}: {why}", EXIT_USAGE)


def config_from_args(ns: argparse.Namespace, engine_args: list[str]) -> ServeConfig:
    """serve's options, checked (exit 2 with the fix for anything wrong), before it listens."""
    key = check_auth(ns.bind, ns.port, ns.key_file, ns.insecure_no_auth)
    check_engine_args(engine_args)
    log_path = None if ns.log is None else str(ns.log)
    if log_path is not None:
        _check_log_path(log_path)
    timeout = float(engine_option(engine_args, "timeout") or 10.0)
    limits = Limits(max_size=ns.max_size, max_memory=ns.max_memory, max_duration_s=ns.max_duration,
                    max_iters=ns.max_iters, max_runs_per_minute=ns.max_runs_per_minute,
                    max_connections=ns.max_connections, max_connections_per_source=ns.max_connections_per_source)
    engine_env = None
    if getattr(ns, "preload", None):
        from ..launch import rspreload

        library = rspreload.find_library(ns.preload)
        rspreload.check_host(None)
        engine_env = rspreload.engine_env(library)
    return ServeConfig(ns.bind, ns.port, engine_args, key, ns.allow, limits, timeout, log_path, ns.max_runs,
                       engine_env)
