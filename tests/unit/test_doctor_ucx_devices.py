# SPDX-License-Identifier: BSD-3-Clause
"""The doctor and a misrouted result agree on Open MPI's UCX PML device filter: `pml_ucx_devices`
(Open MPI 4.1's default `mlx*`) is named whenever an RDMA device asked for, or found here, does not
match it, not only when UCX_NET_DEVICES is set. Real ompi_info and /etc of this host, the sysfs
and inventory of a real rxe guest (tests/fixtures)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_doctor import ctx, fx, run

from fabscope.doctor import Finding
from fabscope.doctor.cli_entry import main_doctor
from fabscope.results.misroute import device_matches

pytestmark = pytest.mark.skipif(shutil.which("ompi_info") is None
                                or not Path("/etc/openmpi/openmpi-mca-params.conf").exists(),
                                reason="Open MPI not installed")


def _ucx_devices(**kw: object) -> list[Finding]:
    return [f for f in run(ctx(fx("rxe-qemu"), **kw), "openmpi") if f.id == "openmpi.ucx_devices"]


def test_an_rxe_device_against_the_default_mlx_filter_warns_without_ucx_net_devices() -> None:
    (f,) = _ucx_devices()
    assert f.severity == "warn"
    assert "rxe0" in f.title and "pml_ucx_devices = mlx*" in f.title
    assert "pml_ucx_devices any" in f.fix


def test_the_device_asked_for_is_the_one_checked() -> None:
    (f,) = _ucx_devices(device="rxe0:1")
    assert f.severity == "warn" and "rxe0:1" in f.title
    assert "asked: rxe0:1" in f.evidence


@pytest.mark.parametrize("value", ["any", "rxe*", "mlx*,rxe0"])
def test_a_filter_that_admits_the_device_is_ok(value: str) -> None:
    (f,) = _ucx_devices(env={"OMPI_MCA_pml_ucx_devices": value})
    assert f.severity == "ok", f


def test_a_host_without_rdma_and_without_ucx_net_devices_has_no_such_finding() -> None:
    assert _ucx_devices_on("host-no-rdma") == []


def _ucx_devices_on(name: str) -> list[Finding]:
    return [f for f in run(ctx(fx(name)), "openmpi") if f.id == "openmpi.ucx_devices"]


def test_device_matches_reads_globs_and_ports() -> None:
    assert not device_matches("mlx*", "rxe0") and not device_matches("mlx*", "rxe0:1")
    assert device_matches("mlx5_0:1,rxe*", "rxe0:1") and device_matches("all", "eth0")


def test_doctor_takes_device_on_its_command_line() -> None:
    assert main_doctor(["--device", "rxe0:1"], parse_only=True) == 0
