# SPDX-License-Identifier: BSD-3-Clause
"""A fabscope.matrix/1 document read back (MatrixRun.parse): what `fabscope report` draws from a file.

The document is the one `fabscope matrix --format json` writes (MatrixRun.to_json), around a record an
engine really wrote (a netns run's fixture); a malformed document is refused naming the field.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from fabscope.results import RecordError, parse_record
from fabscope.results.findingwhy import CauseOnPairs, FindingWhy
from fabscope.results.matrix import Finding, MatrixRun, Measurement

RECORD = REPO / "tests" / "fixtures" / "records" / "netns-tcp-bw-device-fabric0-verified.jsonl"


def _matrix() -> MatrixRun:
    raw = json.loads(Path(RECORD).read_text().splitlines()[0])
    result = parse_record(raw, judge_path=False)
    run = MatrixRun(hosts=["fs-a", "fs-b", "fs-c"], patterns=["bw"], backend="tcp", schedule={"rounds": 3},
                    rule={"bw_fraction": 0.5}, launcher="mpirun", notes=["a note"])
    run.measurements = [
        Measurement("fs-a", "fs-b", "bw", 0.09, verdict=result.path.verdict, result=result),
        Measurement("fs-a", "fs-c", "bw", 0.02, phase="retest", round=4, result=result, suspect=True),
        Measurement("fs-c", "fs-b", "bw", None, error="exit 3: the peer stopped answering"),
    ]
    why = FindingWhy(causes=(CauseOnPairs("retransmission", 2, 2, "fs-a -> fs-c: 12 retransmitted", "check the cable",
                                          0, 4),),
                     diagnosis="loss (retransmissions or drops)", slow_pairs=2, unexplained=())
    run.findings = [Finding("node", ["fs-c"], "fs-c slow with every partner", {"partners": 2}, why),
                    Finding("misrouted", ["fs-a", "fs-b"], "asked for fabric0, went over mgmt0")]
    run.unreachable = {"fs-d": "its agent did not check in within 10 s"}
    return run


def test_a_document_reads_back_as_the_run_that_wrote_it() -> None:
    run = _matrix()
    doc = json.loads(json.dumps(run.to_json()))
    back = MatrixRun.parse(doc)
    assert (back.hosts, back.patterns, back.backend, back.launcher) == (run.hosts, run.patterns, "tcp", "mpirun")
    assert (back.rule, back.schedule, back.notes, back.unreachable) == (run.rule, run.schedule, run.notes,
                                                                      run.unreachable)
    assert [(m.src, m.dst, m.pattern, m.value, m.phase, m.round, m.suspect, m.error) for m in back.measurements] == [
        (m.src, m.dst, m.pattern, m.value, m.phase, m.round, m.suspect, m.error) for m in run.measurements]
    first = back.measurements[0]
    assert first.result is not None and first.result.path.verdict == "verified" and first.verdict == "verified"
    assert first.result.bandwidth == run.measurements[0].result.bandwidth  # type: ignore[union-attr]
    assert back.measurements[2].result is None
    assert [f.to_json() for f in back.findings] == [f.to_json() for f in run.findings]
    assert back.exit_code == run.exit_code == 8
    # What it prints again is what it read, but for the timing (the document holds only its summary).
    assert {k: v for k, v in back.to_json().items() if k != "timing"} == \
        {k: v for k, v in doc.items() if k != "timing"}


def _broken(path: list[Any], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(_matrix().to_json()))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return copy.deepcopy(doc)


@pytest.mark.parametrize(("path", "value", "field"), [
    (["schema"], "fabscope.result/1", "schema"),
    (["schema"], "fabscope.matrix/2", "schema"),
    (["pattern"], "ping", "pattern"),
    (["hosts"], "fs-a", "hosts"),
    (["pairs"], {"not": "a list"}, "pairs"),
    (["pairs", 0, "matrix", "pattern"], "stream", "pairs[0].matrix.pattern"),
    (["pairs", 1, "src_host"], KeyError, "pairs[1].src_host"),
    (["pairs", 0, "size"], "eight", "pairs[0].size"),
    (["findings", 0, "kind"], "slow", "findings[0].kind"),
    (["findings", 0, "causes", 0, "pairs"], -1, "findings[0].causes[0].pairs"),
    (["unreachable", 0, "reason"], KeyError, "unreachable[0].reason"),
])
def test_a_malformed_document_is_refused_naming_the_field(path: list[Any], value: Any, field: str) -> None:
    with pytest.raises(RecordError) as info:
        MatrixRun.parse(_broken(path, value))
    assert info.value.field == field, str(info.value)
    assert str(info.value).startswith(f"fabscope.matrix/1 document: field '{field}' "), str(info.value)
