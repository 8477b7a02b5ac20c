"""The two-host suite's RDMA rows, for real: `fabscope suite --peer peer` in the client Soft-RoCE
guest against `fabscope serve` in the server guest, and `--preload-peer peer:18600` against a second
serve there whose engines run under librspreload. Slow under TCG emulation (several minutes), so it
runs with the other Soft-RoCE tests (marker softroce)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabscope.testbed import softroce

pytestmark = pytest.mark.softroce


def test_suite_peer_between_two_softroce_guests_has_verbs_rows(tmp_path: Path) -> None:
    why = softroce.why_it_cannot_boot()
    if why:
        pytest.skip(why)
    softroce.build()
    out = tmp_path / "out"
    with open(tmp_path / "console.log", "w") as console:
        # tcp and verbs rows only: under TCG every row costs minutes, and UCX/libfabric over rxe are
        # covered by tests/softroce (this test is about the suite's verbs rows beside its tcp row).
        rc = softroce.run(["fabscope", "suite", "--peer", "peer", "--preload-peer", "peer:18600", "--quick",
                           "--no-store", "--timeout", "30", "--backends", "tcp,verbs,rsocket", "--out", "/out/suite"],
                          two_guests=True, out_dir=out, timeout_s=1200, stdout=console, stderr=console,
                          server_cmd=["sh", "-c", "fabscope serve --bind 0.0.0.0 --insecure-no-auth & exec fabscope "
                                      "serve --bind 0.0.0.0 --port 18600 --insecure-no-auth --preload rsocket"])
    log = (tmp_path / "console.log").read_text()
    summary_file = out / "client" / "suite" / "suite.json"
    assert summary_file.exists(), log[-4000:]
    rows = {r["label"]: r for r in json.loads(summary_file.read_text())["rows"]}
    verbs = [r for label, r in rows.items() if label.startswith("verbs send (device rxe0")]
    assert verbs, (rows.keys(), log[-3000:])
    (row,) = verbs
    assert row["carried_by"].startswith("verbs rxe0/1"), row
    assert isinstance(row["lat8_p50_us"], float) and isinstance(row["bw1m_gbps"], float), row
    assert "verbs: not in this table" not in log
    # sockets over RDMA beside them: the rsocket API, and unmodified tcp under the preload, both
    # verified on rxe0 (the preload's row is judged against the RDMA device, not eth0)
    assert rows["rsocket send (device rxe0)"]["carried_by"] == "rsocket rxe0 via eth0", rows
    assert rows["rsocket send (device rxe0)"]["path"] == "verified", rows
    preload = rows["tcp (rspreload) send"]
    assert preload["path"] == "verified" and isinstance(preload["bw1m_gbps"], float), preload
    assert rows["tcp send"]["carried_by"] == "tcp via eth0", rows  # the plain row stays kernel TCP
    assert set(rows) == {"tcp send", "verbs send (device rxe0)", "rsocket send (device rxe0)",
                         "tcp (rspreload) send"}, rows.keys()
    assert row["path"] == "verified", row
    # every row measured and none misrouted: the suite's own exit status says so (no allowance for 4 or 5)
    assert rc == 0, log[-3000:]
