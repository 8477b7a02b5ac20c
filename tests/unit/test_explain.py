# SPDX-License-Identifier: BSD-3-Clause
"""The explanation's decision (fabscope.results.explain) on real saved records (tests/fixtures/records).

Variants change one engine-reported fact of a real record (a retransmission count, a path MTU) to
check the rule that reads it; the planted runs themselves are in tests/integration/test_explain_runs.py."""

from __future__ import annotations

import copy
import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import fabscope, json_lines
from fabscope.report.render import render_csv, render_text
from fabscope.results import load_file, parse_record
from fabscope.results.explain import CAUSES, explain

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
FACTS = RECORDS / "tcp-send-bw-32k-64k-explain-facts.jsonl"
BUFFERS = RECORDS / "tcp-send-bw-32k-sndbuf-explain-buffers.jsonl"
TWO_DEVICES = "softroce-verbs-write-bw-two-devices.jsonl"
FABRIC0 = "netns-tcp-bw-device-fabric0-verified.jsonl"


def raw(name: str, line: int = 0) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads((RECORDS / name).read_text().splitlines()[line])
    return rec


def states(rec: dict[str, Any]) -> dict[str, str]:
    return {c.cause: c.state for c in explain(rec).causes}


def test_every_cause_is_accounted_for_on_every_saved_record() -> None:
    for path in sorted(RECORDS.glob("*.jsonl")):
        for res in load_file(path):
            assert res.explanation is not None
            assert [c.cause for c in res.explanation.causes] == list(CAUSES), path.name
            for c in res.explanation.causes:
                assert c.state in ("seen", "clear", "unchecked") and c.evidence, (path.name, c)
            assert res.to_json()["explanation"] == res.explanation.to_json()


def test_loopback_64k_is_segmentation_and_32k_is_nothing() -> None:
    small, big = load_file(FACTS)
    assert small.explanation is not None and big.explanation is not None
    assert [c.cause for c in big.explanation.seen] == ["segmentation"]
    (seg,) = big.explanation.seen
    mss = big.transport.local["mss"]
    assert f"over MSS {mss:,} B: 2 packets per message, the last one {65536 - mss:,} B" in seg.evidence
    assert small.explanation.seen == ()
    assert states(small.raw)["retransmission"] == "clear" and states(small.raw)["mtu"] == "clear"
    assert states(small.raw)["placement"] == "unchecked"  # lo has no NUMA node


def test_text_prints_one_why_line_per_seen_cause_else_one_count_line_and_csv_a_column() -> None:
    small, big = load_file(FACTS)
    text = render_text([small, big])
    assert "# why (65536 B): segmentation: 65,536 B per message over MSS" in text
    assert "# why (32768 B)" not in text  # a size with nothing seen has no line of its own
    assert render_text([small]).rstrip().endswith("# why: nothing seen; 5 checks clear, 4 unchecked")
    rows = list(csv.DictReader(io.StringIO(render_csv([small, big]))))
    assert [r["why"] for r in rows] == ["5 checks clear, 4 unchecked", "segmentation"]


def test_a_record_from_before_the_facts_says_unchecked_and_why() -> None:
    rec = raw("tcp-send-bw-loopback.jsonl")
    got = {c.cause: c for c in explain(rec).causes}
    assert got["retransmission"].state == "unchecked" and "TCP_INFO" in got["retransmission"].evidence
    assert got["mtu"].state == "unchecked" and "before 0.2" in got["mtu"].evidence
    # The 0.1.0 engine already reported the MSS: its 64 KiB record shows the tail segment.
    assert [c for c, v in got.items() if v.seen] == ["segmentation"]


def test_retransmissions_are_named_unless_the_receiver_reported_them_as_duplicates() -> None:
    _, big = (json.loads(line) for line in FACTS.read_text().splitlines())
    lossy = copy.deepcopy(big)
    lossy["transport"]["local"]["phase_retransmitted_segments"] = 55000
    lossy["transport"]["local"]["phase_spurious_retransmissions"] = 12
    cause = next(c for c in explain(lossy).causes if c.cause == "retransmission")
    assert cause.seen and "retransmitted 55,000 segments (12 reported back as duplicates" in cause.evidence
    assert cause.fix and "tc -s qdisc" in cause.fix
    # Late ACKs on a busy host: every retransmission DSACKed back is no loss.
    spurious = copy.deepcopy(big)
    spurious["transport"]["local"]["phase_retransmitted_segments"] = 40
    spurious["transport"]["local"]["phase_spurious_retransmissions"] = 40
    assert states(spurious)["retransmission"] == "clear"
    # In bw only the client sends: the receiver's count is not the stream's.
    receiver = copy.deepcopy(big)
    receiver["transport"]["peer"]["phase_retransmitted_segments"] = 500
    assert states(receiver)["retransmission"] == "clear"


