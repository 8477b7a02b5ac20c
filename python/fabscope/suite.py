"""The loopback suite (`make run`): every built backend, operation and pattern on this host, with the
same methodology, in one comparison table, plus report files."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import runner
from .engine import backends
from .errors import EXIT_MEASURE, EXIT_OK, EXIT_UNSUPPORTED
from .mpirun import MPI_FLAVOURS, find_mpi_engine
from .report.markdown import markdown_table
from .report.render import render_csv, render_json, render_md
from .report.table import Column, Table
from .results import Result
from .suite_hosts import only_backends, verbs_on_this_host

LAT_SIZES = "8,4K"
BW_SIZES = "64K,1M"


@dataclass
class Case:
    backend: str
    op: str
    pattern: str
    extra: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        extra = " ".join(self.extra)
        return f"{self.backend} {self.op} {self.pattern}" + (f" ({extra})" if extra else "")


def cases(rdma_devices: Sequence[str] = ()) -> list[Case]:
    out: list[Case] = []
    for name, be in backends().items():
        # verbs needs an RDMA port that is up: one set of rows per such device (suite_hosts finds them)
        for extra in ([(f"--device={d}",) for d in rdma_devices] if name == "verbs" else [()]):
            for op in be["ops"]:
                for pattern in be["patterns"]:
                    out.append(Case(name, op, pattern, extra))
    # MPI as its users see it: point-to-point under mpirun, for each MPI whose engine was built.
    for mpi in MPI_FLAVOURS:
        try:
            find_mpi_engine(mpi)
        except FileNotFoundError:
            continue
        out += [Case("mpi", "send", pattern, (f"--mpi={mpi}",)) for pattern in ("lat", "bw", "bibw")]
    return out


def _args(case: Case, quick: bool) -> list[str]:
    lat = case.pattern == "lat"
    iters = ("200" if lat else "100") if quick else ("5000" if lat else "1000")
    sizes = "8" if case.op in ("fadd", "cswap") else (LAT_SIZES if lat else BW_SIZES)
    return [f"--backend={case.backend}", f"--op={case.op}", f"--pattern={case.pattern}",
            f"--sizes={sizes}", f"--iters={iters}", "--warmup=50", *case.extra]


def _row(case: Case, rec: Result) -> list[str]:
    if rec.latency is not None:
        figure = f"p50 {rec.latency.p50:.2f} us, p99 {rec.latency.p99:.2f} us"
    else:
        bw = rec.bandwidth
        figure = (f"{bw.gbps:.2f} Gb/s, {bw.msg_rate_mpps or 0:.3f} Mpps"
                  if bw is not None and bw.gbps is not None else "n/a")
    return [case.label, str(rec.size), figure, rec.transport.carried_by, rec.path.verdict]


def run_suite(out_dir: str, quick: bool = False, keep: Callable[[Result], None] | None = None,
              backends: Sequence[str] | None = None) -> int:
    """Every case on this host (or those of `backends`); ``keep`` gets each result as it arrives
    (the history store)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[list[str]] = []
    records: list[Result] = []
    failures = 0
    started = time.monotonic()
    rdma_devices, verbs_note = verbs_on_this_host()
    plan = cases(rdma_devices)
    only_backends([c.backend for c in plan], backends, [verbs_note] if verbs_note else [])
    plan = [c for c in plan if backends is None or c.backend in backends]
    for case in plan:
        print(f"fabscope suite: {case.label} ...", file=sys.stderr, flush=True)
        got: list[Result] = []

        def collect(rec: Result, sink: list[Result] = got) -> None:  # path verdict attached by the runner
            sink.append(rec)
            if keep:
                keep(rec)

        if case.backend == "mpi":
            mpi = case.extra[0].split("=", 1)[1]
            outcome = runner.run_mpi(_args(case, quick)[:-1], 10.0, collect, mpi=mpi)
        else:
            outcome = runner.run_loopback(_args(case, quick), 10.0, collect)
        records += got
        rows += [_row(case, r) for r in got]
        if outcome.exit_code == EXIT_UNSUPPORTED:
            rows.append([case.label, "-", f"unsupported: {outcome.error}", "", ""])
        elif outcome.exit_code != 0:
            failures += 1
            rows.append([case.label, "-", f"FAILED (exit {outcome.exit_code}): {outcome.error}", "", ""])
    headers = ["backend op pattern", "bytes", "result", "carried by", "path"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    table = "\n".join(lines)
    print(f"# fabscope loopback suite: {len(records)} results in {time.monotonic() - started:.0f} s; "
          "latency = half round trip; bandwidth at the receiver")
    print(table)
    if verbs_note:
        print(f"# {verbs_note}")
    (out / "loopback.jsonl").write_text(render_json(records))
    (out / "loopback.csv").write_text(render_csv(records))
    md_table = markdown_table(Table([Column(h, h) for h in headers], rows))
    note = f"{verbs_note}\n\n" if verbs_note else ""
    (out / "loopback.md").write_text("# fabscope loopback suite\n\n" + note + md_table + "\n" + render_md(records))
    print(f"\nreport: {out}/loopback.md, loopback.csv, loopback.jsonl")
    return EXIT_MEASURE if failures else EXIT_OK
