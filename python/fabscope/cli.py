"""The `fabscope` command: subcommands only; the logic lives in the modules they call."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import __version__, control
from .errors import EXIT_MISROUTED, EXIT_OK, EXIT_USAGE, FabscopeError

DELEGATED = ("devices", "doctor", "testbed")

# Engine options the CLI manages itself (modes, output, the control socket).
CLI_MANAGED = {"peer", "listen", "control-fd", "session-open", "format", "options-json", "list-backends", "help"}


class Parser(argparse.ArgumentParser):
    """argparse that exits 2 with one clear line instead of a usage dump plus traceback risk."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise FabscopeError(f"{self.prog}: {message}", EXIT_USAGE)


def _add_engine_options(p: argparse.ArgumentParser, table: dict[str, Any]) -> None:
    seen: set[str] = set()
    core = p.add_argument_group("measurement options (engine)")
    groups = [(core, table["core"])] + [
        (p.add_argument_group(f"{name} backend options"), be["options"]) for name, be in table["backends"].items()
    ]
    for group, rows in groups:
        for row in rows:
            name = row["name"]
            if name in CLI_MANAGED or name in seen:
                continue
            seen.add(name)
            text = row["help"]
            if row.get("allowed"):
                text += f" [{', '.join(row['allowed'])}]"
            if row.get("default"):
                text += f" (default {row['default']})"
            kwargs: dict[str, Any] = {"dest": f"eng:{name}", "default": argparse.SUPPRESS, "help": text}
            if row["type"] == "bool":
                kwargs.update(nargs="?", const="true", metavar="yes|no")
            else:
                kwargs["metavar"] = row["type"].upper()
            group.add_argument(f"--{name}", **kwargs)


def _engine_args(ns: argparse.Namespace) -> list[str]:
    return [f"--{k[4:]}={v}" for k, v in vars(ns).items() if k.startswith("eng:")]


def _run(ns: argparse.Namespace) -> int:
    from . import path as pathmod
    from . import runner
    from .report.render import RENDERERS

    args = _engine_args(ns)
    timeout = float(getattr(ns, "eng:timeout", 10))
    records: list[dict[str, Any]] = []
    progress = _progress(ns)

    streaming = ns.format == "json"

    def on_record(rec: dict[str, Any]) -> None:
        rec["path"] = pathmod.verdict(rec)
        records.append(rec)
        if streaming:  # JSON lines need no table layout: each size is out the moment it is measured
            sys.stdout.write(RENDERERS["json"]([rec]))
            sys.stdout.flush()
        if progress:
            progress(rec)

    if getattr(ns, "eng:backend", "") == "mpi":
        outcome = _run_mpi(ns, args, timeout, on_record)
    elif ns.loopback:
        outcome = runner.run_loopback(args + ["--format=json"], timeout, on_record, pin=not ns.no_pin)
    else:
        outcome = runner.run_peer(args + ["--format=json"], ns.peer, timeout, on_record)
    if progress:
        progress(None)
    if not streaming:
        sys.stdout.write(RENDERERS[ns.format](outcome.records))
        sys.stdout.flush()
    if outcome.error:
        kept = f" ({len(outcome.records)} size(s) measured before that are shown above)" if outcome.records else ""
        print(f"fabscope: {outcome.error}{kept}", file=sys.stderr)
        return outcome.exit_code or 4
    if any((r.get("path") or {}).get("verdict") == "misrouted" for r in outcome.records):
        return EXIT_MISROUTED
    return EXIT_OK


def _pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise FabscopeError(f"{flag} {item!r}: expected KEY=VALUE", EXIT_USAGE)
        out[key] = value
    return out


def _run_mpi(ns: argparse.Namespace, args: list[str], timeout: float, on_record: Any) -> Any:
    """Both ranks under the MPI launcher; rank 0 prints records like a client engine."""
    from . import runner

    if ns.peer:
        raise FabscopeError(
            "--backend mpi places its two ranks with the launcher (host files, srun), not with --peer; "
            "use --loopback for this host, or your launcher's host options via --launcher",
            EXIT_USAGE,
        )
    try:
        return runner.run_mpi(args, timeout, on_record, mpi=ns.mpi, launcher=ns.launcher,
                              mca=_pairs(ns.mca, "--mca"), env=_pairs(ns.env, "--env"))
    except (ValueError, FileNotFoundError) as exc:
        raise FabscopeError(str(exc), EXIT_USAGE) from exc


def _progress(ns: argparse.Namespace) -> Any:
    """A progress bar on sweeps when stdout is a terminal (rich), else nothing."""
    sizes = str(getattr(ns, "eng:sizes", ""))
    if not sys.stdout.isatty() or not (":" in sizes or "," in sizes):
        return None
    try:
        from rich.progress import Progress
    except ImportError:
        return None
    from .engine import option_table  # noqa: F401  (already loaded for the parser)

    total = len(sizes.split(",")) if ":" not in sizes else None
    bar = Progress(transient=True)
    task = bar.add_task("sizes", total=total)
    bar.start()

    def step(rec: dict[str, Any] | None) -> None:
        if rec is None:
            bar.stop()
        else:
            bar.update(task, advance=1, description=f"{rec.get('pattern')} {rec.get('size')} B")

    return step


