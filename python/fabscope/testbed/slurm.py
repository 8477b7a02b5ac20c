# SPDX-License-Identifier: BSD-3-Clause
"""A one-node Slurm on this host, for running `fabscope run --backend mpi --launcher srun` for real;
or (``up --netns``, ``up(dir, netns_hosts=[...])``) one node per host of the netns testbed: node
fs-a is ``slurmd -N fs-a`` running inside host fs-a (netns.ns_exec_argv), at its mgmt address,
with a spool, pid file and log of its own (DIR/spool/fs-a, DIR/slurmd-fs-a.log), while munged and
slurmctld run here and are reached at the testbed head's address, so ``srun -N 2 -w fs-a,fs-b``
and ``fabscope run --launcher srun --hosts fs-a,fs-b`` place ranks on two "nodes".

Everything lives in one state directory the caller chooses; nothing of the system's own Slurm or
munge is read or changed (not /etc/slurm, not /etc/munge, not /run/munge, not ports 6817/6818)::

    DIR/slurm.conf         generated: this host is the only node (its real hostname and CPU
                           topology from `slurmd -C`), one partition, private ports and paths
    DIR/munge.key          a random key (0400); DIR/munge.sock is this cluster's munged
    DIR/state, DIR/spool   slurmctld's StateSaveLocation, slurmd's SlurmdSpoolDir, and DIR/tmp
                           the jobs' TmpFS
    DIR/<daemon>.pid       the pid of each daemon this module started (munged, slurmctld, slurmd)
    DIR/<daemon>.log       what each daemon said (slurmd.out: slurmd's own console, with the
                           errors it prints before it opens its log)

The daemons run in the foreground (-F / -D), each in a session of its own; their pid files hold
pid and start time, so a stop signals exactly the processes it started, never a recycled pid.
Clients (srun, sinfo, ...) find the cluster through ``SLURM_CONF=DIR/slurm.conf``
(:meth:`Cluster.env`). Why these plugins: the container this was built in has no usable cgroups,
so ProctrackType=proctrack/linuxproc (process tree from /proc) and TaskPlugin=task/affinity
(sched_setaffinity, which is all `srun --cpu-bind` needs).

Usage::

    python -m fabscope.testbed.slurm up --dir build/slurm
    SLURM_CONF=build/slurm/slurm.conf fabscope run --loopback --backend mpi --launcher srun
    python -m fabscope.testbed.slurm down --dir build/slurm

`up` is idempotent: a cluster that is already up and idle is left alone; a half-started one is
stopped and started again. Every wait has a deadline; a daemon that does not come up fails the
`up` with the daemon's log tail.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import argtypes
from . import preflight
from .lock import exclusive

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("srun", "sinfo", "squeue", "scancel", "scontrol")
# The partition every job of this cluster lands in.
PARTITION = "fabscope"
# Seconds between a job's SIGTERM and SIGKILL when it is cancelled (Slurm's default is 30).
KILL_WAIT_S = 2


class TestbedError(RuntimeError):
    """A testbed step failed; the message says what, why, and how to fix it."""

    __test__ = False  # not a pytest test class, despite the name


@dataclass(frozen=True)
class Cluster:
    """A running one-node cluster: where it lives and how clients reach it."""

    state_dir: Path
    node: str
    cpus: int
    slurmctld_port: int
    slurmd_port: int
    # With --netns: one node per netns testbed host (its name), each slurmd inside that host.
    nodes: tuple[str, ...] = ()

    @property
    def conf(self) -> Path:
        return self.state_dir / "slurm.conf"

    @property
    def all_nodes(self) -> tuple[str, ...]:
        return self.nodes or (self.node,)

    @property
    def daemons(self) -> tuple[str, ...]:
        """munged, slurmctld, then one slurmd per node (``slurmd`` for the one-node cluster,
        ``slurmd-HOST`` for each netns host)."""
        return ("munged", "slurmctld", *(slurmd_daemon(n) for n in self.nodes)) if self.nodes else DAEMONS

    def env(self) -> dict[str, str]:
        """What a client (srun, sinfo, `fabscope run --launcher srun`) needs to use this cluster."""
        return {"SLURM_CONF": str(self.conf)}


# --------------------------------------------------------------------------
# paths, processes, commands
# --------------------------------------------------------------------------


def slurmd_daemon(node: str) -> str:
    """The name this module keeps a netns node's slurmd under (pid file, console log)."""
    return f"slurmd-{node}"


