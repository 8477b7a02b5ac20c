# SPDX-License-Identifier: BSD-3-Clause
"""The main job (`make run`): every built backend, op and pattern on loopback, one table, report files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from conftest import engine_bin, fabscope
from fabscope.suite import NEEDS_RDMA


def test_suite_runs_every_built_backend_and_writes_the_report(tmp_path: Path) -> None:
    out = fabscope("suite", "--quick", "--out", str(tmp_path), timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "FAILED" not in out.stdout
    records = [json.loads(line) for line in (tmp_path / "loopback.jsonl").read_text().splitlines()]
    seen = {(r["backend"], r["op"], r["pattern"]) for r in records}
    table = json.loads(subprocess.run([str(engine_bin()), "--options-json"], capture_output=True,
                                      text=True, check=True).stdout)
    for name, be in table["backends"].items():
        if name in NEEDS_RDMA:
            continue  # needs an RDMA device: covered in the Soft-RoCE guests
        for op in be["ops"]:
            for pattern in be["patterns"]:
                assert (name, op, pattern) in seen, (name, op, pattern)
    assert {"lat", "bw", "bibw"} <= {r["pattern"] for r in records if r["backend"] == "mpi"}
    md = (tmp_path / "loopback.md").read_text()
    assert md.startswith("# fabscope loopback suite")
    assert "```" not in md and "| backend op pattern | bytes | result | carried by | path | why |" in md  # real tables
    assert (tmp_path / "loopback.csv").read_text().startswith("backend,op,pattern,size")
    assert "carried by" in out.stdout and "ucx " in out.stdout and "mpi pml ob1" in out.stdout


def test_suite_backends_picks_rows_and_refuses_a_backend_with_none(tmp_path: Path) -> None:
    out = fabscope("suite", "--quick", "--no-store", "--backends", "tcp", "--out", str(tmp_path), timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "loopback.jsonl").read_text().splitlines()]
    assert records and {r["backend"] for r in records} == {"tcp"}
    summary = json.loads((tmp_path / "suite.json").read_text())  # what a suite check reads
    assert summary["schema"] == "fabscope.suite/1" and summary["failed"] == []
    # 64 KiB over loopback's MSS ends in a tiny segment: the row's "why" cell and its line under the table.
    row = next(line for line in out.stdout.splitlines() if line.startswith("tcp send bw ") and " 65536 " in line)
    assert row.endswith("  segmentation"), out.stdout
    assert "# why (tcp send bw 65536 B): segmentation: 65,536 B per message over MSS" in out.stdout, out.stdout
    # No RDMA device on this host: asking for verbs rows is an error that says why, not a shorter table.
    refused = fabscope("suite", "--quick", "--no-store", "--backends", "tcp,verbs", "--out", str(tmp_path / "v"),
                       timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert "no verbs row can run here" in refused.stderr and "no RDMA device" in refused.stderr
    bad = fabscope("suite", "--backends", "tcp,tpc", "--out", str(tmp_path / "b"), timeout=60)
    assert bad.returncode == 2 and "--backends" in bad.stderr and "'tpc'" in bad.stderr
