# SPDX-License-Identifier: BSD-3-Clause
"""verbs over two devices in one run (``--device rxe0,rxe1``), for real: two Soft-RoCE guests
with two links each (``links=2``: eth0/rxe0 on one datagram link, eth1/rxe1 on another), the
server being ``fabscope serve --device rxe0,rxe1``.

One boot of the pair runs every case; each assertion reads what the engine reported and what the
guests' counters saw, so a run that put every queue pair on one rail fails here.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

from conftest import guest_awaited, guest_awaits_listeners, guest_timeout  # noqa: E402
from fabscope.testbed import softroce  # noqa: E402

GUEST_DEADLINE_S = 1500  # the two-guest boot's (softroce.run's timeout_s), which pytest's must outlast
pytestmark = guest_timeout(GUEST_DEADLINE_S)

DEVS = "rxe0,rxe1"
RUN = f"fabscope run --peer server --backend verbs --device {DEVS} --timeout 60 --format json"
# name -> arguments; each writes /out/NAME.json, NAME.err and NAME.rc
CASES = {
    "write-bw": "--op write --pattern bw --sizes 64K --iters 1000 --qps 2",
    "send-bw": "--op send --pattern bw --sizes 4K --iters 2000 --cq-mod 16",
    "ud-bw": "--qp-type ud --op send --pattern bw --sizes 1K --iters 2000",
    "read-bw": "--op read --pattern bw --sizes 64K --iters 500",
    "send-lat": "--op send --pattern lat --sizes 64 --iters 200",
    "write-lat": "--op write --pattern lat --sizes 64 --iters 200",
    # every payload byte checked, each device against its own sequence
    "send-lat-verify": "--op send --pattern lat --sizes 3000 --iters 100 --verify",
}
# Against a second serve in the server guest that was given no --device (port 18516): it pairs
# its devices with the client's by network, whatever their names and order.
BY_NETWORK = {
    "by-network": "--device rxe1,rxe0 --op write --pattern bw --sizes 64K --iters 500",
    "by-network-one": "--device rxe1 --op send --pattern lat --sizes 64 --iters 100",
}
SLOW_RAIL = "--op write --pattern bw --sizes 64K --iters 1000"
# The explanation (issue 20) in the same boot, on rxe0 alone against the serve without --device: 20
# clean runs that must name no cause, then each cause planted on the client's eth0 (after every
# other case: the plants stay): an MTU of 4200 against the server's 1500 (rxe's active MTU 4096
# against 1024), then netem loss on the link.
EXPLAIN_RUN = "fabscope run --peer server:18516 --backend verbs --device rxe0 --timeout 60 --format json"
CLEAN = {**{f"clean-lat-{i}": "--op send --pattern lat --sizes 64 --iters 200" for i in range(10)},
         **{f"clean-bw-{i}": "--op write --pattern bw --sizes 64K --iters 300" for i in range(10)}}
# Segmentation over RDMA, on the clean link: 1,056 B over the QPs' path MTU of 1,024 B is a full
# packet and a 32 B one per message (the 64 KiB clean runs are 64 full packets each).
SEGMENTED = {"seg-send-bw": "--op send --pattern bw --sizes 1056 --iters 300"}
PLANTED = [
    ("ip link set eth0 mtu 4200", {"mtu-send-bw": "--op send --pattern bw --sizes 64K --iters 300"}),
    # 50 messages of 64 packets at 3 % loss: ~160 of each rxe loss counter (100 gave 240-340 in 15 s
    # of a go-back-N crawl, 300 gave 710-781 in 27 s), far past the 20 retries and 0.5 % of the
    # packets a cause needs.
    ("ip link set eth0 mtu 1500; modprobe sch_netem; tc qdisc add dev eth0 root netem loss 3%",
     {"loss-send-bw": "--op send --pattern bw --sizes 64K --iters 50",
      "loss-write-bw": "--op write --pattern bw --sizes 64K --iters 50"}),
]
# Refusals: (name, command line); each must exit 2 and say why.
REFUSED = {
    "one-vs-two": "fabscope run --peer server --backend verbs --device rxe0 --iters 50 --timeout 30",
    "twice": "fabscope run --peer server --backend verbs --device rxe0,rxe0 --timeout 30",
    "cm": f"fabscope run --peer server --backend verbs --device {DEVS} --cm --timeout 30",
    "tcp-list": "fabscope run --peer server --backend tcp --device eth0,eth1 --timeout 30",
}


@pytest.fixture(scope="module")
def two_rails(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = softroce.why_it_cannot_boot()
    if reason:
        pytest.skip(reason)
    softroce.build()
    out = tmp_path_factory.mktemp("two-rails")
    lines = [f"{RUN} {args} > /out/{name}.json 2> /out/{name}.err; echo $? > /out/{name}.rc"
             for name, args in CASES.items()]
    lines += [f"{cmd} > /dev/null 2> /out/{name}.err; echo $? > /out/{name}.rc" for name, cmd in REFUSED.items()]
    lines += [f"fabscope run --peer server:18516 --backend verbs --timeout 60 --format json {args} "
              f"> /out/{name}.json 2> /out/{name}.err; echo $? > /out/{name}.rc" for name, args in BY_NETWORK.items()]
    # Last, as it stays: the client's eth1 shaped to 10 Mbit/s (about a sixth of what rxe0 moves
    # here), for the slow-rail case.
    lines += [f"{EXPLAIN_RUN} {args} > /out/{name}.json 2> /out/{name}.err; echo $? > /out/{name}.rc"
              for name, args in {**CLEAN, **SEGMENTED}.items()]
    lines += ["modprobe sch_tbf; tc qdisc add dev eth1 root tbf rate 10mbit burst 16k latency 100ms",
              f"{RUN} {SLOW_RAIL} > /out/slow-rail.json 2> /out/slow-rail.err; echo $? > /out/slow-rail.rc"]
    for plant, runs in PLANTED:
        lines.append(plant)
        lines += [f"{EXPLAIN_RUN} {args} > /out/{name}.json 2> /out/{name}.err; echo $? > /out/{name}.rc"
                  for name, args in runs.items()]
    # First the two serves' listeners: a client started before its serve listens is refused.
    lines.insert(0, guest_awaits_listeners(["tcp:18515", "tcp:18516"]))
    # NAME.t: each case's start and end (epoch s), to see where the guest time goes
    lines = [f"date +%s.%N > /out/{m[1]}.t; {line}; date +%s.%N >> /out/{m[1]}.t"
             if (m := re.search(r"> /out/([\w-]+)\.rc$", line)) else line for line in lines]
    rc = softroce.run(["sh", "-c", "\n".join(lines)], two_guests=True, links=2, out_dir=out, timeout_s=GUEST_DEADLINE_S,
                      server_cmd=["sh", "-c", "fabscope serve --bind 0.0.0.0 --port 18516 --insecure-no-auth & "
                                  f"exec fabscope serve --bind 0.0.0.0 --insecure-no-auth --device {DEVS}"])
    assert rc == 0
    guest_awaited(out / "client")
    return out / "client"


def _record(client: Path, name: str) -> dict[str, Any]:
    rc = (client / f"{name}.rc").read_text().strip()
    assert rc == "0", (client / f"{name}.err").read_text()
    rec: dict[str, Any] = json.loads((client / f"{name}.json").read_text())
    return rec


def _net_bytes(rec: dict[str, Any], side: str, netdev: str) -> int:
    c = rec["counters"][side]["net"][netdev]
    return sum(c["after"][k] - c["before"][k] for k in ("tx_bytes", "rx_bytes"))


@pytest.mark.softroce
@pytest.mark.parametrize("name", sorted(CASES))
def test_each_device_carries_its_half(two_rails: Path, name: str) -> None:
    rec = _record(two_rails, name)
    local = rec["transport"]["local"]
    assert local["device"] == DEVS
    devices = local["devices"]
    assert [d["device"] for d in devices] == ["rxe0", "rxe1"]
    # Each device is its own verbs engine: its own GID on its own netdev and subnet.
    assert [(d["netdev"], d["gid"]["ipv4"]) for d in devices] == [("eth0", "192.168.77.2"), ("eth1", "192.168.78.2")]
    qps = 2 if "--qps 2" in CASES[name] else 1
    assert len(local["flows"]) == 2 * qps and {f["device"] for f in local["flows"]} == {"rxe0", "rxe1"}
    # Each device keeps its own share of the window in flight: a ping-pong alternates exactly;
    # in a bandwidth run a device takes a turn whenever it has room, so two equal rails split
    # the operations about evenly (this initiator's completions, plus what arrived here).
    counts = [d["completed"] + d["received"] for d in devices]
    if rec["pattern"] == "lat":
        assert counts[0] == counts[1] > 0, counts
    else:
        assert min(counts) >= 0.35 * sum(counts), counts
    path = rec["path"]
    assert path["verdict"] == "verified", path.get("reason")
    for side in ("local", "peer"):
        per_device = path["sides"][side]["requested"]["per_device"]
        assert sum(per_device[dev]["share_of_operations"] for dev in ("rxe0", "rxe1")) == pytest.approx(1)
        for dev in ("rxe0", "rxe1"):
            assert per_device[dev]["bytes"] >= 0.9 * per_device[dev]["expected_bytes"]
    # The netdevs agree: each rail carried at least 30% of the payload on both guests
    # (control traffic rides on eth0 as well, and the split need not be exact).
    payload = path["expected_bytes"]
    for side in ("local", "peer"):
        for netdev in ("eth0", "eth1"):
            assert _net_bytes(rec, side, netdev) >= 0.3 * payload, (side, netdev)
    if rec["pattern"] == "bw" and name != "ud-bw":
        # The devices' rates add up to the run's (the core turns each device's operations into one).
        total = sum(d["bandwidth_gbps"] for d in devices)
        assert total == pytest.approx(rec.get("sender_bandwidth_gbps") or rec["bandwidth_gbps"], rel=0.01)


@pytest.mark.softroce
def test_text_output_names_each_rail(two_rails: Path) -> None:
    from fabscope.report.render import render_text
    from fabscope.results import parse_record

    text = render_text([parse_record(_record(two_rails, "write-bw"))])
    assert "per device: rxe0 " in text and ", rxe1 " in text
    assert text.count("QPN") == 4


@pytest.mark.softroce
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_device_list_the_run_cannot_honour_is_refused(two_rails: Path, name: str) -> None:
    err = (two_rails / f"{name}.err").read_text()
    assert (two_rails / f"{name}.rc").read_text().strip() == "2", err
    assert "Traceback" not in err
    expect = {
        "one-vs-two": "this side opened 1 device (rxe0) and the peer 2 (rxe0,rxe1)",
        "twice": "names rxe0 twice; for more queue pairs on one device use --qps N",
        "cm": "--cm with --device rxe0,rxe1",
        "tcp-list": "names several devices, and backend tcp runs on one",
    }[name]
    assert expect in err


@pytest.mark.softroce
def test_a_slow_rail_shows_in_its_own_rate(two_rails: Path) -> None:
    """eth1 shaped to 10 Mbit/s on the client: rxe1 completes fewer operations, its rate is its
    link's, rxe0 is not held to it, and the text output calls rxe1 the slow rail."""
    from fabscope.report.render import render_text
    from fabscope.results import parse_record

    rec = _record(two_rails, "slow-rail")
    rates = {d["device"]: d["bandwidth_gbps"] for d in rec["transport"]["local"]["devices"]}
    assert rates["rxe1"] < 0.012  # 10 Mbit/s of RoCE frames, headers included
    assert rates["rxe1"] < 0.3 * rates["rxe0"], rates
    assert rec["path"]["verdict"] == "verified"  # slow, but each device carried what its QPs sent
    text = render_text([parse_record(rec)])
    assert "# warning (65536 B): rxe1 ran at" in text and "a slow rail" in text
    assert "rxe0 ran at" not in text


