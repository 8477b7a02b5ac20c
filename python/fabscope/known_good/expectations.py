# SPDX-License-Identifier: BSD-3-Clause
"""Expectations of a scenario's check: absolute bounds (``p50_us <= 3.5``, ``bw_gbps >= 0.9 *
line_rate``) and bounds relative to a named baseline (``p50_us within 5 % of baseline "golden"``).
Parsing only; judging is check.py's."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# The figures each kind of check produces, and what a bound on each means. A figure not listed for
# a check's kind is an error in the scenario (it would never be judged).
RUN_LATENCY_FIGURES = {"p50_us": "median latency [us]", "p99_us": "99th percentile latency [us]",
                       "p999_us": "99.9th percentile latency [us]", "max_us": "largest latency [us]"}
RUN_BANDWIDTH_FIGURES = {"bw_gbps": "receiver bandwidth [Gb/s]", "msg_rate_mpps": "message rate [Mmsg/s]"}
DOCTOR_FIGURES = {"errors": "doctor findings of severity error", "warnings": "doctor findings of severity warning"}
MATRIX_FIGURES = {"bad_nodes": "nodes the fabric matrix found bad", "bad_links": "links it found bad",
                  "misrouted_pairs": "pairs whose bytes went over another device",
                  "unreachable_hosts": "hosts whose agent never checked in"}
# A suite check: counts over its rows, and each selected row's own figures (as a run check's).
SUITE_COUNT_FIGURES = {"rows_failed": "rows (a backend's pattern) that did not finish (unsupported rows are notes)",
                       "rows_misrouted": "results whose bytes went over another device than asked",
                       "rows_unverified": "results whose path could not be verified"}
SUITE_FIGURES = {**SUITE_COUNT_FIGURES, **RUN_LATENCY_FIGURES, **RUN_BANDWIDTH_FIGURES}
COLLECTIVE_FIGURES = {"busbw_gbps": "bus bandwidth [Gb/s] (algbw x nccl-tests' factor)",
                      "algbw_gbps": "algorithm bandwidth [Gb/s] (size / time of the median collective)",
                      "p50_us": "median time of one collective, the slowest rank's [us]",
                      "p99_us": "99th percentile time of one collective, the slowest rank's [us]",
                      "fraction_of_ceiling": "busbw over the slowest link's expected ceiling (0..1)"}
LOAD_FIGURES = {"total_gbps": "what the load's flows carried together [Gb/s]",
                "fraction_of_bottleneck": "the concurrent total over the bottleneck's rate (0..1)",
                "fairness_jain": "Jain's fairness index of the flows' rates (1 = fair)",
                "retransmitted_segments": "TCP segments the senders retransmitted (spurious ones left out)",
                "drops": "packets the netdevs of both ends dropped during the flows",
                "victim_p50_factor": "the victim's median latency under load over its latency alone",
                "victim_p99_factor": "the victim's p99 latency under load over its latency alone"}
# Names a bound's right-hand side may use, per figure: the run's expected ceiling.
REFERENCES = {"line_rate": "the expected ceiling of the carrying device (link rate x wire efficiency, PCIe)"}
# The figures a baseline can judge (compare's statistics: the median, and latency's p99 tail).
RELATIVE_FIGURES = {"p50_us", "p99_us", "bw_gbps"}

_OPS = ("<=", ">=", "==", "<", ">")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_ABSOLUTE = re.compile(rf"^\s*(\w+)\s*(<=|>=|==|<|>)\s*(?:({_NUMBER})\s*\*\s*)?(\w+|{_NUMBER})\s*$")
_RELATIVE = re.compile(rf'^\s*(\w+)\s+within\s+({_NUMBER})\s*%\s+of\s+baseline\s+"([^"]+)"\s*$')


class ExpectationError(ValueError):
    """What is wrong with one expectation's text (the scenario adds file and line)."""


@dataclass(frozen=True)
class Absolute:
    figure: str
    op: str
    factor: float  # the bound is factor * reference, or factor alone when reference is None
    reference: str | None

    def holds(self, value: float, bound: float) -> bool:
        return {"<=": value <= bound, ">=": value >= bound, "==": value == bound,
                "<": value < bound, ">": value > bound}[self.op]

    def bound(self, reference_value: float | None) -> float | None:
        if self.reference is None:
            return self.factor
        return None if reference_value is None else self.factor * reference_value


@dataclass(frozen=True)
class Relative:
    figure: str
    percent: float
    baseline: str


@dataclass(frozen=True)
class Expectation:
    text: str
    level: str  # "expect" (a violation fails) or "warn" (a violation warns)
    rule: Absolute | Relative
    line: int

    @property
    def figure(self) -> str:
        return self.rule.figure


def parse(text: str, level: str, line: int, figures: dict[str, str]) -> Expectation:
    """One expectation, checked against the figures its check produces."""
    rel = _RELATIVE.match(text)
    if rel:
        figure, pct, name = rel.group(1), float(rel.group(2)), rel.group(3)
        _known(figure, figures, text)
        if figure not in RELATIVE_FIGURES:
            raise ExpectationError(f"{text!r}: a baseline judges {', '.join(sorted(RELATIVE_FIGURES))}, not {figure}")
        if not (0.1 <= pct <= 1000.0):
            raise ExpectationError(f"{text!r}: the tolerance is {pct:g} %; give 0.1 to 1000 %")
        return Expectation(text, level, Relative(figure, pct, name), line)
    ab = _ABSOLUTE.match(text)
    if not ab:
        raise ExpectationError(
            f"{text!r} is not an expectation: write FIGURE OP BOUND (p50_us <= 3.5, bw_gbps >= 0.9 * line_rate) "
            'or FIGURE within N % of baseline "NAME"')
    figure, op, factor_text, rhs = ab.groups()
    _known(figure, figures, text)
    if re.fullmatch(_NUMBER, rhs):
        if factor_text is not None:
            raise ExpectationError(f"{text!r}: a bound is a number, or a number times {', '.join(REFERENCES)}")
        factor, reference = float(rhs), None
    else:
        if rhs not in REFERENCES:
            raise ExpectationError(f"{text!r}: {rhs!r} is not a known reference (known: {', '.join(REFERENCES)})")
        if figure not in RUN_BANDWIDTH_FIGURES or figure != "bw_gbps":
            raise ExpectationError(f"{text!r}: {rhs} is a bandwidth; it bounds bw_gbps only")
        factor, reference = float(factor_text) if factor_text is not None else 1.0, rhs
    if not math.isfinite(factor):
        raise ExpectationError(f"{text!r}: the bound is not a finite number")
    return Expectation(text, level, Absolute(figure, op, factor, reference), line)


def _known(figure: str, figures: dict[str, str], text: str) -> None:
    if figure not in figures:
        raise ExpectationError(f"{text!r}: this check does not produce {figure!r}; it produces "
                               f"{', '.join(sorted(figures))}")
