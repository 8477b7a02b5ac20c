# SPDX-License-Identifier: BSD-3-Clause
"""Collectives under mpirun on this host (Open MPI and MPICH): every operation measured and its
result checked element by element, the figures derived from the records, a wrong element failing
the run with exit 12, and the inputs refused before anything is allocated (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_marks import needs_mpich, needs_openmpi

from conftest import fabscope, json_lines

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from fabscope.launch.mpirun import find_mpi_engine
from fabscope.results.collective import COLLECTIVE_PATTERNS, parse_collective

# 3 ranks: an odd count, so that a factor (n-1)/n or a block split that assumed 2 would show.
# 12 B is one float32 per rank; 96 KiB splits evenly over 3 ranks.
QUICK = ["--iters", "20", "--warmup", "3", "--timeout", "20"]
FLAVOURS = [pytest.param("openmpi", marks=needs_openmpi), pytest.param("mpich", marks=needs_mpich)]
BUS_FACTOR_3 = {"allreduce": 4 / 3, "reduce_scatter": 2 / 3, "allgather": 2 / 3, "alltoall": 2 / 3, "bcast": 1.0}


def _collective(*args: str, mpi: str = "openmpi", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return fabscope("run", "--backend", "mpi", "--mpi", mpi, "--loopback", *args, *QUICK, "--format", "json",
                    timeout=180, env=env)


@pytest.mark.parametrize("mpi", FLAVOURS)
def test_every_collective_measured_and_checked(mpi: str) -> None:
    for pattern in COLLECTIVE_PATTERNS:
        sizes = [] if pattern == "barrier" else ["--sizes", "12,96K"]
        out = _collective("--pattern", pattern, "--ppn", "3", *sizes, mpi=mpi)
        assert out.returncode == 0, (pattern, out.stderr)
        recs = json_lines(out.stdout)
        assert [r["size"] for r in recs] == ([0] if pattern == "barrier" else [12, 98304]), pattern
        for raw in recs:
            res = parse_collective(raw)
            assert res.pattern == pattern and res.ranks == 3 and res.iterations == 20
            assert res.verified, raw["verified"]
            assert 0 < res.time_ns.min <= res.time_ns.p50 <= res.time_ns.p99 <= res.time_ns.max
            assert 0 <= res.skew_ns.min <= res.skew_ns.max <= res.time_ns.max
            assert 0 <= res.last_rank < 3 and sum(raw["last_rank"]["per_rank"]) == 20
            assert res.rank_hosts == (res.rank_hosts[0],) * 3  # all on this host
            figures = raw["figures"]
            if pattern == "barrier":
                assert figures["algbw_gbps"] is None and figures["busbw_gbps"] is None
                continue
            assert figures["algbw_gbps"] == pytest.approx(res.size * 8 / res.time_ns.p50)
            assert figures["busbw_gbps"] == pytest.approx(figures["algbw_gbps"] * BUS_FACTOR_3[pattern])
            # every element of the result was checked on every rank
            per_rank = res.size // 4 // 3 if pattern == "reduce_scatter" else res.size // 4
            assert raw["verified"]["elements_per_rank"] == per_rank


@pytest.mark.parametrize("mpi", FLAVOURS)
@pytest.mark.parametrize(("pattern", "datatype"), [("allreduce", "int32"), ("reduce_scatter", "float64"),
                                                   ("allgather", "float32"), ("alltoall", "int32")])
def test_in_place_and_datatypes(mpi: str, pattern: str, datatype: str) -> None:
    out = _collective("--pattern", pattern, "--ppn", "2", "--sizes", "64K", "--datatype", datatype, "--in-place",
                      mpi=mpi)
    assert out.returncode == 0, out.stderr
    (raw,) = json_lines(out.stdout)
    assert raw["in_place"] is True and raw["datatype"] == datatype and raw["verified"]["ok"] is True


def test_text_table_has_the_figures() -> None:
    out = fabscope("run", "--backend", "mpi", "--loopback", "--pattern", "allreduce", "--sizes", "64K", *QUICK,
                   timeout=180)
    assert out.returncode == 0, out.stderr
    assert "# collective allreduce | 2 ranks on 1 host(s) | float32 | op sum" in out.stdout
    assert "busbw = algbw x 1.000" in out.stdout  # 2(n-1)/n with n = 2
    header = out.stdout.splitlines()[1].split()
    assert header[:3] == ["size_B", "count", "iters"] and "busbw_Gbps" in header


@pytest.mark.parametrize("mpi", FLAVOURS)
def test_a_wrong_element_fails_the_run_naming_it(mpi: str) -> None:
    """FABSCOPE_TEST_CORRUPT_RESULT (test only) changes element 5 of rank 1's checked result, as a
    library or fabric returning wrong data would: exit 12, rank, element, expected and got named."""
    out = _collective("--pattern", "allreduce", "--ppn", "3", "--sizes", "96", "--datatype", "int32", mpi=mpi,
                      env={"FABSCOPE_TEST_CORRUPT_RESULT": "1:5"})
    assert out.returncode == 12, out.stderr
    # value(q, e) = (131 q + e) mod 65521 + 1 summed over 3 ranks at element 5: 6 + 137 + 268 = 411
    assert "rank 1 " in out.stderr and "element 5 is 412, expected 411" in out.stderr, out.stderr
    assert "1 of 3 ranks" in out.stderr and "Traceback" not in out.stderr
    assert json_lines(out.stdout) == []  # the wrong size is not reported as a measurement


@pytest.mark.parametrize(("args", "said"), [
    (["--pattern", "allreduce", "--ppn", "1"], "needs at least 2 ranks"),
    (["--pattern", "reduce_scatter", "--ppn", "3", "--sizes", "8"], "do not divide evenly over 3 ranks"),
    (["--pattern", "allreduce", "--sizes", "10"], "not a whole number of float32 elements"),
    (["--pattern", "allreduce", "--reduce-op", "max"], "--reduce-op"),
    (["--pattern", "bcast", "--in-place"], "--in-place: bcast has no separate send and receive buffers"),
    (["--pattern", "allgather", "--reduce-op", "sum"], "does not reduce"),
    (["--pattern", "lat", "--ppn", "2"], "--ppn applies only to the collectives"),
    (["--pattern", "allreduce", "--ppn", "4", "--sizes", "4G"], "MemAvailable"),
    (["--pattern", "allreduce", "--tag", "x"], "--tag: not for the collectives yet"),
])
def test_bad_input_is_a_named_usage_error(args: list[str], said: str) -> None:
    out = _collective(*args)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert said in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert json_lines(out.stdout) == [] or all(r.get("schema") == "fabscope.error/1" for r in json_lines(out.stdout))


def test_a_collective_needs_the_mpi_backend() -> None:
    out = fabscope("run", "--loopback", "--pattern", "allreduce", "--sizes", "64K")
    assert out.returncode == 2 and "add --backend mpi" in out.stderr, out.stderr


def test_datatype_is_refused_for_a_pair_pattern(engine: Path) -> None:
    out = subprocess.run([str(engine), "--validate-only", "--pattern", "bw", "--datatype", "int32"],
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2 and "--datatype applies only to the collective patterns" in out.stderr, out.stderr


@needs_mpich
def test_ranks_of_different_versions_are_refused() -> None:
    """One rank that says it is another fabscope version (FABSCOPE_TEST_ENGINE_VERSION, test only):
    hydra's MPMD form gives it to rank 0 alone."""
    engine = str(find_mpi_engine("mpich"))
    args = ["--pattern", "allreduce", "--sizes", "64K", "--iters", "5", "--format", "json"]
    out = subprocess.run(["timeout", "120", "mpirun.mpich", "-np", "1", "-env", "FABSCOPE_TEST_ENGINE_VERSION", "9.9",
                          engine, *args, ":", "-np", "1", engine, *args],
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 2, out.stderr
    assert "different fabscope versions: rank 0 runs 9.9, rank 1 runs" in out.stderr, out.stderr
    assert [r["schema"] for r in json_lines(out.stdout)] == ["fabscope.error/1"]


@needs_openmpi
def test_openmpi_algorithm_passes_through_and_is_recorded() -> None:
    out = _collective("--pattern", "allreduce", "--sizes", "64K", "--mca", "coll_tuned_use_dynamic_rules=1",
                      "--mca", "coll_tuned_allreduce_algorithm=4")
    assert out.returncode == 0, out.stderr
    (raw,) = json_lines(out.stdout)
    transport = raw["transport"]
    assert transport["launcher"]["mca"]["coll_tuned_allreduce_algorithm"] == "4"  # what was asked
    assert transport["coll"]["coll_tuned_allreduce_algorithm"] == "4"  # what the library read
    assert transport["selected"]["pml"] == "ob1" and transport["selected"]["btl"]["send"] == ["vader"]
    assert raw["verified"]["ok"] is True


@needs_mpich
def test_mpich_reports_its_netmod_and_algorithm_setting() -> None:
    out = _collective("--pattern", "bcast", "--sizes", "64K", mpi="mpich")
    assert out.returncode == 0, out.stderr
    (raw,) = json_lines(out.stdout)
    assert raw["transport"]["selected"]["device"].startswith("ch4:")
    assert "MPIR_CVAR_BCAST_INTRA_ALGORITHM" in raw["transport"]["coll"]


def test_duration_runs_from_the_ranks_first_meeting() -> None:
    """--duration ends every rank's phase at once, timed from when all ranks first met: a rank that
    waited there for a late one (connecting, no warm-up) used to end the phase after 1 iteration."""
    out = fabscope("run", "--backend", "mpi", "--loopback", "--pattern", "allreduce", "--sizes", "64K",
                   "--duration", "0.3", "--warmup", "0", "--timeout", "20", "--format", "json", timeout=180)
    assert out.returncode == 0, out.stderr
    (raw,) = json_lines(out.stdout)
    assert raw["iterations"] >= 10 and raw["verified"]["ok"] is True, raw["iterations"]


@pytest.mark.parametrize("mpi", FLAVOURS)
def test_cpu_auto_gives_each_rank_its_own_cpu_and_says_where(mpi: str) -> None:
    """--cpu auto (the default) places each rank as it places an engine: the ranks of one machine
    on distinct CPUs while there are enough, each with how it was chosen."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("one CPU here: two ranks cannot have one each")
    out = _collective("--pattern", "allreduce", "--ppn", "2", "--sizes", "64K", mpi=mpi)
    assert out.returncode == 0, out.stderr
    (raw,) = json_lines(out.stdout)
    placed = raw["rank_placement"]
    assert [p["rank"] for p in placed] == [0, 1] and all(p["asked"] == "auto" for p in placed)
    cpus = [p["cpu"] for p in placed]
    assert len(set(cpus)) == 2 and set(cpus) <= set(allowed), placed
    assert all(f"CPU {p['cpu']}" in p["how"] for p in placed), placed
    assert raw["oversubscribed"] == []


def test_more_ranks_than_cpus_is_stated_not_silent() -> None:
    ranks = len(os.sched_getaffinity(0)) + 1
    out = fabscope("run", "--backend", "mpi", "--loopback", "--pattern", "allreduce", "--ppn", str(ranks), "--sizes",
                   "64K", *QUICK, timeout=180)
    assert out.returncode == 0, out.stderr
    every = ",".join(str(r) for r in range(ranks))
    assert f"# oversubscribed: ranks {every} (on " in out.stdout, out.stdout
    assert "share CPUs: more ranks than the CPUs they may use" in out.stdout
    assert "# placement (--cpu auto): rank 0 " in out.stdout
    pinned = _collective("--pattern", "allreduce", "--ppn", "2", "--sizes", "64K", "--cpu", "0")
    assert pinned.returncode == 0, pinned.stderr
    (raw,) = json_lines(pinned.stdout)
    assert [p["cpu"] for p in raw["rank_placement"]] == [0, 0]
    assert raw["oversubscribed"] and "share CPU 0: --cpu 0 pins every rank there" in raw["oversubscribed"][0]
