# SPDX-License-Identifier: BSD-3-Clause
"""The perftest comparison in its default mode, for real: bench/softroce_vs_perftest.py boots two
pinned guests, the server halves of both tools run in the server guest (its bench-server
section), the client halves in the client guest. Two short cases, one repeat: this checks the
machinery (both tools measured in both guests, the figures and ratios in --json, the table where
--out says, nothing written into the checkout), not the ratios, which bench/ measures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

from fabscope.testbed import softroce  # noqa: E402

CASES = ("write_lat", "read_bw")


@pytest.mark.softroce
def test_two_guest_bench_measures_both_tools_and_writes_only_where_told(tmp_path: Path) -> None:
    reason = softroce.why_it_cannot_boot()
    if reason:
        pytest.skip(reason)
    softroce.build()  # cached
    committed = REPO / "bench" / "RESULTS-softroce.md"
    before = committed.read_bytes()
    out_json, out_md = tmp_path / "bench.json", tmp_path / "RESULTS.md"
    p = subprocess.run(
        [sys.executable, str(REPO / "bench" / "softroce_vs_perftest.py"), "--only", ",".join(CASES),
         "--repeats", "1", "--lat-iters", "200", "--bw-iters", "100", "--timeout", "600",
         "--json", str(out_json), "--out", str(out_md)],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    assert p.returncode == 0, p.stderr[-3000:]
    meta = json.loads(out_json.read_text())
    assert meta["mode"] == "two-guests" and meta["suite_exit_status"] == 0
    assert meta["pinned_cpus"] is (len(os.sched_getaffinity(0)) >= 2)
    # Each half ran in its own guest: both guests reported themselves.
    assert meta["guests"]["server"]["ok"] and meta["guests"]["client"]["nproc"] == 1
    rows = {r["bench"]: r for r in meta["rows"]}
    assert set(rows) == set(CASES)
    for name, r in rows.items():
        # perftest under TCG sometimes refuses a run (its r^2 check); fabscope must always measure
        assert r["n_fabscope"] == 2, (name, r["fabscope_all"])
        # one repeat asked for, and one more: two sandwiches cannot reach the three a verdict
        # should rest on (bench/sandwich.py), and a chain runs up to twice its repeats for them
        assert r["runs"] == 2 and len(r["perftest_all"]) == 3, r
        if r["n_perftest"]:
            assert r["ratio"] and r["ratio"] > 0, r
        if r["n_perftest"] == 3:  # both sandwiches were formed: judged, or left out as unstable
            assert len(r["sandwich_ratios"]) + len(r["sandwich_left_out"]) == 2, r
            assert (r["met"] is None) is (r["sandwich_ratio"] is None), r
        if meta["pinned_cpus"]:
            # the host probed where its two CPUs were before each of the five runs and after the
            # last (bench/placement.py): a cache line's round trip between them, in ns
            probes = r["placement_probes_ns"]
            assert sorted(probes) == ["0", "1", "2", "3", "4", "5"] and all(v and v > 0 for v in probes.values()), r
    if meta["pinned_cpus"]:
        assert meta["placement_probes_answered"] == 6 * len(CASES), meta["placement_probes_answered"]
    # The server guest measured what its half of each run cost it (bench-server's reply).
    for rec in meta["records"]:
        if rec.get("tool") and rec["rc"] == 0:
            assert rec["server_cost"]["guest_cpu_s"]["user"] > 0, rec
    md = out_md.read_text()
    assert "| ib_write_lat vs fabscope write lat |" in md
    assert ("`--pin-cpus`" in md) is meta["pinned_cpus"]
    assert ("Host CPU placement (bench/placement.py), probed before each of 10 runs" in md) is meta["pinned_cpus"]
    assert committed.read_bytes() == before
