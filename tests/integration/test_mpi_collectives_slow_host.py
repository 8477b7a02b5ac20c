# SPDX-License-Identifier: BSD-3-Clause
"""A slowed host is named: on 4 netns hosts with fabric links at 200 Mbit/s, fs-c's shaped to a
tenth of that (tbf, both ways), an allreduce names fs-c as the host that held it back (from the
engine's host probe: fs-c receives slowly from both ring neighbours, its neighbours only from it),
though the rank last most often is another host's; with every link at 200 Mbit/s nobody is named."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import netns_helpers as nh
import pytest
from mpi_marks import needs_mpich, needs_openmpi

from conftest import fabscope, json_lines
from fabscope.report.collective import render_text
from fabscope.results.collective import parse_collective
from fabscope.testbed import netns

pytestmark = [pytest.mark.netns, pytest.mark.mpi, nh.needs_root]

HOSTS = ("fs-a", "fs-b", "fs-c", "fs-d")
RATE, SLOW = "200mbit", "20mbit"  # 10x: far beyond what this shared machine's load does to a figure
# 1 MiB: above tbf's 256 KiB burst, so the shaped rate decides (~0.8 s a collective on fs-c's link).
RUN = ("--hosts", ",".join(HOSTS), "--pattern", "allreduce", "--sizes", "1M", "--device", "fabric0",
       "--iters", "8", "--warmup", "1", "--timeout", "30", "--format", "json")


@pytest.fixture(scope="module")
def testbed() -> Iterator[dict[str, str]]:
    with netns.session():
        try:
            yield netns.launcher_env()
        finally:
            netns.down()


def allreduce(env: dict[str, str], mpi: str) -> dict[str, Any]:
    out = fabscope("run", "--backend", "mpi", "--mpi", mpi, *RUN, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    (rec,) = json_lines(out.stdout)
    assert rec["verified"]["ok"] is True and rec["path"]["verdict"] == "verified"
    return rec


@pytest.mark.parametrize("mpi", [pytest.param("openmpi", marks=needs_openmpi), pytest.param("mpich", marks=needs_mpich)])
def test_slowed_host_is_named_text_and_json(testbed: dict[str, str], mpi: str) -> None:
    netns.up(RATE, len(HOSTS), shape_hosts={"fs-c": SLOW})
    rec = allreduce(testbed, mpi)
    figures = rec["figures"]
    assert figures["held_back_by"] == ["fs-c"], figures["held_back_basis"]
    assert "fs-c received the 1048576 B probe" in figures["held_back_basis"]
    probe = {rec["rank_hosts"][h["rank"]]: min(h["from_left_ns"], h["from_right_ns"]) for h in rec["host_probe"]["hosts"]}
    assert set(probe) == set(HOSTS) and max(probe, key=lambda h: probe[h]) == "fs-c", probe
    text = render_text([parse_collective(rec)])
    assert "# held back 1048576 B by fs-c: fs-c received" in text, text


@needs_openmpi
def test_clean_run_names_nobody(testbed: dict[str, str]) -> None:
    netns.up(RATE, len(HOSTS))
    rec = allreduce(testbed, "openmpi")
    figures = rec["figures"]
    assert figures["held_back_by"] == [], figures["held_back_basis"]
    assert figures["held_back_basis"].startswith("no host stands out"), figures["held_back_basis"]
    assert "held back" not in render_text([parse_collective(rec)])
