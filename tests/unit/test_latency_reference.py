# SPDX-License-Identifier: BSD-3-Clause
"""The latency reference from the history (fabscope/reference.py, worded by results/explain/):
stores built under tmp_path from real saved records (tests/fixtures/records) whose p50 is edited
to plant the runs; then two real loopback latency runs against a temporary history."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import fabscope, json_lines
from fabscope.errors import FabscopeError
from fabscope.reference import ReferenceLookup, find_reference, resolve_named
from fabscope.report.render import render_text
from fabscope.results import Result, load_file, parse_record
from fabscope.store import Store, open_store

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"
TCP_LAT = RECORDS / "tcp-send-lat-loopback.jsonl"  # tcp send lat 8 B and 4096 B over lo, host vm


def tcp_lat(p50: float, line: int = 0, hostname: str | None = None) -> Result:
    """The real loopback record (8 B, or line 1: 4096 B) with its p50 set to ``p50`` (min and p99
    moved with it where needed), and its own host renamed when ``hostname`` is given."""
    rec: dict[str, Any] = copy.deepcopy(json.loads(TCP_LAT.read_text().splitlines()[line]))
    lat = rec["latency_us"]
    lat["p50"] = p50
    lat["min"] = min(lat["min"], p50)
    for key in ("p99", "p999", "max"):
        lat[key] = max(lat[key], p50)
    if hostname is not None:
        rec["host"]["hostname"] = hostname
    return parse_record(rec)


def add(store: Store, results: list[Result], tag: str | None = None) -> int:
    return store.add_run("run", ["run", "--loopback"], results, tag=tag)


def test_the_best_of_several_stored_runs_is_the_reference(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        add(store, [tcp_lat(9.0), tcp_lat(11.0, line=1)], tag="base")
        best = add(store, [tcp_lat(8.5)])
        add(store, [tcp_lat(12.0)], tag="slow")
        # not this case: another op/backend (ucx at 0.2 us), another size, another host
        add(store, load_file(RECORDS / "ucx-tag-lat-loopback.jsonl"))
        add(store, [tcp_lat(3.0, line=1)])
        add(store, [tcp_lat(1.0, hostname="elsewhere")])
        now = tcp_lat(10.0)
        ref = find_reference(store, now)
        assert ref is not None
        assert (ref.p50_us, ref.run_id, ref.tag, ref.runs_considered, ref.named) == (8.5, best, None, 3, None)
        lookup = ReferenceLookup.open(store, None, backend="tcp", op=None)
        got = lookup.attach(now, run_id=None)
    expl = got.explanation
    assert expl is not None and expl.reference == ref and expl.reference_sought
    assert expl.achieved_fraction == 0.85  # 8.5 us / 10 us
    assert expl.expected_basis == (f"the fabric's own best: p50 8.50 us in run {best} ({ref.when[:10]}), "
                                   "the best of 3 stored runs of this case")
    # JSON (what --format json prints and the store keeps) carries the same object
    assert got.to_json()["explanation"] == expl.to_json()
    assert got.to_json()["explanation"]["reference"]["run_id"] == best
    assert got.latency == now.latency and got.case == now.case
    text = render_text([got])
    assert (f"# expected: the fabric's own best: p50 8.50 us in run {best}" in text
            and "this run: 1.18x its p50 (achieved_fraction 0.85)" in text), text


def test_the_run_being_explained_is_excluded(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        older = add(store, [tcp_lat(9.0)], tag="base")
        now = tcp_lat(7.0)
        this_run = add(store, [now])  # the run kept as it is measured: its own p50 is the lowest
        ref = find_reference(store, now, exclude_run=this_run)
        assert ref is not None and (ref.run_id, ref.p50_us, ref.runs_considered) == (older, 9.0, 1)
        itself = find_reference(store, now)  # not excluded, the run would be its own best
        assert itself is not None and (itself.run_id, itself.p50_us) == (this_run, 7.0)
        got = ReferenceLookup.open(store, None, backend="tcp", op=None).attach(now, run_id=this_run)
        assert got.explanation is not None and got.explanation.reference == ref
        # a history with no other run of the case says so, naming the file
        alone = tmp_path / "alone.db"
        with open_store(alone) as lonely:
            only = add(lonely, [now])
            got = ReferenceLookup.open(lonely, None, backend="tcp", op=None).attach(now, run_id=only)
    assert got.explanation is not None and got.explanation.reference is None
    assert got.explanation.achieved_fraction is None
    assert got.explanation.expected_basis.startswith(f"no earlier run of this case in the history ({alone})")


def test_no_history_at_all_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--no-store with no history file: nothing is created, the basis names the file."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    lookup = ReferenceLookup.open(None, None, backend="tcp", op=None)
    got = lookup.attach(tcp_lat(10.0), run_id=None)
    lookup.close()
    path = tmp_path / "fabscope" / "history.db"
    assert not path.exists()
    assert got.explanation is not None and got.explanation.reference is None
    assert got.explanation.expected_basis.startswith(f"no earlier run of this case in the history ({path})")


def test_reference_tag_is_the_median_of_its_runs(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        base = [add(store, [tcp_lat(p50)], tag="base") for p50 in (9.0, 11.0, 9.6)]
        single = add(store, [tcp_lat(12.0)], tag="one")
        add(store, [tcp_lat(5.0)])  # the best of the history: not what --reference base asks for
        now = tcp_lat(12.0)
        named = resolve_named(store, "base", backend="tcp", op="send")
        ref = find_reference(store, now, named=named)
        assert ref is not None
        assert (ref.p50_us, ref.run_id, ref.run_ids, ref.tag, ref.runs_considered, ref.named) == (
            9.6, None, tuple(base), "base", 3, "base")
        got = ReferenceLookup.open(store, "base", backend="tcp", op=None).attach(now, run_id=None)
        assert got.explanation is not None and got.explanation.achieved_fraction == 0.8  # 9.6 / 12
        assert got.explanation.expected_basis.startswith(
            "the reference named (--reference base): the median p50 9.60 us of 3 runs of this case "
            f"(runs {', '.join(map(str, base))}; tag base, ")
        # a run id names that run
        by_id = find_reference(store, now, named=resolve_named(store, str(single), backend="tcp", op=None))
        assert by_id is not None and (by_id.p50_us, by_id.run_id, by_id.tag) == (12.0, single, "one")


def test_a_named_reference_without_this_case_is_an_error(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        add(store, [tcp_lat(9.0, line=1)], tag="big")  # 4096 B only
        ucx = add(store, load_file(RECORDS / "ucx-tag-lat-loopback.jsonl"), tag="ucx")
        named = resolve_named(store, "big", backend="tcp", op=None)
        with pytest.raises(FabscopeError) as err:
            find_reference(store, tcp_lat(10.0), named=named)  # 8 B: not in tag big
        assert err.value.exit_code == 2
        assert "--reference big: run 1 in" in err.value.message
        assert "holds no result of this case (tcp send lat 8 B over tcp via lo, vm -> vm)" in err.value.message
        assert "tcp send lat 4096 B over tcp via lo, vm -> vm" in err.value.message  # what the tag holds
        # a tag of another backend is refused before anything is measured
        with pytest.raises(FabscopeError) as err:
            resolve_named(store, "ucx", backend="tcp", op=None)
        assert err.value.exit_code == 2
        assert f"run {ucx} in" in err.value.message and "holds no tcp latency results" in err.value.message


def test_a_bad_reference_is_exit_2_naming_what_exists(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with open_store(db) as store:
        add(store, [tcp_lat(9.0)], tag="base")
    for spec, says in (("nope", "'nope' is not a run id, 'latest', or a tag"), ("99", "no run 99 in")):
        out = fabscope("run", "--loopback", "--sizes", "8", "--iters", "500", "--store", str(db), "--reference", spec)
        assert out.returncode == 2, out.stderr
        assert out.stdout == ""  # nothing measured
        assert f"--reference {spec}: " in out.stderr and says in out.stderr, out.stderr
        assert "runs of tcp latency there: 1 (tag base) tcp send lat 8" in out.stderr, out.stderr
    out = fabscope("run", "--loopback", "--pattern", "bw", "--store", str(db), "--reference", "base")
    # A bandwidth run has a reference too (issue 51): one that holds no such case is refused the same way.
    assert out.returncode == 2 and "holds no tcp bw results" in out.stderr, out.stderr


def test_a_bandwidth_record_gets_no_latency_reference(tmp_path: Path) -> None:
    (bw,) = load_file(RECORDS / "tcp-send-bw-loopback.jsonl")
    with open_store(tmp_path / "h.db") as store:
        add(store, [bw, tcp_lat(9.0)])
        assert find_reference(store, bw) is None
        got = ReferenceLookup.open(store, None, backend="tcp", op=None).attach(bw, run_id=None)
    assert got.explanation is not None and got.explanation.reference is None
    assert got.explanation.bandwidth_reference is not None  # its own case's best (issue 51)
    assert bw.explanation is not None and not bw.explanation.reference_sought and bw.explanation.reference is None
    assert "# expected" not in render_text([bw])


def test_two_loopback_runs_the_second_refers_to_the_first(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path)}
    first = fabscope("run", "--loopback", "--sizes", "8", "--iters", "500", "--tag", "a", env=env)
    assert first.returncode == 0, first.stderr
    kept = re.search(r"kept as run (\d+) in (\S+) \(tag a\)", first.stderr)
    assert kept is not None and Path(kept.group(2)) == tmp_path / "fabscope" / "history.db", first.stderr
    assert "# expected: no earlier run of this case in the history" in first.stdout, first.stdout
    second = fabscope("run", "--loopback", "--sizes", "8", "--iters", "500", "--format", "json", env=env)
    assert second.returncode == 0, second.stderr
    (rec,) = json_lines(second.stdout)
    expl = rec["explanation"]
    assert expl["reference"]["run_id"] == int(kept.group(1)) and expl["reference"]["tag"] == "a", expl
    assert expl["expected_basis"].startswith(f"the fabric's own best: p50 {expl['reference']['p50_us']:.2f} us in "
                                             f"run {kept.group(1)} (tag a, ")
    assert expl["achieved_fraction"] == pytest.approx(expl["reference"]["p50_us"] / rec["latency_us"]["p50"], rel=1e-3)
    # Read back from the history (show, export): the run keeps the reference it was measured against.
    second_id = str(int(kept.group(1)) + 1)
    shown = fabscope("history", "show", second_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"# expected: the fabric's own best: p50 {expl['reference']['p50_us']:.2f} us in run {kept.group(1)}" \
        in shown.stdout, shown.stdout
    exported = fabscope("history", "export", second_id, "--format", "json", env=env)
    (back,) = json_lines(exported.stdout)
    assert back["explanation"]["reference"] == expl["reference"], back["explanation"]
    assert back["explanation"]["achieved_fraction"] == expl["achieved_fraction"]


def test_a_named_reference_without_a_measured_size_fails_the_run_after_showing_it(tmp_path: Path) -> None:
    """--reference a names a run of 8 B only; a run of 8 B and 64 B measures both, shows and keeps
    both (8 B against its reference), then fails (exit 2) naming the size the reference lacks."""
    env = {"XDG_DATA_HOME": str(tmp_path)}
    first = fabscope("run", "--loopback", "--sizes", "8", "--iters", "300", "--tag", "a", env=env)
    assert first.returncode == 0, first.stderr
    second = fabscope("run", "--loopback", "--sizes", "8,64", "--iters", "300", "--format", "json",
                      "--reference", "a", env=env)
    assert second.returncode == 2, second.stderr
    recs = json_lines(second.stdout)
    assert [r["size"] for r in recs] == [8, 64]
    assert recs[0]["explanation"]["reference"]["tag"] == "a" and recs[1]["explanation"]["reference"] is None
    assert "--reference a:" in second.stderr and "holds no result of this case (tcp send lat 64 B" in second.stderr
    assert "the results are shown above and kept" in second.stderr
    assert re.search(r"kept as run \d+ in", second.stderr), second.stderr
