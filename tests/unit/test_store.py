# SPDX-License-Identifier: BSD-3-Clause
"""The history store: migrations from an older file, kill -9 of writers at any moment, two writers
at once, filters, and the `history` command. Every store lives under tmp_path."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from conftest import REPO, fabscope
from fabscope.errors import FabscopeError
from fabscope.results import load_file, parse_record
from fabscope.store import MIGRATIONS, SCHEMA_VERSION, Filters, open_store, parse_time

RECORDS = REPO / "tests" / "fixtures" / "records"

# A writer process: appends saved records one at a time, printing each committed count.
WRITER = """
import sys
sys.path.insert(0, {python!r})
from fabscope.results import load_file, parse_record
from fabscope.store import open_store
results = load_file({records!r})
store = open_store(sys.argv[1])
run = store.begin_run("run", ["writer", sys.argv[2]], tag=sys.argv[2])
for i in range(int(sys.argv[3])):
    store.append(run, results[i % len(results)])
    print(run, i + 1, flush=True)
"""


def writer(db: Path, tag: str, count: int) -> subprocess.Popen[str]:
    code = WRITER.format(python=str(REPO / "python"), records=str(RECORDS / "tcp-send-lat-loopback.jsonl"))
    return subprocess.Popen([sys.executable, "-c", code, str(db), tag, str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def committed_line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The writer's first line (its first commit), so that every kill falls among commits, however
    long the interpreter took to start."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"the writer committed nothing in {timeout:g} s: {proc.poll()=}"
    return proc.stdout.readline()


def test_append_and_read_back(tmp_path: Path) -> None:
    results = load_file(RECORDS / "netns-tcp-bw-bind-misrouted.jsonl") + load_file(
        RECORDS / "tcp-send-lat-with-histogram.jsonl")
    with open_store(tmp_path / "h.db") as store:
        run = store.add_run("run", ["run", "--loopback"], results, tag="t1")
        (info,) = store.runs()
        assert (info.id, info.tag, info.results, info.command) == (run, "t1", 3, "run")
        back = store.results([run])
        assert [r.to_json() for r in back] == [r.to_json() for r in results]  # lossless, in order
        assert back[0].path.verdict == "misrouted"
        assert back[2].latency is not None and back[2].latency.histogram == results[2].latency.histogram  # type: ignore[union-attr]
        assert [r.size for r in store.results(filters=Filters(pattern="lat", size=65536))] == [65536]
        assert store.results(filters=Filters(backend="ucx")) == []
        assert store.runs(Filters(host="vm")) and not store.runs(Filters(host="elsewhere"))
        assert store.run_ids_for("latest") == [run] and store.run_ids_for("t1") == [run]
        with pytest.raises(FabscopeError, match="not a run id, 'latest', or a tag"):
            store.run_ids_for("nope")
        assert store.integrity() == "ok"
        mode = sqlite3.connect(store.path).execute("PRAGMA journal_mode").fetchone()[0]
        assert mode == "wal"


def test_an_older_store_is_migrated_with_its_data(tmp_path: Path) -> None:
    """A file at schema version 1 (before the indexes) opens, migrates to the latest, keeps its rows."""
    db = tmp_path / "old.db"
    rec = load_file(RECORDS / "tcp-send-bw-loopback.jsonl")[0]
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    con.execute("INSERT INTO schema_version VALUES (1)")
    for statement in MIGRATIONS[0]:
        con.execute(statement)
    con.execute("INSERT INTO runs (started_at, command, argv, tag, fabscope_version) VALUES (?, ?, ?, ?, ?)",
                ("2026-11-01T00:00:00+00:00", "run", "[]", "old", "0.1.0"))
    con.execute("INSERT INTO results (run_id, seq, backend, op, pattern, size, transport, host, peer_host, "
                "engine_version, verdict, p50_us, p99_us, bandwidth_gbps, record) VALUES "
                "(1, 0, 'tcp', 'send', 'bw', 65536, 'tcp via lo', 'vm', 'vm', '0.1.0', 'not-requested', NULL, "
                "NULL, 1.0, ?)", (json.dumps(rec.to_json()),))
    con.commit()
    con.close()
    with open_store(db) as store:
        assert store.schema_version == SCHEMA_VERSION > 1
        assert [r.size for r in store.results()] == [65536]
        names = {r[0] for r in sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"results_case", "runs_tag"} <= names


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    open_store(db).close()
    con = sqlite3.connect(db)
    con.execute("UPDATE schema_version SET version = 99")
    con.commit()
    con.close()
    with pytest.raises(FabscopeError, match="schema version 99, newer than this fabscope"):
        open_store(db)


def test_kill_9_at_any_moment_loses_at_most_the_record_being_written(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    open_store(db).close()
    rng = random.Random(13)
    printed: dict[int, int] = {}
    for i in range(12):
        proc = writer(db, f"k{i}", 100000)
        first = committed_line(proc)
        time.sleep(rng.random() * 0.5)  # not a wait: where in the writing the kill falls
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        out = first + out
        # Only whole lines: the kill can fall inside a print, and "9" of "9 1536" is no count.
        whole = out.split("\n")[:-1]
        if whole:
            run_id, committed = whole[-1].split()
            printed[int(run_id)] = int(committed)
    with open_store(db) as store:
        assert store.integrity() == "ok"
        for run, count in printed.items():
            got = store.results([run])
            # Everything it reported committed is there; at most the one in flight beyond that.
            assert count <= len(got) <= count + 1, (run, count, len(got))
            seqs = [row[0] for row in sqlite3.connect(db).execute(
                "SELECT seq FROM results WHERE run_id = ? ORDER BY seq", (run,))]
            assert seqs == list(range(len(got)))
        store.add_run("run", [], load_file(RECORDS / "tcp-send-bw-loopback.jsonl"))  # still writable


def test_two_writers_at_once_both_land(tmp_path: Path) -> None:
    db = tmp_path / "two.db"
    procs = [writer(db, tag, 150) for tag in ("left", "right")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with open_store(db) as store:
        for tag in ("left", "right"):
            (run,) = store.run_ids_for(tag)
            assert len(store.results([run])) == 150


def test_parse_time() -> None:
    assert parse_time("2026-11-20", "--since") == "2026-11-20T00:00:00+00:00"
    now = parse_time("2026-11-20T10:00", "--since")
    assert now == "2026-11-20T10:00:00+00:00"
    from datetime import UTC, datetime

    assert parse_time("6h", "--since", datetime(2026, 11, 20, 12, tzinfo=UTC)) == "2026-11-20T06:00:00+00:00"
    with pytest.raises(FabscopeError, match="--since 'yesterday'"):
        parse_time("yesterday", "--since")


def test_run_keeps_its_results_and_history_shows_them(tmp_path: Path) -> None:
    """The real CLI: `run --store --tag`, then `history` list / show / export; XDG_DATA_HOME default."""
    db = tmp_path / "cli.db"
    ran = fabscope("run", "--loopback", "--sizes", "8,1K", "--iters", "200", "--store", str(db), "--tag", "first")
    assert ran.returncode == 0, ran.stderr
    assert f"kept as run 1 in {db} (tag first)" in ran.stderr
    listed = fabscope("history", "--store", str(db))
    assert listed.returncode == 0 and "first" in listed.stdout and "tcp send lat 8..1024" in listed.stdout
    shown = fabscope("history", "show", "1", "--store", str(db))
    assert shown.returncode == 0 and "--tag first" in shown.stdout and "p50[us]" in shown.stdout
    exported = fabscope("history", "export", "--store", str(db), "--size", "1024")
    (rec,) = [json.loads(line) for line in exported.stdout.splitlines()]
    assert rec["size"] == 1024 and rec["latency_us"]["histogram"]["buckets"]
    csv = fabscope("history", "export", "--format", "csv", "--store", str(db))
    assert csv.stdout.count("\n") == 3 and csv.stdout.startswith("run,tag,started_at,backend,op,pattern,size")
    assert csv.stdout.splitlines()[1].startswith("1,first,")
    xdg = tmp_path / "xdg"
    ran = fabscope("run", "--loopback", "--sizes", "8", "--iters", "100", env={"XDG_DATA_HOME": str(xdg)})
    assert ran.returncode == 0 and (xdg / "fabscope" / "history.db").is_file()
    none = fabscope("run", "--loopback", "--sizes", "8", "--iters", "100", "--no-store",
                    env={"XDG_DATA_HOME": str(tmp_path / "never")})
    assert none.returncode == 0 and not (tmp_path / "never").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "--loopback", "--no-store", "--tag", "x"], "--no-store keeps it out"),
        (["history", "show"], "history show needs a run id"),
        (["history", "show", "7"], "no run 7 in"),
        (["history", "--since", "last tuesday"], "--since 'last tuesday'"),
    ],
)
def test_history_mistakes_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    store = [] if "--no-store" in args else ["--store", str(tmp_path / "m.db")]
    if store:
        open_store(tmp_path / "m.db").close()  # reading commands need an existing store
    out = fabscope(*args, *store)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr and "Traceback" not in out.stderr


def test_an_unwritable_store_fails_before_measuring(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = tmp_path / "a-file"
        target.write_text("x")
        path = target / "sub" / "h.db"  # a directory cannot be made under a regular file, even by root
    else:
        path = Path("/proc/fabscope/h.db")
    out = fabscope("run", "--loopback", "--sizes", "8", "--iters", "10", "--store", str(path))
    assert out.returncode == 2 and "cannot be opened" in out.stderr and "--no-store" in out.stderr
    assert "#bytes" not in out.stdout


def test_a_matrix_is_kept_with_its_findings(tmp_path: Path) -> None:
    from fabscope.results.matrix import Finding, MatrixRun, Measurement
    from fabscope.store import save_matrix

    rec = json.loads((RECORDS / "netns-tcp-bw-device-fabric0-verified.jsonl").read_text().splitlines()[0])
    run = MatrixRun(hosts=["fs-a", "fs-b"], patterns=["bw"], backend="tcp", schedule={"rounds": 1}, rule={})
    run.measurements = [Measurement("fs-a", "fs-b", "bw", 0.9, verdict="verified",
                                    result=parse_record(rec, judge_path=False)),
                        Measurement("fs-b", "fs-a", "bw", None, error="timed out")]
    run.findings = [Finding("link", ["fs-a", "fs-b"], "slow link")]
    run_id = save_matrix(run, tmp_path / "m.db", tag="fabric", argv=["matrix", "--hosts", "fs-a,fs-b"])
    assert run_id is not None
    with open_store(tmp_path / "m.db") as store:
        (info,) = store.runs(Filters(tag="fabric"))
        assert (info.command, info.results) == ("matrix", 1)
        assert store.results([run_id])[0].path.verdict == "verified"
        (summary,) = store.summaries(run_id)
        assert summary["schema"] == "fabscope.matrix/1" and summary["findings"][0]["kind"] == "link"
        assert "pairs" not in summary


# ---- damage, read-only opening, NaN, tags (issue 23) ---------------------------------------------

@dataclass
class Said:
    returncode: int
    stdout: str
    stderr: str


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> Said:
    """The CLI in this process (what `fabscope ARGS` runs, minus the interpreter's start: these
    commands start no engine); an exception escaping it fails the test like a traceback would."""
    from fabscope.cli import main

    capsys.readouterr()
    rc = main(list(args))
    out = capsys.readouterr()
    return Said(rc, out.out, out.err)


def _many_runs(db: Path, runs: int = 60) -> None:
    """A store of ``runs`` runs (two real records each, tags t0..t4): ~250 pages of 4 KiB."""
    recs = load_file(RECORDS / "tcp-send-lat-with-histogram.jsonl")
    with open_store(db) as store:
        for i in range(runs):
            store.add_run("run", ["run", "--loopback"], recs, tag=f"t{i % 5}")


def _damage(db: Path) -> None:
    """`dd if=/dev/urandom of=h.db bs=4096 seek=12 count=3 conv=notrunc`, with fixed bytes."""
    with open(db, "r+b") as fh:
        fh.seek(12 * 4096)
        fh.write(random.Random(23).randbytes(3 * 4096))


def test_a_damaged_store_is_an_error_in_every_command_and_salvage_keeps_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "h.db"
    _many_runs(db)
    _damage(db)
    size = db.stat().st_size
    # The damage is the same bytes on the same pages every time: those pages hold both results of
    # run 1 (overwritten text SQLite still reads) and none of the runs table, so the listing alone
    # reads no damaged page. (Where the pages fall depends on the size of the stored records: a
    # change to what a record carries moves them, and this test says so exactly.)
    listing = cli(capsys, "history", "--store", str(db))
    listed = [int(line.split()[0]) for line in listing.stdout.splitlines()[2:]]
    assert listing.returncode == 0 and listed == list(range(60, 10, -1)), listing.stdout  # the newest 50
    commands = [["history", "show", "1"], ["history", "export"], ["compare", "t0", "t1"],
                ["report", "t0", "t1"], ["history", "check"]]
    for args in commands:
        out = cli(capsys, *args, "--store", str(db))
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert str(db) in out.stderr and f"history salvage NEW.db --store {db}" in out.stderr, (args, out.stderr)
    run = fabscope("run", "--loopback", "--sizes", "8", "--iters", "10", "--store", str(db))
    assert run.returncode == 2 and "nothing was measured" in run.stderr and "#bytes" not in run.stdout
    assert f"history salvage NEW.db --store {db}" in run.stderr and "Traceback" not in run.stderr
    assert db.stat().st_size == size  # the run wrote nothing into the damaged file
    saved = tmp_path / "saved.db"
    out = cli(capsys, "history", "salvage", str(saved), "--store", str(db))
    assert out.returncode == 0, out.stderr
    lost = [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("lost:")]
    assert lost == ["lost: run 1: 2 of 2 result(s) do not read: lost"], out.stdout
    assert "salvaged 59 run(s), 118 result(s)" in out.stdout, out.stdout
    assert cli(capsys, "history", "show", "2", "--store", str(db)).returncode == 0  # an undamaged run reads
    with open_store(saved) as store:
        assert store.integrity() == "ok"
        runs = sorted(store.runs(limit=None), key=lambda r: r.id)
        # Runs 2..60 in their order (numbered from 1 again), each with both its results.
        assert [(r.tag, r.results) for r in runs] == [(f"t{i % 5}", 2) for i in range(1, 60)]
        assert all(r.argv == ["run", "--loopback"] for r in runs)
        results = store.results()
        assert len(results) == 118 and all(r.latency is not None for r in results)
    assert cli(capsys, "history", "check", "--store", str(saved)).returncode == 0
    again = cli(capsys, "history", "salvage", str(saved), "--store", str(db))
    assert again.returncode == 2 and "never writes over a file" in again.stderr


def test_reading_commands_never_create_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no" / "such" / "h.db"
    rec = str(RECORDS / "tcp-send-lat-loopback.jsonl")
    for args in (["history"], ["history", "export"], ["history", "check"], ["compare", "t1", "latest"],
                 ["report", "latest"], ["report", rec, "--html", str(tmp_path / "r.html")]):
        out = cli(capsys, *args, "--store", str(missing))
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "no history store at" in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
    assert not (tmp_path / "no").exists()


def test_a_store_in_a_read_only_directory_is_read(tmp_path: Path) -> None:
    """history, compare and report read a store whose directory this user cannot write (root
    writes anywhere: then the commands run as nobody)."""
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="fabscope-ro-"))  # 0700 parents of tmp_path would hide it from nobody
    try:
        db = where / "h.db"
        _many_runs(db, runs=4)
        db.chmod(0o644)
        where.chmod(0o555)
        python = sys.executable
        as_user: list[str] = []
        if os.geteuid() == 0:
            # nobody cannot enter root's home, where this venv's interpreter may live: the system's
            # Python runs these stdlib-only commands
            python = shutil.which("python3", path="/usr/bin:/bin") or ""
            if not python or not shutil.which("runuser"):
                pytest.skip("root, without runuser and a system python3 to run the commands as nobody")
            as_user = ["runuser", "-u", "nobody", "--"]
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"), XDG_DATA_HOME=str(where / "xdg"))
        for args in (["history"], ["compare", "t0", "t1"], ["report", "t0"], ["history", "check"]):
            out = subprocess.run([*as_user, python, "-m", "fabscope", *args, "--store", str(db)],
                                 capture_output=True, text=True, timeout=120, env=env, cwd="/")
            assert out.returncode in (0, 10), (args, out.stderr)  # compare: 10 = inconclusive (one run a side)
            assert "readonly" not in out.stderr and "Traceback" not in out.stderr
        assert sorted(p.name for p in where.iterdir()) == ["h.db"]
    finally:
        where.chmod(0o755)
        shutil.rmtree(where)


def _record_line(**latency: float) -> str:
    rec = json.loads((RECORDS / "tcp-send-lat-with-histogram.jsonl").read_text().splitlines()[0])
    rec["latency_us"].update(latency)
    return json.dumps(rec)  # json writes NaN / Infinity, as a hand-edited file would have them


def test_nan_and_infinity_are_refused_naming_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = (RECORDS / "tcp-send-lat-loopback.jsonl").read_text().splitlines()[0]
    for bad in (_record_line(p50=float("nan")), _record_line(max=float("inf"))):
        f = tmp_path / "bad.jsonl"
        f.write_text(good + "\n" + bad + "\n")
        for args in (["compare", str(f), str(RECORDS / "tcp-send-lat-loopback.jsonl")], ["report", str(f)]):
            out = cli(capsys, *args)
            assert out.returncode == 2 and f"{f}:2" in out.stderr and "finite" in out.stderr, (args, out.stderr)
    db = tmp_path / "nan.db"
    _many_runs(db, runs=1)
    con = sqlite3.connect(db)
    con.execute("UPDATE results SET record = ? WHERE seq = 1", (_record_line(p99=float("nan")),))
    con.commit()
    con.close()
    out = cli(capsys, "history", "export", "--store", str(db))
    assert out.returncode == 2 and f"{db}: run 1, result 2" in out.stderr and "finite" in out.stderr, out.stderr


def test_a_foreign_line_is_refused_by_compare_as_by_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_text((RECORDS / "tcp-send-lat-loopback.jsonl").read_text() + '{"schema": "iperf3/1", "x": 1}\n')
    for args in (["compare", str(f), str(f)], ["report", str(f)]):
        out = cli(capsys, *args)
        assert out.returncode == 2 and f"{f}:3" in out.stderr and "iperf3/1" in out.stderr, (args, out.stderr)


def test_exported_records_keep_their_runs_for_compare(tmp_path: Path) -> None:
    from test_compare import _shaped  # real records with known latencies

    db = tmp_path / "h.db"
    with open_store(db) as store:
        for p50 in (10.0, 10.05, 9.95, 10.1, 9.9):
            store.add_run("run", ["run"], [_shaped(p50)], tag="before")
            store.add_run("run", ["run"], [_shaped(p50 * 1.5)], tag="after")
    files = []
    for tag in ("before", "after"):
        out = fabscope("history", "export", "--tag", tag, "--store", str(db))
        lines = [json.loads(line) for line in out.stdout.splitlines()]
        assert [r["run"]["tag"] for r in lines] == [tag] * 5 and len({r["run"]["id"] for r in lines}) == 5
        assert all(datetime.fromisoformat(r["run"]["started_at"]).tzinfo for r in lines)  # when, with its zone
        files.append(tmp_path / f"{tag}.jsonl")
        files[-1].write_text(out.stdout)
    out = fabscope("compare", *map(str, files), "--format", "json")
    (row,) = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["runs"] == [5, 5] and row["verdict"] == "regression" and out.returncode == 9


@pytest.mark.parametrize("tag", ["latest", "latest~2", "12", "a/b", "x.jsonl"])
def test_tags_that_read_as_runs_or_files_are_refused(tag: str) -> None:
    from fabscope.cli import main

    assert main(["suite", "--no-store", "--tag", tag], execute=False) == 2
    assert main(["run", "--loopback", "--tag", tag], execute=False) == 2  # the issue's `run --tag latest`
    assert main(["run", "--loopback", "--tag", f"v-{tag.replace('/', '-').replace('.', '-')}"], execute=False) == 0


def test_history_formats_are_honoured_or_refused(tmp_path: Path) -> None:
    """As a subprocess: `jq` reads exactly what the process writes to stdout."""
    db = tmp_path / "h.db"
    _many_runs(db, runs=2)
    shown = fabscope("history", "show", "1", "--format", "json", "--store", str(db))
    lines = [json.loads(line) for line in shown.stdout.splitlines()]  # pure JSON lines: jq reads them
    assert len(lines) == 2 and lines[0]["run"]["id"] == 1
    listed = fabscope("history", "--format", "csv", "--store", str(db))
    assert listed.stdout.splitlines()[0] == "run,started_at,command,tag,results,hosts,cases"
    assert len(listed.stdout.splitlines()) == 3
    js = fabscope("history", "--format", "json", "--store", str(db))
    assert [json.loads(line)["id"] for line in js.stdout.splitlines()] == [2, 1]
    refused = fabscope("history", "check", "--format", "csv", "--store", str(db))
    assert refused.returncode == 2 and "check writes text" in refused.stderr
    ok = fabscope("history", "check", "--store", str(db))
    assert ok.returncode == 0 and "ok" in ok.stdout and "2 run(s)" in ok.stdout