def _node_of(daemon: str) -> str | None:
    return daemon.removeprefix("slurmd-") if daemon.startswith("slurmd-") else None


def missing_tools() -> list[str]:
    """The Slurm and munge programs this testbed needs that are not on PATH."""
    return preflight.not_on_path((*DAEMONS, *CLIENTS))


def _require_tools() -> None:
    missing = missing_tools()
    if missing:
        raise TestbedError(
            f"the Slurm testbed needs {', '.join(missing)} but they are not on PATH; install them with "
            "`make setup` (or `apt-get install munge slurmctld slurmd slurm-client slurm-wlm-basic-plugins`)"
        )


def _require_root() -> None:
    preflight.require_root(TestbedError, "slurmd starts job steps as their owner and must run as root",
                           "sudo python -m fabscope.testbed.slurm up --dir DIR")


def _pid_file(state_dir: Path, daemon: str) -> Path:
    return state_dir / f"{daemon}.pid"


def _log_file(state_dir: Path, daemon: str) -> Path:
    return state_dir / f"{daemon}.log"


def _console_file(state_dir: Path, daemon: str) -> Path:
    """Where a daemon's stdout and stderr go: its log, except for slurmd, which writes its log file
    itself (for its slurmstepds) and copies every line to stderr when in the foreground."""
    return state_dir / f"{daemon}.out" if daemon.startswith("slurmd") else _log_file(state_dir, daemon)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"({path} does not exist)"
    tail = text.splitlines()[-lines:]
    return "\n".join(f"  | {line}" for line in tail) if tail else f"({path} is empty)"


def _client_env(state_dir: Path) -> dict[str, str]:
    """This process's environment without any Slurm job context, pointed at the private config.

    A SLURM_JOB_ID inherited from an outer allocation (a CI job run under Slurm) would make srun
    create a step in a job this cluster has never heard of."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(state_dir / "slurm.conf")
    return env


def _client(state_dir: Path, argv: Sequence[str], timeout_s: float = 10.0) -> subprocess.CompletedProcess[str]:
    """A Slurm client command against this cluster; a client that hangs counts as failed."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False,
            env=_client_env(state_dir), stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(list(argv), 124, "", f"{argv[0]} did not answer within {timeout_s:g} s")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: [state, ppid, ..., starttime at index 19, ...]."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return []


def _alive(pid: int) -> bool:
    """True while pid runs (a zombie child of ours is reaped and counts as gone)."""
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    stat = _stat(pid)
    return bool(stat) and stat[0] != "Z"


def _start_time(pid: int) -> str:
    stat = _stat(pid)
    return stat[19] if len(stat) > 19 else ""


def _our_pid(state_dir: Path, daemon: str) -> int | None:
    """The pid in DIR/<daemon>.pid if that process still runs and is the one started there: the
    file also holds its start time, so a recycled pid (someone else's process) is never signalled."""
    try:
        pid_text, started = _pid_file(state_dir, daemon).read_text().split()[:2]
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if _alive(pid) and _start_time(pid) == started:
        return pid
    return None


def _wait_gone(pid: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _terminate(pid: int, timeout_s: float) -> None:
    """TERM, then KILL after timeout_s; gone either way when this returns (or raises)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout_s):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, 5.0):
        raise TestbedError(f"pid {pid} ({_cmdline(pid)[:80]}) survived SIGKILL for 5 s")


def _stepds(state_dir: Path) -> list[int]:
    """The slurmstepd processes of this cluster: each job step's keeps slurmd's log (in the state
    dir) open and runs in a session of its own, so neither slurmd's pid nor its session finds it."""
    prefix = str(state_dir) + os.sep
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not _cmdline(int(entry.name)).startswith("slurmstepd"):
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd).startswith(prefix):
                        found.append(int(entry.name))
                        break
    return found


def _locked(state_dir: Path, timeout_s: float) -> contextlib.AbstractContextManager[None]:
    """One up/down at a time per state dir (two test sessions may share one)."""
    return exclusive(
        state_dir / ".lock",
        timeout_s,
        lambda: TestbedError(
            f"another process held {state_dir}/.lock (starting or stopping this cluster) "
            f"for {timeout_s:.0f} s; wait for it, or end it if it is stale"
        ),
    )


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def node_name() -> str:
    """This host's short name: slurmctld only runs where SlurmctldHost names the host itself."""
    return socket.gethostname().split(".", 1)[0]