def test_path_mtu_below_the_netdev_mtu_is_named() -> None:
    _, big = (json.loads(line) for line in FACTS.read_text().splitlines())
    low = copy.deepcopy(big)
    low["transport"]["local"]["path_mtu"] = 1500
    mtu = next(c for c in explain(low).causes if c.cause == "mtu")
    assert mtu.seen and "path MTU 1,500 B below the 65,536 B MTU of lo" in mtu.evidence


def test_verbs_record_checks_mtu_and_segmentation_against_the_path_mtu() -> None:
    res = parse_record(raw("softroce-verbs-write-bw-two-devices.jsonl"))
    assert res.explanation is not None
    got = {c.cause: c for c in res.explanation.causes}
    assert got["mtu"].state == "clear" and "1,024 B" in got["mtu"].evidence
    # 64 KiB over a 1,024 B path MTU: 64 full packets, no tail, so nothing to name.
    assert (got["segmentation"].state, got["segmentation"].evidence) == (
        "clear", "65,536 B per message over path MTU 1,024 B: 64 packets per message, the last one 1,024 B")
    assert got["retransmission"].state == "unchecked"  # the snapshot holds no rxe loss counters


def cause_of(rec: dict[str, Any], name: str) -> Any:
    return next(c for c in explain(rec).causes if c.cause == name)


def test_a_small_fixed_send_buffer_is_named_and_autotuned_buffers_are_clear() -> None:
    """Real loopback runs: --tcp-sndbuf 4096 held less than the stream had in flight (rate x TCP_INFO
    round trip); the default (autotuned) run is clear and names nothing."""
    default, small = load_file(BUFFERS)
    assert default.explanation is not None and small.explanation is not None
    assert "buffers" not in [c.cause for c in default.explanation.seen]
    auto = cause_of(default.raw, "buffers")
    assert auto.state == "clear" and "autotuned" in auto.evidence
    buf = cause_of(small.raw, "buffers")
    rtt = small.raw["transport"]["local"]["rtt_us"]
    assert buf.seen and "the client's send buffer fixed by --tcp-sndbuf 4,096 B" in buf.evidence
    assert f"round trip {rtt:,} us, TCP_INFO" in buf.evidence
    assert buf.fix and "--tcp-sndbuf/--tcp-rcvbuf" in buf.fix and "net.core.wmem_max" in buf.fix
    assert "# why: buffers: the client's send buffer fixed by --tcp-sndbuf 4,096 B" in render_text([small])
    assert {"cause": "buffers", "state": "seen"}.items() <= small.to_json()["explanation"]["causes"][5].items()
    # The same buffer on a stream that needed a quarter of it in flight: room to spare.
    slow = copy.deepcopy(small.raw)
    slow["bandwidth_gbps"] = small.raw["bandwidth_gbps"] / 8
    assert cause_of(slow, "buffers").state == "clear"
    # A fixed receive buffer on the server limits the client's stream the same way.
    rcv = copy.deepcopy(small.raw)
    rcv["config"]["backend_options"].update({"tcp-sndbuf": 0, "tcp-rcvbuf": 4096})
    rcv["transport"]["peer"]["rcvbuf_bytes"] = 8192
    assert "the server's receive buffer fixed by --tcp-rcvbuf 4,096 B" in cause_of(rcv, "buffers").evidence


def test_a_fixed_buffer_without_a_round_trip_in_the_record_is_unchecked_saying_why() -> None:
    _, small = (json.loads(line) for line in BUFFERS.read_text().splitlines())
    del small["transport"]["local"]["rtt_us"]
    buf = cause_of(small, "buffers")
    assert buf.state == "unchecked" and "no round trip (TCP_INFO rtt" in buf.evidence


def test_link_is_clear_on_a_real_run_and_unchecked_on_a_record_without_carrier_counters() -> None:
    default, _ = (json.loads(line) for line in BUFFERS.read_text().splitlines())
    link = cause_of(default, "link")
    assert link.state == "clear" and "counters read" in link.evidence
    old = cause_of(raw("tcp-send-bw-loopback.jsonl"), "link")
    assert old.state == "unchecked" and "no carrier or link-event counter" in old.evidence


