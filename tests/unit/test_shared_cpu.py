# SPDX-License-Identifier: BSD-3-Clause
"""Two ends of a measurement on one machine, bound to the same CPU: the record says that its
latency measures CPU sharing (a scheduler tick), not the network (results/cpushare.py). Only the
same kernel boot AND the same single CPU on both ends earns the warning; the launch plumbing keeps
a binding the user (or the netns testbed) chose instead of overriding it."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fabscope.launch.mpirun import build_mpi_command
from fabscope.report.render import render_text
from fabscope.results import parse_record
from fabscope.results.cpushare import SHARED_CPU_MARK
from fabscope.testbed.netns_launch import launcher_env

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
BOOT = "810842be-89a6-4da9-bb4b-e699a591c83d"


def record(cpus: tuple[str, str], boots: tuple[str | None, str | None] = (BOOT, BOOT)) -> dict[str, Any]:
    """A real engine record (saved from a loopback run) with each end's affinity and boot id set."""
    line = (RECORDS / "tcp-send-lat-loopback.jsonl").read_text().splitlines()[0]
    rec: dict[str, Any] = copy.deepcopy(json.loads(line))
    for key, allowed, boot in (("host", cpus[0], boots[0]), ("peer_host", cpus[1], boots[1])):
        rec[key] = dict(rec.get(key) or {}, hostname=key, cpus_allowed=allowed, boot_id=boot,
                        cpu=int(allowed) if allowed.isdigit() else None)
    return rec


def shared(rec: dict[str, Any]) -> list[str]:
    return [w for w in parse_record(rec).warnings if SHARED_CPU_MARK in w]


def test_same_machine_same_cpu_is_said_with_the_fix() -> None:
    rec = record(("0", "0"))
    (warning,) = shared(rec)
    assert "CPU 0" in warning and "scheduler" in warning and "not the network" in warning
    assert "host and peer_host" in warning and "Fix:" in warning
    # Said in the text output too, and only once however often the record is read.
    result = parse_record(parse_record(rec).to_json())
    assert sum(SHARED_CPU_MARK in w for w in result.warnings) == 1
    assert SHARED_CPU_MARK in render_text([result])


@pytest.mark.parametrize("cpus, boots", [
    (("0", "1"), (BOOT, BOOT)),            # the same machine, different CPUs
    (("0,1", "0,1"), (BOOT, BOOT)),        # unbound: the scheduler spreads them
    (("0-1", "0"), (BOOT, BOOT)),
    (("0", "0"), (BOOT, "another-boot")),  # CPU 0 of two machines
    (("0", "0"), (None, None)),            # an engine from before boot_id: nothing to go on
])
def test_no_warning_otherwise(cpus: tuple[str, str], boots: tuple[str | None, str | None]) -> None:
    assert shared(record(cpus, boots)) == []


def test_mpi_fix_names_the_launcher_settings() -> None:
    rec = record(("1", "1"))
    rec["backend"] = "mpi"
    (warning,) = shared(rec)
    assert "CPU 1" in warning and "hwloc_base_binding_policy none" in warning and "HYDRA_BINDING=none" in warning


def test_testbed_env_unbinds_and_fabscope_keeps_that(monkeypatch: pytest.MonkeyPatch) -> None:
    env = launcher_env()
    assert env["OMPI_MCA_hwloc_base_binding_policy"] == "none"
    assert env["HYDRA_BINDING"] == "none"
    monkeypatch.delenv("HYDRA_BINDING", raising=False)
    cmd, _ = build_mpi_command(["--sizes", "8"], mpi="mpich", check_launcher=False)
    assert cmd[cmd.index("-bind-to") + 1] == "core"  # hydra binds nothing by default: fabscope does
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cmd, full_env = build_mpi_command(["--sizes", "8"], mpi="mpich", check_launcher=False, hosts=["fs-a", "fs-b"])
    assert "-bind-to" not in cmd and full_env["HYDRA_BINDING"] == "none"
    monkeypatch.delenv("SLURM_CPU_BIND", raising=False)
    cmd, _ = build_mpi_command(["--sizes", "8"], launcher="srun", check_launcher=False, hosts=["fs-a", "fs-b"])
    assert "--cpu-bind=threads" in cmd
    monkeypatch.setenv("SLURM_CPU_BIND", "cores")
    cmd, _ = build_mpi_command(["--sizes", "8"], launcher="srun", check_launcher=False, hosts=["fs-a", "fs-b"])
    assert not [a for a in cmd if a.startswith("--cpu-bind")]  # srun reads the user's SLURM_CPU_BIND itself
