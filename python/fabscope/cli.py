# SPDX-License-Identifier: BSD-3-Clause
"""The `fabscope` command: subcommands only; the logic lives in the modules they call.

Adding a subcommand: give every option a `type=` from argtypes.py (finite numbers in range, ports,
hosts, CIDRs, files: exit 2 naming the argument, the value and what is allowed), put rules between
options in a `check` function (set_defaults(func=..., check=...): raise FabscopeError, exit 2, for
an option that does not apply), and start nothing before `func`. tests/property/test_cli_argv.py
finds the new subcommand by itself and drives random argv through it."""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from . import argtypes
from .errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, FabscopeError
from .suite.measure import Measure

if TYPE_CHECKING:
    from .history import Recorder

TESTBED_HELP = ("test setups on one machine: netns (two hosts), softroce (a verbs device), "
                "slurm (a one-node cluster for --launcher srun)")

# What `run --backend mpi` uses when --mpi / --launcher are not given.
MPI_DEFAULTS = {"mpi": "openmpi", "launcher": "mpirun"}


class Parser(argtypes.ArgumentParser):
    """argparse that exits 2 with one clear line (which argument, which value, what is allowed;
    the type= helpers of argtypes.py say the last two) instead of a usage dump."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("fabscope").strip()
        where = f"{command}: " if command else ""
        raise FabscopeError(f"{where}{message} (see `{self.prog} --help`)", EXIT_USAGE)


def _add_engine_options(p: argparse.ArgumentParser, table: dict[str, Any], skip: frozenset[str] = frozenset()) -> None:
    from .launch.engine import mode_option_names, option_help
    from .launch.plan import ENGINE_DEST

    seen: set[str] = set(skip) | mode_option_names(table)  # the CLI sets those for each engine it starts
    core = p.add_argument_group("measurement options (engine)")
    groups = [(core, table["core"])] + [
        (p.add_argument_group(f"{name} backend options"), be["options"]) for name, be in table["backends"].items()
    ]
    for group, rows in groups:
        for row in rows:
            name = row["name"]
            if name in seen:
                continue
            seen.add(name)
            kwargs: dict[str, Any] = {"dest": f"{ENGINE_DEST}{name}", "default": argparse.SUPPRESS, "help": option_help(row)}
            if row["type"] == "bool":
                kwargs.update(nargs="?", const="true", metavar="yes|no")
            else:
                kwargs["metavar"] = row["type"].upper()
            group.add_argument(f"--{name}", **kwargs)


def _engine_options(ns: argparse.Namespace) -> list[tuple[str, str]]:
    from .launch.plan import options_given

    return options_given(ns)


def _engine_args(ns: argparse.Namespace) -> list[str]:
    from .launch.plan import argv_of

    return argv_of(_engine_options(ns))


def _run(ns: argparse.Namespace) -> int:
    from . import history
    from .launch import plan
    from .report.render import RENDERERS
    from .results import Result
    from .results.collective import is_collective

    if is_collective(str(getattr(ns, "eng:pattern", "lat"))):
        from .collective_cli import run_collective

        return run_collective(ns, _plan(ns, None))
    key = _key(ns)
    progress = _progress(ns)
    keep = history.recorder(ns, "run")  # opened before anything runs: a bad --store fails up front
    try:
        reference = _reference_lookup(ns, keep)  # a bad --reference is exit 2 before anything runs
    except BaseException:
        if keep:
            keep.close()
        raise

    streaming = ns.format == "json"
    # Each record as it is shown and kept: the runner's, with its reference from the history. The
    # runner hands every record it collects to on_record once, in order, so this list is the run's.
    referenced: list[Result] = []

    def on_record(measured: Result) -> None:  # typed, path verdict attached by the runner
        rec = reference.attach(measured, keep.run_id if keep else None)  # read before this run's record is kept
        referenced.append(rec)
        if keep:
            keep.add(rec)  # committed as it arrives: a kill loses at most this record
        if streaming:  # JSON lines need no table layout: each size is out the moment it is measured
            sys.stdout.write(RENDERERS["json"]([rec]))
            sys.stdout.flush()
        if progress:
            progress(rec)

    from .capture import run as capture

    cap = capture.start(ns)
    peer_cap = capture.start_on_peer(ns, key, cap)
    captured: dict[str, Any] | None = None
    try:
        outcome = plan.execute(_plan(ns, key), on_record)
    finally:
        reference.close()
        if keep:
            keep.close()
        if cap is not None:
            from pathlib import Path

            from .capture.summary import finish

            captured = finish(cap)
            if peer_cap is not None:
                captured["server"] = peer_cap.finish(Path(ns.capture))
    if progress:
        progress(None)
    outcome.records = referenced
    if not streaming:
        sys.stdout.write(RENDERERS[ns.format](outcome.records))
        sys.stdout.flush()
    if captured is not None:
        capture.report(ns, captured, streaming)
    for note in dict.fromkeys(outcome.notes):
        print(f"fabscope: note: {note}", file=sys.stderr)
    if outcome.error:
        kept = f" ({len(outcome.records)} size(s) measured before that are shown above)" if outcome.records else ""
        print(f"fabscope: {outcome.error}{kept}", file=sys.stderr)
    if reference.missing and not outcome.error:
        for message in dict.fromkeys(reference.missing):
            print(f"fabscope: {message} (the results are shown above and kept)", file=sys.stderr)
        return EXIT_USAGE
    return plan.exit_code(outcome)


def _reference_lookup(ns: argparse.Namespace, keep: Recorder | None) -> Any:
    """Each latency result's reference from the history (fabscope/reference.py): the store this run
    writes to, or with --no-store the default one, read only; --reference resolved now."""
    from .reference import ReferenceLookup

    op = getattr(ns, "eng:op", None)
    return ReferenceLookup.open(keep.store if keep else None, ns.reference,
                                backend=str(getattr(ns, "eng:backend", "tcp")), op=str(op) if op else None,
                                pattern=str(getattr(ns, "eng:pattern", "lat")))


def _plan(ns: argparse.Namespace, key: Any) -> Any:
    """`run`'s RunPlan (plan.py, the one owner of what the engines are told): its engine options as
    parsed, and where the two ends run."""
    from .launch import plan

    where: plan.Where
    if getattr(ns, "eng:backend", "") == "mpi":
        where = plan.MpiLaunch(mpi=ns.mpi, launcher=ns.launcher, hosts=tuple(ns.hosts or ()),
                               mca=tuple(ns.mca or ()), env=tuple(ns.env or ()), ppn=ns.ppn)
    elif ns.loopback:
        where = plan.Loopback(pin=not ns.no_pin)
    else:
        where = plan.Peer(ns.peer, key=key)
    options = _engine_options(ns)
    preload = None
    if ns.preload:
        # The tcp engine gets no --device under the preload (it would bind to a netdev, which rsocket
        # refuses): the RDMA device named there is what the path verdict judges (rspreload.py).
        from .launch.rspreload import Preload

        preload = Preload.of(ns.preload, getattr(ns, "eng:device", None))
        options = [(k, v) for k, v in options if k != "device"]
    return plan.RunPlan.of(options, where, preload=preload)


def _check_capture_preload(ns: argparse.Namespace, backend: str) -> None:
    """--preload only with --backend tcp, on a host with an RDMA device; --capture into a writable
    directory; the capture limits only with --capture."""
    from pathlib import Path

    if ns.preload:
        if backend != "tcp":
            raise FabscopeError(f"--preload applies only to --backend tcp (an unmodified sockets program under the "
                                f"library), but this run is --backend {backend}: drop it, or use --backend tcp",
                                EXIT_USAGE)
        from .launch import rspreload

        rspreload.find_library(ns.preload)
        rspreload.check_host(getattr(ns, "eng:device", None))
    limits = [flag for flag, value in (("--capture-snaplen", ns.capture_snaplen),
                                       ("--capture-max-packets", ns.capture_max_packets)) if value]
    _refuse(limits if not ns.capture else [], "--capture FILE.pcap", "without --capture", "")
    if ns.capture:
        parent = Path(ns.capture).resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise FabscopeError(f"--capture {ns.capture}: cannot write in {parent}", EXIT_USAGE)


def _key(ns: argparse.Namespace) -> Any:
    """--key-file: the shared key of the peer's `fabscope serve` (checked: owner-only, long enough)."""
    if not ns.key_file:
        return None
    if not ns.peer:
        raise FabscopeError("--key-file applies only with --peer HOST (the key of that host's serve)", EXIT_USAGE)
    from .session.auth import load_key

    return load_key(ns.key_file)