def test_carrier_change_on_the_carrying_netdev_is_named_synthetic() -> None:
    """A real loopback record with its lo's carrier_changes edited to +2 (down and up) over the run,
    in both engines' snapshots of the one host: named once; the same change on a netdev that
    carried nothing of the run (eth0) is not this run's link."""
    default, _ = (json.loads(line) for line in BUFFERS.read_text().splitlines())
    flap = copy.deepcopy(default)
    for side in ("local", "peer"):
        lo = flap["counters"][side]["net"]["lo"]
        lo["after"]["carrier_changes"] = lo["before"]["carrier_changes"] + 2
        lo["after"]["carrier_down_count"] = lo["before"]["carrier_down_count"] + 1
    link = cause_of(flap, "link")
    host = flap["counters"]["peer"]["host"]
    assert link.seen and link.evidence.count(
        f"carrier_changes +2 on lo ({host}), carrier_down_count +1 on lo ({host})") == 1, link.evidence
    assert link.fix and "ethtool" in link.fix
    other = copy.deepcopy(default)
    eth = other["counters"]["local"]["net"]["eth0"]
    eth["after"]["carrier_changes"] = eth["before"]["carrier_changes"] + 2
    assert cause_of(other, "link").state == "clear"


def test_rdma_link_downed_and_symbol_errors_are_named_synthetic() -> None:
    """The real Soft-RoCE record's rxe ports have no PMA counters (link unchecked); given
    link_downed/symbol_error before and after (as an mlx5 or IB port has), a delta is named."""
    rec = raw("softroce-verbs-write-bw-two-devices.jsonl")
    assert cause_of(rec, "link").state == "unchecked"
    port = rec["counters"]["peer"]["rdma"]["rxe1/1"]
    port["before"].update({"link_downed": 3, "symbol_error": 10})
    port["after"].update({"link_downed": 4, "symbol_error": 250})
    link = cause_of(rec, "link")
    assert link.seen and "link_downed +1 on rxe1/1" in link.evidence and "symbol_error +240 on rxe1/1" in link.evidence


NUMA_FAR = RECORDS / "softroce-numa-verbs-lat-cpu-far.jsonl"
NUMA_AUTO = RECORDS / "softroce-numa-verbs-lat-cpu-auto.jsonl"


def test_an_engine_on_another_node_than_its_device_is_placement_with_both_nodes() -> None:
    """The NUMA guest (rxe0 on eth0, node 1): --cpu far put the engines on node 0's CPUs."""
    (far,) = load_file(NUMA_FAR)
    assert far.explanation is not None and [c.cause for c in far.explanation.seen] == ["placement"]
    (seen,) = far.explanation.seen
    assert "the local engine ran on CPU 1 (NUMA node 0), and rxe0 (on eth0) is on node 1 (--cpu far)" in seen.evidence
    assert "the peer engine ran on CPU 0 (NUMA node 0)" in seen.evidence
    assert seen.fix and "--cpu auto" in seen.fix
    assert far.host is not None and far.host.placement is not None
    assert far.host.placement.device_numa_node == 1 and far.host.placement.host_numa_nodes == 2
    text = render_text([far])
    assert "# cpu: local on CPU 1, NUMA node 0 (--cpu far; rxe0 (on eth0) on node 1)" in text
    assert "# why: placement: " in text
    # The same record with the local engine moved to the device's node: only the peer is named.
    moved = raw(NUMA_FAR.name)
    moved["cpu_use"]["local"].update(cpu=3, numa_node=1)
    cause = {c.cause: c for c in explain(moved).causes}["placement"]
    assert cause.state == "seen" and "local engine" not in cause.evidence and "peer engine" in cause.evidence


def test_engines_on_their_devices_node_are_clear_and_an_unknown_node_is_unchecked_saying_why() -> None:
    (auto,) = load_file(NUMA_AUTO)
    assert auto.explanation is not None
    cause = {c.cause: c for c in auto.explanation.causes}["placement"]
    assert cause.state == "clear" and "the node of rxe0 (on eth0)" in cause.evidence, cause
    # A multi-node host whose device reports no node: unchecked, with the engine's reason.
    unknown = raw(NUMA_AUTO.name)
    unknown["host"]["placement"].update(device_numa_node=None, why_no_node="the firmware gives eth0 no NUMA node")
    cause = {c.cause: c for c in explain(unknown).causes}["placement"]
    assert cause.state == "unchecked" and "local: the firmware gives eth0 no NUMA node" in cause.evidence


# --------------------------------------------------------------------------
# Expected: the ceiling of the carrying device (link rate x wire efficiency, PCIe)
# --------------------------------------------------------------------------

