# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope health` on a node with an RDMA device (rxe0 in the Soft-RoCE guest): the short verbs
loopback test of each device with an ACTIVE port runs, answers, and is judged with the doctor and
the error counters. One boot; the figure itself is not judged (TCG makes it milliseconds)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

from conftest import engine_bin  # noqa: E402
from fabscope.testbed import softroce  # noqa: E402


@pytest.mark.softroce
@pytest.mark.two_at_once  # times nothing
@pytest.mark.xdist_group("guest")
def test_health_runs_a_verbs_loopback_on_rxe0(tmp_path: Path) -> None:
    reason = softroce.why_it_cannot_boot()
    if reason:
        pytest.skip(reason)
    softroce.build()
    (tmp_path / "bin").mkdir()
    shutil.copy(engine_bin(), tmp_path / "bin" / "fabscope-engine")
    script = ("env PYTHONPATH=/fabscope/python FABSCOPE_ENGINE=/out/bin/fabscope-engine XDG_STATE_HOME=/tmp "
              "python3 -m fabscope health --format json > /out/health.json 2> /out/health.err")
    rc = softroce.main(["run", "--timeout", "400", "--out", str(tmp_path), "--", "sh", "-c", script])
    assert rc == 0, (tmp_path / "health.err").read_text()
    doc = json.loads((tmp_path / "health.json").read_text())
    assert doc["status"] == "pass", doc
    (rdma,) = [j for j in doc["judgements"] if j["case"] == "rdma rxe0"]
    assert rdma["status"] == "pass" and rdma["evidence"].startswith("rxe0: 8 B send ping-pong p50 "), rdma
    assert {j["case"] for j in doc["judgements"]} == {"doctor", "counters", "rdma rxe0"}
