# SPDX-License-Identifier: BSD-3-Clause
"""The host benches' placement rule (bench/placement.py, used by bench/tcp_peers.py): a sandwich
counts only when every probe of the CPU-to-CPU round trip around it saw one placement of the VM's
CPUs, and the probe itself measures that round trip for real."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import placement
import tcp_peers
from tcp_peers import Measurement


def test_probes_of_one_placement_agree_and_a_move_or_a_gap_does_not() -> None:
    assert placement.same_placement([97.0, 113.0, 96.0, 98.0])
    assert not placement.same_placement([492.0, 481.0, 89.0, 92.0])  # moved during the sandwich
    assert not placement.same_placement([97.0, None, 98.0])  # a failed probe proves nothing
    assert not placement.same_placement([])


def _m(tool: str, slot: str, value: float, probe_ns: float) -> Measurement:
    metric = "bw_MBps" if "bw" in tool else "lat_p50_us"
    return Measurement(tool=tool, repeat=0, command=tool, seconds=1.0, values={metric: value}, slot=slot,
                       placement_before=probe_ns)


def _bw_repeat(rep: int, probes: list[float], peer: tuple[float, float], fab: float) -> list[Measurement]:
    ms = [_m("qperf tcp_bw", "before", peer[0], probes[0]), _m("fabscope bw", "", fab, probes[1]),
          _m("qperf tcp_bw", "after", peer[1], probes[2])]
    for m in ms:
        m.repeat = rep
    ms[-1].placement_after = probes[3]
    return ms


def test_a_sandwich_across_a_move_of_the_cpus_is_left_out_even_when_the_peer_looks_stable() -> None:
    # repeat 1: all on the near placement; repeat 2: the CPUs moved apart while fabscope ran, and
    # qperf's two runs happen to agree (both near the boundary) -- still not a fair comparison
    ms = _bw_repeat(1, [97, 98, 96, 97], (5200.0, 5300.0), 5250.0) + \
        _bw_repeat(2, [98, 99, 480, 470], (5100.0, 4900.0), 2400.0)
    for i, m in enumerate(ms[:-1]):
        m.placement_after = ms[i + 1].placement_before
    series, sandwiches, placements = tcp_peers.collect(ms)
    # the probe after a repeat is the one before the next
    assert placements[tcp_peers.QPERF_BW] == {1: [97, 98, 96, 98], 2: [98, 99, 480, 470]}
    goal = tcp_peers.summarize(series, sandwiches, placements)["goals"]["bw"]
    assert goal["ratio"] == pytest.approx(5250.0 / 5250.0)
    assert goal["repeats_used"] == 1 and goal["unstable_repeats"] == [2]


# A wall-clock bound (a round trip under 100 us): `measures` keeps it out of scripts/test.sh's four-at-once
# stage, where two spinning probes among four workers on two CPUs took 730 us.
@pytest.mark.measures
def test_the_probe_measures_a_round_trip_and_refuses_one_cpu(tmp_path: Path) -> None:
    binary = placement.build_probe(tmp_path / "core_to_core")
    rtt = placement.probe(0, 1, 5, binary)
    assert 1.0 < rtt < 100_000.0  # ns: a cache line crosses, whatever the placement
    same = subprocess.run([str(binary), "0", "0", "5"], capture_output=True, text=True, check=False)
    assert same.returncode == 2 and "two different CPUs" in same.stderr
    with pytest.raises(placement.ProbeError, match="cannot run on CPU 1023"):
        placement.probe(0, 1023, 5, binary)


def _client() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "softroce"))
    import placement_client

    placement_client._state.update(seq=0, gave_up=False)
    return placement_client


def test_the_guest_asks_and_the_host_agent_answers_with_a_probe(tmp_path: Path) -> None:
    """The Soft-RoCE benches' protocol over the shared /out directory, here a plain directory: the
    guest's request, the host's probe of its two CPUs, the answer; without an agent, nothing."""
    client = _client()
    assert client.host_placement(str(tmp_path / "placement")) == {}  # no agent: no probe, no wait
    with placement.GuestAgent(tmp_path, (0, 1)) as agent:
        first = client.placement_record("send_lat", 0, str(tmp_path / "placement"))
        second = client.placement_record("send_lat", 1, str(tmp_path / "placement"))
    assert first["section"] == "placement" and first["seq"] == 0 and first["rtt_ns"] > 0, first
    assert second["rtt_ns"] > 0 and agent.answered == 2
    assert sorted(p.name for p in (tmp_path / "placement").iterdir()) == ["agent"]  # requests and answers consumed


def test_an_agent_that_stops_answering_costs_one_deadline_then_probes_are_skipped(tmp_path: Path) -> None:
    client = _client()
    (tmp_path / "placement").mkdir()
    (tmp_path / "placement" / "agent").write_text("{}\n")  # announced, but nobody serves
    got = client.host_placement(str(tmp_path / "placement"), wait_s=0.2)
    assert "no answer from the host within 0.2 s" in got["error"]
    assert client.host_placement(str(tmp_path / "placement"), wait_s=0.2) == {}  # gave up: no second wait