# The link facts as the engine reports them (engine/src/core/linkfacts.c) for a PCIe 4.0 x16 and a
# PCIe 3.0 x8 function (ib-no-sm's LnkSta is x8 at Gen3 under a 100 Gb/s port).
GEN4_X16 = {"address": "0000:3b:00.0", "gts": 16.0, "width": 16, "usable_gbps": 16 * 16 * 128 / 130,
            "encoding": "128b/130b"}
GEN3_X8 = {"address": "000a:11:00.1", "gts": 8.0, "width": 8, "usable_gbps": 8 * 8 * 128 / 130,
           "encoding": "128b/130b"}


def one_rxe_device(**facts: Any) -> dict[str, Any]:
    """The two-device write record with its rxe0 as the only device (a one-device run's
    ``transport.local`` is that device's description, as each entry of ``devices`` is), and the
    link facts given."""
    rec = raw(TWO_DEVICES)
    dev = rec["transport"]["local"]["devices"][0]
    rec["transport"]["local"] = {**dev, **facts}
    rec["bandwidth_gbps"] = dev["bandwidth_gbps"]
    return rec


def test_roce_v2_ceiling_is_the_netdev_speed_times_the_wire_efficiency_at_the_path_mtu() -> None:
    rec = one_rxe_device(rate_gbps=100, rate_source="netdev eth0 speed (sysfs)", pcie=GEN4_X16,
                         pcie_source="sysfs class/infiniband/mlx5_0/device: PCI function 0000:3b:00.0")
    got = explain(rec)
    # 1,024 B of payload per packet + 8 + 14 + 4 + 12 (Ethernet) + 20 (IPv4) + 8 (UDP) + 12 (BTH) + 4 (ICRC)
    assert got.expected_gbps == pytest.approx(100 * 1024 / (1024 + 82), abs=1e-4)
    assert got.expected_basis == (
        "link 100 Gb/s [netdev eth0 speed (sysfs)] x 92.6 % (RoCE v2 at MTU 1,024: 1,024 B per packet + 82 B of "
        "headers and framing) = 92.6 Gb/s; PCIe 4.0 x16 252.1 Gb/s usable after 128b/130b (TLP/DLLP overhead "
        "lowers it further, to ~85-90 %): the link bounds")
    assert got.expected_gbps is not None
    assert got.achieved_fraction == pytest.approx(rec["bandwidth_gbps"] / got.expected_gbps, abs=1e-4)
    assert parse_record(rec).to_json()["explanation"]["expected_gbps"] == got.expected_gbps


def test_the_bound_is_pcie_when_its_usable_rate_is_below_the_link() -> None:
    rec = one_rxe_device(rate_gbps=100, rate_source="netdev eth0 speed (sysfs)", pcie=GEN3_X8)
    got = explain(rec)
    assert got.expected_gbps == pytest.approx(64 * 128 / 130, abs=1e-4)
    assert "= 92.6 Gb/s; PCIe 3.0 x8 63 Gb/s usable after 128b/130b" in got.expected_basis
    assert got.expected_basis.endswith(": PCIe bounds")


def test_infiniband_ceiling_has_its_headers_and_sdr_to_qdr_their_8b_10b_coding() -> None:
    edr = one_rxe_device(link_layer="InfiniBand", rate_gbps=100, rate_source="ibv_query_port: 4X EDR",
                         ib_speed="EDR", pcie=GEN4_X16, gid={"type": "IB", "grh": False},
                         mtu={"active": 4096, "used": 4096})
    got = explain(edr)
    # LRH 8 + BTH 12 + ICRC 4 + VCRC 2; EDR's 25 Gb/s a lane is already a data rate (64b/66b)
    assert got.expected_gbps == pytest.approx(100 * 4096 / (4096 + 26), abs=1e-4)
    assert ("link 100 Gb/s [ibv_query_port: 4X EDR] x 99.4 % (InfiniBand at MTU 4,096: 4,096 B per packet + "
            "26 B of LRH, BTH, ICRC, VCRC) = 99.4 Gb/s") in got.expected_basis
    qdr = copy.deepcopy(edr)
    qdr["transport"]["local"].update(rate_gbps=40, ib_speed="QDR", rate_source="ibv_query_port: 4X QDR",
                                     gid={"type": "IB", "grh": True})
    got = explain(qdr)
    assert got.expected_gbps == pytest.approx(40 * 0.8 * 4096 / (4096 + 66), abs=1e-4)
    assert "x 80.0 % (QDR: a signalling rate: 8b/10b leaves 80 % for data)" in got.expected_basis
    assert "66 B of LRH, GRH, BTH, ICRC, VCRC" in got.expected_basis