def _topology() -> dict[str, int]:
    """CPUs and their layout as slurmd itself will report them (`slurmd -C`): a node configured
    with more than that is drained at registration."""
    proc = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30, check=False)
    first = proc.stdout.splitlines()[0] if proc.stdout else ""
    fields = dict(tok.split("=", 1) for tok in first.split() if "=" in tok)
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    try:
        return {k: int(fields[k]) for k in keys}
    except (KeyError, ValueError):
        raise TestbedError(
            f"`slurmd -C` did not report this host's CPUs (exit {proc.returncode}): "
            f"{(proc.stdout + proc.stderr).strip()[:300]}"
        ) from None


def _node_lines(node: str, nodes: Sequence[str], topo: dict[str, int]) -> list[str]:
    """NodeName lines: this host at 127.0.0.1, or each netns host at its mgmt address. Each netns
    node keeps one CPU of its own for jobs (CpuSpecList reserves the others), in turn, so the two
    ranks of a 2-node job do not spin on one CPU of this machine, which all the nodes share."""
    layout = " ".join(f"{k}={v}" for k, v in topo.items())
    if not nodes:
        return [f"NodeName={node} NodeAddr=127.0.0.1 {layout} State=UNKNOWN"]
    from .netns import mgmt_ip

    cpus = topo["CPUs"]
    lines = []
    for i, host in enumerate(nodes):
        spec = ",".join(str(c) for c in range(cpus) if c != i % cpus)
        lines.append(f"NodeName={host} NodeAddr={mgmt_ip(host)} {layout}"
                     f"{f' CpuSpecList={spec}' if spec else ''} State=UNKNOWN")
    return lines