@pytest.mark.softroce
def test_a_server_without_device_pairs_by_network(two_rails: Path) -> None:
    """The client lists rxe1 first: the server (no --device, two devices) puts rxe1 first too,
    because rxe1 is the device on the client's rxe1's network, and says so."""
    rec = _record(two_rails, "by-network")
    assert [d["device"] for d in rec["transport"]["local"]["devices"]] == ["rxe1", "rxe0"]
    peer = rec["transport"]["peer"]
    assert [d["device"] for d in peer["devices"]] == ["rxe1", "rxe0"]
    assert [d["netdev"] for d in peer["devices"]] == ["eth1", "eth0"]
    assert "by network" in peer["devices"][0]["device_selection"]
    assert "the client's rxe1 is on this host's eth1 network (192.168.78.1)" in peer["devices"][0]["device_selection"]
    assert rec["path"]["verdict"] == "verified", rec["path"].get("reason")


@pytest.mark.softroce
def test_a_server_without_device_follows_one_named_device(two_rails: Path) -> None:
    """Before, a server with two RDMA devices and no --device refused ("does not guess")."""
    rec = _record(two_rails, "by-network-one")
    peer = rec["transport"]["peer"]
    assert peer["device"] == "rxe1" and peer["netdev"] == "eth1"
    assert rec["path"]["verdict"] == "verified", rec["path"].get("reason")
    assert rec["path"]["sides"]["peer"]["requested"]["counted_on"] == "eth1"