def test_tcp_ceiling_is_the_mss_over_its_headers_and_framing_and_pcie_unknown_is_said() -> None:
    rec = raw(FABRIC0)
    mss = rec["transport"]["local"]["mss"]
    rec["transport"]["local"].update(rate_gbps=25, rate_source="netdev fabric0 speed (sysfs)", pcie=None,
                                     pcie_source="no PCI function: fabric0 has no bus device (virtual)")
    got = explain(rec)
    # MSS + IPv4 20 + TCP 20 + timestamps 12 + Ethernet 38
    assert got.expected_gbps == pytest.approx(25 * mss / (mss + 90), abs=1e-4)
    assert (f"(TCP at MSS {mss:,}: {mss:,} B per segment + 90 B of TCP/IP headers and Ethernet framing)"
            in got.expected_basis)
    assert got.expected_basis.endswith(
        "; PCIe unknown: no PCI function: fabric0 has no bus device (virtual): the link bounds")
    assert got.expected_gbps is not None
    assert got.achieved_fraction == pytest.approx(rec["bandwidth_gbps"] / got.expected_gbps, abs=1e-4)


def test_no_link_rate_is_no_ceiling_saying_why_and_bibw_and_several_devices_add_up() -> None:
    rec = raw(FABRIC0)
    rec["transport"]["local"].update(rate_gbps=None, rate_source="fabric0 is virtual: its speed 10000 Mb/s is "
                                     "nominal, not a link rate", pcie=None, pcie_source="no PCI function")
    got = explain(rec)
    assert (got.expected_gbps, got.achieved_fraction) == (None, None)
    assert got.expected_basis.startswith("the record carries no link rate for fabric0 (fabric0 is virtual: its "
                                         "speed 10000 Mb/s is nominal")
    bibw = raw("tcp-send-bibw-loopback.jsonl")
    bibw["transport"]["local"].update(rate_gbps=10, rate_source="netdev eth0 speed (sysfs)")
    mss = bibw["transport"]["local"]["mss"]
    got = explain(bibw)
    assert got.expected_gbps == pytest.approx(2 * 10 * mss / (mss + 90), abs=1e-4)
    assert "both directions at once (bibw): 2 x" in got.expected_basis
    two = raw(TWO_DEVICES)
    for dev, nd in zip(two["transport"]["local"]["devices"], ("eth0", "eth1"), strict=True):
        dev.update(rate_gbps=10, rate_source=f"netdev {nd} speed (sysfs)", pcie=None, pcie_source="no PCI function")
    got = explain(two)
    assert got.expected_gbps == pytest.approx(2 * 10 * 1024 / 1106, abs=1e-4)
    assert got.expected_basis.startswith("rxe0: link 10 Gb/s [netdev eth0 speed (sysfs)]")
    assert "; rxe1: link 10 Gb/s [netdev eth1 speed (sysfs)]" in got.expected_basis
    assert got.expected_basis.endswith("; the devices together: 18.5 Gb/s")
    # One device without a rate: no ceiling for the pair.
    two["transport"]["local"]["devices"][1]["rate_gbps"] = None
    assert explain(two).expected_gbps is None


def test_a_real_loopback_run_reports_lo_has_no_link_rate_and_no_pci_function() -> None:
    out = fabscope("run", "--loopback", "--pattern", "bw", "--sizes", "64K", "--iters", "200", "--format", "json",
                   "--no-store", "--device", "lo")
    assert out.returncode == 0, out.stderr
    (rec,) = json_lines(out.stdout)
    local = rec["transport"]["local"]
    assert local["rate_gbps"] is None and local["rate_source"] == "lo is virtual: no link rate"
    assert local["pcie"] is None and local["pcie_source"] == "no PCI function: lo has no bus device (virtual)"
    assert rec["explanation"]["expected_gbps"] is None and rec["explanation"]["achieved_fraction"] is None
    assert rec["explanation"]["expected_basis"].startswith(  # then the history's reference (issue 51)
        "the record carries no link rate for lo (lo is virtual: no link rate); PCIe unknown: no PCI function: lo "
        "has no bus device (virtual); ")