def _refuse(flags: list[str], applies_to: str, chosen: str, fix: str) -> None:
    if flags:
        them = "it" if len(flags) == 1 else "them"
        raise FabscopeError(f"{', '.join(flags)} {'applies' if len(flags) == 1 else 'apply'} only to {applies_to}, "
                            f"but this run is {chosen}: drop {them}{fix}", EXIT_USAGE)


def _check_run(ns: argparse.Namespace) -> None:
    """Everything `run` can refuse before it starts a process: options that do not apply to the
    chosen backend or mode (exit 2 naming them), then the engine's own verdict on its options
    (`--validate-only`: types, ranges, backend scope, op/pattern/sizes, device names)."""
    from .launch.engine import validate_args

    backend = str(getattr(ns, "eng:backend", "tcp"))
    pattern = str(getattr(ns, "eng:pattern", "lat"))
    given_mpi = [flag for flag, value in (("--mpi", ns.mpi), ("--launcher", ns.launcher), ("--mca", ns.mca),
                                          ("--env", ns.env), ("--hosts", ns.hosts), ("--ppn", ns.ppn)) if value]
    from .collective_cli import check_collective

    check_collective(ns, backend, pattern)
    _check_capture_preload(ns, backend)
    if backend != "mpi":
        _refuse(given_mpi, "--backend mpi (they configure the MPI launch)", f"--backend {backend}",
                ", or add --backend mpi")
        _refuse(["--no-pin"] if ns.no_pin and not ns.loopback else [], "--loopback (both engines on this host)",
                "--peer", "")
        # under --preload, --device names the RDMA device the verdict judges, not the engine's netdev
        validate_args([a for a in _engine_args(ns) if not (ns.preload and a.startswith("--device="))])
        return
    if ns.peer:
        raise FabscopeError(
            "--backend mpi places its two ranks with the launcher (host files, srun), not with --peer; "
            "use --loopback for this host, or --hosts HOST1,HOST2 (rank 0 on HOST1, rank 1 on HOST2)",
            EXIT_USAGE,
        )
    _refuse(["--no-pin"] if ns.no_pin else [], "the two-engine runs (the MPI launcher binds each rank to a CPU)",
            "--backend mpi", "")
    for key, default in MPI_DEFAULTS.items():
        if getattr(ns, key) is None:
            setattr(ns, key, default)
    _refuse(["--mca"] if ns.mca and ns.mpi != "openmpi" else [],
            "--mpi openmpi (MCA parameters are Open MPI's; MPICH takes MPIR_CVAR_* variables with --env)",
            f"--mpi {ns.mpi}", "")
    from .launch.mpi_params import check_names
    from .launch.mpirun import find_mpi_engine

    check_names(ns.mpi, (k for k, _ in ns.mca or []), (k for k, _ in ns.env or []))
    try:
        binary = find_mpi_engine(ns.mpi)
    except FileNotFoundError as exc:
        raise FabscopeError(str(exc), EXIT_USAGE) from exc
    validate_args(_engine_args(ns), binary)