def _seen(rec: dict[str, Any]) -> dict[str, str]:
    return {c["cause"]: c["evidence"] for c in rec["explanation"]["causes"] if c["state"] == "seen"}


def _rdma_loss_moved(rec: dict[str, Any]) -> dict[str, int]:
    """Per RDMA port ("side port"), the loss counters that moved during the run, when they add up to
    a cause (explain's own bar: RDMA_STRAY_RETRIES and RETRANS_SHARE of the port's packets), read
    from the record's before/after snapshots, not from its explanation."""
    from fabscope.results.explain import RDMA_LOSS_COUNTERS, RDMA_STRAY_RETRIES, RETRANS_SHARE

    moved: dict[str, int] = {}
    for side in ("local", "peer"):
        for port, snap in ((rec.get("counters") or {}).get(side) or {}).get("rdma", {}).items():
            def delta(key: str, snap: dict[str, Any] = snap) -> int:
                before, after = snap["before"].get(key), snap["after"].get(key)
                return after - before if isinstance(before, int) and isinstance(after, int) else 0

            lost = {key: d for key in RDMA_LOSS_COUNTERS if (d := delta(key)) > 0}
            packets = max(delta("hw_sent_pkts"), delta("hw_rcvd_pkts"))
            total = sum(lost.values())
            if total >= RDMA_STRAY_RETRIES and total >= RETRANS_SHARE * packets:
                moved.update({f"{side} {port} {key}": d for key, d in lost.items()})
    return moved


