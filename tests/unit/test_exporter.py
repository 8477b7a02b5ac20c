# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope exporter` on real sysfs layouts: the engine's --counters-json, the collector's units and
unwrapping, promtool's verdict on the exposition, the dashboard and the alert rules."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, engine_bin, fabscope
from fabscope import exporter

FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
# Every fixture with RDMA ports (rxe-qemu keeps its sysfs root one level down, under sys/).
PORT_FIXTURES = {
    "mlx5-roce-ndr": FIXTURES / "mlx5-roce-ndr",
    "mlx5-roce-azure": FIXTURES / "mlx5-roce-azure",
    "mlx5-roce-h100": FIXTURES / "mlx5-roce-h100",
    "mlx5-roce-pod-gids": FIXTURES / "mlx5-roce-pod-gids",
    "ib-with-sm": FIXTURES / "ib-with-sm",
    "ib-no-sm": FIXTURES / "ib-no-sm",
    "qedr-roce": FIXTURES / "qedr-roce",
    "rxe-qemu": FIXTURES / "rxe-qemu" / "sys",
    "mlx5-pma-counters": FIXTURES / "mlx5-pma-counters",
}
PMA = FIXTURES / "mlx5-pma-counters"
DASHBOARD = REPO / "deploy" / "grafana" / "fabscope.json"
ALERTS = REPO / "deploy" / "prometheus" / "fabscope-alerts.yml"


def promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is not installed; run `make setup` (deps/apt-packages.txt lists prometheus)")
    return tool


def scrape(root: Path | None, results: list[Path] | None = None) -> str:
    collector = exporter.FabscopeCollector(
        engine_bin(), sysfs_root=None if root is None else str(root), results=exporter.ResultsSource(results or [])
    )
    return exporter.render(collector).decode()