def _progress(ns: argparse.Namespace) -> Any:
    """A progress bar on sweeps when stdout is a terminal (rich), else nothing."""
    sizes = str(getattr(ns, "eng:sizes", ""))
    if not sys.stdout.isatty() or not (":" in sizes or "," in sizes):
        return None
    try:
        from rich.progress import Progress
    except ImportError:
        return None
    from .launch.engine import option_table  # noqa: F401  (already loaded for the parser)

    total = len(sizes.split(",")) if ":" not in sizes else None
    bar = Progress(transient=True)
    task = bar.add_task("sizes", total=total)
    bar.start()

    def step(rec: Any) -> None:  # a Result, or None at the end
        if rec is None:
            bar.stop()
        else:
            bar.update(task, advance=1, description=f"{rec.pattern} {rec.size} B")

    return step


def _check_serve(ns: argparse.Namespace) -> None:
    """The engine options serve hands to every run (--device, --timeout) are checked by the
    engine before serve listens: a bad one is exit 2 now, not "connection reset" for each client.
    So are the key file and the rule that off loopback a key is required (serve.config_from_args)."""
    from .serve.config import config_from_args

    ns.serve_config = config_from_args(ns, _engine_args(ns))


def _serve(ns: argparse.Namespace) -> int:
    from .serve.server import main as serve_main

    return serve_main(ns, _engine_args(ns))


