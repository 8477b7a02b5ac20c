# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope compare BASELINE CURRENT`: its sides read from the history or result files, the settings
that differ between them, the table and the exit status."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import argtypes
from ..errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, FabscopeError
from ..report.text_table import aligned
from ..results import Result
from .rule import CaseComparison, Rule, Side, compare

#: Config entries that name this one run (addresses, descriptors, ports, output form), not a setting.
_VOLATILE_CONFIG = {"peer", "peer-fd", "control-fd", "listen", "session-open", "format", "sizes", "backend", "op",
                    "pattern"}
_VOLATILE_PARTS = ("addr", "qpn", "psn", "key", "pid", "fd", "port_num", "lid", "gid")


def _settings(r: Result) -> dict[str, str]:
    """What a run was set up with: engine options, effective poll mode and buffers, CPUs, versions."""
    out: dict[str, str] = {}

    def put(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                put(f"{prefix}{'.' if prefix else ''}{k}", v)
        elif not isinstance(obj, list):
            out[prefix] = json.dumps(obj)

    put("", {k: v for k, v in r.config.items() if k not in _VOLATILE_CONFIG})
    out["poll (effective)"] = json.dumps(r.transport.poll)
    for k, v in r.transport.local.items():
        if not any(part in k for part in _VOLATILE_PARTS) and not isinstance(v, (dict, list)):
            out[f"transport.{k}"] = json.dumps(v)
    for side, info in (("host", r.host), ("peer_host", r.peer_host)):
        if info is not None:
            out.update({f"{side}.cpu": json.dumps(info.cpu), f"{side}.cpuidle_driver": json.dumps(info.cpuidle_driver),
                        f"{side}.cpuidle_governor": json.dumps(info.cpuidle_governor),
                        f"{side}.cpu_dma_latency_held": json.dumps(info.cpu_dma_latency_held),
                        f"{side}.hostname": json.dumps(info.hostname)})
    out["engine version"] = json.dumps(r.version)
    return out


def differences(baseline: Side, current: Side, limit: int = 20) -> list[str]:
    """The settings whose values differ between the two sides (each side: every value its runs had)."""
    def values(side: Side) -> dict[str, set[str]]:
        got: dict[str, set[str]] = {}
        for run in side.runs:
            for r in run:
                for k, v in _settings(r).items():
                    got.setdefault(k, set()).add(v)
        return got

    a, b = values(baseline), values(current)
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, {"(absent)"}), b.get(key, {"(absent)"})
        if va != vb:
            out.append(f"{key}: {' | '.join(sorted(va))} -> {' | '.join(sorted(vb))}")
    if len(out) > limit:
        out = [*out[:limit], f"... and {len(out) - limit} more"]
    return out


def _file_runs(path: Path) -> list[list[Result]]:
    """A result file's runs. Lines are read by `fabscope report`'s rule (one owner: a line that is
    not a fabscope record is an error naming file and line; suite, matrix and error lines are known
    and carry no results to compare). Records `history export` wrote carry their stored ``run``:
    each run stays a run; records without it are one run per file."""
    from ..report.inputs import read_inputs

    runs: dict[object, list[Result]] = {}
    for r in read_inputs([str(path)]).records:
        run = r.raw.get("run")
        key = run.get("id") if isinstance(run, dict) else None
        runs.setdefault(key, []).append(r)
    return list(runs.values())


def load_side(spec: str, store_path: str | None) -> Side:
    """A result file (or comma-separated files: one run each, or the runs `history export` marked in
    them), else a run id / latest / tag."""
    files = [Path(p) for p in spec.split(",")]
    if all(p.is_file() for p in files):
        try:
            runs = [run for p in files for run in _file_runs(p)]
        except OSError as exc:
            raise FabscopeError(f"{spec}: {exc}", EXIT_USAGE) from exc
        if not any(runs):
            raise FabscopeError(f"{spec}: no fabscope.result records in it", EXIT_USAGE)
        return Side(spec + (f" ({len(runs)} runs)" if len(runs) > len(files) else ""), runs)
    if any(sep in spec for sep in ("/", ".json")):
        raise FabscopeError(f"{spec}: no such file (a side is a result file, a run id, latest, latest~N or a tag)",
                            EXIT_USAGE)
    from ..store import open_store

    with open_store(store_path, readonly=True) as store:
        ids = store.run_ids_for(spec)
        return Side(f"{spec} (run{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))})",
                    [store.results([i]) for i in ids])


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f}%"


def _shout(verdict: str) -> str:
    return verdict.upper() if verdict == "regression" else verdict