def samples(text: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """{labels: value} of every sample of one metric name."""
    out: dict[frozenset[tuple[str, str]], float] = {}
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(?:\{{(.*)\}})? (\S+)$", line)
        if m:
            labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
            out[labels] = float(m.group(2))
    return out


def one(text: str, name: str, **labels: str) -> float:
    hits = [v for k, v in samples(text, name).items() if set(labels.items()) <= k]
    assert len(hits) == 1, f"{name} {labels}: {len(hits)} samples in\n{text[:3000]}"
    return hits[0]


def check_metrics(text: str) -> None:
    out = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def engine_records(*args: str, env: dict[str, str] | None = None) -> str:
    """JSON lines of a real loopback measurement by two engines (client's stdout): what
    `fabscope run --format json` prints, before the front end attaches the path verdict."""
    exe = str(engine_bin())
    full_env = dict(os.environ, **(env or {}))
    server = subprocess.Popen([exe, "--listen", "127.0.0.1:0", "--timeout", "10", "--format", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env)
    try:
        assert server.stdout is not None
        event = json.loads(server.stdout.readline())
        client = subprocess.run([exe, "--peer", f"127.0.0.1:{event['port']}", "--timeout", "10", "--format", "json",
                                 *args], capture_output=True, text=True, timeout=60, env=full_env)
        assert client.returncode == 0, client.stderr
        server.wait(timeout=20)
        return client.stdout
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


# ---- the engine's snapshot -------------------------------------------------------------------


def counters_json(root: Path) -> dict[str, Any]:
    out = subprocess.run([str(engine_bin()), "--counters-json"], capture_output=True, text=True, timeout=30,
                         env=dict(os.environ, FABSCOPE_SYSFS_ROOT=str(root)))
    assert out.returncode == 0, out.stderr
    snap: dict[str, Any] = json.loads(out.stdout)
    return snap


def test_counters_json_reads_every_counter_file_raw_with_units() -> None:
    snap = counters_json(PMA)
    assert snap["schema"] == "fabscope.counters/1"
    (port,) = snap["rdma"]
    files = {p.name: int(p.read_text()) for p in (PMA / "class/infiniband/mlx5_1/ports/1/counters").iterdir()}
    assert port["counters"] == files  # every file, raw (words stay words), as integers
    assert snap["units"]["counters"][""]["port_xmit_data"]["unit"] == "4-byte words"
    assert snap["units"]["counters"][""]["link_downed"] == {"unit": "events", "bits": 8, "overflow": "saturate"}


def test_counters_json_rxe_hw_counters_attributes_and_netdev() -> None:
    snap = counters_json(PORT_FIXTURES["rxe-qemu"])
    (port,) = snap["rdma"]
    assert (port["device"], port["port"], port["driver"], port["link_layer"]) == ("rxe0", "1", "rdma_rxe", "Ethernet")
    assert port["ndevs"] == ["eth0"] and port["state"] == "4: ACTIVE" and port["rate"] == "2.5 Gb/sec (1X SDR)"
    hw_dir = PORT_FIXTURES["rxe-qemu"] / "class/infiniband/rxe0/ports/1/hw_counters"
    assert set(port["hw_counters"]) == {p.name for p in hw_dir.iterdir()}
    (eth0,) = snap["net"]
    assert eth0["statistics"]["tx_bytes"] == int((PORT_FIXTURES["rxe-qemu"] / "class/net/eth0/statistics/tx_bytes").read_text())


def test_run_records_carry_the_error_counters_additively() -> None:
    """Every record's snapshot now has rx/tx errors and drops next to the keys the verdict reads."""
    from fabscope.results import parse_record

    rec = json.loads(engine_records("--pattern", "lat", "--sizes", "8", "--iters", "50").splitlines()[0])
    for side in ("local", "peer"):
        lo = rec["counters"][side]["net"]["lo"]
        for snap in (lo["before"], lo["after"]):
            assert {"tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "rx_errors", "tx_errors", "rx_dropped",
                    "tx_dropped", "rx_crc_errors", "rx_missed_errors", "tx_carrier_errors"} <= set(snap)
    result = parse_record(rec)  # the verdict still reads the same snapshot
    assert result.path.verdict == "not-requested" and "lo" in result.path.summary


def test_run_records_carry_the_rdma_error_counters_of_the_port() -> None:
    """A record's rdma snapshot has the PMA error counters next to the data counters (values of the
    fixture, which does not change during the run)."""
    out = engine_records("--pattern", "lat", "--sizes", "8", "--iters", "20", env={"FABSCOPE_SYSFS_ROOT": str(PMA)})
    rec = json.loads(out.splitlines()[0])
    after = rec["counters"]["local"]["rdma"]["mlx5_1/1"]["after"]
    assert after["port_xmit_data"] == 205143497464492
    assert {k: after[k] for k in ("symbol_error", "link_downed", "port_xmit_discards", "port_xmit_wait",
                                  "port_rcv_switch_relay_errors", "excessive_buffer_overrun_errors")} == {
        "symbol_error": 0, "link_downed": 255, "port_xmit_discards": 65535, "port_xmit_wait": 4294967295,
        "port_rcv_switch_relay_errors": 2, "excessive_buffer_overrun_errors": 15}


# ---- the exposition --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PORT_FIXTURES))
def test_promtool_accepts_the_exposition_of_every_fixture(name: str) -> None:
    text = scrape(PORT_FIXTURES[name])
    check_metrics(text)
    assert samples(text, "fabscope_rdma_port_info"), "every fixture has at least one RDMA port"
    assert one(text, "fabscope_exporter_scrape_error") == 0


def test_promtool_accepts_the_live_exposition_with_results(tmp_path: Path) -> None:
    out = engine_records("--pattern", "bw", "--sizes", "64K", "--iters", "300")
    res = tmp_path / "bw.jsonl"
    res.write_text(out)
    text = scrape(None, [res])
    check_metrics(text)
    rec = json.loads(out.splitlines()[0])
    assert one(text, "fabscope_result_bandwidth_bytes_per_second", backend="tcp", size="65536") == pytest.approx(
        rec["bandwidth_gbps"] * 1e9 / 8)
    assert one(text, "fabscope_result_path_verdict", verdict="not-requested", size="65536") == 1
    assert one(text, "fabscope_result_path_verdict", verdict="misrouted", size="65536") == 0
    assert one(text, "fabscope_netdev_up", netdev="lo") in (0, 1)


def test_ib_word_counters_come_out_as_bytes_and_saturation_is_named() -> None:
    text = scrape(PMA)
    counters = PMA / "class/infiniband/mlx5_1/ports/1/counters"
    words_tx = int((counters / "port_xmit_data").read_text())
    words_rx = int((counters / "port_rcv_data").read_text())
    assert one(text, "fabscope_rdma_port_transmit_bytes_total", device="mlx5_1") == 4 * words_tx == 820573989857968
    assert one(text, "fabscope_rdma_port_receive_bytes_total", device="mlx5_1") == 4 * words_rx
    # packets stay packets
    assert one(text, "fabscope_rdma_port_transmit_packets_total", device="mlx5_1") == 242071897216
    saturated = {dict(k)["counter"] for k in samples(text, "fabscope_rdma_port_saturated")}
    assert saturated == {"link_downed", "port_xmit_discards", "port_xmit_wait", "excessive_buffer_overrun_errors"}
    assert ("# HELP fabscope_rdma_port_transmit_bytes_total Data bytes transmitted (counters/port_xmit_data: "
            "4-byte words, x4 here, width not known, saturates)") in text
    assert ("# HELP fabscope_rdma_port_link_downed_total Times the link went down after training (counters/link_downed: "
            "events, 8-bit, saturates)") in text


def test_active_mtu_comes_from_the_engines_inventory() -> None:
    """sysfs has no active MTU; ibv_query_port does (the inventory captured with the same host)."""
    from fabscope import inventory

    mtu = exporter.ActiveMtu(lambda: inventory.load(REPO / "tests/fixtures/inventory/mlx5-roce-h100.json"))
    mtu.refresh()
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(PORT_FIXTURES["mlx5-roce-h100"]),
                                           active_mtu=mtu)
    text = exporter.render(collector).decode()
    assert one(text, "fabscope_rdma_port_active_mtu_bytes", device="mlx5_2", port="1") == 4096


def test_latest_results_come_from_the_history_store(tmp_path: Path) -> None:
    """Two runs of the same case in the store: the newer one is exported; a file result of another
    case is exported next to it."""
    from fabscope.results import parse_record
    from fabscope.store import open_store

    older, newer = (parse_record(json.loads(engine_records("--pattern", "lat", "--sizes", "8", "--iters", n)
                                            .splitlines()[0])) for n in ("50", "60"))
    db = tmp_path / "history.db"
    with open_store(db) as st:
        st.add_run("run", ["fabscope", "run"], [older])
        st.add_run("run", ["fabscope", "run"], [newer])
    bw = tmp_path / "bw.jsonl"
    bw.write_text(engine_records("--pattern", "bw", "--sizes", "4K", "--iters", "100"))
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(PMA),
                                           results=exporter.ResultsSource([bw], store=db))
    text = exporter.render(collector).decode()
    check_metrics(text)
    assert newer.latency is not None
    assert one(text, "fabscope_result_latency_p50_seconds", pattern="lat", size="8") == pytest.approx(
        newer.latency.p50 * 1e-6)
    assert one(text, "fabscope_result_bandwidth_bytes_per_second", pattern="bw", size="4096") > 0
    assert not samples(text, "fabscope_exporter_results_unreadable")


