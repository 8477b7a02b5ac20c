# SPDX-License-Identifier: BSD-3-Clause
"""A run plan: what the engines on both hosts are told, built in one place.

`fabscope run`, the loopback suite, the two-host suite and the matrix's MPI pairs each describe a
measurement as a `RunPlan`: the engine's options (names checked against the engine's own option
table, the single source of options), where the two ends run (`Loopback`: both here; `Peer`:
against `fabscope serve`; `MpiLaunch`: two ranks under a launcher) and the deadline. `execute` is
the one function that starts a plan and returns its typed records and outcome, and `exit_code` the
one rule that turns an outcome into a command's exit code. A setting given to a plan reaches the
engines the same way whichever command built it: the two-host suite once lost its rows' data-path
setting on a path of its own."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import EXIT_MEASURE, EXIT_MISROUTED, EXIT_OK, EXIT_PEER, EXIT_UNSUPPORTED, EXIT_USAGE, FabscopeError
from ..results import Result
from ..session.auth import Key
from ..session.control import PeerBusy
from . import runner
from .rspreload import Preload, explain_failure

OnResult = Callable[[Result], None]

DEFAULT_TIMEOUT_S = 10.0
_BUSY_RETRY_S = 0.25


@dataclass(frozen=True)
class Loopback:
    """Both engines on this host over 127.0.0.1; pinned to two different CPUs unless pin is False."""

    pin: bool = True


@dataclass(frozen=True)
class Peer:
    """The client engine here against `fabscope serve` at `address` (HOST:PORT). `wait_if_busy`:
    back-to-back runs (a suite's rows) can find serve still ending the previous run's engine; "busy"
    is then retried until the plan's deadline instead of being the run's failure."""

    address: str
    key: Key | None = field(default=None, repr=False)
    wait_if_busy: bool = False


@dataclass(frozen=True)
class MpiLaunch:
    """Two ranks of an MPI engine under `launcher`; hosts (A, B) puts rank 0 on A and rank 1 on B,
    none puts both on this host."""

    mpi: str = "openmpi"
    launcher: str = "mpirun"
    hosts: tuple[str, ...] = ()
    mca: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    # A collective: ranks per host (on this host without hosts); None for the two ranks of a pair.
    ppn: int | None = None


@dataclass(frozen=True)
class Agents:
    """Each pair's two engines started on their hosts by the matrix's agents (matrix/agent.py adds
    --listen / --peer); the matrix coordinator runs such a plan, not `execute`."""


Where = Loopback | Peer | MpiLaunch | Agents


# The dest prefix of the engine options a command's parser takes from the engine's table
# (cli._add_engine_options): "eng:sizes" holds --sizes.
ENGINE_DEST = "eng:"


def options_given(ns: argparse.Namespace) -> list[tuple[str, str]]:
    """The engine options given on a command line, by name, in the parser's order (`run`, `matrix`)."""
    return [(k[len(ENGINE_DEST):], str(v)) for k, v in vars(ns).items() if k.startswith(ENGINE_DEST)]


def argv_of(options: Iterable[tuple[str, str]]) -> list[str]:
    """Engine options as the engine's argv (`--name=value`), in the order given."""
    return [f"--{name}={value}" for name, value in options]


def known_option_names() -> frozenset[str]:
    """Every option name of the engine's table (core rows and each built backend's rows)."""
    from .engine import option_table

    table = option_table()
    names = {str(row["name"]) for row in table["core"]}
    for backend in table["backends"].values():
        names.update(str(row["name"]) for row in backend["options"])
    return frozenset(names)


@dataclass(frozen=True)
class RunPlan:
    """One measurement: engine options by name (in the order given), where the ends run, the deadline."""

    options: tuple[tuple[str, str], ...]
    where: Where
    preload: Preload | None = None  # the engines under an LD_PRELOAD library (rspreload.py)

    @classmethod
    def of(cls, options: Mapping[str, object] | Iterable[tuple[str, object]], where: Where,
           preload: Preload | None = None) -> RunPlan:
        """A plan from option names and values. A name the engine does not know, or one that sets a
        process's mode (the plan's `where` does), is a programming error here, not a user's: the
        CLI's parser only offers the table's names."""
        pairs = list(options.items() if isinstance(options, Mapping) else options)
        from .engine import mode_option_names

        known = known_option_names() - mode_option_names()  # a plan's `where` decides the modes
        bad = [name for name, _ in pairs if name not in known]
        if bad:
            raise ValueError(f"run plan: not engine measurement options: {', '.join(bad)}")
        return cls(tuple((name, str(value)) for name, value in pairs), where, preload)

    def get(self, name: str, default: str | None = None) -> str | None:
        for key, value in reversed(self.options):
            if key == name:
                return value
        return default

    @property
    def backend(self) -> str:
        return self.get("backend", "tcp") or "tcp"

    @property
    def timeout_s(self) -> float:
        return float(self.get("timeout") or DEFAULT_TIMEOUT_S)

    def with_options(self, **changes: object) -> RunPlan:
        """The same plan with options set (keyword names use _ for -), e.g. with_options(pattern="bw")."""
        named = {k.replace("_", "-"): str(v) for k, v in changes.items()}
        kept = [(k, v) for k, v in self.options if k not in named]
        return RunPlan.of([*kept, *named.items()], self.where, self.preload)

    def engine_args(self) -> list[str]:
        """The options as the engine's argv (`--name=value`), in the order given."""
        return argv_of(self.options)


def execute(plan: RunPlan, on_record: OnResult | None = None) -> runner.RunOutcome:
    """Starts the plan's engines and waits for them (each wait has the plan's deadline). Typed records
    (path verdict attached) go to on_record as they arrive and into the outcome. FabscopeError: the
    plan cannot start (exit 2 for what the launcher refuses, exit 3 for hosts it cannot reach, or a
    peer whose session cannot be opened)."""
    return _complete(plan, _start(plan, on_record))


def _start(plan: RunPlan, on_record: OnResult | None) -> runner.RunOutcome:
    args, timeout = plan.engine_args(), plan.timeout_s
    where = plan.where
    env = plan.preload.engine_env() if plan.preload else None
    amend = plan.preload.amend_record if plan.preload else None
    if isinstance(where, Loopback):
        return _explained(plan, runner.run_loopback(args + ["--format=json"], timeout, on_record, pin=where.pin,
                                                    env=env, amend=amend))
    if isinstance(where, Peer):
        give_up = time.monotonic() + timeout
        while True:
            try:
                return _explained(plan, runner.run_peer(args + ["--format=json"], where.address, timeout, on_record,
                                                        key=where.key, env=env, amend=amend))
            except PeerBusy:
                if not where.wait_if_busy or time.monotonic() >= give_up:
                    raise
                time.sleep(_BUSY_RETRY_S)
    if isinstance(where, Agents):
        raise ValueError("a plan for the matrix's agents is run by the matrix coordinator (matrix/execute.py)")
    from .mpirun import NodesUnavailable

    try:
        return runner.run_mpi(args, timeout, on_record, mpi=where.mpi, launcher=where.launcher,
                              mca=dict(where.mca) or None, env=dict(where.env) or None, hosts=list(where.hosts) or None,
                              ppn=where.ppn)
    except (ValueError, FileNotFoundError) as exc:
        raise FabscopeError(str(exc), EXIT_USAGE) from exc
    except NodesUnavailable as exc:
        raise FabscopeError(str(exc), EXIT_PEER) from exc


def _complete(plan: RunPlan, outcome: runner.RunOutcome) -> runner.RunOutcome:
    """A run that ended without error but without a result for every size it asked (a record lost
    on the way) fails, naming the sizes that came: never a shorter table without a word."""
    sizes = plan.get("sizes") or ""
    asked = [s for s in sizes.split(",") if s] if ":" not in sizes else []
    if not outcome.error and outcome.records and len(outcome.records) < len(asked):
        came = ", ".join(f"{r.size} B" for r in outcome.records)
        outcome.error = (f"results came for {len(outcome.records)} of the {len(asked)} sizes asked (--sizes {sizes}): "
                         f"{came}; the others were lost though the engine ended without an error")
        outcome.exit_code = EXIT_MEASURE
    return outcome


def _explained(plan: RunPlan, outcome: runner.RunOutcome) -> runner.RunOutcome:
    """The preload's reading of a failure (rspreload.explain_failure), where the run had one."""
    if plan.preload and outcome.error:
        outcome.error = explain_failure(outcome.error)
    return outcome


def execute_row(plan: RunPlan, on_record: OnResult | None = None) -> runner.RunOutcome:
    """`execute` for one row of many (suites, matrix pairs): a run that cannot start is that row's
    failure, in its outcome; bad usage (exit 2) is still raised, since every row would share it."""
    try:
        return execute(plan, on_record)
    except FabscopeError as exc:
        if exc.exit_code == EXIT_USAGE:
            raise
        return runner.RunOutcome(error=exc.message, exit_code=exc.exit_code)


def exit_code(outcome: runner.RunOutcome) -> int:
    """The exit-code rule of a run: its error's code; else 5 when any result's bytes went elsewhere
    than asked (the numbers are not what was asked for); else 0."""
    if outcome.error:
        return outcome.exit_code or EXIT_MEASURE
    if any(r.misrouted for r in outcome.records):
        return EXIT_MISROUTED
    return EXIT_OK


def rows_exit_code(outcomes: Iterable[runner.RunOutcome]) -> int:
    """The exit-code rule of many runs (a suite's rows): 5 when any row's bytes went elsewhere than
    asked (the table is not what was asked for: the loudest outcome), else 4 when any row failed (a
    row its backend cannot run, exit 6, is a note, not a failure), else 0."""
    done = list(outcomes)
    if any(r.misrouted for o in done for r in o.records):
        return EXIT_MISROUTED
    return EXIT_MEASURE if any(o.exit_code not in (EXIT_OK, EXIT_UNSUPPORTED) for o in done) else EXIT_OK
