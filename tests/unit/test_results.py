# SPDX-License-Identifier: BSD-3-Clause
"""The result model on records the engine really printed (tests/fixtures/records, saved from the
0.1.0 engine before the model existed, plus one with the histogram the engine added after): every
one is still read, judged, rendered and exported losslessly; a broken record is an error naming the
field; a device named in a transport setting is a request for the verdict."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fabscope.report.render import render_csv, render_md, render_text
from fabscope.results import Histogram, RecordError, Result, load_file, parse_record
from fabscope.results.histogram import bucket_index, mann_whitney

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"

# What today's verdict says about each saved record (the first record of each file).
EXPECTED = {
    "tcp-send-lat-loopback.jsonl": "not-requested",
    "tcp-send-bw-loopback.jsonl": "not-requested",
    "tcp-send-bibw-loopback.jsonl": "not-requested",
    "tcp-send-bw-device-lo.jsonl": "verified",
    "ucx-tag-lat-loopback.jsonl": "not-requested",
    "ofi-send-bw-loopback.jsonl": "not-requested",
    "netns-tcp-bw-device-fabric0-verified.jsonl": "verified",
    "netns-tcp-bw-bind-misrouted.jsonl": "misrouted",
    "netns-tcp-lat-not-requested.jsonl": "not-requested",
    "netns-ucx-tag-bw-verified.jsonl": "verified",
    "netns-ucx-tag-bw-misrouted.jsonl": "misrouted",
    # Requests the 0.1.0 front end did not see (issue 11): a device named in --mca / --env.
    "mpi-openmpi-lat-mca-tcp-if.jsonl": "verified",
    "mpi-openmpi-lat-ucxnetdev.jsonl": "misrouted",
    "tcp-send-lat-with-histogram.jsonl": "not-requested",
}


def raw(name: str) -> dict[str, Any]:
    with open(RECORDS / name, encoding="utf-8") as fh:
        obj: dict[str, Any] = json.loads(fh.readline())
    return obj


def fresh(name: str) -> Result:
    """The record as the engine printed it (the saved front end's path removed), judged now."""
    rec = raw(name)
    rec.pop("path", None)
    return parse_record(rec)


def test_every_saved_record_is_still_read() -> None:
    """A record of schema N is still read by later versions: the 0.1.0 files parse, typed."""
    assert set(EXPECTED) <= {p.name for p in RECORDS.glob("*.jsonl")}
    for path in sorted(RECORDS.glob("*.jsonl")):
        results = load_file(path)
        assert results, path.name
        for r in results:
            assert r.schema_version == 1 and r.pattern in ("lat", "bw", "bibw")
            assert (r.latency is not None) == (r.pattern == "lat")
            assert r.hosts[0]  # the engine names its host
            assert r.transport.carried_by and r.transport.carried_by != "?"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdict_on_saved_records(name: str) -> None:
    assert fresh(name).path.verdict == EXPECTED[name]


def test_saved_verdicts_agree_where_the_request_rules_did_not_change() -> None:
    for name, want in EXPECTED.items():
        if name.startswith("mpi-"):
            continue
        assert raw(name)["path"]["verdict"] == want, name


def test_export_is_lossless() -> None:
    """JSON export is the engine's record plus path and explanation: nothing dropped, nothing renamed."""
    for path in sorted(RECORDS.glob("*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            first = json.loads(fh.readline())
        exported = parse_record(first, judge_path=False).to_json()
        assert exported.pop("explanation")["causes"]
        assert exported == first
        again = parse_record(json.loads(json.dumps(parse_record(first).to_json())))
        assert again.path.verdict == parse_record(first).path.verdict


def test_the_mpi_setting_without_effect_is_misrouted_and_shown_everywhere() -> None:
    """UCX_NET_DEVICES=eth0 under pml ob1: the ranks talked through shared memory (vader)."""
    r = fresh("mpi-openmpi-lat-ucxnetdev.jsonl")
    assert r.path.requested == "eth0" and r.path.requested_via == "UCX_NET_DEVICES"
    assert "shared memory (pml ob1, btl vader)" in r.path.summary
    assert any("UCX_NET_DEVICES=eth0 had no effect" in s for s in r.settings_without_effect)
    text = render_text([r])
    assert "!! MISROUTED: asked for eth0" in text
    assert "# setting had no effect: UCX_NET_DEVICES=eth0 had no effect" in text
    assert "UCX_NET_DEVICES=eth0 had no effect" in render_md([r])
    (row,) = list(__import__("csv").DictReader(render_csv([r]).splitlines()))
    assert row["path_verdict"] == "misrouted" and "UCX_NET_DEVICES=eth0 had no effect" in row["settings_without_effect"]


def test_mca_interface_is_a_request() -> None:
    r = fresh("mpi-openmpi-lat-mca-tcp-if.jsonl")
    assert (r.path.requested, r.path.requested_via) == ("lo", "mca btl_tcp_if_include")


def _with_launcher(name: str, **launcher: Any) -> Result:
    rec = raw(name)
    rec.pop("path", None)
    rec["transport"]["launcher"] = {"name": "mpirun", **launcher}
    return parse_record(rec)


def test_launcher_env_and_mca_name_the_device() -> None:
    """The netns lat run went over fabric0: naming fabric0 verifies it, naming mgmt0 accuses it."""
    name = "netns-tcp-lat-not-requested.jsonl"
    ok = _with_launcher(name, env={"FI_TCP_IFACE": "fabric0"})
    assert (ok.path.verdict, ok.path.requested_via) == ("verified", "FI_TCP_IFACE")
    bad = _with_launcher(name, mca={"btl_tcp_if_include": "mgmt0"})
    assert (bad.path.verdict, bad.path.requested) == ("misrouted", "mgmt0")
    assert "fabric0" in bad.path.summary
    both = _with_launcher(name, env={"OMPI_MCA_btl_tcp_if_include": "mgmt0,fabric0"})
    assert both.path.verdict == "verified" and both.path.requested == "mgmt0,fabric0"
    nothing = _with_launcher(name, env={"UCX_NET_DEVICES": "all"}, mca={"pml_ucx_devices": "any"})
    assert nothing.path.verdict == "not-requested"


def test_ucx_default_net_devices_is_not_a_request() -> None:
    r = fresh("ucx-tag-lat-loopback.jsonl")
    assert r.transport.local["requested"]["UCX_NET_DEVICES_source"] == "default"
    assert r.path.verdict == "not-requested"


def test_shares_above_100_percent_are_bytes() -> None:
    """Loopback with --device lo: lo counts headers and ACKs too, many times the payload."""
    r = fresh("tcp-send-bw-device-lo.jsonl")
    side = r.path.raw["sides"]["local"]["requested"]
    assert side["of_expected"] > 1.0
    assert "%" not in r.path.summary and " MB (" in r.path.summary
    assert "more than the payload" in render_text([r])


def test_misrouted_text_is_loud() -> None:
    text = render_text([fresh("netns-tcp-bw-bind-misrouted.jsonl")])
    assert "!! MISROUTED: asked for fabric0" in text and "mgmt0" in text


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r["latency_us"].pop("p50"), "latency_us.p50"),
        (lambda r: r.__setitem__("size", "eight"), "size"),
        (lambda r: r.__setitem__("schema", "fabscope.result/9"), "schema"),
        (lambda r: r.__setitem__("pattern", "pingpong"), "pattern"),
        (lambda r: r.pop("transport"), "transport"),
        (lambda r: r["latency_us"].__setitem__("p99", 0.001), "latency_us"),
        (lambda r: r["latency_us"]["histogram"]["buckets"].reverse(), "latency_us.histogram.buckets[1]"),
        (lambda r: r.__setitem__("warnings", [3]), "warnings"),
    ],
)
def test_invalid_records_name_the_field(mutate: Any, field: str) -> None:
    rec = copy.deepcopy(raw("tcp-send-lat-with-histogram.jsonl"))
    mutate(rec)
    with pytest.raises(RecordError) as err:
        parse_record(rec)
    assert err.value.field == field
    assert f"'{field}'" in str(err.value)


