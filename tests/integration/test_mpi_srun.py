# SPDX-License-Identifier: BSD-3-Clause
"""MPI engines under srun, for real: a private one-node Slurm (fabscope.testbed.slurm) on this host,
`fabscope run --loopback --backend mpi --launcher srun` for Open MPI (srun --mpi=pmix) and MPICH
(--mpi=pmi2), and the failures: a node that cannot be had, an unreachable controller, a bad
option, a Slurm without the PMI plugin an MPI needs, no srun or no readable Slurm configuration.
Each ends within its deadline with a clear message and fabscope's exit code, before launching
anything where it can."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from engine_pair import check_bandwidth, check_latency, free_port
from mpi_marks import have_mpi_engine, needs_mpich, needs_openmpi

from conftest import fabscope, json_lines
from fabscope.launch.mpirun import SRUN_MPI_PLUGIN, build_mpi_command, describe_launch, find_mpi_engine
from fabscope.testbed import slurm as slurmbed

pytestmark = pytest.mark.mpi


needs_srun = pytest.mark.skipif(not shutil.which("srun"), reason="srun not installed (`make setup`)")

SRUN = ("run", "--loopback", "--backend", "mpi", "--launcher", "srun", "--format", "json")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[slurmbed.Cluster]:
    missing = slurmbed.missing_tools()
    if missing:
        pytest.skip(f"Slurm is not installed here ({', '.join(missing)} missing); `make setup` installs it")
    state_dir = tmp_path_factory.mktemp("slurm")
    with pytest.MonkeyPatch.context() as mp:
        # Only this cluster: no job context or configuration inherited from an outer Slurm.
        for key in [k for k in os.environ if k.startswith("SLURM_")]:
            mp.delenv(key)
        with slurmbed.running(state_dir, timeout_s=30) as c:
            for key, value in c.env().items():
                mp.setenv(key, value)
            yield c
    assert _processes_of(state_dir) == [], "the Slurm testbed left processes behind"


def _processes_of(state_dir: Path) -> list[str]:
    """Every process whose command line or open files name the state dir."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fds = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
        except OSError:
            continue
        if str(state_dir) in cmd or any(f.startswith(str(state_dir)) for f in fds):
            found.append(f"{entry.name}: {cmd}")
    return found


def _job(cluster: slurmbed.Cluster, name: str) -> dict[str, str]:
    """The job of that name as slurmctld knows it (finished jobs stay listed for MinJobAge)."""
    out = subprocess.run(
        ["squeue", "--noheader", "--states=all", f"--name={name}", "--format=%i|%T|%N|%C"],
        capture_output=True, text=True, timeout=10, check=True, env=dict(os.environ, **cluster.env()),
    )
    rows = [line.split("|") for line in out.stdout.split()]
    assert len(rows) == 1, f"expected one job named {name} in the test cluster, squeue said: {out.stdout!r}"
    return dict(zip(("id", "state", "nodes", "cpus"), rows[0], strict=True))


def _job_count(cluster: slurmbed.Cluster) -> int:
    out = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i"], capture_output=True, text=True,
                         timeout=10, check=True, env=dict(os.environ, **cluster.env()))
    return len(out.stdout.split())


