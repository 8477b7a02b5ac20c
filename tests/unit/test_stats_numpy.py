# SPDX-License-Identifier: BSD-3-Clause
"""The engine's statistics against numpy on the same samples (exact order statistics)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from conftest import REPO, engine_bin


def summarize(samples: np.ndarray) -> dict[str, float | None]:
    tool = engine_bin().parent / "fs-stats-tool"
    if not tool.exists():
        tool = REPO / "build" / "engine" / "fs-stats-tool"
    text = "\n".join(repr(float(x)) for x in samples)
    out = subprocess.run([str(tool)], input=text, capture_output=True, text=True, check=True, timeout=30)
    result: dict[str, float | None] = json.loads(out.stdout)
    return result


@pytest.mark.parametrize(
    "samples",
    [
        np.random.default_rng(1).lognormal(1.0, 0.3, 10_000),
        np.random.default_rng(2).exponential(5.0, 999),
        np.random.default_rng(3).integers(1, 5, 1000).astype(float),  # many ties
        np.array([3.25]),  # n = 1
        np.array([2.0, 2.0]),
        np.random.default_rng(4).normal(100, 1, 7),
    ],
    ids=["lognormal-10k", "exponential-999", "ties", "n1", "n2-equal", "n7"],
)
def test_summary_matches_numpy(samples: np.ndarray) -> None:
    got = summarize(samples)
    assert got["n"] == len(samples)
    assert got["min"] == pytest.approx(samples.min(), rel=1e-12)
    assert got["max"] == pytest.approx(samples.max(), rel=1e-12)
    assert got["mean"] == pytest.approx(samples.mean(), rel=1e-12)
    for key, q in (("p50", 50), ("p99", 99), ("p999", 99.9)):
        assert got[key] == pytest.approx(np.percentile(samples, q), rel=1e-12), key
    if len(samples) == 1:
        assert got["stdev"] is None  # no spread from one sample, and we say so
    else:
        assert got["stdev"] == pytest.approx(samples.std(ddof=1), rel=1e-9, abs=1e-12)
    med = np.median(samples)
    mad = np.median(np.abs(samples - med))
    assert got["mad"] == pytest.approx(mad, rel=1e-12, abs=1e-15)
    if mad > 0:
        expected = int(np.sum(0.6745 * np.abs(samples - med) / mad > 3.5))
    else:
        expected = int(np.sum(np.abs(samples - med) > 0.01 * abs(med)))
    assert got["outliers"] == expected


def test_outliers_are_found_in_a_tail() -> None:
    rng = np.random.default_rng(7)
    samples = np.concatenate([rng.normal(10, 0.1, 1000), [50.0, 60.0, 70.0]])
    assert summarize(samples)["outliers"] >= 3