def test_bandwidth_record_needs_its_figures() -> None:
    rec = raw("tcp-send-bw-loopback.jsonl")
    del rec["bandwidth_gbps"]
    with pytest.raises(RecordError, match="'bandwidth_gbps' is missing"):
        parse_record(rec)


def test_histogram_matches_the_engine_and_its_error_bound() -> None:
    """The engine's buckets decode to quantiles within one bucket (<= 1/32) of the exact ones."""
    for r in load_file(RECORDS / "tcp-send-lat-with-histogram.jsonl"):
        assert r.latency is not None and r.latency.histogram is not None
        h = r.latency.histogram
        assert h.total == r.latency.samples
        assert abs(h.quantile_us(0.5) / r.latency.p50 - 1) <= 1 / 32
        assert abs(h.quantile_us(0.0) / r.latency.min - 1) <= 1 / 64 + 1e-9
    # Python's bucket of a value is the engine's (same frexp formula, see engine/tests/test_stats.c).
    assert bucket_index(1000.0, 32) == 9 * 32 + 30 and bucket_index(1056.0, 32) == 10 * 32 + 1


def test_mann_whitney_on_histograms() -> None:
    base = Histogram.from_samples_ns([5000 + (i % 97) * 10 for i in range(2000)])
    same = Histogram.from_samples_ns([5000 + (i % 89) * 11 for i in range(2000)])
    slower = Histogram.from_samples_ns([5600 + (i % 97) * 10 for i in range(2000)])
    assert mann_whitney(base, base).p_two_sided == pytest.approx(1.0)
    assert mann_whitney(base, same).p_two_sided > 0.002
    shift = mann_whitney(base, slower)
    assert shift.p_two_sided < 1e-6 and shift.prob_b_greater > 0.9