def _no_retransmission_without_loss(rec: dict[str, Any]) -> None:
    """Retransmission named only where the run's rxe counters show it. rxe's requester resends its
    unacknowledged window when no ACK came within the QP's timeout (67 ms, verbs/qp.c): a guest that
    a loaded host leaves without a CPU that long makes REAL retransmissions (one such stall in a
    64 KiB send run: duplicate_request +129 on the server, two messages of 64 packets and the one
    resent first; in a clean latency run here: duplicate_request +15, completer_retry_err +12),
    which the explanation is right to name. What it must never do is name one that no counter
    shows (a path-MTU mismatch or a slow run taken for loss), nor stray retries below its bar."""
    seen = _seen(rec)
    if "retransmission" not in seen:
        return
    moved = _rdma_loss_moved(rec)
    assert moved, ("retransmission named while no RDMA loss counter moved past the bar", seen["retransmission"])
    named = [key for key in moved if f"{key.split()[-1]} +" in seen["retransmission"]]
    assert named, (moved, seen["retransmission"])


@pytest.mark.softroce
def test_clean_runs_between_the_guests_name_no_cause(two_rails: Path) -> None:
    """No false alarms: 20 clean verbs runs (10 latency, 10 bandwidth) on rxe0 name nothing, and a
    bandwidth run has its ceiling: rxe0's link is eth0's announced 10 Gb/s less RoCE v2 headers."""
    for name in CLEAN:
        _no_retransmission_without_loss(_record(two_rails, name))  # real ones, counted, are named
    named = {name: other for name in CLEAN if (other := set(_seen(_record(two_rails, name))) - {"retransmission"})}
    assert not named, named
    bw = _record(two_rails, "clean-bw-0")
    assert bw["transport"]["local"]["rate_gbps"] == 10, bw["transport"]["local"].get("rate_source")
    assert 8.5 < bw["explanation"]["expected_gbps"] < 10, bw["explanation"]["expected_basis"]


@pytest.mark.softroce
def test_a_message_just_over_the_path_mtu_is_named_as_segmentation(two_rails: Path) -> None:
    """RDMA segmentation (cause 7): 1,056 B messages over a 1,024 B path MTU end in a 32 B packet
    each; named with the packets per message and the sizes that avoid it. The 64 KiB clean runs,
    exact multiples of the path MTU, name nothing (test_clean_runs_between_the_guests_name_no_cause)."""
    rec = _record(two_rails, "seg-send-bw")
    seen = _seen(rec)
    assert "1,056 B per message over path MTU 1,024 B: 2 packets per message, the last one 32 B" \
        in seen.get("segmentation", ""), rec["explanation"]
    assert set(seen) == {"segmentation"}, seen
    (seg,) = [c for c in rec["explanation"]["causes"] if c["cause"] == "segmentation"]
    assert "at most 1,024 B or about 2,048 B" in seg["fix"], seg


@pytest.mark.softroce
def test_a_larger_mtu_here_than_on_the_peer_is_named(two_rails: Path) -> None:
    """The client's eth0 at 4200 (rxe0's active MTU 4096), the server's at 1500 (1024): the QPs
    run at 1024 and the explanation says so, with the fix."""
    rec = _record(two_rails, "mtu-send-bw")
    seen = _seen(rec)
    assert "path MTU 1,024 B where the port's active MTU is 4,096 B" in seen.get("mtu", ""), rec["explanation"]
    # the mismatch itself loses nothing (every packet fits the server's 1,500 B): no retransmission
    # named that the rxe counters do not show
    _no_retransmission_without_loss(rec)


@pytest.mark.softroce
@pytest.mark.parametrize("name", ["loss-send-bw", "loss-write-bw"])
def test_loss_on_the_link_is_named_with_the_rxe_counters_that_moved(two_rails: Path, name: str) -> None:
    """netem loss 3% on the client's eth0: rxe retransmits, and the explanation names loss with the
    hw_counters that moved (sequence errors, retries)."""
    from fabscope.results.explain import RDMA_LOSS_COUNTERS

    rec = _record(two_rails, name)
    evidence = _seen(rec).get("retransmission", "")
    assert any(counter in evidence for counter in RDMA_LOSS_COUNTERS), rec["explanation"]