def test_a_results_file_being_written_gives_its_complete_lines(tmp_path: Path) -> None:
    out = engine_records("--pattern", "lat", "--sizes", "8,64", "--iters", "30")
    first, second = [ln for ln in out.splitlines() if ln.startswith("{")][:2]
    res = tmp_path / "growing.jsonl"
    res.write_text(first + "\n" + second[: len(second) // 2])  # the engine is mid-line
    text = scrape(PMA, [res])
    assert {dict(k)["size"] for k in samples(text, "fabscope_result_latency_p50_seconds")} == {"8"}
    assert not samples(text, "fabscope_exporter_results_unreadable")


def test_a_malformed_matrix_file_is_named_unreadable_and_keeps_no_findings(tmp_path: Path) -> None:
    """The matrix documents a scrape reads go through the matrix's own parser: a finding of an unknown
    kind makes the file unreadable (said, with the field), never a series with junk labels."""
    from fabscope.results.matrix import Finding, MatrixRun

    run = MatrixRun(hosts=["a", "b"], patterns=["bw"], backend="tcp", schedule={}, rule={},
                    findings=[Finding("link", ["a", "b"], "a<->b at 40 % of the median")])
    doc = run.to_json()
    doc["findings"][0]["kind"] = "gremlin"
    bad = tmp_path / "matrix.json"
    bad.write_text(json.dumps(doc))
    text = scrape(PMA, [bad])
    assert not samples(text, "fabscope_matrix_finding")
    (why,) = [dict(k)["error"] for k in samples(text, "fabscope_exporter_results_unreadable")]
    assert "findings[0].kind" in why and "gremlin" in why, why


def test_cli_without_prometheus_client_says_what_to_install() -> None:
    script = ("import sys; sys.modules['prometheus_client'] = None\n"
              "from fabscope.cli import main; sys.exit(main(['exporter']))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(REPO / "python")))
    assert out.returncode == 6, out.stderr
    assert "prometheus_client" in out.stderr and "pip install" in out.stderr and "Traceback" not in out.stderr


def test_cli_refuses_a_missing_store(tmp_path: Path) -> None:
    out = fabscope("exporter", "--store", str(tmp_path / "nope.db"))
    assert out.returncode == 2 and "--store" in out.stderr and "Traceback" not in out.stderr


def test_rate_is_exported_in_bytes_per_second() -> None:
    text = scrape(PORT_FIXTURES["mlx5-roce-ndr"])
    assert one(text, "fabscope_rdma_port_rate_bytes_per_second", device="mlx5_0") == 400e9 / 8
    assert one(text, "fabscope_rdma_port_state", device="mlx5_0") == 4
    assert one(text, "fabscope_rdma_port_phys_state", device="mlx5_0") == 5


def _mlx5_tree(tmp_path: Path, out_of_sequence: int, port_xmit_data: int) -> Path:
    """The PMA fixture's real counters plus the layout mlx5 adds (device/driver -> mlx5_core, a Q counter)."""
    root = tmp_path / "sys"
    if not root.exists():
        shutil.copytree(PMA, root)
        dev = root / "class/infiniband/mlx5_1"
        (root / "bus/pci/drivers/mlx5_core").mkdir(parents=True)
        (dev / "device").mkdir()
        (dev / "device/driver").symlink_to(root / "bus/pci/drivers/mlx5_core")
        (dev / "ports/1/hw_counters").mkdir()
    port = root / "class/infiniband/mlx5_1/ports/1"
    (port / "hw_counters/out_of_sequence").write_text(f"{out_of_sequence}\n")
    (port / "counters/port_xmit_data").write_text(f"{port_xmit_data}\n")
    return root


def test_a_32bit_wrap_between_scrapes_gives_the_right_increase(tmp_path: Path) -> None:
    """mlx5's Q counters are 32-bit and wrap; the collector keeps state between scrapes."""
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(_mlx5_tree(tmp_path, 2**32 - 300, 1000)))
    first = exporter.render(collector).decode()
    assert one(first, "fabscope_rdma_port_hw_stat_total", counter="out_of_sequence") == 2**32 - 300
    _mlx5_tree(tmp_path, 196, 1000)  # wrapped: 300 + 196 = 496 more
    second = exporter.render(collector).decode()
    assert one(second, "fabscope_rdma_port_hw_stat_total", counter="out_of_sequence") == 2**32 + 196
    # A 64-bit PMA data counter that goes down was reset (perfquery -R): it goes down in the output too,
    # which Prometheus reads as a reset, never as a negative rate.
    _mlx5_tree(tmp_path, 200, 10)
    third = exporter.render(collector).decode()
    assert one(third, "fabscope_rdma_port_transmit_bytes_total", device="mlx5_1") == 40
    assert one(third, "fabscope_rdma_port_hw_stat_total", counter="out_of_sequence") == 2**32 + 200


def test_a_legacy_32bit_data_counter_stuck_at_its_maximum_is_named_saturated(tmp_path: Path) -> None:
    text = scrape(_mlx5_tree(tmp_path, 0, 2**32 - 1))
    assert one(text, "fabscope_rdma_port_saturated", counter="port_xmit_data") == 1
    assert "port_rcv_data" not in {dict(k)["counter"] for k in samples(text, "fabscope_rdma_port_saturated")}


def test_unwrapper_rules() -> None:
    u = exporter.CounterUnwrapper()
    key = ("m", ("a",))
    assert u.value(key, 2**32 - 10, 32, "wrap") == 2**32 - 10
    assert u.value(key, 5, 32, "wrap") == 2**32 + 5
    assert u.value(key, 2**32 - 1, 32, "wrap") == 2 * 2**32 - 1
    # unknown width: never guessed as a wrap (the run deltas' rule), even from the top to zero
    assert u.value(("u", ()), 2**32 - 100, None, None) == 2**32 - 100
    assert u.value(("u", ()), 50, None, None) == 50
    assert u.value(("r", ()), 2**31, None, None) == 2**31
    assert u.value(("r", ()), 50, None, None) == 50
    # 64-bit and saturating counters never wrap
    assert u.value(("s", ()), 65535, 16, "saturate") == 65535
    assert u.value(("s", ()), 0, 16, "saturate") == 0
    assert u.value(("n", ()), 2**40, 64, "none") == 2**40
    assert u.value(("n", ()), 7, 64, "none") == 7


def test_a_device_that_vanishes_does_not_fail_the_scrape(tmp_path: Path) -> None:
    """A device removed between the directory listing and the reads: its links dangle."""
    root = tmp_path / "sys"
    shutil.copytree(PORT_FIXTURES["rxe-qemu"], root, symlinks=True)
    (root / "class/infiniband/mlx5_9").symlink_to(tmp_path / "gone")
    (root / "class/net/eth9").symlink_to(tmp_path / "gone-too")
    text = scrape(root)
    check_metrics(text)
    assert one(text, "fabscope_exporter_scrape_error") == 0
    devices = {dict(k)["device"] for k in samples(text, "fabscope_rdma_port_info")}
    assert devices == {"rxe0"}


def test_a_port_without_pma_is_named_unreadable_not_zero(tmp_path: Path) -> None:
    """iWARP ports print "N/A (no PMA)" in every counters/ file (node_exporter #966)."""
    root = tmp_path / "sys"
    shutil.copytree(PMA, root)
    for f in (root / "class/infiniband/mlx5_1/ports/1/counters").iterdir():
        f.write_text("N/A (no PMA)\n")
    text = scrape(root)
    check_metrics(text)
    assert not samples(text, "fabscope_rdma_port_transmit_bytes_total")
    assert one(text, "fabscope_rdma_port_unreadable", counter="port_xmit_data") == 1


def test_an_engine_that_cannot_run_is_a_scrape_error_not_a_failed_scrape(tmp_path: Path) -> None:
    collector = exporter.FabscopeCollector(tmp_path / "no-engine", sysfs_root=str(PMA))
    text = exporter.render(collector).decode()
    check_metrics(text)
    assert one(text, "fabscope_exporter_scrape_error") == 1
    (labels,) = samples(text, "fabscope_exporter_last_error")
    assert "no-engine" in dict(labels)["message"] and "make setup" in dict(labels)["message"]


def test_device_wide_hw_counters_are_exported(tmp_path: Path) -> None:
    """hfi1 keeps counters in class/infiniband/<dev>/hw_counters (layout of the listing in
    node_exporter #2023; the values here are made up)."""
    root = tmp_path / "sys"
    shutil.copytree(PORT_FIXTURES["rxe-qemu"], root, symlinks=True)
    hw = root / "class/infiniband/rxe0/hw_counters"
    hw.mkdir()
    for name, value in (("RxRbufDescPart2CorErr", 0), ("TxLinkdownErr", 3), ("lifespan", 10)):
        (hw / name).write_text(f"{value}\n")
    text = scrape(root)
    check_metrics(text)
    assert one(text, "fabscope_rdma_device_hw_stat_total", device="rxe0", counter="TxLinkdownErr") == 3
    assert "lifespan" not in {dict(k)["counter"] for k in samples(text, "fabscope_rdma_device_hw_stat_total")}


def test_exclude_devices(tmp_path: Path) -> None:
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(PORT_FIXTURES["mlx5-roce-ndr"]),
                                           exclude=["mlx5_1"])
    text = exporter.render(collector).decode()
    assert {dict(k)["device"] for k in samples(text, "fabscope_rdma_port_info")} == {"mlx5_0"}


def test_cli_refuses_an_unknown_exclude_and_a_bad_listen() -> None:
    out = fabscope("exporter", "--sysfs-root", str(PORT_FIXTURES["mlx5-roce-ndr"]), "--exclude-devices", "mlx5_7")
    assert out.returncode == 2
    assert "mlx5_7" in out.stderr and "mlx5_0" in out.stderr and "Traceback" not in out.stderr
    out = fabscope("exporter", "--listen", "127.0.0.1:70000")
    assert out.returncode == 2 and "--listen" in out.stderr and "Traceback" not in out.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_serves_metrics_on_loopback() -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fabscope", "exporter", "--listen", f"127.0.0.1:{port}", "--sysfs-root",
         str(PORT_FIXTURES["rxe-qemu"])],
        env=dict(os.environ, PYTHONPATH=str(REPO / "python")), stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    text = resp.read().decode()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the exporter did not answer within 20 s"
                time.sleep(0.1)
        assert one(text, "fabscope_rdma_port_hw_stat_total", device="rxe0", counter="sent_pkts") > 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---- dashboard and alert rules -----------------------------------------------------------------

