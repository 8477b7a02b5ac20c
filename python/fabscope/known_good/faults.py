# SPDX-License-Identifier: BSD-3-Clause
"""The stable fault codes of `fabscope check` (docs/check.md lists them; a code is never reused for
another meaning). Each code has one owner here: its title and the fix the output prints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    code: str
    title: str
    fix: str


FAULTS: dict[str, Fault] = {f.code: f for f in (
    Fault("FS-LAT-001", "latency above the scenario's bound",
          "look at the run's causes (`fabscope run ... ` prints them under the table): placement, counters, "
          "link events; then `fabscope doctor` on both hosts"),
    Fault("FS-LAT-002", "latency regressed against the baseline",
          "`fabscope compare` the baseline's runs with this check's runs: its table names the settings and "
          "causes that differ"),
    Fault("FS-BW-001", "bandwidth below the scenario's bound",
          "check the link's speed and MTU (`fabscope devices`), its shaping and the run's causes"),
    Fault("FS-BW-002", "bandwidth regressed against the baseline",
          "`fabscope compare` the baseline's runs with this check's runs"),
    Fault("FS-PATH-001", "misrouted: the bytes did not go over the requested device",
          "route the peer's address over the device asked for (ip route get PEER), or ask for the device "
          "that carries it"),
    Fault("FS-LINK-001", "the peer could not be reached",
          "bring the link up and start `fabscope serve` on the peer; `ip link`, `ping` the peer's address"),
    Fault("FS-NODE-001", "the fabric matrix found a bad node (slow with every partner)",
          "the finding's causes name what was seen on its pairs; `fabscope doctor` and `fabscope health` on that node"),
    Fault("FS-LINK-003", "the fabric matrix found a bad link (one pair slow, both ends fine with others)",
          "the finding's diagnosis says rate limit or loss; check that link's cable, switch ports and shaping"),
    Fault("FS-RUN-001", "the measurement failed", "the check's own message names what failed; rerun it by hand"),
    Fault("FS-LINK-002", "a port is not up (link down)",
          "`ip link set DEV up`; check the cable, the switch port and `fabscope devices`"),
    Fault("FS-MTU-001", "a port's MTU differs from the baseline",
          "set the MTU the baseline was made with (`ip link set DEV mtu N`; for RDMA, the switch and the netdev)"),
    Fault("FS-SPEED-001", "a port's speed or rate differs from the baseline",
          "check the cable, the transceiver and the negotiated speed (`ethtool DEV`, `ibstat`)"),
    Fault("FS-PORT-001", "a port of the baseline is missing on this node",
          "load the driver or bring the device back; `fabscope devices` lists what this node has"),
    Fault("FS-RDMA-001", "a short verbs loopback test of an RDMA device failed",
          "the evidence has the run's own message; `fabscope run --loopback --backend verbs --device DEV` by hand, "
          "`ibv_devinfo -v`, `fabscope doctor`"),
    Fault("FS-CNT-001", "error counters moved since the last health check",
          "look at the port's counters (`ethtool -S DEV`, hw_counters) and the link's history"),
    Fault("FS-DOC-001", "the doctor found an error", "apply the fix the doctor prints for that finding"),
    Fault("FS-DOC-002", "the doctor found a warning", "apply the fix the doctor prints for that finding"),
    Fault("FS-FIG-001", "a figure outside the scenario's bound",
          "the check's evidence names the figure; see docs/check.md"),
    Fault("FS-FIG-002", "the run did not report the figure or the reference an expectation needs",
          "bound the figure by a number, or measure where the record carries it (a link rate needs a real port)"),
    Fault("FS-STAT-001", "no statistical evidence either way (inconclusive)",
          "repeat the check (`repeat = N` in the scenario) and keep more runs in the baseline"),
    Fault("FS-SUITE-001", "a suite row (a backend's pattern) did not finish",
          "the evidence has the row's own message; rerun that row by hand (`fabscope run ...` with its backend and "
          "pattern) and `fabscope doctor`"),
    Fault("FS-SUITE-002", "a suite row's bytes went over another device than asked (misrouted)",
          "route the peer's address over the device asked for (ip route get PEER), or ask for the device that "
          "carries it; the evidence names the carriers"),
    Fault("FS-SUITE-003", "a suite row's path could not be verified",
          "ask for a device (`device = \"NAME\"` in the options) whose counters this host can read"),
    Fault("FS-COLL-001", "a collective returned a wrong element (the engine's exit 12)",
          "the evidence names the rank, element, expected and got: suspect the MPI library's algorithm "
          "(try another: OMPI_MCA_coll_tuned_*_algorithm) or the fabric's data integrity; rerun with --datatype int32"),
    Fault("FS-COLL-002", "a collective's bandwidth below the scenario's bound",
          "compare busbw with the slowest link's rate (fraction_of_ceiling), check the ranks' placement (--ppn) "
          "and the MPI transport the record names"),
    Fault("FS-LOAD-001", "loss under load: the senders retransmitted, or a netdev dropped",
          "deepen the congested port's queue or turn on ECN (and DCQCN / PFC for RDMA); the evidence names the "
          "hot spot"),
    Fault("FS-LOAD-002", "unfair or starved flows under load",
          "look for a flow on a slower path or a shallow queue at the bottleneck; more flows per pair (--flows) "
          "evens TCP out"),
    Fault("FS-LOAD-003", "the victim pair is slower under the load",
          "isolate the victim's traffic (another traffic class or rail), or shallower queues with ECN"),
    Fault("FS-LOAD-004", "the rails are not shared evenly (imbalance or a slow rail)",
          "check the multipath hash (fib_multipath_hash_policy) and the slow rail's link"),
    Fault("FS-LOAD-005", "congestion signals under load (ECN marks, RDMA congestion counters, pause frames)",
          "expected under incast with ECN/DCQCN; if the rates collapse, tune the marking thresholds"),
    Fault("FS-LOAD-006", "the load carried less than the scenario's bound",
          "compare the total with the bottleneck's rate; check the bottleneck's link speed and shaping"),
    Fault("FS-BASE-001", "the baseline was made on another configuration",
          "compare like with like: make a baseline on this configuration, or undo the change named"),
)}


def fault(code: str) -> Fault:
    return FAULTS[code]