def _render_conf(state_dir: Path, node: str, topo: dict[str, int], ctld_port: int, slurmd_port: int,
                 nodes: Sequence[str] = ()) -> str:
    d = state_dir
    # One node: everything on 127.0.0.1. Netns nodes: slurmctld (here) is reached over the netns
    # testbed's mgmt network at the head's address; each slurmd has its own spool, pid and log.
    ctld_addr = "127.0.0.1"
    per_node = ""
    if nodes:
        from .netns import HEAD_IP

        ctld_addr, per_node = HEAD_IP, "-%n"
    partition_nodes = ",".join(nodes) if nodes else node
    return "\n".join([
        "# Generated by fabscope.testbed.slurm: a private one-node cluster for tests. Do not edit;",
        "# `python -m fabscope.testbed.slurm up` writes it again.",
        "ClusterName=fabscope",
        f"SlurmctldHost={node}({ctld_addr})",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={d / 'munge.sock'}",
        f"StateSaveLocation={d / 'state'}",
        f"SlurmdSpoolDir={d / 'spool'}{per_node.replace('-', '/')}",
        # Job steps' scratch (the pmix plugin's per-step directories) stays in the state dir too.
        f"TmpFS={d / 'tmp'}",
        f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={d / 'run' / f'slurmd{per_node}.pid'}",
        # slurmctld logs to its stderr (-D), which goes to DIR/slurmctld.log; slurmd's file is
        # named so that the slurmstepd of each job step logs there too.
        f"SlurmdLogFile={_log_file(d, f'slurmd{per_node}')}",
        # No cgroups here: the process tree from /proc, binding with sched_setaffinity.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "ReturnToService=2",
        f"KillWait={KILL_WAIT_S}",
        "InactiveLimit=0",
        *_node_lines(node, nodes, topo),
        f"PartitionName={PARTITION} Nodes={partition_nodes} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _read_cluster(state_dir: Path) -> Cluster | None:
    try:
        data = json.loads((state_dir / "cluster.json").read_text())
        return Cluster(state_dir, str(data["node"]), int(data["cpus"]), int(data["slurmctld_port"]),
                       int(data["slurmd_port"]), tuple(str(n) for n in data.get("nodes") or ()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_config(state_dir: Path, nodes: Sequence[str] = ()) -> Cluster:
    node = node_name()
    topo = _topology()
    cluster = Cluster(state_dir, node, topo["CPUs"], _free_port(), _free_port(), tuple(nodes))
    for sub in ("state", "spool", "run", "tmp", *(f"spool/{n}" for n in nodes)):
        (state_dir / sub).mkdir(exist_ok=True)
    cluster.conf.write_text(_render_conf(state_dir, node, topo, cluster.slurmctld_port, cluster.slurmd_port, nodes))
    (state_dir / "cluster.json").write_text(json.dumps({
        "node": node, "cpus": cluster.cpus, "slurmctld_port": cluster.slurmctld_port,
        "slurmd_port": cluster.slurmd_port, "nodes": list(nodes),
    }) + "\n")
    key = state_dir / "munge.key"
    if not key.is_file():
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(1024))
    return cluster


# --------------------------------------------------------------------------
# starting and waiting
# --------------------------------------------------------------------------


def _argv(state_dir: Path, daemon: str, node: str) -> list[str]:
    d = state_dir
    if daemon == "munged":
        # --force: the state dir may sit below a 0700 directory (pytest's tmp), which munged
        # refuses for a socket by default; only root uses this socket.
        return ["munged", "--foreground", "--force", f"--socket={d / 'munge.sock'}",
                f"--key-file={d / 'munge.key'}", f"--pid-file={d / 'run' / 'munged.pid'}",
                f"--seed-file={d / 'munged.seed'}", f"--log-file={_log_file(d, 'munged')}"]
    conf = str(d / "slurm.conf")
    if daemon == "slurmctld":
        # -c: a fresh controller, no jobs recovered from an earlier run of this cluster.
        return ["slurmctld", "-D", "-c", "-f", conf]
    host = _node_of(daemon)
    if host is not None:
        # Inside the netns testbed host, under its own host name (netns.ns_exec_argv execs, so
        # the pid started is slurmd's).
        from .netns import ns_exec_argv

        # `ip netns exec` mounts a fresh /sys, which hides this machine's /sys/fs/cgroup, and
        # slurmd refuses to start without it ("No filesystem mounted on /sys/fs/cgroup"): mount
        # the same cgroup hierarchies again inside (a bind through /proc/PID/root only finds the
        # empty directory of the new sysfs).
        # TmpFS is one path for every node, but the pmix plugin makes the same per-step directory
        # on each node ("File exists"): each node gets a tmpfs of its own there, as real nodes have.
        private_tmp = f"mount -t tmpfs -o mode=1777 fabscope-{host}-tmp {d / 'tmp'} && "
        return ns_exec_argv(host, ["sh", "-c", f'{_cgroup_mounts()}{private_tmp}exec "$@"', "slurmd",
                                   "slurmd", "-D", "-f", conf, "-N", host])
    return ["slurmd", "-D", "-f", conf, "-N", node]


def _cgroup_mounts() -> str:
    """Shell commands that mount, below /sys/fs/cgroup, the cgroup filesystems this machine has
    there (a cgroup v2 mount, or a tmpfs with the v1 hierarchies), each followed by ` && `."""
    try:
        mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    except OSError:
        return ""
    cmds: list[str] = []
    for dev, where, fstype, opts, *_ in mounts:
        if where != "/sys/fs/cgroup" and not where.startswith("/sys/fs/cgroup/"):
            continue
        if fstype == "tmpfs":
            cmds.append(f"mount -t tmpfs -o mode=755 {dev} {where}")
        elif fstype in ("cgroup", "cgroup2"):
            keep = ",".join(o for o in opts.split(",") if o not in ("rw", "ro", "relatime", "nosuid", "nodev",
                                                                   "noexec"))
            cmds.append(f"mkdir -p {where} && mount -t {fstype} {f'-o {keep} ' if keep else ''}{dev} {where}")
    return "".join(f"{c} && " for c in cmds)


def _start(state_dir: Path, daemon: str, node: str) -> int:
    env = _client_env(state_dir)
    with open(_console_file(state_dir, daemon), "wb") as log:  # this start only
        proc = subprocess.Popen(
            _argv(state_dir, daemon, node), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=state_dir, start_new_session=True,
        )
    _pid_file(state_dir, daemon).write_text(f"{proc.pid} {_start_time(proc.pid)}\n")
    return proc.pid


def _failed(state_dir: Path, daemon: str, what: str, extra: str = "") -> TestbedError:
    log = _console_file(state_dir, daemon)
    return TestbedError(
        f"{what}{extra}\nlast lines of {log}:\n{_tail(log)}"
    )


def _wait(
    state_dir: Path, daemon: str, pid: int, ready: Callable[[], tuple[bool, str]], what: str, timeout_s: float
) -> None:
    """Poll ready() until true; fail at the deadline or as soon as the daemon exits."""
    end = time.monotonic() + timeout_s
    last = ""
    while True:
        ok, last = ready()
        if ok:
            return
        if not _alive(pid):
            raise _failed(state_dir, daemon, f"{daemon} (pid {pid}) exited before {what}",
                          f"; last check: {last}" if last else "")
        if time.monotonic() > end:
            raise _failed(state_dir, daemon, f"{daemon} (pid {pid}) did not get to {what} within {timeout_s:g} s",
                          f"; last check: {last}" if last else "")
        time.sleep(0.2)


def _munge_ready(state_dir: Path) -> tuple[bool, str]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(state_dir / "munge.sock"))
        except OSError as exc:
            return False, f"connect {state_dir / 'munge.sock'}: {exc.strerror}"
    return True, ""


def _ctld_ready(state_dir: Path) -> tuple[bool, str]:
    out = _client(state_dir, ["scontrol", "ping"], timeout_s=5)
    text = (out.stdout + out.stderr).strip()
    return ("is UP" in text), text


def node_state(state_dir: Path, node: str) -> str:
    """The node's state as sinfo prints it (idle, mixed, allocated, drained, down*, ...), or ''."""
    out = _client(state_dir, ["sinfo", "--noheader", "--Node", f"--nodes={node}", "--format=%T"], timeout_s=5)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def wait_idle(cluster: Cluster, timeout_s: float = 30.0) -> None:
    """Wait until the node is idle (registered, responding, not drained, no job): the state a
    test needs before it asks for both CPUs."""
    for daemon, node in _slurmds(cluster):
        pid = _our_pid(cluster.state_dir, daemon)
        if pid is None:
            raise _failed(cluster.state_dir, daemon, f"{daemon} of {cluster.state_dir} is not running")
        _wait_idle(cluster, pid, timeout_s, daemon, node)


def _slurmds(cluster: Cluster) -> list[tuple[str, str]]:
    """(daemon name, node) of each slurmd of the cluster."""
    return [(slurmd_daemon(n), n) for n in cluster.nodes] if cluster.nodes else [("slurmd", cluster.node)]


def _wait_idle(cluster: Cluster, pid: int, timeout_s: float, daemon: str = "slurmd", node: str = "") -> None:
    node = node or cluster.node

    def idle() -> tuple[bool, str]:
        state = node_state(cluster.state_dir, node)
        if state.startswith(("drain", "down", "fail", "inval")):
            reason = _client(cluster.state_dir, ["sinfo", "--noheader", "--Node", f"--nodes={node}",
                                                 "--format=%E"], timeout_s=5).stdout.strip()
            return False, f"node {node} is {state} ({reason or 'no reason given'})"
        return state == "idle", f"node {node} is {state or 'not listed by sinfo'}"

    _wait(cluster.state_dir, daemon, pid, idle, f"an idle node {node}", timeout_s)


def status(state_dir: Path) -> dict[str, Any]:
    """Which daemons of this state dir run (pid or None), the node's state, and `up`: all three
    run and the node is idle or busy with jobs."""
    state_dir = state_dir.resolve()
    cluster = _read_cluster(state_dir)
    pids = {d: _our_pid(state_dir, d) for d in (cluster.daemons if cluster else DAEMONS)}
    running_all = bool(cluster) and all(pids.values())
    states = {n: node_state(state_dir, n) if running_all else "" for n in (cluster.all_nodes if cluster else ())}
    state = states.get(cluster.node, "") if cluster and not cluster.nodes else ""
    usable = bool(states) and all(st in ("idle", "mixed", "allocated", "completing") for st in states.values())
    return {
        "state_dir": str(state_dir),
        "conf": str(state_dir / "slurm.conf"),
        "daemons": pids,
        "node": cluster.node if cluster else None,
        "cpus": cluster.cpus if cluster else None,
        "node_state": state or None,
        "nodes": {n: st or None for n, st in states.items()},
        "up": bool(cluster) and all(pids.values()) and usable,
    }


def up(state_dir: Path, timeout_s: float = 30.0, netns_hosts: Sequence[str] | None = None) -> Cluster:
    """Start (or find running) the cluster of state_dir and wait until its nodes are idle.

    Without netns_hosts: one node, this host. With netns_hosts (hosts of the netns testbed, which
    must be up; `fabscope testbed slurm up --netns`): one node per host, named after it, its slurmd
    running inside it (`slurmd -N HOST`), so `srun -N 2 -w fs-a,fs-b` places tasks on two "nodes".
    slurmctld runs here and is reached from the hosts at the testbed head's address.

    Each daemon gets timeout_s to come up. TestbedError says which did not, with its log tail."""
    nodes = tuple(netns_hosts or ())
    if nodes:
        from .netns import hosts_up

        missing = [h for h in nodes if h not in hosts_up()]
        if missing:
            raise TestbedError(f"--netns: {', '.join(missing)} not up in the netns testbed (up: "
                               f"{', '.join(hosts_up()) or 'none'}); `fabscope testbed netns up --hosts N` first")
    _require_tools()
    _require_root()
    state_dir = state_dir.resolve()
    with _locked(state_dir, timeout_s=60):
        existing = _read_cluster(state_dir)
        if existing is not None and existing.nodes == nodes and status(state_dir)["up"]:
            wait_idle(existing, timeout_s)
            return existing
        _stop(state_dir, timeout_s=15)
        os.chmod(state_dir, 0o755)
        cluster = _write_config(state_dir, nodes)
        try:
            pid = _start(state_dir, "munged", cluster.node)
            _wait(state_dir, "munged", pid, lambda: _munge_ready(state_dir), "a listening munge socket", timeout_s)
            pid = _start(state_dir, "slurmctld", cluster.node)
            _wait(state_dir, "slurmctld", pid, lambda: _ctld_ready(state_dir), "answering `scontrol ping`",
                  timeout_s)
            started = [(_start(state_dir, daemon, node), daemon, node) for daemon, node in _slurmds(cluster)]
            for pid, daemon, node in started:
                _wait_idle(cluster, pid, timeout_s, daemon, node)
        except BaseException:
            _stop(state_dir, timeout_s=15)
            raise
        return cluster


def _cancel_jobs(state_dir: Path, timeout_s: float) -> None:
    """Cancel every job of this cluster and wait (bounded) for their steps to end, so slurmstepd
    kills the tasks it started rather than leaving them behind."""
    jobs = _client(state_dir, ["squeue", "--noheader", "--format=%i"], timeout_s=5)
    ids = jobs.stdout.split() if jobs.returncode == 0 else []
    if not ids:
        return
    _client(state_dir, ["scancel", *ids], timeout_s=5)
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        left = _client(state_dir, ["squeue", "--noheader", "--format=%i"], timeout_s=5)
        if left.returncode != 0 or not left.stdout.strip():
            return
        time.sleep(0.2)


def _stop(state_dir: Path, timeout_s: float) -> list[str]:
    stopped: list[str] = []
    cluster = _read_cluster(state_dir)
    slurmds = [d for d in (cluster.daemons if cluster else DAEMONS) if d.startswith("slurmd")]
    if _our_pid(state_dir, "slurmctld") and any(_our_pid(state_dir, d) for d in slurmds):
        _cancel_jobs(state_dir, timeout_s=KILL_WAIT_S + 5)
    for daemon in (*slurmds, "slurmctld"):
        pid = _our_pid(state_dir, daemon)
        if pid is not None:
            _terminate(pid, timeout_s)
            stopped.append(f"{daemon} (pid {pid})")
    # A slurmstepd whose step did not end when its job was cancelled.
    for pid in _stepds(state_dir):
        name = _cmdline(pid).strip() or "slurmstepd"
        _terminate(pid, 5.0)
        stopped.append(f"{name} (pid {pid})")
    pid = _our_pid(state_dir, "munged")
    if pid is not None:
        _terminate(pid, timeout_s)
        stopped.append(f"munged (pid {pid})")
    for daemon in (*DAEMONS, *slurmds):
        with contextlib.suppress(FileNotFoundError):
            _pid_file(state_dir, daemon).unlink()
    return stopped


def down(state_dir: Path, timeout_s: float = 15.0) -> list[str]:
    """Stop every process this cluster started (jobs first, then slurmd, slurmctld, munged).
    Fine when nothing runs. Returns what was stopped."""
    state_dir = state_dir.resolve()
    if not state_dir.is_dir():
        return []
    with _locked(state_dir, timeout_s=60):
        return _stop(state_dir, timeout_s)


@contextlib.contextmanager
def running(state_dir: Path, timeout_s: float = 30.0, netns_hosts: Sequence[str] | None = None) -> Iterator[Cluster]:
    """The cluster for the duration of a with-block (tests); always stopped afterwards."""
    try:
        yield up(state_dir, timeout_s, netns_hosts)
    finally:
        down(state_dir)


# --------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------


def _render_status(st: dict[str, Any]) -> str:
    lines = [f"slurm testbed in {st['state_dir']}: {'up' if st['up'] else 'not up'}"]
    for daemon, pid in st["daemons"].items():
        lines.append(f"  {daemon:9} {f'pid {pid}' if pid else 'not running'}")
    nodes = st.get("nodes") or {}
    if len(nodes) > 1 or (nodes and st["node"] not in nodes):
        for node, state in nodes.items():
            lines.append(f"  node {node} (inside the netns testbed host): {state or 'unknown'}")
    elif st["node"]:
        lines.append(f"  node {st['node']} ({st['cpus']} CPUs): {st['node_state'] or 'unknown'}")
    if st["up"]:
        lines.append(f"  use it with: SLURM_CONF={st['conf']}")
    return "\n".join(lines)


def _netns_hosts_arg(value: str) -> str:
    """argparse type for --netns: testbed host names (fs-a ... fs-p), comma-separated (kept as text)."""
    from .netns_cmd import TestbedError as NetnsError
    from .netns_cmd import host_index

    for host in filter(None, value.split(",")):
        try:
            host_index(host)
        except NetnsError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace(repr(host), argtypes.shown(host))) from None
    return value


def main(argv: Sequence[str] | None = None, parse_only: bool = False) -> int:
    """Exit codes: 0 ok; 1 a step failed (message on stderr); 2 usage; 3 status: not up.
    parse_only: check the arguments, do nothing."""
    args = parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if parse_only:
        return 0
    return _execute(args)


def parser() -> argparse.ArgumentParser:
    """`fabscope testbed slurm` on its own (``python -m fabscope.testbed.slurm``)."""
    parser = argtypes.ArgumentParser(prog="fabscope testbed slurm")
    fill_parser(parser)
    return parser


def fill_parser(parser: argparse.ArgumentParser) -> None:
    """`fabscope testbed slurm`'s arguments, on the parser the CLI's tree gives it (also the source
    of its man page and shell completion)."""
    parser.description = ("A private Slurm on this host (munged, slurmctld, slurmd) for srun tests: one node, or "
                          "(--netns) one node per netns testbed host.")
    parser.set_defaults(func=_execute)
    common = argtypes.ArgumentParser(add_help=False)
    common.add_argument("--dir", type=argtypes.output_dir, default=Path("build/slurm"),
                        help="state directory: config, key, sockets, logs (default build/slurm)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", parents=[common], help="start the cluster (or find it running) and wait for it")
    p_up.add_argument("--timeout", type=argtypes.finite_float(1, 3600), default=30.0, metavar="S",
                      help="per-daemon deadline, 1 to 3600 s (default 30)")
    p_up.add_argument("--netns", nargs="?", const="", default=None, metavar="HOST,HOST,...", type=_netns_hosts_arg,
                      help="one node per netns testbed host (default: every host up), slurmd inside each")
    sub.add_parser("down", parents=[common], help="stop everything the cluster started (fine when not running)")
    p_st = sub.add_parser("status", parents=[common], help="show what runs; exit code 3 when not up")
    p_st.add_argument("--json", action="store_true")


def _execute(args: argparse.Namespace) -> int:
    try:
        if args.cmd == "up":
            netns_hosts = None
            if args.netns is not None:
                from .netns import hosts_up

                netns_hosts = [h for h in args.netns.split(",") if h] or hosts_up()
                if not netns_hosts:
                    raise TestbedError("--netns: the netns testbed is not up; `fabscope testbed netns up --hosts N`")
            cluster = up(args.dir, args.timeout, netns_hosts)
            print(_render_status(status(cluster.state_dir)))
            return 0
        if args.cmd == "down":
            stopped = down(args.dir)
            print("stopped " + ", ".join(stopped) if stopped else "slurm testbed was not running")
            return 0
        st = status(args.dir)
        print(json.dumps(st, indent=2) if args.json else _render_status(st))
        return 0 if st["up"] else 3
    except TestbedError as exc:
        print(f"fabscope testbed slurm: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