def _backends(_ns: argparse.Namespace) -> int:
    """Every backend this fabscope knows (the engine's list): what each built one offers, and for each
    one not built, the package that builds it."""
    from .launch.engine import backends, engine_path, known_backends
    from .launch.mpirun import MPI_FLAVOURS, find_mpi_engine

    print(f"engine: {engine_path()}")
    built = backends()
    missing: list[str] = []
    for known in known_backends():
        if known.name in built:
            be = built[known.name]
            print(f"  {known.name:7} ops: {', '.join(be['ops'])}; patterns: {', '.join(be['patterns'])} - {be['summary']}")
            continue
        if known.name == "mpi":  # engines of its own, started under a launcher
            engines = []
            for flavour in MPI_FLAVOURS:
                try:
                    engines.append(f"{flavour} ({find_mpi_engine(flavour)})")
                except FileNotFoundError:
                    pass
            if engines:
                print(f"  {'mpi':7} under mpirun or srun: {', '.join(engines)}")
                continue
        missing.append(f"{known.name} (apt-get install {known.package})")
    if missing:
        print(f"  not built: {'; '.join(missing)}: their development packages were missing at build time; "
              "install them and rebuild (`make setup`)")
    return EXIT_OK


# What `suite --peer/--hosts` uses when --launcher / --timeout are not given.
SUITE_HOSTS_DEFAULTS: dict[str, Any] = {"launcher": "mpirun", "timeout": 10.0}


def _check_suite(ns: argparse.Namespace) -> None:
    """The two-host options are refused by the loopback suite (which uses this host's defaults),
    --launcher without --hosts (it starts the MPI rows) and --key-file without --peer."""
    given = [f"--{name.replace('_', '-')}" for name in ("device", "key_file", "launcher", "timeout", "preload_peer")
             if getattr(ns, name) is not None]
    if not (ns.peer or ns.hosts):
        _refuse(given, "a suite between two hosts (--peer HOST or --hosts A,B)", "the loopback suite", "")
    _refuse(["--launcher"] if ns.launcher is not None and not ns.hosts else [],
            "--hosts A,B (it starts the MPI rows)", "without --hosts", "")
    _refuse(["--key-file"] if ns.key_file and not ns.peer else [], "--peer HOST (the key of that host's serve)",
            "without --peer", "")
    _refuse(["--preload-peer"] if ns.preload_peer and not ns.peer else [], "--peer HOST (the tcp rows' peer)",
            "without --peer", "")
    for key, default in SUITE_HOSTS_DEFAULTS.items():
        if getattr(ns, key) is None:
            setattr(ns, key, default)


def _suite(ns: argparse.Namespace) -> int:
    from .suite.loopback import run_suite

    try:  # the report directory exists before the first case runs, or the suite does not start
        ns.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FabscopeError(f"--out {argtypes.shown(str(ns.out))}: cannot create it: {exc.strerror}", EXIT_USAGE) from exc
    from . import history

    if ns.peer or ns.hosts:  # between two hosts: suite/hosts.py
        from .suite.hosts import run_suite_hosts

        rc = run_suite_hosts(str(ns.out), peer=ns.peer, hosts=ns.hosts, device=ns.device, key=_key(ns),
                             launcher=ns.launcher, timeout_s=ns.timeout, measure=Measure(quick=ns.quick), backends=ns.backends,
                             preload_peer=ns.preload_peer)
        history.keep_file(ns, "suite", ns.out / "hosts.jsonl")
        return rc
    keep = history.recorder(ns, "suite")
    try:
        return run_suite(str(ns.out), measure=Measure(quick=ns.quick), keep=keep.add if keep else None, backends=ns.backends)
    finally:
        if keep:
            keep.close()


def _report(ns: argparse.Namespace) -> int:
    from .report.command import report

    return report(ns.inputs, html=ns.html, md=ns.md, csv=ns.csv, title=ns.title, size=ns.size, store=ns.store,
                  history=not ns.no_history)


def _exporter(ns: argparse.Namespace) -> int:
    from .errors import EXIT_UNSUPPORTED

    try:
        from .exporter import serve
    except ImportError as exc:  # prometheus_client is the one package the exporter needs
        if not (exc.name or "").startswith("prometheus_client"):
            raise
        raise FabscopeError(f"fabscope exporter needs prometheus_client ({exc}); install it: "
                            "`pip install 'fabscope[exporter]'` or `apt-get install python3-prometheus-client`",
                            EXIT_UNSUPPORTED) from exc

    root = None if ns.sysfs_root is None else str(ns.sysfs_root)
    return serve(ns.listen, sysfs_root=root, exclude=ns.exclude_devices, results=ns.results, store=ns.store)


