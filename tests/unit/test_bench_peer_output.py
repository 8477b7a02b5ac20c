# SPDX-License-Identifier: BSD-3-Clause
"""How the benches read ucx_perftest's result (bench/peer_output.py), on rows it printed between the
two Soft-RoCE guests (UCX 1.13.1, 8-byte tag_lat)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from peer_output import BenchError, parse_ucx_perftest

HEAD = """\
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+
"""
# 1,000 messages: one report after a second, then the final row
SHORT = HEAD + """\
[thread 0]               626    594.000   799.329   799.329        0.01       0.01        1251        1251
Final:                  1000    552.000   693.781   759.854        0.01       0.01        1441        1316
"""
# 20,000 messages ending right on a report: the last interval holds no iteration, so its averages
# are "inf" and 0, while the run's own figures stand
ON_A_REPORT = HEAD + """\
[thread 0]             19087    375.000   533.989   577.053        0.01       0.01        1873        1733
[thread 0]             20000    361.500   547.838   575.720        0.01       0.01        1825        1737
Final:                 20000    361.500       inf   575.822        0.00       0.01           0        1737
"""


def test_the_final_row_gives_the_median_and_the_overall_mean() -> None:
    assert parse_ucx_perftest(SHORT, "lat") == {"lat_p50_us": 552.0, "lat_mean_us": 759.854, "samples": 1000.0}


def test_a_run_that_ends_on_a_report_still_has_its_figures() -> None:
    assert parse_ucx_perftest(ON_A_REPORT, "lat") == {"lat_p50_us": 361.5, "lat_mean_us": 575.822,
                                                      "samples": 20000.0}
    assert parse_ucx_perftest(ON_A_REPORT, "bw")["bw_MBps"] == pytest.approx(0.01 * 1048576 / 1e6)


def test_a_row_without_a_usable_figure_is_an_error_not_a_zero() -> None:
    with pytest.raises(BenchError, match="no usable figure"):
        parse_ucx_perftest(ON_A_REPORT.replace("575.822", "    inf"), "lat")
    with pytest.raises(BenchError, match="no 'Final:' row"):
        parse_ucx_perftest(HEAD, "lat")
