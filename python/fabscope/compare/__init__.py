# SPDX-License-Identifier: BSD-3-Clause
"""Regression calls: `fabscope compare BASELINE CURRENT`.

Each side is a run id, ``latest`` / ``latest~N``, a tag (every run with that tag: repeated runs),
or a result file (JSON lines; several files = several runs). Results are matched per case
(backend, op, pattern, size, transport). A case is called ``regression`` or ``improvement`` only
when BOTH hold:

1. effect size: the median over runs of latency p50 (lat) or receiver bandwidth (bw, bibw) moved by
   more than ``--threshold`` (default 5 %) in that direction;
2. statistical evidence that the runs differ, with at least two runs on each side: Welch's t-test
   on the per-run figures (log scale) at ``--alpha`` (default 0.01) and, for latency, also the
   Mann-Whitney U test on the runs' merged latency histograms at ``--alpha-samples``
   (default 0.002, as asv uses) in the same direction.

Why runs and not only samples: on a shared machine whole runs shift (A/A pairs of one build here
moved p50 by up to 15 % with Mann-Whitney p < 1e-80 over their samples; bench/RESULTS.md), so the
samples of one run cannot tell a change from the run-to-run variation. With one run on a side the
case says "one run: no statistical evidence" and is never called; the samples' test is still shown.

A change beyond the threshold without that evidence is never "same": it is ``inconclusive``, with the
number of runs a side that would settle it (from the runs' own spread: a two-sided Welch test at
``--alpha`` with 80 % power; at least 3 a side when a side has one run and no spread to go by).

The tail is judged on its own ("tail regression"): latency p99, and for bandwidth the slowest whole
interval (``bandwidth_min_gbps``), per run, with the same threshold and a Mann-Whitney U test across
the runs' figures (exact; ranks, because one run's p99 can be 100 times another's on a shared
machine: A/A runs here did that). It needs at least 5 runs a side to reach p < 0.01. A CPU hog on
the engine's CPU moves the tail long before the median.

Above the table: the settings that differ between the two sides (engine options from the records'
``config``, poll mode, what carried the run, the CPUs and idle drivers of ``host``, versions), since
a "regression" between two different configurations is a comparison of configurations.

Under a case where B (current) is slower than A (baseline): a regression of the median or the tail,
or a median change beyond the threshold in the slower direction that lacks the evidence to call it
(one run a side, the usual `latest~1 latest`), the causes that differ between A's runs and B's
(results/contrast.py, from each result's explanation): text ``# why B differs: ...`` lines under
the row (or one line saying the causes are the same), JSON ``causes_differ`` and its neighbours.

Exit status: ``EXIT_REGRESSION`` (9) when any case (median or tail) is a regression, else
``EXIT_INCONCLUSIVE`` (10) when a median change is inconclusive, else 0 (an inconclusive tail is
shown, not an exit status: p99 moves that much between A/A runs here).
"""

from .rule import CaseComparison, Rule, Side, compare
from .stats import rank_p, runs_needed, welch_p

__all__ = ["CaseComparison", "Rule", "Side", "compare", "rank_p", "runs_needed", "welch_p"]
