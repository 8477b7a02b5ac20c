# SPDX-License-Identifier: BSD-3-Clause
"""The loopback suite (`make run`): every built backend, operation and pattern on this host, with the
same methodology, in one comparison table, plus report files."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import EXIT_UNSUPPORTED
from .launch import plan, runner
from .launch.engine import backends
from .launch.mpirun import MPI_FLAVOURS, find_mpi_engine
from .report.markdown import markdown_table
from .report.render import labelled_why_lines, render_csv, render_json, render_md, why_cell
from .report.table import Column, Table
from .report.text_table import aligned
from .results import Result
from .results.suite import SuiteSummary
from .suite_hosts import only_backends, verbs_on_this_host
from .suite_measure import DEFAULT as DEFAULT_MEASURE
from .suite_measure import Measure


@dataclass
class Case:
    backend: str
    op: str
    pattern: str
    options: tuple[tuple[str, str], ...] = ()  # engine options of this case (the verbs device)
    mpi: str | None = None

    @property
    def label(self) -> str:
        extra = " ".join([f"--{k}={v}" for k, v in self.options] + ([f"--mpi={self.mpi}"] if self.mpi else []))
        return f"{self.backend} {self.op} {self.pattern}" + (f" ({extra})" if extra else "")


# Backends that only run over an RDMA device (rsocket never falls back to the kernel's TCP).
NEEDS_RDMA = ("verbs", "rsocket")


def cases(rdma_devices: Sequence[str] = ()) -> list[Case]:
    out: list[Case] = []
    for name, be in backends().items():
        # verbs and rsocket need an RDMA port that is up: one set of rows per such device (suite_hosts
        # finds them); without one they have no rows, and the verbs note says why.
        for extra in ([(("device", d),) for d in rdma_devices] if name in NEEDS_RDMA else [()]):
            for op in be["ops"]:
                for pattern in be["patterns"]:
                    out.append(Case(name, op, pattern, extra))
    # MPI as its users see it: point-to-point under mpirun, for each MPI whose engine was built.
    for mpi in MPI_FLAVOURS:
        try:
            find_mpi_engine(mpi)
        except FileNotFoundError:
            continue
        out += [Case("mpi", "send", pattern, mpi=mpi) for pattern in ("lat", "bw", "bibw")]
    return out


def _plan(case: Case, measure: Measure) -> plan.RunPlan:
    """A case's RunPlan: the suites' measurement (atomics are 8 bytes), its own options, on this host."""
    sizes = "8" if case.op in ("fadd", "cswap") else None
    options = measure.row_options(case.backend, case.op, case.pattern, sizes)
    if case.backend == "mpi":
        return plan.RunPlan.of(options, plan.MpiLaunch(mpi=case.mpi or "openmpi"))
    return plan.RunPlan.of([*options, *case.options], plan.Loopback())


HEADERS = ["backend op pattern", "bytes", "result", "carried by", "path", "why"]


def _row(case: Case, rec: Result) -> list[str]:
    if rec.latency is not None:
        figure = f"p50 {rec.latency.p50:.2f} us, p99 {rec.latency.p99:.2f} us"
    else:
        bw = rec.bandwidth
        figure = (f"{bw.gbps:.2f} Gb/s, {bw.msg_rate_mpps or 0:.3f} Mpps"
                  if bw is not None and bw.gbps is not None else "n/a")
    return [case.label, str(rec.size), figure, rec.transport.carried_by, rec.path.verdict, why_cell([rec])]


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """The suite's table: one row per result (or per case that measured nothing, saying why)."""
    return "\n".join(aligned(HEADERS, rows))


def why_notes(measured: Sequence[tuple[Case, Result]]) -> list[str]:
    """Under the table: each cause seen, for the rows whose "why" cell names one."""
    return [line for case, rec in measured for line in labelled_why_lines(case.label, rec)]


def run_suite(out_dir: str, measure: Measure = DEFAULT_MEASURE, keep: Callable[[Result], None] | None = None,
              backends: Sequence[str] | None = None) -> int:
    """Every case on this host (or those of `backends`); ``keep`` gets each result as it arrives
    (the history store)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[list[str]] = []
    records: list[Result] = []
    measured: list[tuple[Case, Result]] = []
    outcomes: list[runner.RunOutcome] = []
    failed: list[dict[str, Any]] = []  # the rows that did not finish, for suite.json
    started = time.monotonic()
    rdma_devices, verbs_note = verbs_on_this_host()
    todo = cases(rdma_devices)
    only_backends([c.backend for c in todo], backends, [verbs_note] if verbs_note else [])
    todo = [c for c in todo if backends is None or c.backend in backends]
    for case in todo:
        print(f"fabscope suite: {case.label} ...", file=sys.stderr, flush=True)
        got: list[Result] = []

        def collect(rec: Result, sink: list[Result] = got) -> None:  # path verdict attached by the runner
            sink.append(rec)
            if keep:
                keep(rec)

        outcome = plan.execute_row(_plan(case, measure), collect)
        outcomes.append(outcome)
        records += got
        measured += [(case, r) for r in got]
        rows += [_row(case, r) for r in got]
        if outcome.exit_code == EXIT_UNSUPPORTED:
            rows.append([case.label, "-", f"unsupported: {outcome.error}", "", "", ""])
        elif outcome.exit_code != 0:
            rows.append([case.label, "-", f"FAILED (exit {outcome.exit_code}): {outcome.error}", "", "", ""])
            failed.append({"row": case.label, "exit_code": outcome.exit_code, "error": outcome.error or ""})
    why = why_notes(measured)
    print(f"# fabscope loopback suite: {len(records)} results in {time.monotonic() - started:.0f} s; "
          "latency = half round trip; bandwidth at the receiver")
    print(text_table(rows))
    for line in why:
        print(f"# {line}")
    if verbs_note:
        print(f"# {verbs_note}")
    (out / "loopback.jsonl").write_text(render_json(records))
    summary = SuiteSummary(title="fabscope loopback suite", notes=why + ([verbs_note] if verbs_note else []),
                           failed=failed)
    (out / "suite.json").write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    (out / "loopback.csv").write_text(render_csv(records))
    md_table = markdown_table(Table([Column(h, h) for h in HEADERS], rows))
    note = f"{verbs_note}\n\n" if verbs_note else ""
    md_why = "".join(f"> {line}\n\n" for line in why)
    (out / "loopback.md").write_text("# fabscope loopback suite\n\n" + note + md_table + "\n" + md_why
                                     + render_md(records))
    print(f"\nreport: {out}/loopback.md, loopback.csv, loopback.jsonl, suite.json")
    return plan.rows_exit_code(outcomes)  # the two-host suite's rule: 5 on a misrouted row, 4 on a failed one