def test_rxe_loss_counters_name_loss_and_a_few_stray_retries_do_not() -> None:
    """Between two Soft-RoCE guests: netem 3 % loss moved rcvd_seq_err, completer_retry_err and
    out_of_seq_request by hundreds; a clean latency run had 4 stray retries of 608 packets (the ACK
    timer firing while the emulated peer was descheduled), which is no loss to name."""
    (lossy,) = load_file(RECORDS / "softroce-verbs-send-bw-netem-loss.jsonl")
    assert lossy.explanation is not None and [c.cause for c in lossy.explanation.seen] == ["retransmission"]
    (seen,) = lossy.explanation.seen
    assert "rcvd_seq_err +673 on rxe0/1" in seen.evidence and "out_of_seq_request" in seen.evidence
    (clean,) = load_file(RECORDS / "softroce-verbs-send-lat-stray-retries.jsonl")
    assert clean.explanation is not None and clean.explanation.seen == ()
    cause = {c.cause: c for c in clean.explanation.causes}["retransmission"]
    assert cause.state == "clear" and "a few stray retries" in cause.evidence and "of 608 packets" in cause.evidence


BLOCK_LAT = "tcp-send-lat-block-loopback.jsonl"


def _cpu_cause(rec: dict[str, Any]) -> Any:
    (cpu,) = [c for c in explain(rec).causes if c.cause == "cpu"]
    return cpu


def test_a_latency_run_under_the_powersave_governor_names_it_and_performance_names_nothing() -> None:
    """Cause 4's governor: a latency run whose engine CPU ran under 'powersave' (intel_pstate's default
    on a bare-metal host) is named with the governor and the fix; 'performance' is clear; this VM's
    record (no cpufreq) says the governor could not be read."""
    rec = raw("softroce-verbs-send-lat-stray-retries.jsonl")
    assert rec["pattern"] == "lat" and rec["transport"]["poll"] == "busy"
    vm = _cpu_cause(rec)
    assert vm.state == "clear" and "has no frequency governor to read" in vm.evidence
    slow = copy.deepcopy(rec)
    slow["cpu_use"]["local"]["governor"] = "powersave"
    cpu = _cpu_cause(slow)
    assert cpu.state == "seen" and "ran under the 'powersave' frequency governor" in cpu.evidence, cpu
    assert cpu.fix and "cpupower frequency-set -g performance" in cpu.fix and cpu.cost and "clock" in cpu.cost
    fast = copy.deepcopy(rec)
    for side in ("local", "peer"):
        fast["cpu_use"][side]["governor"] = "performance"
    assert _cpu_cause(fast).state == "clear" and "'performance' frequency governor" in _cpu_cause(fast).evidence
    bw = raw("softroce-verbs-send-bw-netem-loss.jsonl")
    bw["cpu_use"]["local"]["governor"] = "powersave"  # a bandwidth run keeps its CPU busy: not judged
    assert "governor" not in _cpu_cause(bw).evidence


def test_a_blocking_latency_run_on_a_deep_idle_driver_is_named_unless_the_latency_is_held() -> None:
    """Cause 4's C-states: a --poll block latency run whose hosts idle with a driver whose states cost
    tens of microseconds to leave (haltpoll, intel_idle) pays that per message: named, with
    --poll busy and --hold-cpu-latency as the fix; held at 0, or this VM's 'none', it is clear."""
    rec = raw(BLOCK_LAT)
    assert rec["transport"]["poll"] == "block" and rec["host"]["cpuidle_driver"] == "none"
    assert _cpu_cause(rec).state == "unchecked"  # the hog check cannot judge a sleeper; nothing seen
    assert "cpuidle driver 'none'" in _cpu_cause(rec).evidence
    deep = copy.deepcopy(rec)
    deep["host"]["cpuidle_driver"] = "intel_idle"
    cpu = _cpu_cause(deep)
    assert cpu.state == "seen" and "the local engine waited in the kernel (--poll block)" in cpu.evidence, cpu
    assert "'intel_idle'" in cpu.evidence and "peer" not in cpu.evidence.split("; ")[0][:9]
    assert cpu.fix and "--hold-cpu-latency" in cpu.fix and "--poll busy" in cpu.fix
    text = render_text([parse_record(deep)])
    assert "# why: cpu: the local engine waited in the kernel" in text
    held = copy.deepcopy(deep)
    held["host"]["cpu_dma_latency_held"] = True
    assert _cpu_cause(held).state == "unchecked" and "held at 0" in _cpu_cause(held).evidence
    busy = copy.deepcopy(deep)
    busy["transport"]["poll"] = "busy"  # a spinning engine never idles its CPU
    assert "cpuidle" not in _cpu_cause(busy).evidence