def test_suite_summary_shape() -> None:
    from fabscope.results.suite import SUITE_SCHEMA, SuiteSummary

    s = SuiteSummary("fabscope suite to 10.201.0.2", peer="10.201.0.2", line_rates_gbps={"fabric0": 1.0},
                     notes=["verbs: not in this table"], rows=[{"label": "tcp send", "lat_p50_us": 30.1}])
    obj = json.loads(json.dumps(s.to_json()))
    assert obj["schema"] == SUITE_SCHEMA and SuiteSummary.parse(obj) == s
    with pytest.raises(RecordError) as err:
        SuiteSummary.parse({**obj, "line_rates_gbps": {"fabric0": "fast"}})
    assert err.value.field == "line_rates_gbps"
    # the rows that did not finish: kept as objects; a summary from before them still reads
    failed = {**obj, "failed": [{"row": "ucx tag lat", "exit_code": 2, "error": "no device 'bogus0'"}]}
    assert SuiteSummary.parse(failed).failed == failed["failed"]
    assert SuiteSummary.parse({k: v for k, v in obj.items() if k != "failed"}).failed == []
    with pytest.raises(RecordError) as err:
        SuiteSummary.parse({**obj, "failed": ["ucx tag lat FAILED"]})
    assert err.value.field == "failed"


def test_ucx_net_devices_from_the_environment_is_a_request() -> None:
    """UCX_NET_DEVICES=lo set by the user, but UCX carried the bytes over shared memory."""
    rec = raw("ucx-tag-lat-loopback.jsonl")
    rec.pop("path")
    rec["transport"]["local"]["requested"].update(UCX_NET_DEVICES="lo", UCX_NET_DEVICES_source="environment")
    r = parse_record(rec)
    assert (r.path.requested, r.path.requested_via, r.path.verdict) == ("lo", "UCX_NET_DEVICES", "misrouted")
    assert "shared memory (UCX sysv+cma)" in r.path.summary


def test_the_runner_refuses_an_invalid_record_naming_the_field(tmp_path: Path) -> None:
    """A real process printing one good and one broken record: the good one is kept, typed and
    judged; the broken one ends the run with exit 4 and the field named, never a partial row."""
    from fabscope.errors import EXIT_MEASURE
    from fabscope.launch import runner

    good = raw("tcp-send-bw-loopback.jsonl")
    bad = copy.deepcopy(good)
    del bad["bandwidth_MBps"]
    lines = tmp_path / "engine-output.jsonl"
    lines.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    seen: list[Result] = []
    outcome = runner.stream_client(["cat", str(lines)], 5.0, seen.append)
    assert [r.size for r in outcome.records] == [65536] and seen == outcome.records
    assert outcome.records[0].path.verdict == "not-requested"
    assert outcome.exit_code == EXIT_MEASURE
    assert outcome.error is not None and "'bandwidth_MBps' is missing" in outcome.error
