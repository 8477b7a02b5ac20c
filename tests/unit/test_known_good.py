# SPDX-License-Identifier: BSD-3-Clause
"""Known-good scenarios (fabscope/known_good): every kind of bad input is a named error with the
file's line, exit 2, and nothing run; baselines saved from stored runs with their fingerprint,
listed, shown, deleted; a fingerprint that differs is said. Nothing here measures: runs are the
saved records of tests/fixtures/records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, fabscope
from fabscope.known_good import baseline
from fabscope.known_good.faults import FAULTS
from fabscope.results import load_file
from fabscope.store import open_store

RECORDS = REPO / "tests" / "fixtures" / "records"

GOOD = """\
name = "good"
valid_for = "2h"

[[checks]]
name = "lat"
kind = "run"
loopback = true
options = { backend = "tcp", op = "send", pattern = "lat", sizes = "8" }
expect = ["p50_us <= 3.5"]
warn = ["p99_us < 40"]

[[checks]]
name = "doc"
kind = "doctor"
expect = ["errors == 0"]
"""


def _store_with_runs(db: Path, tag: str = "gold") -> None:
    results = load_file(RECORDS / "tcp-send-lat-with-histogram.jsonl")
    with open_store(db) as store:
        store.add_run("run", ["run", "--loopback"], results, tag=tag)
        store.add_run("run", ["run", "--loopback"], results, tag=tag)


def _scenario(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_a_good_scenario_validates_and_runs_nothing(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    got = fabscope("check", str(_scenario(tmp_path, GOOD)), "--validate", "--store", str(db))
    assert got.returncode == 0, got.stderr
    assert "2 check(s), 3 expectation(s): valid; nothing was run" in got.stdout
    assert not db.exists()  # nothing ran, nothing was kept


@pytest.mark.parametrize(("edit", "line", "says"), [
    (("kind = \"run\"\n", "kind = \"run\"\ncolour = \"red\"\n"), 7, "unknown key 'colour' in check 'lat'"),
    (("valid_for = \"2h\"", "valid_for = \"2h\"\nhostz = []"), 3, "unknown key 'hostz' at the top level"),
    (("loopback = true", "loopback = \"yes\""), 7, "loopback = 'yes' in check 'lat': expected bool"),
    (("valid_for = \"2h\"", "valid_for = \"forever\""), 2, "valid_for = 'forever': expected a duration"),
    (("\"p50_us <= 3.5\"", "\"bw_gbps >= 3.5\""), 9, "this check does not produce 'bw_gbps'"),
    (("\"errors == 0\"", "\"p50_us <= 3\""), 15, "this check does not produce 'p50_us'"),
    (("\"p50_us <= 3.5\"", "\"p50_us is small\""), 9, "'p50_us is small' is not an expectation"),
    (("\"p50_us <= 3.5\"", "\"p50_us <= 3.5 * line_rate\""), 9, "line_rate is a bandwidth; it bounds bw_gbps only"),
    (("kind = \"doctor\"", "kind = \"survey\""), 14, "kind = 'survey' in check 'doc': expected one of doctor, run"),
    (("sizes = \"8\"", "sizes = \"8\", colour = \"red\""), 8, "check 'lat'"),  # an engine option run does not know
    (("name = \"doc\"", "name = \"lat\""), 12, "two checks are named 'lat'"),
    (("kind = \"doctor\"\nexpect = [\"errors == 0\"]", "kind = \"matrix\"\nexpect = [\"bad_links == 0\"]"), 12,
     "a matrix needs the scenario's hosts"),
    (("kind = \"doctor\"", "kind = \"doctor\"\nkind = \"run\""), 15, "not valid TOML"),
])
def test_bad_input_is_a_named_error_with_its_line(tmp_path: Path, edit: tuple[str, str], line: int, says: str) -> None:
    assert_refused(tmp_path, GOOD, edit, line, says)


def assert_refused(tmp_path: Path, good: str, edit: tuple[str, str], line: int, says: str) -> None:
    """The scenario ``good`` with ``edit``: exit 2 naming the file's line, nothing run or kept."""
    text = good.replace(*edit, 1)
    assert text != good
    path = _scenario(tmp_path, text)
    db = tmp_path / "h.db"
    got = fabscope("check", str(path), "--store", str(db))  # not --validate: nothing may run either way
    assert got.returncode == 2, (got.stdout, got.stderr)
    assert f"{path}:{line}:" in got.stderr and says in got.stderr, got.stderr
    assert "nothing was run" in got.stderr and "Traceback" not in got.stderr
    assert got.stdout == "" and not db.exists()


