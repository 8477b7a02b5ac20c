# SPDX-License-Identifier: BSD-3-Clause
"""A misrouted result says why, from what the library reported of its own choice (results/misroute.py,
the explanation's `route` cause): real records of the two Soft-RoCE guests and the netns testbed
(tests/fixtures/records/README.md). The verified runs beside them name no route."""

from __future__ import annotations

from pathlib import Path

from fabscope.report.render import render_text
from fabscope.results import Result
from fabscope.results.explain import Cause
from fabscope.results.files import load_file

RECORDS = Path(__file__).resolve().parents[1] / "fixtures" / "records"


def _route(res: Result) -> Cause:
    assert res.explanation is not None
    return next(c for c in res.explanation.causes if c.cause == "route")


def _split(name: str) -> tuple[list[Result], list[Result]]:
    got = load_file(RECORDS / name)
    return [r for r in got if r.misrouted], [r for r in got if not r.misrouted]


def test_debian_pml_exclusion_is_named_with_its_file_line_and_fix() -> None:
    misrouted, verified = _split("softroce-suite-rxe0-openmpi-default-and-pml-ucx.jsonl")
    assert len(misrouted) == 4 and len(verified) == 4
    for res in misrouted:
        cause = _route(res)
        assert cause.seen
        assert "pml ob1 (btl tcp)" in cause.evidence
        assert "pml = ^ucx (/etc/openmpi/openmpi-mca-params.conf:69)" in cause.evidence
        assert cause.fix is not None and "--mca pml=ucx" in cause.fix
        assert "remove the line at /etc/openmpi/openmpi-mca-params.conf:69" in cause.fix
        assert cause.cost == "the result measures eth0, not rxe0/1"
    for res in verified:  # pml ucx beside it: its bytes took rxe0
        assert _route(res).state == "clear"


def test_pml_ucx_devices_default_is_named_when_the_exclusion_is_lifted() -> None:
    misrouted, _ = _split("softroce-mpi-pml-ucx-devices-mlx.jsonl")
    (res,) = misrouted
    cause = _route(res)
    assert cause.seen and "pml_ucx_devices = mlx* (default) does not match rxe0" in cause.evidence
    assert "pml = ^ucx" not in cause.evidence  # the exclusion was lifted: not the reason here
    assert cause.fix is not None and "--mca pml_ucx_devices=any" in cause.fix


def test_the_tcp_row_behind_rxe0_is_verified_on_eth0_and_names_no_route() -> None:
    got = load_file(RECORDS / "softroce-suite-rxe0-tcp-behind.jsonl")
    assert got and all(r.path.verdict == "verified" and r.path.requested == "eth0" for r in got)
    assert all(_route(r).state == "clear" for r in got)


def test_run_text_prints_the_route_under_why() -> None:
    misrouted, _ = _split("softroce-suite-rxe0-openmpi-default-and-pml-ucx.jsonl")
    text = render_text(misrouted[:1])
    assert "# why: route: Open MPI ran pml ob1" in text and "openmpi-mca-params.conf:69" in text


def test_a_netns_misroute_without_a_library_reason_still_says_so() -> None:
    # UCX's lane was on fabric0, the host route moved its bytes to mgmt0; this record is from an engine
    # before route_to_peer, so no setting is named, and the cause says that instead of nothing.
    (res, *_) = load_file(RECORDS / "netns-ucx-tag-bw-misrouted.jsonl")
    cause = _route(res)
    assert cause.seen and "names no setting that chose it" in cause.evidence
    assert cause.fix is not None and "fabscope doctor --device fabric0" in cause.fix


def test_html_report_says_why_under_the_misrouted_line() -> None:
    from fabscope.report.html import ReportInput, render_html

    got = load_file(RECORDS / "softroce-suite-rxe0-openmpi-default-and-pml-ucx.jsonl")
    page = render_html(ReportInput(got, title="guests"))
    misrouted_line = page.index("MISROUTED: mpi send")
    why = page.index("why: route: Open MPI ran pml ob1", misrouted_line)
    assert "openmpi-mca-params.conf:69" in page[why:why + 600]


def test_matrix_misrouted_pair_says_why() -> None:
    from fabscope.matrix.findings import misrouted
    from fabscope.results.matrix import Measurement

    (res, *_) = [r for r in load_file(RECORDS / "softroce-mpi-pml-ucx-devices-mlx.jsonl") if r.misrouted]
    (finding,) = misrouted([Measurement("client", "server", "bw", 0.5, verdict="misrouted", result=res)])
    assert "why: route: Open MPI ran pml ob1" in finding.summary and "pml_ucx_devices = mlx*" in finding.summary
    assert finding.evidence["why"] and "--mca pml_ucx_devices=any" in finding.evidence["why"][0]


def test_mpich_is_named_only_where_its_ucx_was_not_told_the_device() -> None:
    """MPICH's netmod is a reason only when the device asked never reached it: planted on a real
    MPICH record (netns, --device fabric0, verified) as a misroute over mgmt0. Told UCX_NET_DEVICES=
    fabric0 (what --device sets), MPICH did as told and is not named (the kernel's route is, when it
    is the culprit: test_mpi_hosts); without it, MPICH's UCX chose its own interfaces: named, with
    how MPICH chose its netmod and the fix."""
    import copy
    import json

    from fabscope.results.misroute import route_reasons

    rec = json.loads((RECORDS / "netns-mpich-bw-verified.jsonl").read_text().splitlines()[0])
    assert rec["path"]["verdict"] == "verified" and rec["transport"]["local"]["selected"]["netmod"] == "ucx"
    planted = copy.deepcopy(rec)
    planted["path"]["verdict"] = "misrouted"
    planted["path"]["sides"]["local"]["carriers"] = [{"device": "mgmt0", "bytes": 6553600, "share": 1.0}]
    assert route_reasons(planted) == []  # UCX was told fabric0; the route to the peer is over fabric0
    del planted["transport"]["local"]["environment"]["UCX_NET_DEVICES"]
    assert route_reasons(planted) == [
        ("MPICH runs its ucx netmod (ch4:ucx), chosen when MPICH was built",
         "for ucx: UCX_NET_DEVICES=fabric0 (ch4:ucx) or FI_PROVIDER=verbs (ch4:ofi) in the environment")]
