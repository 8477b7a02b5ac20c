# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope load` for real on loopback: agents started the --launcher external way (one per
"host", placed by rank), every flow an engine pair, all at once. Loopback has no bottleneck to judge;
these check that every flow ran together for the same time, what each flow and the total carry, the
victim's impact factor with its interval, and that a missing agent ends the run within its deadline."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

QUICK = ["--duration", "1", "--warmup-time", "0.2", "--sizes", "64K"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load(tmp_path: Path, n_agents: int, *args: str, connect_timeout: float = 30) -> tuple[int, str, str]:
    port = _free_port()
    token = tmp_path / "token"
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    cmd = [sys.executable, "-m", "fabscope", "load", *args, "--launcher", "external", "--coordinator",
           f"127.0.0.1:{port}", "--token-file", str(token), "--connect-timeout", f"{connect_timeout:g}"]
    main = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    agents: list[subprocess.Popen[str]] = []
    try:
        deadline = time.monotonic() + 20
        while not token.exists() and time.monotonic() < deadline and main.poll() is None:
            time.sleep(0.05)  # the load writes the token file before it listens
        for rank in range(n_agents):
            agents.append(subprocess.Popen(
                [sys.executable, "-m", "fabscope", "matrix-agent", "--coordinator", f"127.0.0.1:{port}",
                 "--token-file", str(token), "--connect-timeout", "20"],
                env=dict(env, OMPI_COMM_WORLD_RANK=str(rank)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                text=True))
        out, err = main.communicate(timeout=180)
    finally:
        if main.poll() is None:
            main.kill()
            main.wait()
        for a in agents:
            try:
                a.wait(timeout=20)
            except subprocess.TimeoutExpired:
                a.kill()
                a.wait()
    return main.returncode, out, err


def test_incast_with_flows_and_a_victim(tmp_path: Path) -> None:
    rc, out, err = load(tmp_path, 5, "incast", "--hosts", "h0,h1,h2", "--flows", "2", "--victim", "h3,h4",
                        "--format", "json", "--csv", str(tmp_path / "flows.csv"), "--html", str(tmp_path / "r.html"),
                        *QUICK)
    doc: dict[str, Any] = json.loads(out)
    assert doc["schema"] == "fabscope.load/1", err
    flows = doc["flows"]
    assert [(f["src"], f["dst"], f["lane"]) for f in flows] == [
        ("h1", "h0", 0), ("h1", "h0", 1), ("h2", "h0", 0), ("h2", "h0", 1)]
    for f in flows:
        assert f["error"] is None and f["gbps"] > 0.01, f
        assert f["retransmitted_segments"] is not None and f["segments"] > 0
        assert f["ce_marked_segments"] == 0  # read (TCP_INFO), and nothing on loopback marks CE
        # --duration 1 cut in quarters: the engine's whole intervals, each a rate
        assert len(f["intervals_gbps"]) >= 3 and all(x > 0 for x in f["intervals_gbps"])
        rec = f["record"]
        assert rec["config"]["duration"] == 1 and rec["pattern"] == "bw"
    # All four ran together: over each flow's run, loopback carried the others' bytes too (run one
    # after another, each flow's loopback delta would be about its own payload).
    for f in flows:
        rec = f["record"]
        lo = rec["counters"]["local"]["net"]["lo"]
        carried = lo["after"]["tx_bytes"] - lo["before"]["tx_bytes"]
        assert carried > 2 * rec["size"] * rec["iterations"], (f["flow"], carried)
    # the total is over the union of the flows' windows: at most the sum of their own rates
    assert doc["sum_of_rates_gbps"] == sum(f["gbps"] for f in flows)
    assert 0 < doc["total_gbps"] <= doc["sum_of_rates_gbps"] * (1 + 1e-9) and doc["phase_spread_s"] is not None
    assert 0.25 <= doc["fairness_jain"] <= 1.0
    b = doc["bottleneck"]
    assert (b["host"], b["links_in"], b["flows"], b["rate_gbps"]) == ("h0", 2, 4, None)  # lo has no link rate
    kinds = [f["kind"] for f in doc["findings"]]
    assert kinds[0] == "oversubscription"
    victim = doc["victim"]
    assert victim["pair"] == ["h3", "h4"]
    assert victim["isolated"]["latency_p50_us"] > 0 and victim["congested"]["latency_p50_us"] > 0
    for imp in victim["impact"]:
        lo, hi = imp["interval"]
        assert lo <= imp["factor"] <= hi
        assert imp["factor"] == imp["congested_us"] / imp["isolated_us"]
    assert [i["q"] for i in victim["impact"]] == [0.5, 0.99]
    csv_lines = (tmp_path / "flows.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 4 and csv_lines[0].startswith("flow,role,src,dst")
    html = (tmp_path / "r.html").read_text()
    assert 'id="heatmap"' in html and "h1</th>" in html and "impact factor" in html
    assert rc in (0, 11), err  # 11 only if this loaded machine made a flow lose or starve


def test_permutation_text(tmp_path: Path) -> None:
    rc, out, err = load(tmp_path, 3, "permutation", "--hosts", "h0,h1,h2", "--seed", "3", *QUICK)
    assert rc in (0, 11), err
    assert "load permutation: 3 hosts" in out and "seed 3" in out
    assert "Jain's fairness index" in out
    assert out.count("->") >= 3


def test_a_missing_agent_ends_the_run_within_its_deadline(tmp_path: Path) -> None:
    t0 = time.monotonic()
    rc, out, err = load(tmp_path, 1, "incast", "--hosts", "h0,h1", *QUICK, connect_timeout=3)
    assert rc == 3 and not out and "1 of 2 load agents checked in within 3 s (missing: h1)" in err
    assert time.monotonic() - t0 < 30


@pytest.mark.parametrize("backend", ["ucx", "ofi"])
def test_other_transports_run_as_flows_too(tmp_path: Path, backend: str) -> None:
    rc, out, err = load(tmp_path, 3, "incast", "--hosts", "h0,h1,h2", "--backend", backend, "--format", "json", *QUICK)
    doc = json.loads(out)
    assert doc["backend"] == backend, err
    assert [f["record"]["backend"] for f in doc["flows"]] == [backend, backend]
    assert all(f["gbps"] > 0 and len(f["intervals_gbps"]) >= 3 for f in doc["flows"])
    # no TCP_INFO behind these: loss is said to be unchecked, never reported as none
    assert all(f["retransmitted_segments"] is None for f in doc["flows"])
    assert any("loss unchecked" in n for n in doc["notes"])
    assert rc == 0, err


def test_a_load_is_kept_in_the_history(tmp_path: Path) -> None:
    store = tmp_path / "history.db"
    rc, out, err = load(tmp_path, 2, "incast", "--hosts", "h0,h1", "--store", str(store), "--tag", "load-a", *QUICK)
    assert rc in (0, 11), err
    assert out.startswith("load incast: 2 hosts") and "kept as run" in err
    listed = subprocess.run([sys.executable, "-m", "fabscope", "history", "list", "--store", str(store)],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO / "python")))
    assert "load" in listed.stdout and "load-a" in listed.stdout, listed.stdout + listed.stderr