def test_a_baseline_that_does_not_exist_is_named_with_its_line(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _store_with_runs(db)
    with open_store(db) as store:
        runs_before = len(store.runs())
    text = GOOD.replace('"p50_us <= 3.5"]', '"p50_us <= 3.5",\n  \'p50_us within 5 % of baseline "golden-2026-12"\']')
    path = _scenario(tmp_path, text)
    got = fabscope("check", str(path), "--store", str(db))
    assert got.returncode == 2
    assert f"{path}:10: no baseline 'golden-2026-12'" in got.stderr and "nothing was run" in got.stderr
    with open_store(db) as store:
        assert len(store.runs()) == runs_before  # no check ran
    missing = fabscope("check", str(path), "--store", str(tmp_path / "none.db"))
    assert missing.returncode == 2 and f"{path}:10: baseline 'golden-2026-12': no history store" in missing.stderr


def test_a_baseline_keeps_its_runs_and_fingerprint(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    _store_with_runs(db)
    saved = fabscope("baseline", "save", "golden", "--tag", "gold", "--store", str(db))
    assert saved.returncode == 0, saved.stderr
    assert "2 run(s) (1, 2)" in saved.stdout
    again = fabscope("baseline", "save", "golden", "--tag", "gold", "--store", str(db))
    assert again.returncode == 2 and "baseline 'golden' exists" in again.stderr
    shown = fabscope("baseline", "show", "golden", "--store", str(db), "--format", "json")
    got = json.loads(shown.stdout)
    assert got["run_ids"] == [1, 2] and got["selection"] == "tag=gold"
    fp = got["fingerprint"]
    assert fp["kernel"] == baseline.this_kernel() and fp["engine"] and fp["fabscope"]
    listed = fabscope("baseline", "list", "--store", str(db))
    assert listed.stdout.startswith("golden\t")
    nothing = fabscope("baseline", "save", "other", "--tag", "no-such-tag", "--store", str(db))
    assert nothing.returncode == 2 and "no runs with results" in nothing.stderr
    gone = fabscope("baseline", "delete", "golden", "--store", str(db))
    assert gone.returncode == 0
    assert "no baselines" in fabscope("baseline", "list", "--store", str(db)).stdout
    absent = fabscope("baseline", "show", "golden", "--store", str(db))
    assert absent.returncode == 2 and "no baseline 'golden'" in absent.stderr


def test_a_changed_fingerprint_says_what_changed() -> None:
    results = load_file(RECORDS / "tcp-send-lat-with-histogram.jsonl")
    then = baseline.fingerprint(results, ["0.1.0"], "6.1.0-old")
    now = baseline.fingerprint(results, ["0.2.0"], "6.1.0-old")
    assert baseline.changes(then, now) == ["fabscope: 0.1.0 -> 0.2.0"]
    assert baseline.changes(then, then) == []


def test_fault_codes_are_documented_and_stable() -> None:
    doc = (REPO / "docs" / "check.md").read_text()
    for code, f in FAULTS.items():
        assert f"`{code}`" in doc, f"{code} ({f.title}) is not in docs/check.md"


def test_the_exporter_shows_each_nodes_last_status_codes_and_age(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime, timedelta

    from conftest import engine_bin
    from fabscope import exporter
    from fabscope.known_good import status
    from fabscope.known_good.check import Judgement

    monkeypatch.setenv("FABSCOPE_KNOWN_GOOD", str(tmp_path / "known-good.json"))
    made = datetime.now(UTC) - timedelta(hours=2)
    stamp = {"made_at": made.isoformat(timespec="seconds"),
             "valid_until": (made + timedelta(hours=1)).isoformat(timespec="seconds")}
    status.record([Judgement("health", "port fabric0", "mtu", "fail", "FS-MTU-001", None, None, "1400", "", ("n2",),
                             **stamp),
                   Judgement("health", "doctor", "no errors", "pass", None, None, None, "", "", ("n2",), **stamp),
                   Judgement("health", "doctor", "no errors", "pass", None, None, None, "", "", ("n1",), **stamp)],
                  "health", "n0")
    collector = exporter.FabscopeCollector(engine_bin(), sysfs_root=str(REPO / "tests" / "fixtures" / "mlx5-pma-counters"))
    text = exporter.render(collector).decode()
    assert 'fabscope_check_status{check="health",node="n2",scenario="health"} 3.0' in text
    assert 'fabscope_check_status{check="health",node="n1",scenario="health"} 0.0' in text
    assert 'fabscope_check_fault{check="health",code="FS-MTU-001",node="n2",scenario="health"} 1.0' in text
    assert 'fabscope_check_expired{check="health",node="n2",scenario="health"} 1.0' in text
    age = next(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith('fabscope_check_age_seconds{check="health",node="n1"'))
    assert 7100 < age < 7300


@pytest.mark.parametrize("name", ["tcp-cluster", "roce-cluster", "ib-cluster"])
def test_shipped_scenarios_read_and_state_the_pitfalls(name: str) -> None:
    """Each shipped scenario reads (keys, types, figures, doctor checks); its pitfalls are stated as
    expectations (memlock, MTU, GID index, UCX_NET_DEVICES, NUMA); every line of it is explained."""
    from fabscope.known_good.scenario import load

    path = REPO / "examples" / "known-good" / f"{name}.toml"
    s = load(path)
    doctor = {n for c in s.checks if c.kind == "doctor" for n in c.only}
    runs = [c for c in s.checks if c.kind == "run"]
    assert runs and all(c.options.get("cpu") == "near" for c in runs)  # NUMA placement asked for by name
    assert all(c.options.get("device") for c in runs)  # a named device: no silent fallback
    if name != "tcp-cluster":
        assert {"memlock.shell", "memlock.noninteractive", "ports.mtu", "ucx", "cpu.numa"} <= doctor
        assert any(c.options.get("mtu") == "4096" for c in runs)
    if name == "roce-cluster":
        assert "gid.roce_v2" in doctor and any(c.options.get("gid-index") for c in runs)
        assert any(c.options.get("backend") == "ucx" for c in runs)
        assert any(c.kind == "collective" and c.options.get("device") == "mlx5_0:1" for c in s.checks)
    for block in path.read_text().split("\n\n"):  # explained: a comment opens the block, or ends each line
        lines = [ln for ln in block.splitlines() if ln.strip()]
        assert lines[0].startswith("#") or all("#" in ln for ln in lines), block


def test_a_shipped_scenario_is_validated_against_this_host(tmp_path: Path) -> None:
    """--validate runs `fabscope run`'s own checks: the RDMA device of the RoCE scenario does not
    exist here, which is an error naming the scenario's line, never a fallback."""
    path = REPO / "examples" / "known-good" / "roce-cluster.toml"
    got = fabscope("check", str(path), "--validate", "--store", str(tmp_path / "h.db"))
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith("options = { backend = \"verbs\""))
    assert got.returncode == 2 and f"{path}:{line}: check 'verbs-latency': --backend verbs" in got.stderr, got.stderr


def test_an_unknown_doctor_check_is_named(tmp_path: Path) -> None:
    path = _scenario(tmp_path, GOOD.replace('kind = "doctor"', 'kind = "doctor"\nonly = ["memlock", "memlok"]'))
    got = fabscope("check", str(path), "--validate")
    assert got.returncode == 2 and f"{path}:15: only: 'memlok' in check 'doc' is not a doctor check" in got.stderr


def test_a_matrix_checks_options_are_the_matrixs_own(tmp_path: Path) -> None:
    text = GOOD.replace('valid_for = "2h"', 'valid_for = "2h"\nhosts = ["a", "b"]').replace(
        'kind = "doctor"\nexpect = ["errors == 0"]', 'kind = "matrix"\noptions = { patern = "bw" }\nexpect = ["bad_links == 0"]')
    path = _scenario(tmp_path, text)
    got = fabscope("check", str(path), "--validate")
    assert got.returncode == 2 and f"{path}:16: check 'doc': " in got.stderr and "--patern" in got.stderr, got.stderr
    ok = _scenario(tmp_path, text.replace("patern", "pattern"))
    assert fabscope("check", str(ok), "--validate").returncode == 0


def _slower(results: list[Any], factor: float) -> list[Any]:
    """The same records with every latency figure (and histogram bucket) times factor: a slower run."""
    from fabscope.results import parse_record

    out = []
    for r in results:
        raw = json.loads(json.dumps(r.to_json()))
        lat = raw["latency_us"]
        for k in ("min", "p50", "mean", "p99", "p999", "max"):
            lat[k] *= factor
        lat.pop("histogram", None)
        out.append(parse_record(raw, judge_path=False))
    return out


def test_a_baseline_call_without_evidence_is_inconclusive_never_a_pass(tmp_path: Path) -> None:
    """One current run twice as slow as the baseline's two: beyond the tolerance, but one run is no
    statistical evidence: inconclusive (FS-STAT-001). The baseline's kernel differs: FS-BASE-001 says so."""
    from fabscope.known_good.check import _judge_relative
    from fabscope.known_good.expectations import RUN_LATENCY_FIGURES, parse
    from fabscope.known_good.scenario import CheckSpec

    db = tmp_path / "h.db"
    _store_with_runs(db)
    results = load_file(RECORDS / "tcp-send-lat-with-histogram.jsonl")
    fp = baseline.fingerprint(results, ["0.1.0"], "5.10.0-old-kernel", baseline.port_facts())
    with open_store(db) as store:
        store.save_baseline("golden", [1, 2], fp, "runs 1,2")
    e = parse('p50_us within 5 % of baseline "golden"', "expect", 1, dict(RUN_LATENCY_FIGURES))
    check = CheckSpec("lat", "run", 1, loopback=True, expectations=(e,))
    got = _judge_relative(check, e, [_slower(results, 2.0)], str(db))
    calls = [j for j in got if j.code != "FS-BASE-001"]
    assert calls and all(j.status == "inconclusive" and j.code == "FS-STAT-001" for j in calls), calls
    assert all("+100.0 %" in j.evidence and "one run" in j.evidence for j in calls), calls
    (changed,) = [j for j in got if j.code == "FS-BASE-001"]
    assert changed.status == "warn" and "kernel: 5.10.0-old-kernel -> " in changed.evidence
