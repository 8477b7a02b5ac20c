"""The loopback suite (`make run`): every built backend, operation and pattern on this host, with the
same methodology, in one comparison table, plus report files."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import path as pathmod
from . import runner
from .engine import backends
from .errors import EXIT_MEASURE, EXIT_OK, EXIT_UNSUPPORTED
from .mpirun import MPI_FLAVOURS, find_mpi_engine
from .report.render import render_csv, render_md
from .report.table import carried_by

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


def cases() -> list[Case]:
    out: list[Case] = []
    for name, be in backends().items():
        if name == "verbs":
            continue  # needs an RDMA device; `fabscope testbed softroce run` covers it
        for op in be["ops"]:
            for pattern in be["patterns"]:
                out.append(Case(name, op, pattern))
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


def _row(case: Case, rec: dict[str, Any]) -> list[str]:
    size = str(rec.get("size"))
    path = (rec.get("path") or {}).get("verdict", "-")
    if rec.get("pattern") == "lat":
        lat = rec.get("latency_us") or {}
        figure = f"p50 {lat.get('p50', 0):.2f} us, p99 {lat.get('p99', 0):.2f} us"
    else:
        gbps = rec.get("bandwidth_gbps")
        figure = f"{gbps:.2f} Gb/s, {rec.get('msg_rate_mpps', 0):.3f} Mpps" if gbps is not None else "n/a"
    return [case.label, size, figure, carried_by(rec), str(path)]


def run_suite(out_dir: str, quick: bool = False) -> int:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[list[str]] = []
    records: list[dict[str, Any]] = []
    failures = 0
    started = time.monotonic()
    for case in cases():
        print(f"fabscope suite: {case.label} ...", file=sys.stderr, flush=True)
        got: list[dict[str, Any]] = []

        def keep(rec: dict[str, Any], sink: list[dict[str, Any]] = got) -> None:
            rec["path"] = pathmod.verdict(rec)
            sink.append(rec)

        if case.backend == "mpi":
            mpi = case.extra[0].split("=", 1)[1]
            outcome = runner.run_mpi(_args(case, quick)[:-1], 10.0, keep, mpi=mpi)
        else:
            outcome = runner.run_loopback(_args(case, quick), 10.0, keep)
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
    (out / "loopback.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (out / "loopback.csv").write_text(render_csv(records))
    (out / "loopback.md").write_text("# fabscope loopback suite\n\n```\n" + table + "\n```\n\n" + render_md(records))
    print(f"\nreport: {out}/loopback.md, loopback.csv, loopback.jsonl")
    return EXIT_MEASURE if failures else EXIT_OK
