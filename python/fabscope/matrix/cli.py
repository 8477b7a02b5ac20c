# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope matrix` and `fabscope matrix-agent`: their options and what they run.

`fabscope matrix --hosts H1,...,HN --backend tcp --device fabric0 --pattern bw` starts the
coordinator here, one agent per host under the launcher, runs the schedule, judges, retests and
prints the matrix with its findings. Exit 0 clean, 5 a misrouted pair, 8 a bad node or link,
3 hosts unreachable (and nothing worse found), 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import argtypes
from ..errors import EXIT_USAGE, FabscopeError
from ..launch import plan
from . import schedule as schedmod

PATTERNS = ("lat", "bw", "bibw")
# Engine options the matrix sets itself (per job) or that make no sense across hosts.
MATRIX_MANAGED = frozenset({"pattern", "bind", "cpu"})


def pattern_list(value: str) -> list[str]:
    items = [p.strip() for p in value.split(",")]
    bad = [p for p in items if p not in PATTERNS]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{argtypes.shown(value)}: patterns are {', '.join(PATTERNS)} (comma-separated)")
    return list(dict.fromkeys(items))


def fill_matrix_parser(m: argparse.ArgumentParser,
                       add_engine_options: Callable[[argparse.ArgumentParser], None] | None) -> None:
    """The options of `fabscope matrix` (cli.py names the subcommand and its help line)."""
    where = m.add_mutually_exclusive_group(required=True)
    where.add_argument("--hosts", type=argtypes.host_list, help="H1,H2,...: the hosts (at least 2)")
    where.add_argument("--hostfile", type=argtypes.existing_file,
                       help="a file with one host per line (`HOST`, or Open MPI's `HOST slots=N`; # comments)")
    m.add_argument("--launcher", choices=["mpirun", "srun", "external"], default="mpirun",
                   help="what starts one agent per host (default mpirun); external: your own starter (pdsh, "
                        "clush, flux, a batch script) runs the agent command this prints on every host")
    m.add_argument("--token-file", type=argtypes.file_to_use_or_create, metavar="FILE",
                   help="--launcher external: the run's one-time token for the agents (created owner-only if "
                        "absent and removed afterwards; an existing one, e.g. made by a harness, is used)")
    m.add_argument("--coordinator", metavar="ADDR[:PORT]",
                   help="where the agents connect back to: an address of this host the hosts can reach "
                        "(default: listen on every address, agents use this host's name)")
    m.add_argument("--connect-timeout", type=argtypes.finite_float(1, 3600, unit="s"), default=60.0,
                   help="seconds for every agent to check in (default 60)")
    m.add_argument("--pattern", dest="patterns", type=pattern_list, default=["lat", "bw"],
                   help="lat, bw, bibw, comma-separated (default lat,bw)")
    m.add_argument("--schedule", choices=schedmod.SCHEDULES, default="all-pairs",
                   help="which pairs, round by round (default all-pairs)")
    m.add_argument("--pairs", type=argtypes.existing_file,
                   help="a file of pairs (`HOST_A HOST_B` per line) instead of --schedule")
    m.add_argument("--rounds", type=argtypes.int_range(1, 10**6), help="random: rounds (default 4); others: at most this many")
    m.add_argument("--seed", type=argtypes.int_range(0, 2**31), default=0, help="random: the seed (in the output)")
    m.add_argument("--parallel", type=argtypes.int_range(1, 10**6), default=None,
                   help="at most this many pairs measured at once (default: a whole round); 1 when the hosts "
                        "share CPUs, as the netns testbed's do, and latency matters")
    m.add_argument("--directions", choices=["both", "one"], default="both",
                   help="screen each pair in both directions (default) or one, retesting suspects")
    rule = m.add_argument_group("the rule (printed in the output)")
    rule.add_argument("--bw-fraction", type=argtypes.finite_float(0.05, 0.999), default=0.8,
                      help="bandwidth suspect below this fraction of the reference (default 0.8)")
    rule.add_argument("--lat-factor", type=argtypes.finite_float(1.01, 1000), default=2.0,
                      help="latency suspect above this multiple of the fabric median (default 2)")
    rule.add_argument("--line-rate", type=argtypes.finite_float(0.001, 10**6, unit=" Gb/s"),
                      help="Gb/s: judge bandwidth against this line rate instead of the fabric median")
    rule.add_argument("--robust-z", type=argtypes.finite_float(0, 100), default=4.0,
                      help="and at least this many spreads (1.4826 x MAD) from the fabric median (default 4)")
    rule.add_argument("--retests", type=argtypes.int_range(0, 10), default=2, help="retests per suspect at most (default 2)")
    rule.add_argument("--partners", type=argtypes.int_range(1, 100), default=3,
                      help="partners a suspect host is measured with before it is judged (default 3)")
    rule.add_argument("--node-share", type=argtypes.finite_float(0.05, 0.99), default=0.5,
                      help="a bad node is slow with more than this share of its partners (default 0.5)")
    from ..history import add_store_options

    add_store_options(m)
    m.add_argument("--format", choices=["text", "json"], default="text")
    m.add_argument("--csv", type=Path, metavar="FILE", help="also write the matrices as CSV to FILE")
    mpi = m.add_argument_group("--backend mpi (each pair a 2-rank MPI job)")
    mpi.add_argument("--mpi", choices=["openmpi", "mpich"], default="openmpi")
    mpi.add_argument("--mca", action="append", type=argtypes.key_value, metavar="KEY=VALUE")
    mpi.add_argument("--env", action="append", type=argtypes.key_value, metavar="KEY=VALUE")
    if add_engine_options is not None:
        add_engine_options(m)
    m.set_defaults(func=run_matrix, check=check_matrix)