def _queried_metrics(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values are not metric names
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    return set(re.findall(r"\b(fabscope_[a-z0-9_]+)\b", expr))


@pytest.fixture(scope="module")
def exposed_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Metric names in the exposition of every fixture and of the live host with a real result
    (lat and bw) and a matrix run's findings (the matrix's own serialiser) to read."""
    from fabscope.results.matrix import Finding, MatrixRun

    res = tmp_path_factory.mktemp("results") / "report.jsonl"
    lines = []
    for pattern in ("lat", "bw"):
        lines.append(engine_records("--pattern", pattern, "--sizes", "4K", "--iters", "100"))
    res.write_text("".join(lines))
    # as `fabscope matrix --format json` prints it: one indented document
    run = MatrixRun(hosts=["a", "b"], patterns=["bw"], backend="tcp", schedule={}, rule={},
                    findings=[Finding("link", ["a", "b"], "a<->b at 40 % of the median")])
    matrix = res.with_name("matrix.json")
    matrix.write_text(json.dumps(run.to_json(), indent=1) + "\n")
    names: set[str] = set()
    for root in [*PORT_FIXTURES.values(), None]:
        text = scrape(root, [res, matrix])
        names |= set(exporter.iter_metric_names(text))
    assert one(text, "fabscope_matrix_finding", kind="link", hosts="a,b") == 1
    assert samples(text, "fabscope_result_latency_p99_seconds") and samples(text, "fabscope_result_path_verdict")
    return names


def test_dashboard_loads_and_every_queried_metric_exists(exposed_names: set[str]) -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    assert len(exprs) > 20
    queried = set().union(*(_queried_metrics(e) for e in exprs))
    missing = queried - exposed_names
    assert not missing, f"the dashboard queries metrics the exporter never exposes: {sorted(missing)}"
    titles = {p["title"] for p in dash["panels"]}
    assert "Bytes on fabric vs management network" in titles


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel's expression (Grafana's variables filled in as Grafana would)."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    filled = [e.replace("$__rate_interval", "1m").replace('"$', '"').replace("$instance", ".*") for e in exprs]
    for var in ("instance", "device", "fabric", "mgmt"):
        filled = [e.replace(f'=~"{var}"', '=~".*"') for e in filled]
    rules = tmp_path / "dashboard-as-rules.yml"
    rules.write_text("groups:\n  - name: dashboard\n    rules:\n" + "".join(
        f"      - record: fabscope:dashboard_{i}\n        expr: {json.dumps(e)}\n" for i, e in enumerate(filled)))
    out = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(exprs)} rules found" in out.stdout


def test_alert_rules_pass_promtool_and_query_exported_metrics(exposed_names: set[str]) -> None:
    out = subprocess.run([promtool(), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    queried = _queried_metrics(ALERTS.read_text())
    assert queried and not queried - exposed_names, sorted(queried - exposed_names)


# ---- a damaged history, --sysfs-root, --listen (issue 23) -----------------------------------------

def test_a_run_added_to_a_settled_store_shows_at_the_next_scrape(tmp_path: Path) -> None:
    """The store is read again only when its files changed: a store last written long ago is kept
    between scrapes, and a run added after that is exported at the very next scrape."""
    from fabscope.results import parse_record
    from fabscope.store import open_store

    lat8, lat64 = (parse_record(json.loads(engine_records("--pattern", "lat", "--sizes", size, "--iters", "50")
                                           .splitlines()[0])) for size in ("8", "64"))
    db = tmp_path / "history.db"
    with open_store(db) as st:
        st.add_run("run", ["fabscope", "run"], [lat8])
    old = time.time() - 3600
    for f in tmp_path.glob("history.db*"):
        os.utime(f, (old, old))  # written an hour ago: settled, so the first scrape's reading is kept
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(PMA),
                                           results=exporter.ResultsSource([], store=db))
    try:
        first = exporter.render(collector).decode()
        assert {dict(k)["size"] for k in samples(first, "fabscope_result_latency_p50_seconds")} == {"8"}
        with open_store(db) as st:
            st.add_run("run", ["fabscope", "run"], [lat64])
        second = exporter.render(collector).decode()
        assert {dict(k)["size"] for k in samples(second, "fabscope_result_latency_p50_seconds")} == {"8", "64"}
    finally:
        collector.snapshots.close()


def test_a_damaged_store_never_takes_the_port_counters_down(tmp_path: Path) -> None:
    """The store's pages overwritten: every scrape still serves the port metrics, the results of the
    --results files, and names the store problem in fabscope_exporter_store_unreadable."""
    import random

    from fabscope.results import parse_record
    from fabscope.store import open_store

    rec = parse_record(json.loads(engine_records("--pattern", "lat", "--sizes", "8", "--iters", "50").splitlines()[0]))
    db = tmp_path / "history.db"
    with open_store(db) as st:
        for _ in range(20):  # the exporter reads the newest 20 runs: the damage falls among them
            st.add_run("run", ["fabscope", "run"], [rec])
    assert db.stat().st_size > 16 * 4096
    with open(db, "r+b") as fh:  # dd if=/dev/urandom of=history.db bs=4096 seek=12 count=3 conv=notrunc
        fh.seek(12 * 4096)
        fh.write(random.Random(23).randbytes(3 * 4096))
    bw = tmp_path / "bw.jsonl"
    bw.write_text(engine_records("--pattern", "bw", "--sizes", "4K", "--iters", "100"))
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(PMA),
                                           results=exporter.ResultsSource([bw], store=db))
    for _ in range(2):
        text = exporter.render(collector).decode()
        check_metrics(text)
        assert samples(text, "fabscope_rdma_port_receive_bytes_total")  # the counters are served
        assert one(text, "fabscope_result_bandwidth_bytes_per_second", pattern="bw", size="4096") > 0
        ((labels, value),) = samples(text, "fabscope_exporter_store_unreadable").items()
        assert value == 1 and dict(labels)["store"] == str(db) and "damaged" in dict(labels)["error"]
    healthy = tmp_path / "ok.db"
    with open_store(healthy) as st:
        st.add_run("run", ["fabscope", "run"], [rec])
    text = exporter.render(exporter.FabscopeCollector(
        engine_bin(), sysfs_root=str(PMA), results=exporter.ResultsSource([], store=healthy))).decode()
    assert not samples(text, "fabscope_exporter_store_unreadable")
    assert one(text, "fabscope_result_latency_p50_seconds", pattern="lat", size="8") > 0


def test_cli_refuses_a_sysfs_root_without_class() -> None:
    out = fabscope("exporter", "--sysfs-root", str(FIXTURES / "rxe-qemu"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "class/infiniband" in out.stderr and f"did you mean {FIXTURES / 'rxe-qemu' / 'sys'}" in out.stderr


def test_cli_listen_prints_the_real_url_and_explains_a_bad_value() -> None:
    out = fabscope("exporter", "--listen", "abc", "--sysfs-root", str(PMA))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "'abc' is not an address or a host name" in out.stderr and "free port" not in out.stderr
    with socket.socket() as held:  # a port in use
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = fabscope("exporter", "--listen", f"127.0.0.1:{port}", "--sysfs-root", str(PMA))
    assert out.returncode == 2 and f"port {port} is in use" in out.stderr
    # No port given: the default one, and the URL printed says so. In a network namespace of its own
    # (made here, only its loopback up), where no other process on this machine can hold that port.
    proc = subprocess.Popen(["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
                             sys.executable, "-m", "fabscope", "exporter", "--listen", "127.0.0.1", "--sysfs-root",
                             str(PMA)], env=dict(os.environ, PYTHONPATH=str(REPO / "python")),
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the first line: serving ... or why not
        assert f"serving http://127.0.0.1:{exporter.DEFAULT_PORT}/metrics" in line, line
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_values_are_written_as_prometheus_client_writes_them() -> None:
    """The exporter formats counts itself (text.value_text); the text must be floatToGoString's."""
    import random

    from prometheus_client.utils import floatToGoString

    from fabscope.exporter.text import value_text

    rnd = random.Random(24)
    values: list[float] = [*range(0, 2_000_000, 997), *(rnd.randrange(1 << 64) for _ in range(20_000)),
                           *(rnd.randrange(1 << 54) for _ in range(20_000)), *(10**k for k in range(20)),
                           *(10**k - 1 for k in range(1, 20)), *(5 * 10**k for k in range(20)),
                           (1 << 53) - 1, 1 << 53, (1 << 53) + 1, 0.5, 1e-6, 3.25e9, 12.5e9, -1, -5_000_000]
    assert [value_text(v) for v in values] == [floatToGoString(v) for v in values]