def _srun_records(out: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert out.returncode == 0, out.stderr
    recs = [r for r in json_lines(out.stdout) if r.get("schema") == "fabscope.result/1"]
    assert recs, out.stdout + out.stderr
    return recs


def _check_launched_by_srun(rec: dict[str, Any], mpi: str, cluster: slurmbed.Cluster) -> None:
    launcher = rec["transport"]["launcher"]
    assert launcher["name"] == "srun"
    assert launcher["mpi_plugin"] == SRUN_MPI_PLUGIN[mpi]
    assert launcher["cpu_bind"] == "threads"
    assert launcher["slurm_conf"] == str(cluster.conf)
    assert launcher["deadline_s"] > 0 and launcher["allocation_wait_s"] >= 1
    # ... and Slurm agrees: the job ran to completion on the test node with both CPUs.
    job = _job(cluster, launcher["job_name"])
    assert job["state"] == "COMPLETED" and job["nodes"] == cluster.node and job["cpus"] == "2", job
    for side in ("local", "peer"):
        assert rec["transport"][side]["kind"] == "mpi"
    assert {rec["transport"]["local"]["rank"], rec["transport"]["peer"]["rank"]} == {0, 1}


@needs_openmpi
@pytest.mark.parametrize("pattern", ["lat", "bw"])
def test_openmpi_under_srun(cluster: slurmbed.Cluster, pattern: str) -> None:
    sizes = "8" if pattern == "lat" else "64K"
    out = fabscope(*SRUN, "--mpi", "openmpi", "--pattern", pattern, "--sizes", sizes, "--iters", "2000",
                   "--timeout", "10", timeout=90)
    rec = _srun_records(out)[0]
    check_latency(rec) if pattern == "lat" else check_bandwidth(rec)
    _check_launched_by_srun(rec, "openmpi", cluster)
    local = rec["transport"]["local"]
    assert local["selected"]["pml"] == "ob1" and local["selected"]["btl"]["send"] == ["vader"], local["selected"]
    # Slurm's PMIx server started these ranks, not ORTE: no mpirun daemon URI in their environment.
    assert "OMPI_MCA_orte_hnp_uri" not in local["environment"], local["environment"]


@needs_mpich
@pytest.mark.parametrize("pattern", ["lat", "bw"])
def test_mpich_under_srun(cluster: slurmbed.Cluster, pattern: str) -> None:
    sizes = "8" if pattern == "lat" else "64K"
    out = fabscope(*SRUN, "--mpi", "mpich", "--pattern", pattern, "--sizes", sizes, "--iters", "2000",
                   "--timeout", "10", timeout=90)
    rec = _srun_records(out)[0]
    check_latency(rec) if pattern == "lat" else check_bandwidth(rec)
    _check_launched_by_srun(rec, "mpich", cluster)
    local = rec["transport"]["local"]
    assert local["selected"]["device"].startswith(("ch4:", "ch3:")), local["selected"]
    assert "MPICH" in local["library"]


@needs_openmpi
def test_text_output_names_the_launcher(cluster: slurmbed.Cluster) -> None:
    out = fabscope("run", "--loopback", "--backend", "mpi", "--launcher", "srun", "--sizes", "8", "--iters", "200",
                   "--timeout", "10", timeout=90)
    assert out.returncode == 0, out.stderr
    assert "launcher srun --mpi=pmix" in out.stdout.splitlines()[0], out.stdout


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_srun_binds_the_two_ranks_to_different_cpus(cluster: slurmbed.Cluster, mpi: str) -> None:
    """The srun options fabscope uses, with a probe instead of the engine: each rank's CPU set."""
    if cluster.cpus < 2:
        pytest.skip(f"the test node has {cluster.cpus} CPU")
    if not have_mpi_engine(mpi):
        pytest.skip(f"fabscope-engine-mpi-{mpi} not built")
    cmd, env = build_mpi_command(["--sizes", "8"], mpi=mpi, launcher="srun")
    engine = cmd.index(str(find_mpi_engine(mpi)))
    probe = [*cmd[:engine], "sh", "-c", "echo $SLURM_PROCID $(grep Cpus_allowed_list /proc/self/status)"]
    probe = [a for a in probe if not a.startswith("--mpi=")]  # a shell needs no PMI
    out = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    cpus = {line.split()[0]: line.split()[-1] for line in out.stdout.splitlines()}
    assert set(cpus) == {"0", "1"}, out.stdout
    assert all(c.isdigit() for c in cpus.values()), f"a rank is not bound to one CPU: {cpus}"
    assert cpus["0"] != cpus["1"], f"both ranks are bound to the same CPU: {cpus}"


@needs_openmpi
def test_node_that_cannot_be_had_exits_3_within_the_timeout(cluster: slurmbed.Cluster) -> None:
    """The missing peer of a launcher: no node for the ranks. srun waits --timeout, not forever."""
    env = dict(os.environ, **cluster.env())
    subprocess.run(["scontrol", "update", f"nodename={cluster.node}", "state=drain", "reason=fabscope-test"],
                   check=True, env=env, timeout=10)
    try:
        t0 = time.monotonic()
        out = fabscope(*SRUN, "--sizes", "8", "--timeout", "2", timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        subprocess.run(["scontrol", "update", f"nodename={cluster.node}", "state=resume"], check=True, env=env,
                       timeout=10)
        slurmbed.wait_idle(cluster, timeout_s=30)
    assert out.returncode == 3, out.stderr
    assert "srun could not get one node" in out.stderr and "within 2 s" in out.stderr, out.stderr
    assert "sinfo" in out.stderr and str(cluster.conf) in out.stderr
    assert "Traceback" not in out.stderr
    assert elapsed < 2 + 8


@needs_openmpi
def test_unreachable_controller_exits_3_naming_it(cluster: slurmbed.Cluster, tmp_path: Path) -> None:
    """A client view of the cluster whose controller port has nobody listening (MessageTimeout
    shortened from 10 s: srun's own retries, within fabscope's deadline either way)."""
    conf = tmp_path / "slurm.conf"
    lines = [line for line in cluster.conf.read_text().splitlines() if not line.startswith("SlurmctldPort=")]
    conf.write_text("\n".join([*lines, f"SlurmctldPort={free_port()}", "MessageTimeout=2", ""]))
    t0 = time.monotonic()
    out = fabscope(*SRUN, "--sizes", "8", "--timeout", "3", env={"SLURM_CONF": str(conf)}, timeout=60)
    assert out.returncode == 3, out.stderr
    assert "srun cannot reach the Slurm controller" in out.stderr and "scontrol ping" in out.stderr, out.stderr
    assert str(conf) in out.stderr and "Traceback" not in out.stderr
    assert time.monotonic() - t0 < 15


@needs_openmpi
def test_bad_option_under_srun_is_a_usage_error(cluster: slurmbed.Cluster) -> None:
    t0 = time.monotonic()
    out = fabscope(*SRUN, "--sizes", "8", "--pattern", "nope", "--timeout", "2", timeout=60)
    assert out.returncode == 2, out.stderr
    assert "--pattern" in out.stderr and "nope" in out.stderr and "lat, bw, bibw" in out.stderr
    assert "Traceback" not in out.stderr
    assert time.monotonic() - t0 < 2 + 10


def _slurm_without(cluster: slurmbed.Cluster, tmp_path: Path, plugin_prefix: str) -> Path:
    """A client's view of the test cluster whose PluginDir lacks some plugins: a Slurm built or
    packaged without them (srun loads MPI plugins itself, so the client's view is what counts)."""
    show = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=10, check=True,
                          env=dict(os.environ, **cluster.env())).stdout
    plugin_dir = Path(next(line.split("=", 1)[1].strip() for line in show.splitlines()
                           if line.startswith("PluginDir")))
    view = tmp_path / "plugins"
    view.mkdir()
    for so in plugin_dir.glob("*.so"):
        if not so.name.startswith(plugin_prefix):
            (view / so.name).symlink_to(so)
    conf = tmp_path / "slurm.conf"
    conf.write_text(cluster.conf.read_text() + f"PluginDir={view}\n")
    return conf


@needs_openmpi
def test_slurm_without_pmix_refuses_openmpi_before_launch(cluster: slurmbed.Cluster, tmp_path: Path) -> None:
    conf = _slurm_without(cluster, tmp_path, "mpi_pmix")
    jobs = _job_count(cluster)
    t0 = time.monotonic()
    out = fabscope(*SRUN, "--mpi", "openmpi", "--sizes", "8", env={"SLURM_CONF": str(conf)}, timeout=60)
    assert out.returncode == 2, out.stderr
    msg = out.stderr
    assert "--launcher srun --mpi openmpi" in msg and "srun --mpi=pmix" in msg  # what was asked
    assert "offers only" in msg and "pmi2" in msg and "srun --mpi=list" in msg  # what this Slurm has
    assert "libpmix-dev" in msg and "--launcher mpirun" in msg  # the fix
    assert "Traceback" not in msg
    assert time.monotonic() - t0 < 10
    assert _job_count(cluster) == jobs, "a job was submitted although the launch was refused"


@needs_mpich
def test_slurm_without_pmix_still_runs_mpich(cluster: slurmbed.Cluster, tmp_path: Path) -> None:
    conf = _slurm_without(cluster, tmp_path, "mpi_pmix")
    out = fabscope(*SRUN, "--mpi", "mpich", "--sizes", "8", "--iters", "200", "--timeout", "10",
                   env={"SLURM_CONF": str(conf)}, timeout=90)
    rec = _srun_records(out)[0]
    assert rec["transport"]["launcher"]["mpi_plugin"] == "pmi2"


@needs_openmpi
@needs_srun
def test_unreadable_slurm_conf_is_refused_at_once(tmp_path: Path) -> None:
    """srun itself would retry a missing SLURM_CONF for 60 s."""
    t0 = time.monotonic()
    out = fabscope(*SRUN, "--sizes", "8", env={"SLURM_CONF": str(tmp_path / "nope.conf")}, timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"SLURM_CONF={tmp_path / 'nope.conf'} is not a file" in out.stderr
    assert time.monotonic() - t0 < 10


@needs_openmpi
def test_no_srun_is_a_usage_error_naming_the_fix(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "timeout").symlink_to("/usr/bin/timeout")
    out = fabscope(*SRUN, "--sizes", "8", env={"PATH": str(bin_dir)}, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "srun is not on PATH" in out.stderr and "slurm-client" in out.stderr and "--launcher mpirun" in out.stderr


@pytest.mark.parametrize("mpi", ["openmpi", "mpich"])
def test_srun_command_shape(mpi: str) -> None:
    if not have_mpi_engine(mpi):
        pytest.skip(f"fabscope-engine-mpi-{mpi} not built")
    cmd, env = build_mpi_command(["--sizes", "8", "--timeout", "4"], mpi=mpi, launcher="srun",
                                 env={"UCX_TLS": "sm"}, check_launcher=False)
    assert cmd[:2] == ["timeout", "--kill-after=5"] and cmd[3] == "srun"
    assert f"--mpi={SRUN_MPI_PLUGIN[mpi]}" in cmd and "--cpu-bind=threads" in cmd and "--immediate=4" in cmd
    assert "--nodes=1" in cmd and "--ntasks=2" in cmd and "--kill-on-bad-exit=1" in cmd
    assert env["UCX_TLS"] == "sm"
    launch = describe_launch(cmd, {"SLURM_CONF": "/x/slurm.conf"})
    assert launch["name"] == "srun" and launch["mpi_plugin"] == SRUN_MPI_PLUGIN[mpi]
    assert launch["allocation_wait_s"] == 4 and launch["slurm_conf"] == "/x/slurm.conf"
    json.dumps(launch)  # goes into every record as is


def test_testbed_up_is_idempotent_and_down_leaves_nothing(cluster: slurmbed.Cluster, tmp_path: Path) -> None:
    again = slurmbed.up(cluster.state_dir)
    assert again == cluster
    assert slurmbed.status(cluster.state_dir)["up"]
    # A second, short-lived cluster with a job running when it is stopped.
    other = tmp_path / "other"
    c2 = slurmbed.up(other)
    env = dict(os.environ, **c2.env())
    job = subprocess.Popen(["srun", "--ntasks=1", "--job-name=held", "sleep", HELD], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 20
        while not _sleepers() and time.monotonic() < end:
            time.sleep(0.1)
        assert _sleepers(), "the held job never started"
        stopped = slurmbed.down(other)
        assert any(s.startswith("slurmd") for s in stopped) and any(s.startswith("munged") for s in stopped)
        assert job.wait(timeout=20) != 0  # srun ends when its cluster goes away
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
        slurmbed.down(other)
    assert _processes_of(other) == []
    assert not _sleepers(), "the job's task outlived its cluster"
    assert slurmbed.status(other)["up"] is False
    assert slurmbed.status(cluster.state_dir)["up"], "stopping one cluster touched another"


HELD = "59.731"  # the held job's sleep, an argument no other process on this host uses


def _sleepers() -> list[str]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z":
                    continue
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if Path(argv[0]).name == "sleep" and argv[1:2] == [HELD]:  # slurmstepd execs /usr/bin/sleep
                out.append(f"{entry.name}: {' '.join(argv)}")
    return out
