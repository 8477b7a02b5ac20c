# SPDX-License-Identifier: BSD-3-Clause
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import EXIT_PEER, EXIT_USAGE
from .engine import engine_option, locate

MPI_FLAVOURS = ("openmpi", "mpich")
LAUNCHERS = ("mpirun", "srun")

# Grace between the deadline's TERM and a KILL: lets mpirun tear its ranks down.
KILL_AFTER_S = 5  # what `timeout` waits after its SIGTERM before SIGKILL

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


# Environment variables that decide which device or transport MPI uses: forwarded to the ranks
# explicitly (a real remote shell would not carry them) and recorded in transport.launcher.env.
REQUEST_ENV_PREFIXES = ("UCX_", "FI_", "OMPI_MCA_", "MPIR_CVAR_")
_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$")


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
    value = engine_option(engine_args, "timeout")
    return float(value) if value is not None else 10.0


def _sizes_count(engine_args: list[str]) -> int:
    value = engine_option(engine_args, "sizes")
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


def check_hosts(hosts: Sequence[str]) -> list[str]:
    """The two hosts of `run --hosts H1,H2` (rank 0 on H1, rank 1 on H2), checked: ValueError
    (exit 2) naming the problem for a count other than two, an empty or malformed name, or a host
    listed twice. Whether a host exists is the launcher's to find out (its own host handling)."""
    names = [h.strip() for h in hosts]
    if len(names) != 2:
        raise ValueError(f"--hosts {','.join(hosts)}: the MPI engine measures one pair: name exactly two hosts "
                         f"(rank 0 runs on the first, rank 1 on the second), not {len(names)}")
    for h in names:
        if not _HOST_RE.match(h):
            raise ValueError(f"--hosts {','.join(hosts)}: {h!r} is not a host name (letters, digits, '-', '.')")
    if names[0] == names[1]:
        raise ValueError(f"--hosts {','.join(hosts)}: {names[0]} is listed twice; name two different hosts, or use "
                         "--loopback for two ranks on this host")
    return names


def check_collective_hosts(hosts: Sequence[str]) -> list[str]:
    """The hosts of a collective (`run --backend mpi --pattern allreduce --hosts H1,...,Hn`): at least
    one, each a host name, none twice (ValueError, exit 2, otherwise). Ranks go to them in order,
    --ppn per host."""
    names = [h.strip() for h in hosts]
    for h in names:
        if not _HOST_RE.match(h):
            raise ValueError(f"--hosts {','.join(hosts)}: {h!r} is not a host name (letters, digits, '-', '.')")
    twice = [h for i, h in enumerate(names) if h in names[:i]]
    if twice:
        raise ValueError(f"--hosts {','.join(hosts)}: {twice[0]} is listed twice; use --ppn for more ranks per host")
    return names


@dataclass
class DeviceMapping:
    """How `--device NAME` reaches MPI: the MCA parameters and environment variables that restrict
    each path the library might take to that device, said in every record
    (transport.launcher.device_mapping) so that the verdict and the reader see what was asked."""

    device: str
    mca: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "mca": dict(self.mca), "env": dict(self.env), "note": self.note}




