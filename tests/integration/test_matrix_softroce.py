"""The fabric matrix with the verbs backend across two Soft-RoCE guests, for real: each guest's rxe0
carries its pairs, both hosts' counters give the verdict. The guests have no MPI and no Slurm, so
their agents come from the testbed itself through `--launcher external` (the site's own starter:
pdsh, clush, flux, a batch script), with a token file the harness made. Slow under TCG (minutes),
so it runs with the other Soft-RoCE tests (marker softroce)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from fabscope.testbed import softroce

pytestmark = pytest.mark.softroce

COORDINATOR = f"{softroce.SUBNET}.2:18600"  # the client guest, where `fabscope matrix` runs
AGENT = ["fabscope", "matrix-agent", "--coordinator", COORDINATOR, "--token-file", "/fabscope-ctl/token",
         "--connect-timeout", "300"]


def test_verbs_matrix_between_two_softroce_guests(tmp_path: Path) -> None:
    why = softroce.why_it_cannot_boot()
    if why:
        pytest.skip(why)
    softroce.build()
    token = tmp_path / "token"
    token.write_text(secrets.token_urlsafe(24) + "\n")
    token.chmod(0o600)
    matrix = ["fabscope", "matrix", "--hosts", "client,server", "--launcher", "external",
              "--coordinator", COORDINATOR, "--token-file", "/fabscope-ctl/token", "--connect-timeout", "300",
              "--backend", "verbs", "--device", "rxe0", "--pattern", "lat,bw", "--sizes", "4K", "--iters", "300",
              "--warmup", "20", "--timeout", "60", "--no-store", "--format", "json"]
    # The client guest is both a matrix host (its agent, in the background) and the launch node.
    client = ["sh", "-c", f"{' '.join(AGENT)} & {' '.join(matrix)} > /out/matrix.json; rc=$?; wait; exit $rc"]
    out = tmp_path / "out"
    with open(tmp_path / "console.log", "w") as console:
        rc = softroce.run(client, two_guests=True, server_cmd=AGENT, out_dir=out, timeout_s=1200,
                          stdout=console, stderr=console, extra_files={"token": token})
    log = (tmp_path / "console.log").read_text()
    doc_file = out / "client" / "matrix.json"
    assert doc_file.exists() and doc_file.read_text().strip(), log[-4000:]
    doc = json.loads(doc_file.read_text())
    assert doc["schema"] == "fabscope.matrix/1" and doc["launcher"] == "external"
    assert doc["hosts"] == ["client", "server"] and not doc["unreachable"], log[-3000:]
    pairs = doc["pairs"]
    # Both directions of the one pair, each pattern; rxe0 named and verified on both hosts.
    assert {(p["src_host"], p["dst_host"], p["matrix"]["pattern"]) for p in pairs} == {
        (a, b, pat) for a, b in (("client", "server"), ("server", "client")) for pat in ("lat", "bw")}, log[-3000:]
    for p in pairs:
        assert "error" not in p["matrix"] and p["backend"] == "verbs" and p["status"] == "ok", (
            p["matrix"].get("error"), p["status"], log[-3000:])
        assert p["path"]["requested"] == "rxe0" and p["path"]["verdict"] == "verified", p["path"]
        assert {side["host"] for side in p["path"]["sides"].values()} == {"client", "server"}
    lat = [p for p in pairs if p["matrix"]["pattern"] == "lat"]
    assert all(p["latency_us"]["p50"] > 0 for p in lat)
    assert rc == 0, log[-3000:]  # two hosts: a pair alone cannot be judged against the fabric
