# SPDX-License-Identifier: BSD-3-Clause
"""compare's statistics (python/fabscope/compare/stats.py, standard library only: the Debian package
promises no third-party Python on the nodes) against SciPy's, the well-kept implementation, on many
random samples: the same p-values, so the small hand-written functions are no weaker than the
library they stand in for. SciPy is a test dependency only (deps/python-requirements.txt)."""

from __future__ import annotations

import random

import pytest

from fabscope.compare import rank_p, welch_p

scipy_stats = pytest.importorskip("scipy.stats")


def _samples(rng: random.Random, n: int, shift: float) -> list[float]:
    # Log-normal like run figures; distinct values (no ties) with probability one.
    return [rng.lognormvariate(shift, 0.3) for _ in range(n)]


def test_welch_p_is_scipys_unequal_variance_t_test() -> None:
    rng = random.Random(20261206)
    for _ in range(300):
        n, m = rng.randint(2, 30), rng.randint(2, 30)
        a, b = _samples(rng, n, 0.0), _samples(rng, m, rng.choice((0.0, 0.1, 0.5)))
        want = scipy_stats.ttest_ind(a, b, equal_var=False).pvalue
        assert welch_p(a, b) == pytest.approx(want, rel=1e-6, abs=1e-12), (a, b)


def test_rank_p_is_scipys_exact_mann_whitney_up_to_40_a_side() -> None:
    rng = random.Random(6122026)
    for _ in range(200):
        n, m = rng.randint(2, 12), rng.randint(2, 12)
        a, b = _samples(rng, n, 0.0), _samples(rng, m, rng.choice((0.0, 0.2, 1.0)))
        want = scipy_stats.mannwhitneyu(b, a, alternative="two-sided", method="exact").pvalue
        assert rank_p(a, b) == pytest.approx(want, rel=1e-9), (a, b)


def test_rank_p_beyond_40_a_side_is_the_normal_approximation_without_continuity() -> None:
    rng = random.Random(40)
    for _ in range(50):
        n, m = rng.randint(41, 80), rng.randint(41, 80)
        a, b = _samples(rng, n, 0.0), _samples(rng, m, rng.choice((0.0, 0.05, 0.2)))
        want = scipy_stats.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic",
                                        use_continuity=False).pvalue
        assert rank_p(a, b) == pytest.approx(want, rel=1e-9, abs=1e-15), (a, b)