class _VersionAction(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        from .launch.engine import version_report

        text, ok = version_report()
        print(text)
        raise SystemExit(EXIT_OK if ok else 1)


def _fill_run(run: Parser, with_engine: bool) -> None:
    from . import history
    from .session import control

    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--loopback", action="store_true", help="start both engines on this host (127.0.0.1)")
    where.add_argument("--peer", metavar="HOST[:PORT]", type=argtypes.host_port(control.DEFAULT_PORT),
                       help=f"a host running `fabscope serve` (port {control.DEFAULT_PORT})")
    where.add_argument("--hosts", metavar="HOST1,HOST2", type=argtypes.host_list,
                       help="--backend mpi: rank 0 on HOST1, rank 1 on HOST2, started by the launcher; a "
                            "collective (--pattern allreduce, ...) takes any number of hosts, --ppn ranks on each "
                            "(for the netns testbed: eval \"$(fabscope testbed netns env)\" first)")
    run.add_argument("--format", choices=["text", "json", "csv", "md"], default="text")
    run.add_argument("--key-file", metavar="FILE", default=None,
                     help="with --peer: the shared key of that `fabscope serve` (the file its --key-file names)")
    run.add_argument("--no-pin", action="store_true",
                     help="--loopback (not with --backend mpi): do not pin the two engines to different CPUs")
    pk = run.add_argument_group("sockets over RDMA and packet capture")
    pk.add_argument("--preload", metavar="rsocket|PATH", default=None,
                    help="--backend tcp only: run the engines under librspreload.so (`rsocket`: the one librdmacm "
                         "installed) or the preload library PATH; reported as `tcp (rspreload)` and judged against "
                         "the RDMA device, so a silent fallback to kernel TCP shows as misrouted")
    pk.add_argument("--capture", metavar="FILE.pcap", default=None,
                    help="capture the run's packets on the device's netdev with tcpdump (needs CAP_NET_RAW) and "
                         "print a summary per BTH opcode (decoded by tshark); with --peer the peer's serve captures "
                         "too, and its file comes back as FILE.server.pcap")
    pk.add_argument("--capture-snaplen", metavar="BYTES", type=argtypes.int_range(64, 65535), default=None,
                    help="bytes kept of each captured packet (default 128: the headers; 352 where rdma_cm connects "
                         "(rsocket, verbs --cm), to keep the connection manager's MADs whole)")
    pk.add_argument("--capture-max-packets", metavar="N", type=argtypes.int_range(1, 10**8), default=None,
                    help="stop capturing after N packets (default 200000), so a long run cannot fill the disk")
    # The MPI options default to None so that giving one without --backend mpi can be refused
    # (MPI_DEFAULTS fills them in for mpi runs).
    mpi = run.add_argument_group("--backend mpi (point-to-point as MPI users see it, under a launcher); "
                                 "these options are refused with any other backend")
    mpi.add_argument("--mpi", choices=["openmpi", "mpich"], default=None,
                     help=f"which MPI build of the engine (default {MPI_DEFAULTS['mpi']})")
    mpi.add_argument("--launcher", choices=["mpirun", "srun"], default=None,
                     help=f"what starts the two ranks (default {MPI_DEFAULTS['launcher']})")
    mpi.add_argument("--mca", action="append", metavar="KEY=VALUE", type=argtypes.key_value,
                     help="Open MPI MCA parameter (repeatable; not with --mpi mpich)")
    mpi.add_argument("--env", action="append", metavar="KEY=VALUE", type=argtypes.key_value,
                     help="environment for the ranks, e.g. UCX_NET_DEVICES=eth0 (repeatable)")
    mpi.add_argument("--ppn", metavar="N", type=argtypes.int_range(1, 256), default=None,
                     help="collectives (--pattern allreduce, ...): ranks per host (default 1 with --hosts, 2 with "
                          "--loopback)")
    if with_engine:
        from .launch.engine import option_table

        _add_engine_options(run, option_table())
    history.add_store_options(run)
    run.add_argument("--reference", metavar="TAG|RUN", type=argtypes.text(200), default=None,
                     help="the reference each size is measured against (latency: its p50; bandwidth: its Gb/s, "
                          "which is what 'expected' means where no link rate is known) (explanation.achieved_fraction, "
                          "the '# expected:' line): that stored run's figure of the same case (hosts, backend, op, "
                          "pattern, size), or the median of a tag's runs; a run or tag without the case is an "
                          "error (default: the best of every earlier run of the case in the history, read "
                          "even with --no-store)")
    run.set_defaults(func=_run, check=_check_run)


def _fill_serve(srv: Parser, _with_engine: bool) -> None:
    from .serve.config import add_arguments as add_serve_arguments
    from .session import control

    srv.add_argument("--bind", default="127.0.0.1", type=argtypes.bind_address,
                     help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    srv.add_argument("--port", type=argtypes.port(allow_zero=True), default=control.DEFAULT_PORT,
                     help=f"TCP port, 1 to 65535, 0 = any free one (default {control.DEFAULT_PORT})")
    srv.add_argument("--max-runs", type=argtypes.int_range(1, 10**9), default=None, help=argparse.SUPPRESS)
    srv.add_argument("--device", dest="eng:device", metavar="NAME", default=argparse.SUPPRESS,
                     help="device this host uses for runs (a netdev, RDMA, UCX or libfabric device)")
    srv.add_argument(
        "--timeout", dest="eng:timeout", metavar="S", default=argparse.SUPPRESS,
        help="seconds without progress before a client counts as gone",
    )
    add_serve_arguments(srv)
    srv.set_defaults(func=_serve, check=_check_serve)


def _fill_backends(bk: Parser, _with_engine: bool) -> None:
    bk.set_defaults(func=_backends)


def _fill_suite(st: Parser, _with_engine: bool) -> None:
    from . import history
    from .launch.engine import KnownBackendNames
    from .session import control

    st.add_argument("--out", default="fabscope-report", type=argtypes.output_dir,
                    help="directory for the report files (JSON, CSV, Markdown)")
    st.add_argument("--quick", action="store_true", help="fewer iterations (for tests)")
    st.add_argument("--backends", metavar="LIST", type=argtypes.choice_list(KnownBackendNames()), default=None,
                    help="only the rows of these backends (`fabscope backends` lists them); a listed backend with no "
                         "row here is an error saying why (default: every backend)")
    two = st.add_argument_group("between two hosts (one comparison row per transport)")
    two.add_argument("--peer", metavar="HOST[:PORT]", type=argtypes.host_port(control.DEFAULT_PORT), default=None,
                     help="a host running `fabscope serve`: tcp, verbs, ucx and libfabric rows")
    two.add_argument("--hosts", metavar="A,B", type=argtypes.host_list, default=None,
                     help="two hosts for the MPI rows, started by --launcher (rank 0 on A, rank 1 on B)")
    two.add_argument("--device", metavar="NAME", default=None, help="the device every row must use (checked per row)")
    two.add_argument("--key-file", metavar="FILE", default=None, help="with --peer: the shared key of that serve")
    two.add_argument("--preload-peer", metavar="HOST[:PORT]", type=argtypes.host_port(control.DEFAULT_PORT),
                     default=None, help="with --peer: a `fabscope serve --preload rsocket` on the peer host, for the "
                                        "`tcp (rspreload)` row (unmodified sockets over RDMA) beside tcp, verbs and "
                                        "rsocket")
    two.add_argument("--launcher", choices=["mpirun", "srun"], default=None,
                     help=f"starts the MPI ranks (--hosts; default {SUITE_HOSTS_DEFAULTS['launcher']})")
    two.add_argument("--timeout", type=argtypes.finite_float(0.1, 3600), default=None,
                     help="seconds without progress before a peer counts as gone "
                          f"(0.1 to 3600; default {SUITE_HOSTS_DEFAULTS['timeout']:g})")
    history.add_store_options(st)
    st.set_defaults(func=_suite, check=_check_suite)


def _fill_history(h: Parser, _with_engine: bool) -> None:
    from .history import fill_history_parser

    fill_history_parser(h)


def _fill_compare(c: Parser, _with_engine: bool) -> None:
    from .compare.command import fill_compare_parser

    fill_compare_parser(c)


def _fill_matrix(m: Parser, with_engine: bool) -> None:
    from .launch.engine import option_table
    from .matrix.cli import MATRIX_MANAGED, fill_matrix_parser

    fill_matrix_parser(m, (lambda p: _add_engine_options(p, option_table(), MATRIX_MANAGED)) if with_engine else None)


def _fill_load(p: Parser, with_engine: bool) -> None:
    from .launch.engine import option_table
    from .load.cli import LOAD_MANAGED, fill_load_parser

    fill_load_parser(p, (lambda q: _add_engine_options(q, option_table(), LOAD_MANAGED)) if with_engine else None)


def _fill_matrix_agent(a: Parser, _with_engine: bool) -> None:
    from .matrix.cli import fill_agent_parser

    fill_agent_parser(a)


def _fill_report(rp: Parser, _with_engine: bool) -> None:
    rp.add_argument("inputs", nargs="+", metavar="FILE|DIR|RUN",
                    help="result files (`run --format json` output, a suite's loopback.jsonl, a matrix JSON), "
                         "directories of them, or stored runs (a run id, latest, latest~N, a tag)")
    rp.add_argument("--html", metavar="FILE", help="write one self-contained HTML file (inline SVG, no network)")
    rp.add_argument("--md", metavar="FILE", help="write Markdown tables")
    rp.add_argument("--csv", metavar="FILE", help="write CSV, one row per measured size")
    rp.add_argument("--title", default="fabscope report", type=argtypes.text(200))
    rp.add_argument("--size", type=argtypes.byte_size(1), default=None,
                    help="message size whose latency distribution is drawn (default: the largest latency size)")
    rp.add_argument("--store", metavar="PATH", default=None,
                    help="history file for RUN inputs and the trend charts (default: the one `run` keeps results in)")
    rp.add_argument("--no-history", action="store_true", help="leave the history trend charts out")
    rp.set_defaults(func=_report)


def _fill_exporter(ex: Parser, _with_engine: bool) -> None:
    ex.add_argument("--listen", default="127.0.0.1:9730", type=argtypes.host_port(9730), metavar="ADDR:PORT",
                    help="where to serve /metrics (default 127.0.0.1:9730, loopback; 0.0.0.0:9730 for all)")
    ex.add_argument("--sysfs-root", type=argtypes.existing_dir, default=None, metavar="PATH",
                    help="read counters under PATH instead of /sys (a copy of another host's tree)")
    ex.add_argument("--exclude-devices", type=argtypes.text(), nargs="+", default=[], metavar="NAME",
                    help="RDMA devices or netdevs not to export (each must exist)")
    ex.add_argument("--results", type=argtypes.existing_file, nargs="+", default=[], metavar="FILE",
                    help="JSON-lines reports (run --format json, suite, matrix) whose latest results to export")
    ex.add_argument("--store", type=argtypes.existing_file, default=None, metavar="PATH",
                    help="history store to export the latest results from (default: the default store, if any)")
    ex.set_defaults(func=_exporter)


def _fill_devices(sp: Parser, _with_engine: bool) -> None:
    from .doctor.cli_entry import fill_devices_parser

    fill_devices_parser(sp)


def _fill_doctor(sp: Parser, _with_engine: bool) -> None:
    from .doctor.cli_entry import fill_doctor_parser

    fill_doctor_parser(sp)


def _fill_check(c: Parser, _with_engine: bool) -> None:
    from .known_good.check import fill_check_parser

    fill_check_parser(c)


def _fill_health(hp: Parser, _with_engine: bool) -> None:
    from .known_good.health import fill_health_parser

    fill_health_parser(hp)


def _fill_baseline(b: Parser, _with_engine: bool) -> None:
    from .known_good.baseline import fill_baseline_parser

    fill_baseline_parser(b)


# The testbeds: name, help line, the module whose fill_parser gives its options.
TESTBEDS = (("netns", "N hosts as network namespaces on a fabric and a management switch", "netns"),
            ("softroce", "qemu guest(s) with a real rdma_rxe (Soft-RoCE) verbs device", "softroce"),
            ("slurm", "a private Slurm on this host for --launcher srun", "slurm"))


def _no_testbed(_ns: argparse.Namespace) -> int:
    raise FabscopeError("testbed: the first argument is netns, softroce or slurm (got nothing); see "
                        "`fabscope testbed --help`", EXIT_USAGE)


def _fill_testbed(sp: Parser, _with_engine: bool) -> None:
    import importlib

    sp.description = TESTBED_HELP
    # Not required=True: argparse's message would name the dest, not the three choices.
    sp.set_defaults(func=_no_testbed, check=_no_testbed)
    sub = sp.add_subparsers(dest="testbed", parser_class=Parser, metavar="{netns,softroce,slurm}")
    for name, helptext, module in TESTBEDS:
        child = sub.add_parser(name, help=helptext)
        importlib.import_module(f".testbed.{module}", __package__).fill_parser(child)
        child.set_defaults(check=child.get_default("check"))  # its own check, or none: not _no_testbed


# Every subcommand: its name, its help line and what fills in its options. A command builds only
# its own subcommand's options (`fabscope run` does not import serve, compare or the matrix: start-up
# is paid on every host a launcher starts, and under emulation it is seconds); help and the
# generated documentation build them all.
SUBCOMMANDS: tuple[tuple[str, str, Callable[[Parser, bool], None]], ...] = (
    ("run", "measure: both ends here (--loopback) or against `fabscope serve` (--peer)", _fill_run),
    ("serve", "answer `fabscope run --peer` from other hosts, one run at a time", _fill_serve),
    ("backends", "list the transport backends this engine was built with", _fill_backends),
    ("suite", "the loopback suite: every available backend and pattern, one comparison table", _fill_suite),
    ("history", "the runs kept in the history store: list, show one, export, check, salvage", _fill_history),
    ("compare", "compare two sets of results and call regressions (exit 9 on a regression, 10 when a change "
                "lacks the evidence to call it)", _fill_compare),
    ("matrix", "the fabric matrix: every pair of N hosts under mpirun/srun, bad nodes, bad links and misrouted "
               "pairs named with evidence", _fill_matrix),
    ("load", "the fabric under load: incast, fan-out, all-to-all, permutation; per-flow rates, fair share, "
             "fairness, a victim pair's congestion impact factor", _fill_load),
    ("matrix-agent", "(started by `fabscope matrix` through the launcher on each host)", _fill_matrix_agent),
    ("report", "report files from saved results: one self-contained HTML file with charts, Markdown tables, CSV",
     _fill_report),
    ("exporter", "serve /metrics for Prometheus: every port counter, fabscope's latest results", _fill_exporter),
    ("devices", "RDMA devices, ports, GIDs and netdevs as sysfs shows them", _fill_devices),
    ("doctor", "check the configuration for known pitfalls, each with its fix", _fill_doctor),
    ("testbed", TESTBED_HELP, _fill_testbed),
    ("check", "run a scenario file's checks and judge its expectations: pass/warn/fail/inconclusive with fault "
              "codes, the defective nodes and links (docs/check.md)", _fill_check),
    ("baseline", "named baselines from runs in the history, with their configuration's fingerprint: save, list, "
                 "show, delete", _fill_baseline),
    ("health", "the quick per-node health check for the scheduler (Slurm HealthCheckProgram, prolog): doctor, "
               "ports against a baseline, moved error counters; --drain / --undrain", _fill_health),
)


def build_parser(with_engine: bool = True, only: str | None = None) -> Parser:
    """The whole command line; with ``only``, that subcommand's options alone are built (every
    subcommand is still listed, with its help line, for `fabscope --help` and its errors)."""
    p = Parser(prog="fabscope", description="Measure and diagnose high-speed networks (RDMA, UCX, libfabric, MPI, TCP).")
    p.add_argument("--version", action=_VersionAction, nargs=0,
                   help="this fabscope's version, its engine's (one version) and the backends built; exit 1 when "
                        "the engine is missing or another version")
    sub = p.add_subparsers(dest="command", parser_class=Parser, required=True)
    for name, helptext, fill in SUBCOMMANDS:
        sp = sub.add_parser(name, help=helptext)
        if only is None or name == only:
            fill(sp, with_engine)
    return p


def _tolerant_stdout() -> None:
    """argv arrives decoded with surrogateescape: echoing an argument (a path, a name) to stdout
    writes back the bytes the user typed instead of raising UnicodeEncodeError, as Python itself
    does under the C locale. (stderr already escapes them: backslashreplace.)"""
    if isinstance(sys.stdout, io.TextIOWrapper) and sys.stdout.errors == "strict":
        sys.stdout.reconfigure(errors="surrogateescape")


def main(argv: Sequence[str] | None = None, execute: bool = True) -> int:
    """The `fabscope` command; returns the exit status (never raises for a user's mistake).

    Each subcommand is: argparse with argtypes' `type=` helpers, then its `check` (set_defaults
    (check=FN): cross-option rules and the engine's --validate-only; raise FabscopeError), then its
    `func`. execute=False stops after the checks and returns 0: parse and validate only, nothing
    started (what tests/property drives with random argv)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _tolerant_stdout()
    try:
        # Only `run` needs the engine's option table; other commands work without an engine.
        command = argv[0] if argv else ""
        parser = build_parser(with_engine=command in ("run", "matrix", "load"), only=command)
        ns = parser.parse_args(argv)
        check = getattr(ns, "check", None)
        if check is not None:
            check(ns)
        if not execute:
            return EXIT_OK
        rc: int = ns.func(ns)
        return rc
    except FabscopeError as exc:
        print(f"fabscope: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except SystemExit as exc:  # --help, --version, and the usage errors of the testbeds' own parsers
        if isinstance(exc.code, int):
            return exc.code
        if exc.code is not None:
            print(exc.code, file=sys.stderr)
            return 1
        return EXIT_OK
    except KeyboardInterrupt:
        print("fabscope: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
