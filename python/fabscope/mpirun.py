"""Launch commands for the MPI builds of the engine (`fabscope-engine-mpi-<openmpi|mpich>`).

The MPI engine runs as 2 ranks: rank 1 is the server, rank 0 the client, and only rank 0 prints
result lines, so the front end reads the launcher's stdout like a client engine's. Every command
is wrapped in `timeout` so a stuck launcher (a rank that never starts, a hung MPI_Init) can never
hang the front end.

Under srun the ranks are started by Slurm itself, and they find each other through the PMI
server of Slurm's MPI plugin (`srun --mpi=...`), which must be one the MPI library speaks. The
wrong one is not an error Slurm can see: MPICH's ranks start as two singletons, Open MPI's abort
in MPI_Init. So each flavour has its plugin, and a Slurm that lacks it is refused before launch."""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .engine import locate
from .errors import EXIT_PEER, EXIT_USAGE

MPI_FLAVOURS = ("openmpi", "mpich")
LAUNCHERS = ("mpirun", "srun")

# Grace between the deadline's TERM and a KILL: lets mpirun tear its ranks down.
_KILL_AFTER_S = 5

# The PMI each Debian 12 build speaks when srun starts its ranks (checked with Slurm 22.05):
# Open MPI 4.1 is a PMIx client only (its pmix framework has ext3x, no s1/s2 for Slurm's PMI-1/2);
# MPICH 4.0 (hydra build) has only its built-in PMI-1/PMI-2 wire protocol, which Slurm's pmi2
# plugin serves, and no PMIx client.
SRUN_MPI_PLUGIN = {"openmpi": "pmix", "mpich": "pmi2"}
# One hardware thread per rank: two spinning ranks on one CPU pay a scheduler time slice per
# message. Not "cores": with SelectTypeParameters=CR_Core on a node with SMT, Slurm gives the two
# tasks one core (its two threads), and binding to cores then puts both ranks on the same CPU set.
# On a node without SMT the two are the same (checked here: masks 0x1 and 0x2).
SRUN_CPU_BIND = "threads"
_SRUN_FIX = {
    "pmix": "Slurm's pmix plugin (mpi_pmix*.so in slurm-wlm-basic-plugins on Debian, built --with-pmix "
            "elsewhere) and the PMIx library it loads (libpmix-dev on Debian) on every node",
    "pmi2": "Slurm's pmi2 plugin (mpi_pmi2.so, in slurm-wlm-basic-plugins on Debian) on every node",
}


class LauncherUnavailable(ValueError):
    """The launcher cannot start this MPI here; the message says what was asked, what is
    missing and the fix. A usage error (exit 2): nothing was launched."""


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


def _immediate_s(engine_args: list[str]) -> int:
    return max(1, math.ceil(_engine_timeout(engine_args)))


def srun_mpi_plugins(env: dict[str, str]) -> list[str]:
    """The MPI plugin types this Slurm's srun offers (`srun --mpi=list`)."""
    try:
        out = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, env=env, timeout=15,
                             check=False, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise LauncherUnavailable(
            "--launcher srun: `srun --mpi=list` did not answer within 15 s; check that Slurm's "
            "configuration is readable (SLURM_CONF, /etc/slurm/slurm.conf)"
        ) from None
    text = out.stdout + out.stderr
    if out.returncode != 0:
        raise LauncherUnavailable(
            f"--launcher srun: `srun --mpi=list` failed (exit {out.returncode}): {text.strip()[-400:]}"
        )
    # "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\nspecific pmix plugin versions available: ..."
    return [line.strip() for line in text.splitlines() if line.startswith(("\t", " ")) and line.strip()]


def check_srun(mpi: str, env: dict[str, str]) -> str:
    """The srun MPI plugin `mpi` needs, after checking that srun is here and offers it.
    LauncherUnavailable (before anything is launched) otherwise."""
    _check_flavour(mpi)
    plugin = SRUN_MPI_PLUGIN[mpi]
    if shutil.which("srun", path=env.get("PATH")) is None:
        raise LauncherUnavailable(
            f"--launcher srun --mpi {mpi}: srun is not on PATH. Install Slurm's client (slurm-client on "
            "Debian) on a node of a Slurm cluster, or use --launcher mpirun"
        )
    conf = env.get("SLURM_CONF")
    if conf and not Path(conf).is_file():
        # srun itself would retry reading it for 60 s before giving up.
        raise LauncherUnavailable(
            f"--launcher srun: SLURM_CONF={conf} is not a file; point SLURM_CONF at the cluster's "
            "slurm.conf, or unset it to use /etc/slurm/slurm.conf"
        )
    offered = srun_mpi_plugins(env)
    if plugin not in offered:
        raise LauncherUnavailable(
            f"--launcher srun --mpi {mpi}: {mpi} needs srun --mpi={plugin} ({_why_plugin(mpi)}), but this "
            f"Slurm offers only {', '.join(offered) or 'no MPI plugins'} (`srun --mpi=list`"
            f"{f' with SLURM_CONF={conf}' if conf else ''}). Fix: install {_SRUN_FIX[plugin]}; or run it "
            f"with --launcher mpirun"
        )
    return plugin