def fill_agent_parser(a: argparse.ArgumentParser) -> None:
    """The options of `fabscope matrix-agent`."""
    a.add_argument("--coordinator", required=True, metavar="HOST:PORT")
    a.add_argument("--connect-timeout", type=argtypes.finite_float(1, 3600, unit="s"), default=60.0)
    a.add_argument("--idle-timeout", type=argtypes.finite_float(1, 86400, unit="s"), default=600.0)
    a.add_argument("--token-file", type=argtypes.existing_file, metavar="FILE",
                   help="the run's token (under `fabscope matrix --launcher external`; else it is in the environment)")
    a.set_defaults(func=run_agent_cmd)


def run_agent_cmd(ns: argparse.Namespace) -> int:
    from .agent import run_agent

    return run_agent(ns.coordinator, ns.connect_timeout, ns.idle_timeout, ns.token_file)


def read_hostfile(path: Path) -> list[str]:
    hosts: list[str] = []
    for lineno, raw in enumerate(path.read_text(errors="replace").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name = line.split()[0]
        argtypes.check(argtypes.hostname, f"--hostfile {path} line {lineno}", name)
        if name in hosts:
            raise FabscopeError(f"--hostfile {path} line {lineno}: {name} is listed twice", EXIT_USAGE)
        hosts.append(name)
    return hosts


def _engine_args(ns: argparse.Namespace) -> list[str]:
    return plan.argv_of(plan.options_given(ns))


def _schedule(ns: argparse.Namespace, hosts: list[str]) -> schedmod.Schedule:
    try:
        if ns.pairs:
            pairs = schedmod.parse_pairs(ns.pairs.read_text(errors="replace"), hosts, f"--pairs {ns.pairs}")
            return schedmod.Explicit.pack(len(hosts), pairs)
        return schedmod.make(ns.schedule, len(hosts), rounds=ns.rounds, seed=ns.seed)
    except schedmod.ScheduleError as exc:
        raise FabscopeError(str(exc), EXIT_USAGE) from exc


def check_matrix(ns: argparse.Namespace) -> None:
    """Everything refusable before a process starts: hosts, schedule, sizes, the engine's options."""
    ns.host_list = ns.hosts if ns.hosts else read_hostfile(ns.hostfile)
    hosts = ns.host_list
    if len(hosts) < 2:
        raise FabscopeError(f"a matrix needs at least 2 hosts; got {', '.join(hosts) or 'none'}", EXIT_USAGE)
    sizes = str(getattr(ns, "eng:sizes", ""))
    if ":" in sizes or "," in sizes:
        raise FabscopeError(f"--sizes {sizes}: a matrix judges one message size per pattern; give one size "
                            "(e.g. --sizes 64K), and run a sweep between two hosts with `fabscope run`", EXIT_USAGE)
    backend = str(getattr(ns, "eng:backend", "tcp"))
    _check_external(ns, backend)
    if backend != "mpi" and (ns.mca or ns.env):
        raise FabscopeError(f"--mca/--env apply only to --backend mpi, but this matrix is --backend {backend}: "
                            "drop them, or add --backend mpi", EXIT_USAGE)
    from ..launch.engine import validate_args

    binary = None
    if backend == "mpi":
        from ..launch.mpi_params import check_names
        from ..launch.mpirun import find_mpi_engine

        check_names(ns.mpi, (k for k, _ in ns.mca or []), (k for k, _ in ns.env or []))  # MPI ignores unknown ones
        try:
            binary = find_mpi_engine(ns.mpi)
        except FileNotFoundError as exc:
            raise FabscopeError(str(exc), EXIT_USAGE) from exc
    # --device names a device of the matrix hosts, not of this launch node: the agents check it there.
    local = [a for a in _engine_args(ns) if not a.startswith("--device=")]
    for pattern in ns.patterns:
        validate_args([*local, f"--pattern={pattern}"], binary)
    ns.schedule_obj = _schedule(ns, hosts)


def _check_external(ns: argparse.Namespace, backend: str) -> None:
    """--launcher external needs a fixed place for the agents to call and a token file to give them."""
    if ns.launcher != "external":
        if ns.token_file is not None:
            raise FabscopeError(f"--token-file applies only to --launcher external; {ns.launcher} passes the token "
                                "to the agents in their environment: drop it", EXIT_USAGE)
        return
    if backend == "mpi":
        raise FabscopeError("--launcher external --backend mpi: each MPI pair is a job of its own launcher; "
                            "use --launcher mpirun or srun", EXIT_USAGE)
    from ..session import control

    port = 0
    if ns.coordinator:
        try:
            port = control.split_hostport(ns.coordinator, 0)[1]
        except ValueError:
            port = 0
    if not port or ns.token_file is None:
        raise FabscopeError("--launcher external: give --coordinator ADDR:PORT (where the agents you start call "
                            "back, a fixed port) and --token-file FILE (the token you hand them, e.g. on a shared "
                            "file system)", EXIT_USAGE)


def run_matrix(ns: argparse.Namespace) -> int:
    started = time.monotonic()
    from ..results.matrix import MatrixRun
    from . import driver, render
    from .rules import Rule

    if not hasattr(ns, "schedule_obj"):
        check_matrix(ns)
    from ..history import recorder

    keep = recorder(ns, "matrix")  # opened (and closed) before anything runs: a bad --store fails up front
    if keep is not None:
        keep.close()
    hosts, sched = ns.host_list, ns.schedule_obj
    rule = Rule(bw_fraction=ns.bw_fraction, lat_factor=ns.lat_factor, line_rate_gbps=ns.line_rate,
                retests=ns.retests, partners=ns.partners, node_share=ns.node_share, robust_z=ns.robust_z)
    backend = str(getattr(ns, "eng:backend", "tcp"))
    # Every pair's measurement, as `fabscope run` builds one (plan.py); each pair adds its pattern and hosts.
    where: plan.Where = (plan.MpiLaunch(mpi=ns.mpi, launcher=ns.launcher, mca=tuple(ns.mca or ()),
                                        env=tuple(ns.env or ())) if backend == "mpi" else plan.Agents())
    pair_plan = plan.RunPlan.of(plan.options_given(ns), where)
    progress, stop_progress = _progress(sched.rounds * len(ns.patterns) * (2 if ns.directions == "both" else 1))
    try:
        if backend == "mpi":
            from .execute import MpiMeasurer

            measurer: Any = MpiMeasurer(pair_plan)
            result = driver.run(hosts, ns.patterns, sched, rule, measurer, backend=backend, progress=progress,
                                directions=ns.directions, parallel=ns.parallel, started=started)
            result.launcher = ns.launcher
        else:
            result = _run_with_agents(ns, hosts, sched, rule, backend, pair_plan.timeout_s, pair_plan.engine_args(),
                                      progress, started)
    finally:
        stop_progress()
    assert isinstance(result, MatrixRun)
    if ns.format == "json":
        sys.stdout.write(json.dumps(result.to_json(), indent=1, sort_keys=False) + "\n")
    else:
        sys.stdout.write(render.text(result))
    sys.stdout.flush()
    if ns.csv:
        try:
            ns.csv.write_text(render.csv_text(result))
        except OSError as exc:
            print(f"fabscope: --csv {ns.csv}: {exc.strerror}", file=sys.stderr)
    _store(ns, result)
    return result.exit_code


def _store(ns: argparse.Namespace, result: Any) -> None:
    """Append the run to the history store (every pair's record, and the matrix as its summary)."""
    if ns.no_store:
        return
    from ..store import save_matrix

    try:
        run_id = save_matrix(result, ns.store, ns.tag)
    except Exception as exc:  # the matrix is printed already; a store problem must not turn into a traceback
        print(f"fabscope: the matrix was not kept in the history store: {exc}", file=sys.stderr)
        return
    if run_id is not None:
        print(f"fabscope: kept as run {run_id} in the history (`fabscope history show {run_id}`)", file=sys.stderr)


def _run_with_agents(ns: argparse.Namespace, hosts: list[str], sched: schedmod.Schedule, rule: Any, backend: str,
                     timeout: float, args: list[str], progress: Any, started: float) -> Any:
    from . import driver
    from .execute import AgentMeasurer
    from .launch import agents_on

    with agents_on(ns, hosts, "matrix", 2) as agents:
        missing = [h for h in hosts if h not in agents]
        _check_device(ns, agents)
        measurer = AgentMeasurer(agents, args, timeout, getattr(ns, "eng:device", None) or None)
        for h in missing:
            measurer.unreachable[h] = f"its agent did not check in within {ns.connect_timeout:g} s"
        result = driver.run(hosts, ns.patterns, sched, rule, measurer, backend=backend, progress=progress,
                            directions=ns.directions, parallel=ns.parallel, started=started)
        result.launcher = ns.launcher
        result.unreachable = dict(measurer.unreachable)
        return result


def _check_device(ns: argparse.Namespace, agents: dict[str, Any]) -> None:
    """No silent fallback: a --device that is neither a netdev nor (for RDMA backends) left to the
    engine to check is refused before anything runs, naming what each host has."""
    device = getattr(ns, "eng:device", None)
    backend = str(getattr(ns, "eng:backend", "tcp"))
    if not device or backend != "tcp":
        return  # RDMA device names are checked by the engine itself on each host (it lists what exists)
    lacking = {h: agents[h] for h in ns.host_list if h in agents and device not in agents[h].addresses}
    if lacking:
        what = "; ".join(f"{h} has {', '.join(sorted(a.addresses)) or 'no netdev with IPv4'}" for h, a in lacking.items())
        raise FabscopeError(f"--device {device}: not a netdev on {', '.join(lacking)} ({what}); name a netdev every "
                            "host has", EXIT_USAGE)


def _progress(total: int) -> tuple[Any, Callable[[], None]]:
    """A progress bar (rounds done, time left) on stderr when it is a terminal (rich), else nothing."""
    if not sys.stderr.isatty():
        return None, lambda: None
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    except ImportError:
        return None, lambda: None
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task("matrix", total=total)
    bar.start()
    started = time.monotonic()

    def step(done: int, planned: int, what: str) -> None:
        bar.update(task, completed=done, total=planned, description=f"{what} ({time.monotonic() - started:.0f} s)")

    return step, bar.stop