def render(rows: Sequence[CaseComparison], baseline: Side, current: Side, rule: Rule) -> str:
    lines = [f"# baseline: {baseline.name}", f"# current:  {current.name}"]
    differ = differences(baseline, current)
    if differ:
        lines.append("# settings that differ (baseline -> current): this compares configurations, not only builds")
        lines += [f"#   {d}" for d in differ]
    else:
        lines.append("# settings: the same on both sides (engine options, poll mode, buffers, CPUs, versions)")
    lines.append(f"# a call needs a change beyond {100 * rule.threshold:g}% AND runs that differ (Welch t p < "
                 f"{rule.alpha:g}; latency also Mann-Whitney U p < {rule.alpha_samples:g} over the samples); a "
                 "change beyond it without that evidence is inconclusive. The tail (latency p99, the slowest "
                 "bandwidth interval) is judged the same way on its own")
    head = ["case", "metric", "baseline", "current", "change", "verdict", "tail", "tail change", "tail verdict",
            "evidence"]
    table = [[f"{r.backend} {r.op} {r.pattern} {r.size} B ({r.transport})", r.metric, _fmt(r.baseline),
              _fmt(r.current), _pct(r.change), _shout(r.verdict),
              "-" if r.tail_metric is None else f"{_fmt(r.tail_baseline)} -> {_fmt(r.tail_current)}",
              _pct(r.tail_change), "TAIL REGRESSION" if r.tail_verdict == "regression" else r.tail_verdict,
              "; ".join(e for e in (r.evidence, f"tail: {r.tail_evidence}" if r.tail_evidence else "") if e)]
             for r in rows]
    head_line, *row_lines = aligned(head, table)
    lines.append(head_line)
    for r, text in zip(rows, row_lines, strict=True):
        lines.append(text)
        lines += [f"# {line}" for line in (r.causes.lines() if r.causes is not None else [])]
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("regression", "improvement", "inconclusive", "same")}
    tails = {v: sum(1 for r in rows if r.tail_verdict == v) for v in ("regression", "inconclusive")}
    lines.append(f"# {counts['regression']} regression(s), {counts['improvement']} improvement(s), "
                 f"{counts['inconclusive']} inconclusive, {counts['same']} same, of {len(rows)} case(s); tail: "
                 f"{tails['regression']} regression(s), {tails['inconclusive']} inconclusive")
    settle = [r.runs_to_settle for r in rows if r.runs_to_settle is not None]
    if settle:
        lines.append(f"# inconclusive calls: repeat each side to about {max(settle)} runs (`fabscope run ... --tag T` "
                     "repeatedly, then `fabscope compare T_A T_B`)")
    return "\n".join(lines) + "\n"


def fill_compare_parser(c: argparse.ArgumentParser) -> None:
    """The options of `fabscope compare` (cli.py names the subcommand and its help line)."""
    c.add_argument("baseline", help="run id, latest, latest~N, a tag (all its runs), or result file(s) a.jsonl,b.jsonl")
    c.add_argument("current", help="the same forms")
    c.add_argument("--store", metavar="PATH", default=None, help="history file for run ids and tags")
    c.add_argument("--threshold", type=argtypes.finite_float(0.1, 1000.0), default=5.0, metavar="PCT",
                   help="smallest change called, in percent (default 5)")
    c.add_argument("--alpha", type=argtypes.finite_float(1e-12, 0.5), default=0.01,
                   help="Welch t significance over runs (default 0.01)")
    c.add_argument("--alpha-samples", type=argtypes.finite_float(1e-12, 0.5), default=0.002,
                   help="Mann-Whitney U significance over latency samples (default 0.002)")
    c.add_argument("--format", choices=["text", "json"], default="text")
    c.set_defaults(func=compare_main)


def exit_status(rows: Sequence[CaseComparison]) -> int:
    """9: a regression, of the median or the tail; 10: none, but a median change beyond the threshold
    lacks evidence. An inconclusive tail alone does not set 10: p99 moves beyond any threshold between
    runs of one build here (A/A), so it would set it nearly always; the table shows it."""
    if any("regression" in (r.verdict, r.tail_verdict) for r in rows):
        return EXIT_REGRESSION
    if any(r.verdict == "inconclusive" for r in rows):
        return EXIT_INCONCLUSIVE
    return EXIT_OK


def compare_main(ns: argparse.Namespace) -> int:
    rule = Rule(ns.threshold / 100.0, ns.alpha, ns.alpha_samples)
    baseline, current = load_side(ns.baseline, ns.store), load_side(ns.current, ns.store)
    rows = compare(baseline, current, rule)
    if ns.format == "json":
        sys.stdout.write("".join(json.dumps(r.to_json()) + "\n" for r in rows))
    else:
        sys.stdout.write(render(rows, baseline, current, rule))
    return exit_status(rows)