def _why_plugin(mpi: str) -> str:
    if mpi == "openmpi":
        return "Open MPI is a PMIx client only"
    return "MPICH's built-in PMI speaks PMI-1/PMI-2, not PMIx"


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
    check_launcher: bool = True,
) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that runs the MPI engine under `launcher` with a hard deadline.

    `mca` is Open MPI's MCA parameters (--mca k v; OMPI_MCA_k under srun); `env` is exported to
    the ranks (UCX_TLS, UCX_NET_DEVICES, FI_PROVIDER, MPIR_CVAR_...).

    srun puts both ranks on one node of the cluster SLURM_CONF (or /etc/slurm) names, with the
    MPI plugin of SRUN_MPI_PLUGIN, one CPU each, and waits at most the engine's --timeout for
    the allocation (--immediate). With check_launcher (the default) srun is asked first whether
    it has that plugin: LauncherUnavailable (a ValueError) if not."""
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
        plugin = check_srun(mpi, full_env) if check_launcher else SRUN_MPI_PLUGIN[mpi]
        cmd += [
            "srun", f"--job-name=fabscope-{mpi}-{os.getpid()}", "--nodes=1", f"--ntasks={np}",
            f"--mpi={plugin}", f"--cpu-bind={SRUN_CPU_BIND}", f"--immediate={_immediate_s(engine_args)}",
            "--kill-on-bad-exit=1", "--export=ALL", engine, *engine_args,
        ]
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


def describe_launch(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """What started the ranks, for the record's transport.launcher: the launcher, its deadline and
    the settings that decide how ranks meet and where they run. Read back from the argv
    build_mpi_command made, so it says what really ran."""
    deadline = float(cmd[2]) if cmd[:1] == ["timeout"] and len(cmd) > 3 else None
    argv = cmd[3:] if deadline is not None else list(cmd)
    name = Path(argv[0]).name if argv else ""
    out: dict[str, Any] = {"name": "srun" if name == "srun" else "mpirun", "binary": name, "deadline_s": deadline}
    if out["name"] == "srun":
        opts: dict[str, str] = {}
        for arg in argv[1:]:
            if not arg.startswith("--"):
                break  # the engine: what follows are its own options
            key, _, value = arg[2:].partition("=")
            opts[key] = value
        out.update(
            mpi_plugin=opts.get("mpi"), cpu_bind=opts.get("cpu-bind"), job_name=opts.get("job-name"),
            allocation_wait_s=int(opts["immediate"]) if "immediate" in opts else None,
            slurm_conf=env.get("SLURM_CONF") or "/etc/slurm/slurm.conf (srun's default)",
        )
    out["argv"] = argv
    return out


_SRUN_ERROR = re.compile(r"^srun: (?:error|fatal): (.*)$", re.MULTILINE)
# Open MPI's help boxes (between lines of dashes) and MPICH's "BAD TERMINATION" box (between
# lines of '='): the launcher's account of a rank that exited non-zero, after the rank's own
# message.
_LAUNCHER_BOX = re.compile(r"^(-{20,}|={20,})$\n.*?^\1$\n?", re.MULTILINE | re.DOTALL)


def strip_launcher_boxes(message: str) -> str:
    """The ranks' own words without the launcher's boxes about them; the whole text when that
    is all there is."""
    stripped = _LAUNCHER_BOX.sub("", message).strip()
    return stripped or message.strip()


def explain_launch_failure(launch: dict[str, Any], exit_code: int, message: str) -> tuple[str, int] | None:
    """A launcher-level failure (not the engine's) said plainly with its exit code, or None when
    the message is already the engine's own. `launch` is describe_launch's dict; `message` what
    the run ended with (the launcher's stderr when no rank reported an error)."""
    name = launch.get("name", "mpirun")
    deadline = launch.get("deadline_s")
    if exit_code in (124, 137) and deadline is not None:
        return (f"{name} did not finish within its deadline of {deadline:g} s and was stopped; a rank never "
                f"started or hung (in MPI_Init?). What it said: {message.strip()[-600:] or 'nothing'}", EXIT_PEER)
    if name != "srun":
        return None
    errors = _SRUN_ERROR.findall(message)
    said = "; ".join(errors) or message.strip()[-400:]
    plugin = launch.get("mpi_plugin")
    if any("contact slurm controller" in e.lower() or "slurm_load" in e for e in errors):
        return (f"srun cannot reach the Slurm controller ({said}); is slurmctld running for "
                f"SLURM_CONF={launch.get('slurm_conf')}? Check with `scontrol ping`", EXIT_PEER)
    if any("Unable to allocate resources" in e or "Requested nodes are busy" in e for e in errors):
        return (f"srun could not get one node with 2 CPUs within {launch.get('allocation_wait_s')} s (--immediate, "
                f"the engine's --timeout): {said}. The partition is busy, drained or down: see `sinfo` "
                f"(SLURM_CONF={launch.get('slurm_conf')}); raise --timeout to wait longer", EXIT_PEER)
    if any("MPI type" in e or "mpi plugin" in e.lower() or "PMIx library" in e for e in errors):
        return (f"srun cannot load its --mpi={plugin} plugin: {said}. Fix: install {_SRUN_FIX.get(str(plugin), plugin)}",
                EXIT_USAGE)
    # The ranks ran but did not meet: the MPI library did not speak the plugin's PMI.
    if "not built with SLURM's PMI support" in message:
        seen = "Open MPI aborted in MPI_Init: \"not built with SLURM's PMI support\""
    elif "--listen ADDR" in message:
        seen = "each rank started as an MPI singleton and then asked for --peer/--listen"
    else:
        return None
    return (f"the 2 ranks started by srun --mpi={plugin} did not find each other ({seen}): this MPI build does "
            f"not speak the PMI of Slurm's {plugin} plugin", EXIT_USAGE)
