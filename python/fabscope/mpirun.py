"""Launch commands for the MPI builds of the engine (`fabscope-engine-mpi-<openmpi|mpich>`).

The MPI engine runs as 2 ranks: rank 1 is the server, rank 0 the client, and only rank 0 prints
result lines, so the front end reads the launcher's stdout like a client engine's. Every command
is wrapped in `timeout` so a stuck launcher (a rank that never starts, a hung MPI_Init) can never
hang the front end."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .engine import locate

MPI_FLAVOURS = ("openmpi", "mpich")
LAUNCHERS = ("mpirun", "srun")

# Grace between the deadline's TERM and a KILL: lets mpirun tear its ranks down.
_KILL_AFTER_S = 5


def _engine_name(mpi: str) -> str:
    return f"fabscope-engine-mpi-{mpi}"


def _check_flavour(mpi: str) -> None:
    if mpi not in MPI_FLAVOURS:
        raise ValueError(f"--mpi {mpi}: unknown MPI; choose one of {', '.join(MPI_FLAVOURS)}")


def find_mpi_engine(mpi: str) -> Path:
    """The MPI engine for one flavour: $FABSCOPE_ENGINE_DIR, this Python's prefix (the repo's
    .venv), PATH, then an uninstalled build in the checkout. FileNotFoundError says where it looked
    and which package builds it."""
    _check_flavour(mpi)
    name = _engine_name(mpi)
    path, candidates = locate(name)
    if path is not None:
        return path
    package = "libopenmpi-dev" if mpi == "openmpi" else "libmpich-dev"
    raise FileNotFoundError(
        f"cannot find {name}: looked in {', '.join(str(p.parent) for p in candidates)}. It is built "
        f"when {package} (mpicc.{mpi}) is installed: run `make setup`"
    )


def _engine_timeout(engine_args: list[str]) -> float:
    for i, arg in enumerate(engine_args):
        if arg.startswith("--timeout="):
            return float(arg.split("=", 1)[1])
        if arg == "--timeout" and i + 1 < len(engine_args):
            return float(engine_args[i + 1])
    return 10.0


def _sizes_count(engine_args: list[str]) -> int:
    for i, arg in enumerate(engine_args):
        value = arg.split("=", 1)[1] if arg.startswith("--sizes=") else None
        if arg == "--sizes" and i + 1 < len(engine_args):
            value = engine_args[i + 1]
        if value is not None:
            if ":" in value:
                return 33  # a power-of-two sweep: at most 2..8G
            return len(value.split(","))
    return 1


def default_deadline(engine_args: list[str]) -> float:
    """Outer deadline: the engine's own per-wait timeout for start-up plus each size. The engine
    normally ends far sooner; this only bounds a launcher or rank that never does."""
    per_wait = _engine_timeout(engine_args)
    return 30.0 + per_wait * (2 + _sizes_count(engine_args))


def _launcher_binary(launcher: str, mpi: str) -> str:
    if launcher == "srun":
        return "srun"
    # Debian installs both MPIs; plain `mpirun` is whichever the alternatives system chose.
    flavoured = f"mpirun.{mpi}"
    return flavoured if shutil.which(flavoured) else "mpirun"


def build_mpi_command(
    engine_args: list[str],
    mpi: str = "openmpi",
    launcher: str = "mpirun",
    np: int = 2,
    mca: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    deadline_s: float | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that runs the MPI engine under `launcher` with a hard deadline.

    `mca` is Open MPI's MCA parameters (--mca k v; OMPI_MCA_k under srun); `env` is exported to
    the ranks (UCX_TLS, UCX_NET_DEVICES, FI_PROVIDER, MPIR_CVAR_...)."""
    _check_flavour(mpi)
    if launcher not in LAUNCHERS:
        raise ValueError(f"--launcher {launcher}: choose one of {', '.join(LAUNCHERS)}")
    if np != 2:
        raise ValueError(f"np={np}: the MPI engine measures one pair: run it with 2 ranks")
    if mca and mpi != "openmpi":
        raise ValueError("MCA parameters are Open MPI's; MPICH takes MPIR_CVAR_* variables in env")
    engine = str(find_mpi_engine(mpi))
    extra_env = dict(env or {})
    full_env = dict(os.environ)
    full_env.update(extra_env)
    deadline = deadline_s if deadline_s is not None else default_deadline(engine_args)
    cmd = ["timeout", f"--kill-after={_KILL_AFTER_S}", f"{deadline:g}"]
    if launcher == "srun":
        for key, value in (mca or {}).items():
            full_env[f"OMPI_MCA_{key}"] = value
        cmd += ["srun", "-n", str(np), "--kill-on-bad-exit=1", "--export=ALL", engine, *engine_args]
        return cmd, full_env
    cmd.append(_launcher_binary(launcher, mpi))
    cmd += ["-np", str(np)]
    if mpi == "openmpi":
        if os.geteuid() == 0:
            # Open MPI refuses root unless told twice; tests and containers run as root.
            full_env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            full_env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        if len(os.sched_getaffinity(0)) < np:
            cmd.append("--oversubscribe")
        for key, value in (mca or {}).items():
            cmd += ["--mca", key, value]
        for key in extra_env:
            cmd += ["-x", key]
    else:
        # Hydra does not bind by default; two unbound spinning ranks can share one core and pay
        # a scheduler time slice per message (5.6 ms instead of 1 us measured here).
        cmd += ["-bind-to", "core"]
        for key, value in extra_env.items():
            cmd += ["-genv", key, value]
    cmd += [engine, *engine_args]
    return cmd, full_env