def _with_congestion(rec: dict[str, Any], side: str, counts: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """The record as an mlx5 port would have reported it: its hw_counters carry the congestion
    signals (rxe has none), with these (before, after) values on the side's first RDMA port."""
    out = copy.deepcopy(rec)
    dev = next(iter(out["counters"][side]["rdma"].values()))
    for key, (before, after) in counts.items():
        dev["before"][key], dev["after"][key] = before, after
    return out


def test_congestion_signals_without_loss_are_named_and_quiet_ones_are_counted_as_read() -> None:
    """Cause 2's congestion signals: ECN-marked packets at the receiver and CNPs handled by the
    sender's rate limiter are named even when no packet was lost (DCQCN slowed the sender); when
    they were read and did not move, the clear line says so."""
    clean = raw("softroce-verbs-send-lat-stray-retries.jsonl")
    quiet = _with_congestion(clean, "peer", {"np_ecn_marked_roce_packets": (10, 10), "np_cnp_sent": (4, 4)})
    (ret,) = [c for c in explain(quiet).causes if c.cause == "retransmission"]
    assert ret.state == "clear" and "no congestion counter moved (2 read)" in ret.evidence, ret
    marked = _with_congestion(clean, "peer", {"np_ecn_marked_roce_packets": (10, 5010), "np_cnp_sent": (4, 904)})
    marked = _with_congestion(marked, "local", {"rp_cnp_handled": (0, 900)})
    (ret,) = [c for c in explain(marked).causes if c.cause == "retransmission"]
    assert ret.state == "seen", ret
    assert ret.evidence.startswith("no loss counter moved, but the fabric signalled congestion during the run: ")
    assert "np_ecn_marked_roce_packets +5,000 on rxe0/1" in ret.evidence and "rp_cnp_handled +900" in ret.evidence
    assert ret.cost and "DCQCN" in ret.cost and ret.fix and "ECN marking thresholds" in ret.fix
    lossy = _with_congestion(raw("softroce-verbs-send-bw-netem-loss.jsonl"), "peer",
                             {"np_ecn_marked_roce_packets": (0, 77)})
    (ret,) = [c for c in explain(lossy).causes if c.cause == "retransmission"]
    assert ret.evidence.startswith("during the run: rcvd_seq_err +673") and \
        ret.evidence.endswith("; the fabric signalled congestion: np_ecn_marked_roce_packets +77 on rxe0/1 (server)")


def _with_pauses(rec: dict[str, Any], side: str, netdev: str, counts: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """The record as the engine of this version writes it for a netdev behind an RDMA port whose
    driver has pause statistics (mlx5's names; the guests' virtio NIC has none): its driver's pause
    and PFC counters under before/after.ethtool, with these (before, after) values."""
    out = copy.deepcopy(rec)
    dev = out["counters"][side]["net"][netdev]
    dev["before"]["ethtool"] = {k: b for k, (b, _) in counts.items()}
    dev["after"]["ethtool"] = {k: a for k, (_, a) in counts.items()}
    return out


def test_pause_frames_are_congestion_and_a_driver_without_them_is_said() -> None:
    """Cause 2's Ethernet pause (PFC) counters, which only the driver's statistics hold: a sender
    paused by the switch (rx_prio3_pause rising at the client) with no packet lost is named with
    what it costs and where to look; pauses that did not move count as read; a netdev whose driver
    lists no pause statistics (virtio_net, as in the guests) is named as not counted, and a record
    without the driver's statistics at all (an older engine, a fixture tree) says nothing of them."""
    clean = raw("softroce-verbs-send-lat-stray-retries.jsonl")
    (before,) = [c for c in explain(clean).causes if c.cause == "retransmission"]
    assert "pause" not in before.evidence, before
    quiet = _with_pauses(clean, "local", "eth0", {"rx_prio3_pause": (7, 7), "tx_prio3_pause": (0, 0)})
    quiet = _with_pauses(quiet, "peer", "eth0", {})
    (ret,) = [c for c in explain(quiet).causes if c.cause == "retransmission"]
    assert ret.state == "clear", ret
    assert "no congestion counter moved (2 read)" in ret.evidence, ret
    assert ret.evidence.endswith("; pause frames not counted on eth0 (server): the driver lists no pause statistics")
    paused = _with_pauses(clean, "local", "eth0", {"rx_prio3_pause": (7, 1207), "rx_prio3_pause_duration": (0, 900),
                                                   "tx_prio3_pause": (0, 0)})
    (ret,) = [c for c in explain(paused).causes if c.cause == "retransmission"]
    assert ret.state == "seen", ret
    assert ret.evidence == ("no loss counter moved, but the fabric signalled congestion during the run: "
                            "rx_prio3_pause +1,200 on eth0 (client), rx_prio3_pause_duration +900 on eth0 (client)")
    assert ret.cost and "a paused port sends nothing" in ret.cost and "DCQCN" not in ret.cost
    assert ret.fix and "rx_*pause counters rising at a sender" in ret.fix
    both = _with_congestion(paused, "peer", {"np_cnp_sent": (0, 50)})
    (ret,) = [c for c in explain(both).causes if c.cause == "retransmission"]
    assert "np_cnp_sent +50 on rxe0/1 (server)" in ret.evidence and "rx_prio3_pause +1,200" in ret.evidence
    assert ret.cost and "DCQCN" in ret.cost and "a paused port" in ret.cost
    lossy = _with_pauses(raw("softroce-verbs-send-bw-netem-loss.jsonl"), "peer", "eth0", {"tx_pause_ctrl_phy": (3, 9)})
    (ret,) = [c for c in explain(lossy).causes if c.cause == "retransmission"]
    assert ret.evidence.startswith("during the run: rcvd_seq_err +673")
    assert ret.evidence.endswith("; the fabric signalled congestion: tx_pause_ctrl_phy +6 on eth0 (server)"), ret


def _with_library_sockets(rec: dict[str, Any], side: str, out: int, again: int, dsack: int = 0) -> dict[str, Any]:
    """The record with what the engine of this version reads of the transport library's own TCP
    sockets (TCP_INFO from its file descriptors, deltas over the run) on one side."""
    r = copy.deepcopy(rec)
    r["counters"][side]["tcp_sockets"] = {"sockets": 1, "data_segs_out": out, "total_retrans": again,
                                          "dsack_dups": dsack}
    return r


def test_transports_on_the_librarys_own_sockets_are_judged_by_those_sockets() -> None:
    """libfabric's tcp provider and MPI's tcp btl open their own sockets: their TCP_INFO, read by
    the engine from its file descriptors, holds the loss (the netns UCX case is planted for real in
    test_explain_runs.py). Without it (a record of an older engine) the cause is unchecked."""
    ofi = raw("ofi-send-bw-loopback.jsonl")
    assert states(ofi)["retransmission"] == "unchecked"
    lost = _with_library_sockets(ofi, "local", 50000, 900)
    (ret,) = [c for c in explain(lost).causes if c.cause == "retransmission"]
    assert ret.state == "seen" and ret.evidence.startswith(
        "libfabric's tcp provider: the client sent 900 of 50,000 data segments again on its 1 socket"), ret
    assert "(~1.8% of its data segments)" in ret.evidence and ret.fix
    # Below 0.5 % of the data segments, or only retransmissions the receiver already had: clear.
    assert states(_with_library_sockets(ofi, "local", 50000, 200))["retransmission"] == "clear"
    dup = _with_library_sockets(ofi, "local", 50000, 900, dsack=900)
    (ret,) = [c for c in explain(dup).causes if c.cause == "retransmission"]
    assert ret.state == "clear" and "900 reported back as duplicates" in ret.evidence
    mpi = raw("mpi-openmpi-lat-mca-tcp-if.jsonl")  # lat: both sides send
    both = _with_library_sockets(_with_library_sockets(mpi, "local", 4000, 0), "peer", 4000, 200)
    (ret,) = [c for c in explain(both).causes if c.cause == "retransmission"]
    assert ret.state == "seen" and ret.evidence.startswith("MPI's tcp btl: the client sent 0 of 4,000") and \
        "the server sent 200 of 4,000" in ret.evidence
    # RDMA: a TCP socket in the engine is not the payload's path; the RDMA counters judge it.
    verbs = _with_library_sockets(raw("softroce-verbs-send-lat-stray-retries.jsonl"), "local", 4000, 900)
    assert states(verbs)["retransmission"] == "clear"


def test_a_loopback_run_names_each_counter_once_and_says_pauses_were_not_counted() -> None:
    """A real loopback verbs run in one Soft-RoCE guest: both engines snapshot the same rxe0 port and
    eth0, so a loss counter that moved is in both snapshots; it is one port's loss, named and summed
    once. eth0's driver (virtio_net) lists no pause statistics, which the verdict says whatever it is."""
    rec = raw("softroce-loopback-verbs-send-bw-retries.jsonl")
    assert rec["counters"]["local"]["net"]["eth0"]["after"]["ethtool"] == {}
    (ret,) = [c for c in explain(rec).causes if c.cause == "retransmission"]
    assert ret.state == "seen", ret
    assert ret.evidence.count("duplicate_request +178 on rxe0/1 (softroce)") == 1, ret.evidence
    assert ret.evidence.endswith("; pause frames not counted on eth0 (softroce): the driver lists no pause statistics")