def device_mapping(
    mpi: str, engine_args: Sequence[str], mca: dict[str, str] | None = None, env: dict[str, str] | None = None
) -> DeviceMapping | None:
    """The explicit mapping of the engine's --device for this MPI, or None without --device.

    Open MPI: ``btl_tcp_if_include`` (pml ob1 over the tcp btl) and ``UCX_NET_DEVICES`` (pml ucx,
    btl uct); a device written DEV:PORT is an RDMA port, for UCX only. MPICH (Debian's is ch4:ucx):
    ``UCX_NET_DEVICES``. Each rank checks that the device exists on its host before MPI starts.
    A different value for the same setting given with --mca/--env is a contradiction: ValueError.
    ``--bind`` has no MPI meaning: ValueError (exit 2) with the fix."""
    bind = engine_option(engine_args, "bind")
    if bind:
        raise ValueError(f"--bind {bind} with --backend mpi: MPI picks each rank's source addresses itself; name "
                         "the device instead (--device NETDEV: Open MPI's btl_tcp_if_include and UCX_NET_DEVICES)")
    device = engine_option(engine_args, "device")
    if not device:
        return None
    mapping = DeviceMapping(device)
    rdma_port = ":" in device
    if mpi == "openmpi":
        # UCX only where it can carry the bytes: asked for (pml ucx / btl uct) or an RDMA port.
        # Elsewhere UCX_NET_DEVICES would only earn a "had no effect" note of our own making.
        pml = (mca or {}).get("pml") or (env or {}).get("OMPI_MCA_pml") or os.environ.get("OMPI_MCA_pml", "")
        btl = (mca or {}).get("btl") or (env or {}).get("OMPI_MCA_btl") or os.environ.get("OMPI_MCA_btl", "")
        uses_ucx = rdma_port or ("ucx" in pml and not pml.startswith("^")) or \
            ("uct" in btl and not btl.startswith("^"))
        notes = []
        if not rdma_port:
            mapping.mca["btl_tcp_if_include"] = device
            notes.append("btl_tcp_if_include for pml ob1's tcp btl")
        if uses_ucx:
            mapping.env["UCX_NET_DEVICES"] = device
            notes.append("UCX_NET_DEVICES for " + ("the RDMA port (pml ucx)" if rdma_port else "pml ucx / btl uct"))
        mapping.note = "Open MPI: " + "; ".join(notes)
    else:
        mapping.env["UCX_NET_DEVICES"] = device
        mapping.note = "MPICH ch4:ucx: UCX_NET_DEVICES"
    for given, mine, how in ((mca or {}, mapping.mca, "--mca"), (env or {}, mapping.env, "--env")):
        for key, value in mine.items():
            if key in given and given[key] != value:
                raise ValueError(f"--device {device} sets {key}={value}, but {how} {key}={given[key]} says otherwise; "
                                 f"drop one of them")
    return mapping


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
    hosts: Sequence[str] | None = None,
    ppn: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) that runs the MPI engine under `launcher` with a hard deadline.

    With `ppn` (a collective): `ppn` ranks on each of `hosts` (any number, check_collective_hosts),
    or `ppn` ranks on this host without hosts, in rank order host by host; np is then ppn x hosts.

    `mca` is Open MPI's MCA parameters (--mca k v; OMPI_MCA_k under srun); `env` is exported to
    the ranks (UCX_TLS, UCX_NET_DEVICES, FI_PROVIDER, MPIR_CVAR_...), and so is every UCX_*, FI_*
    and MPIR_CVAR_* variable of this process's environment (Open MPI forwards OMPI_MCA_* itself).
    The engine's --device is mapped onto MPI's own settings (device_mapping); --bind is refused.

    `hosts` (two names, check_hosts) puts rank 0 on the first and rank 1 on the second through the
    launcher's own host handling: ``mpirun -H H1,H2 --map-by node`` (Open MPI), ``mpiexec -hosts
    H1,H2 -ppn 1`` (MPICH hydra), ``srun --nodelist=H1,H2 --distribution=arbitrary`` (one task per
    node, in that order). Without hosts both ranks run on this host (mpirun) or on one node (srun).

    srun uses the MPI plugin of SRUN_MPI_PLUGIN, one CPU per rank, and waits at most the engine's
    --timeout for the allocation (--immediate). With check_launcher (the default) srun is asked
    first whether it has that plugin and, with hosts, whether those nodes are up (check_srun_nodes):
    LauncherUnavailable (a ValueError, exit 2) or NodesUnavailable (exit 3) if not. A launcher
    program that is not installed is LauncherUnavailable."""
    _check_flavour(mpi)
    if launcher not in LAUNCHERS:
        raise ValueError(f"--launcher {launcher}: choose one of {', '.join(LAUNCHERS)}")
    if ppn is None and np != 2:
        raise ValueError(f"np={np}: the MPI engine measures one pair: run it with 2 ranks")
    if mca and mpi != "openmpi":
        raise ValueError("MCA parameters are Open MPI's; MPICH takes MPIR_CVAR_* variables in env")
    group = check_collective_hosts(hosts) if hosts and ppn is not None else None
    if ppn is not None:
        if ppn < 1:
            raise ValueError(f"--ppn {ppn}: at least 1 rank per host")
        np = ppn * (len(group) if group else 1)
    pair = check_hosts(hosts) if hosts and ppn is None else None
    mapping = device_mapping(mpi, engine_args, mca, env)
    mca = dict(mca or {})
    extra_env = dict(env or {})
    if mapping:
        mca.update(mapping.mca)
        extra_env.update(mapping.env)
    engine = str(find_mpi_engine(mpi))
    full_env = dict(os.environ)
    full_env.update(extra_env)
    deadline = deadline_s if deadline_s is not None else default_deadline(engine_args)
    cmd = ["timeout", f"--kill-after={KILL_AFTER_S}", f"{deadline:g}"]
    if launcher == "srun":
        for key, value in mca.items():
            full_env[f"OMPI_MCA_{key}"] = value
        plugin = check_srun(mpi, full_env) if check_launcher else SRUN_MPI_PLUGIN[mpi]
        if (pair or group) and check_launcher:
            check_srun_nodes(pair or group or [], full_env)
        # A binding the user chose (SLURM_CPU_BIND; the netns testbed sets none) is kept: the
        # command line would override it.
        cpu_bind = [] if "SLURM_CPU_BIND" in full_env else [f"--cpu-bind={SRUN_CPU_BIND}"]
        where = ["--nodes=1"] if not pair else [
            "--nodes=2", "--ntasks-per-node=1", f"--nodelist={','.join(pair)}", "--distribution=arbitrary"]
        if group:
            where = [f"--nodes={len(group)}", f"--ntasks-per-node={ppn}", f"--nodelist={','.join(group)}",
                     "--distribution=block"]
        cmd += [
            "srun", f"--job-name=fabscope-{mpi}-{os.getpid()}", *where, f"--ntasks={np}",
            f"--mpi={plugin}", *cpu_bind, f"--immediate={_immediate_s(engine_args)}",
            "--kill-on-bad-exit=1", "--export=ALL", engine, *engine_args,
        ]
        return cmd, full_env
    binary = _launcher_binary(launcher, mpi)
    if shutil.which(binary, path=full_env.get("PATH")) is None:
        package = "openmpi-bin" if mpi == "openmpi" else "mpich"
        raise LauncherUnavailable(
            f"--launcher mpirun --mpi {mpi}: neither mpirun.{mpi} nor mpirun is on PATH ({full_env.get('PATH', '')}); "
            f"install {package} (`make setup`), or use --launcher srun"
        )
    if (pair or group) and check_launcher:
        probe_hosts(mpi, pair or group or [], full_env, float(_immediate_s(engine_args)))
    cmd += [binary, "-np", str(np)]
    forwarded = [k for k in full_env if k.startswith(REQUEST_ENV_PREFIXES) and not k.startswith("OMPI_MCA_")]
    if mpi == "openmpi":
        if os.geteuid() == 0:
            # Open MPI refuses root unless told twice; tests and containers run as root.
            full_env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            full_env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        if pair:
            cmd += ["-H", ",".join(pair), "--map-by", "node"]
        elif group:
            cmd += ["-H", ",".join(f"{h}:{ppn}" for h in group), "--map-by", f"ppr:{ppn}:node"]
        elif len(os.sched_getaffinity(0)) < np:
            cmd.append("--oversubscribe")
        if ppn is not None and "OMPI_MCA_hwloc_base_binding_policy" not in full_env \
                and "hwloc_base_binding_policy" not in mca:
            # A collective's ranks place themselves (--cpu, as an engine does: distinct CPUs of the
            # device's node per machine); Open MPI's own binding would leave each one CPU to "choose".
            # A binding the user chose is kept (the engine then says it was left on that CPU).
            cmd += ["--bind-to", "none"]
        for key, value in mca.items():
            cmd += ["--mca", key, value]
        for key in dict.fromkeys([*extra_env, *forwarded]):
            cmd += ["-x", key]
    else:
        if pair:
            cmd += ["-hosts", ",".join(pair), "-ppn", "1"]
        elif group:
            cmd += ["-hosts", ",".join(group), "-ppn", str(ppn)]
        # Hydra does not bind by default; two unbound spinning ranks can share one core and pay
        # a scheduler time slice per message (5.6 ms instead of 1 us measured here). A binding
        # the user chose (HYDRA_BINDING, which the command line would override) is kept: the netns
        # testbed sets none, as its "hosts" share this machine's CPUs and core 0 of each would be
        # one CPU for both ranks (results/cpushare.py warns when that happens anyway).
        if "HYDRA_BINDING" not in full_env:
            # A collective's ranks place themselves (--cpu), as above.
            cmd += ["-bind-to", "none" if ppn is not None else "core"]
        for key in dict.fromkeys([*extra_env, *forwarded]):
            cmd += ["-genv", key, full_env[key]]
    cmd += [engine, *engine_args]
    return cmd, full_env


class NodesUnavailable(RuntimeError):
    """A node asked for with --hosts cannot run a job step now (down, drained, unknown to Slurm
    as up): exit 3, nothing launched."""


def check_srun_nodes(hosts: Sequence[str], env: dict[str, str]) -> None:
    """Both nodes are known to Slurm and can take a job (`sinfo`): ValueError naming a node Slurm
    does not know (with the nodes it has), NodesUnavailable naming one that is down or drained."""
    try:
        out = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N|%T|%E"], capture_output=True,
                             text=True, env=env, timeout=15, check=False, stdin=subprocess.DEVNULL)
    except (subprocess.TimeoutExpired, FileNotFoundError) as exc:
        raise NodesUnavailable(f"--launcher srun: `sinfo` did not answer ({exc}); is slurmctld running? "
                               "Check with `scontrol ping`") from None
    if out.returncode != 0:
        raise NodesUnavailable(f"--launcher srun: `sinfo` failed: {(out.stderr or out.stdout).strip()[-300:]}; "
                               "is slurmctld running? Check with `scontrol ping`")
    states: dict[str, tuple[str, str]] = {}
    for line in out.stdout.splitlines():
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        states.setdefault(name.strip(), (state.strip(), reason.strip()))
    for host in hosts:
        if host not in states:
            raise ValueError(f"--hosts {','.join(hosts)}: Slurm has no node {host}; its nodes are "
                             f"{', '.join(sorted(states)) or 'none'} (`sinfo -N`)")
    for host in hosts:
        state, reason = states[host]
        if state.rstrip("*~#!%$@^-").startswith(("down", "drain", "fail", "inval", "unk", "futur")) or \
                state.endswith("*"):
            raise NodesUnavailable(
                f"--hosts {','.join(hosts)}: Slurm node {host} is {state}"
                f"{f' ({reason})' if reason and reason != 'none' else ''}: it cannot run a job step. Bring it back "
                f"(`scontrol update nodename={host} state=resume`, or start its slurmd) or name another node"
            )


def describe_launch(cmd: list[str], env: dict[str, str], mapping: DeviceMapping | None = None) -> dict[str, Any]:
    """What started the ranks, for the record's transport.launcher: the launcher, its deadline, the
    hosts it was asked for, and the settings that decide how ranks meet, where they run and which
    device they use. Read back from the argv build_mpi_command made and the environment it gave
    the launcher, so it says what really ran:

    - ``hosts``: [rank 0's host, rank 1's host] as asked (--hosts), or None (this host / one node);
    - ``mca``: every Open MPI MCA parameter given, from ``--mca K V`` and from OMPI_MCA_K in the
      environment (the argv wins, as in Open MPI);
    - ``env``: the request-relevant variables the ranks got (UCX_*, FI_*, OMPI_MCA_*, MPIR_CVAR_*);
    - ``device_mapping``: how --device was mapped onto those settings (DeviceMapping), or None."""
    deadline = float(cmd[2]) if cmd[:1] == ["timeout"] and len(cmd) > 3 else None
    argv = cmd[3:] if deadline is not None else list(cmd)
    name = Path(argv[0]).name if argv else ""
    out: dict[str, Any] = {"name": "srun" if name == "srun" else "mpirun", "binary": name, "deadline_s": deadline}
    hosts: list[str] | None = None
    mca = {k.removeprefix("OMPI_MCA_"): v for k, v in env.items() if k.startswith("OMPI_MCA_")}
    if out["name"] == "srun":
        opts: dict[str, str] = {}
        for arg in argv[1:]:
            if not arg.startswith("--"):
                break  # the engine: what follows are its own options
            key, _, value = arg[2:].partition("=")
            opts[key] = value
        out.update(
            mpi_plugin=opts.get("mpi"), cpu_bind=opts.get("cpu-bind") or env.get("SLURM_CPU_BIND"),
            job_name=opts.get("job-name"),
            allocation_wait_s=int(opts["immediate"]) if "immediate" in opts else None,
            allocation=_srun_allocation(opts),
            slurm_conf=env.get("SLURM_CONF") or "/etc/slurm/slurm.conf (srun's default)",
        )
        if opts.get("nodelist"):
            hosts = opts["nodelist"].split(",")
    else:
        for i, arg in enumerate(argv[:-1]):
            if arg in ("-H", "-hosts", "--host"):
                hosts = [h.split(":")[0] for h in argv[i + 1].split(",")]  # Open MPI's HOST:SLOTS
            elif arg == "--mca" and i + 2 < len(argv):
                mca[argv[i + 1]] = argv[i + 2]
    out["hosts"] = hosts
    # Open MPI's MCA parameters mean nothing to MPICH's ranks: never a request there.
    ompi = "mpich" not in name and not any("engine-mpi-mpich" in a for a in argv)
    out["mca"] = dict(sorted(mca.items())) if ompi else {}
    out["env"] = {k: v for k, v in sorted(env.items())
                  if k.startswith(REQUEST_ENV_PREFIXES) and (ompi or not k.startswith("OMPI_MCA_"))}
    out["device_mapping"] = mapping.as_dict() if mapping else None
    out["argv"] = argv
    return out


def placement_warnings(rec: dict[str, Any], hosts: Sequence[str] | None) -> list[str]:
    """Warnings for a record whose ranks ran elsewhere than --hosts asked (the engine reports each
    rank's host name): the launcher's host handling decided otherwise, and the reader must know."""
    if not hosts:
        return []
    out: list[str] = []
    for key, rank, want in (("host", 0, hosts[0]), ("peer_host", 1, hosts[1])):
        info = rec.get(key)
        got = info.get("hostname") if isinstance(info, dict) else None
        if isinstance(got, str) and got.split(".", 1)[0] != want.split(".", 1)[0]:
            out.append(f"rank {rank} ran on {got}, not on {want} as --hosts asked: the launcher placed it there")
    return out


def remote_shell(mpi: str, env: dict[str, str]) -> list[str] | None:
    """The remote shell the launcher starts its daemons with on other hosts (Open MPI's
    plm_rsh_agent, hydra's launcher-exec; ssh by default), or None when the launcher starts them
    some other way (hydra's slurm or fork launchers)."""
    if mpi == "openmpi":
        agent = env.get("OMPI_MCA_plm_rsh_agent", "ssh : rsh")
        for choice in agent.split(":"):
            words = choice.split()
            if words and shutil.which(words[0], path=env.get("PATH")):
                return words
        return agent.split(":")[0].split() or ["ssh"]
    launcher = env.get("HYDRA_LAUNCHER", "ssh")
    if launcher not in ("ssh", "rsh"):
        return None
    return (env.get("HYDRA_LAUNCHER_EXEC") or launcher).split()


def probe_hosts(mpi: str, hosts: Sequence[str], env: dict[str, str], timeout_s: float) -> None:
    """Before launching on other hosts: run `true` on each through the launcher's own remote shell,
    within timeout_s, so that an unknown or unreachable host is named at once (MPICH's hydra waits
    for its deadline instead; Open MPI says "ORTE was unable to reliably start one or more
    daemons"). LauncherUnavailable (exit 2) when that shell is not installed, NodesUnavailable
    (exit 3) naming the host and what the shell said otherwise."""
    shell = remote_shell(mpi, env)
    if shell is None:
        return
    if shutil.which(shell[0], path=env.get("PATH")) is None:
        setting = "OMPI_MCA_plm_rsh_agent" if mpi == "openmpi" else "HYDRA_LAUNCHER_EXEC"
        raise LauncherUnavailable(
            f"--hosts {','.join(hosts)}: the launcher starts processes on other hosts with {shell[0]}, which is not "
            f"installed ({setting}); install openssh-client, or set {setting}. For the netns testbed: "
            '`eval "$(fabscope testbed netns env)"`'
        )
    batch = ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, math.ceil(timeout_s))}"] \
        if Path(shell[0]).name == "ssh" else []
    for host in hosts:
        try:
            out = subprocess.run([*shell, *batch, host, "true"], capture_output=True, text=True, env=env,
                                 timeout=timeout_s, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise NodesUnavailable(
                f"--hosts {','.join(hosts)}: host {host} did not answer `{' '.join(shell)} {host} true` within "
                f"{timeout_s:g} s (--timeout); is it up and reachable from here?"
            ) from None
        if out.returncode != 0:
            said = (out.stderr or out.stdout).strip()[-400:] or f"exit {out.returncode}"
            hint = ""
            if "Could not resolve hostname" in said:
                hint = ('. For the netns testbed\'s hosts: `eval "$(fabscope testbed netns env)"` (the launcher '
                        "then reaches them with the testbed's agent)")
            raise NodesUnavailable(
                f"--hosts {','.join(hosts)}: cannot start a process on {host} the way the launcher would "
                f"(`{' '.join(shell)} {host} true`): {said}{hint}"
            )


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


def _srun_allocation(opts: dict[str, str]) -> str:
    """What srun's options ask Slurm for, in words: "one node with 2 CPUs", "3 nodes (fs-a,fs-b,fs-c)
    with 2 CPUs each" (one CPU per rank)."""
    tasks = opts.get("ntasks", "?")
    nodes = opts.get("nodes", "1")
    if nodes == "1":
        return f"one node with {tasks} CPU{'s' if tasks != '1' else ''}"
    per = opts.get("ntasks-per-node", "?")
    where = f" ({opts['nodelist']})" if opts.get("nodelist") else ""
    return f"{nodes} nodes{where} with {per} CPU{'s' if per != '1' else ''} each"


def explain_launch_failure(
    launch: dict[str, Any], exit_code: int, message: str, elapsed_s: float | None = None
) -> tuple[str, int] | None:
    """A launcher-level failure (not the engine's) said plainly with its exit code, or None when
    the message is already the engine's own. `launch` is describe_launch's dict; `message` what
    the run ended with (the launcher's stderr when no rank reported an error); `elapsed_s` how long
    it ran (137 is also a launcher whose ranks were killed early: only a run that lasted to its
    deadline was stopped by it)."""
    name = launch.get("name", "mpirun")
    deadline = launch.get("deadline_s")
    timed_out = exit_code == 124 or (exit_code == 137 and (elapsed_s is None or deadline is None
                                                          or elapsed_s >= float(deadline) - 1))
    if timed_out and deadline is not None:
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
        # "Requested node configuration is not available": no node has that many CPUs, now or ever.
        never = ("; or a node has fewer CPUs for jobs than that: lower --ppn" if "configuration is not available" in said
                 else "")
        return (f"srun could not get {launch.get('allocation') or 'its nodes'} within {launch.get('allocation_wait_s')} "
                f"s (--immediate, the engine's --timeout): {said}. The partition is busy, drained or down: see `sinfo` "
                f"(SLURM_CONF={launch.get('slurm_conf')}); raise --timeout to wait longer{never}", EXIT_PEER)
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