def _serve(ns: argparse.Namespace) -> int:
    from .serve import serve

    return serve(ns.bind, ns.port, _engine_args(ns), ns.max_runs)


def _backends(_ns: argparse.Namespace) -> int:
    from .engine import backends, engine_path

    print(f"engine: {engine_path()}")
    for name, be in backends().items():
        print(f"  {name:6} ops: {', '.join(be['ops'])}; patterns: {', '.join(be['patterns'])} - {be['summary']}")
    missing = [b for b in ("tcp", "verbs", "ucx", "ofi") if b not in backends()]
    if missing:
        print(f"  not built: {', '.join(missing)} (their development packages were missing at build time; `make setup`)")
    return EXIT_OK


def _suite(ns: argparse.Namespace) -> int:
    from .suite import run_suite

    return run_suite(ns.out, quick=ns.quick)


def build_parser(with_engine: bool = True) -> Parser:
    p = Parser(prog="fabscope", description="Measure and diagnose high-speed networks (RDMA, UCX, libfabric, MPI, TCP).")
    p.add_argument("--version", action="version", version=f"fabscope {__version__}")
    sub = p.add_subparsers(dest="command", parser_class=Parser, required=True)

    run = sub.add_parser("run", help="measure: both ends here (--loopback) or against `fabscope serve` (--peer)")
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--loopback", action="store_true", help="start both engines on this host (127.0.0.1)")
    where.add_argument("--peer", metavar="HOST[:PORT]", help=f"a host running `fabscope serve` (port {control.DEFAULT_PORT})")
    run.add_argument("--format", choices=["text", "json", "csv", "md"], default="text")
    run.add_argument("--no-pin", action="store_true", help="loopback: do not pin the two engines to different CPUs")
    mpi = run.add_argument_group("--backend mpi (point-to-point as MPI users see it, under a launcher)")
    mpi.add_argument("--mpi", choices=["openmpi", "mpich"], default="openmpi", help="which MPI build of the engine")
    mpi.add_argument("--launcher", choices=["mpirun", "srun"], default="mpirun")
    mpi.add_argument("--mca", action="append", metavar="KEY=VALUE", help="Open MPI MCA parameter (repeatable)")
    mpi.add_argument("--env", action="append", metavar="KEY=VALUE",
                     help="environment for the ranks, e.g. UCX_NET_DEVICES=eth0 (repeatable)")
    if with_engine:
        from .engine import option_table

        _add_engine_options(run, option_table())
    run.set_defaults(func=_run)

    srv = sub.add_parser("serve", help="answer `fabscope run --peer` from other hosts, one run at a time")
    srv.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    srv.add_argument("--port", type=int, default=control.DEFAULT_PORT)
    srv.add_argument("--max-runs", type=int, default=None, help=argparse.SUPPRESS)
    srv.add_argument("--device", dest="eng:device", default=argparse.SUPPRESS, help="device this host uses for runs")
    srv.add_argument(
        "--timeout", dest="eng:timeout", default=argparse.SUPPRESS,
        help="seconds without progress before a client counts as gone",
    )
    srv.set_defaults(func=_serve)

    bk = sub.add_parser("backends", help="list the transport backends this engine was built with")
    bk.set_defaults(func=_backends)

    st = sub.add_parser("suite", help="the loopback suite: every available backend and pattern, one comparison table")
    st.add_argument("--out", default="fabscope-report", help="directory for the report files (JSON, CSV, Markdown)")
    st.add_argument("--quick", action="store_true", help="fewer iterations (for tests)")
    st.set_defaults(func=_suite)

    for name, helptext in (("devices", "RDMA devices, ports, GIDs and netdevs as sysfs shows them"),
                           ("doctor", "check the configuration for known pitfalls, each with its fix"),
                           ("testbed", "test setups on one machine: netns (two hosts), softroce (a verbs device), "
                                       "slurm (a one-node cluster for --launcher srun)")):
        sp = sub.add_parser(name, help=helptext, add_help=False)
        sp.add_argument("rest", nargs=argparse.REMAINDER)
        sp.set_defaults(func=None)
    return p


def _delegate(command: str, rest: list[str]) -> int:
    if command == "devices":
        from .doctor.cli_entry import main_devices

        return main_devices(rest)
    if command == "doctor":
        from .doctor.cli_entry import main_doctor

        return main_doctor(rest)
    if not rest or rest[0] not in ("netns", "softroce", "slurm"):
        raise FabscopeError("usage: fabscope testbed netns|softroce|slurm ... (see `fabscope testbed netns --help`)",
                            EXIT_USAGE)
    if rest[0] == "netns":
        from .testbed import netns

        return netns.main(rest[1:])
    if rest[0] == "slurm":
        from .testbed import slurm

        return slurm.main(rest[1:])
    from .testbed import softroce

    return softroce.main(rest[1:])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        # Only `run` needs the engine's option table; other commands work without an engine.
        if argv and argv[0] in DELEGATED:
            # These parse their own arguments (argparse's REMAINDER would drop leading options).
            return _delegate(argv[0], argv[1:])
        parser = build_parser(with_engine=bool(argv) and argv[0] == "run")
        ns = parser.parse_args(argv)
        if ns.func is None:
            return _delegate(ns.command, ns.rest)
        rc: int = ns.func(ns)
        return rc
    except FabscopeError as exc:
        print(f"fabscope: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fabscope: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
