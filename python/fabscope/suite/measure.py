# SPDX-License-Identifier: BSD-3-Clause
"""What every row of a suite measures (loopback and between two hosts), and so the sizes of its
comparison table: one owner, light to import."""
from __future__ import annotations

from dataclasses import dataclass

LAT_SMALL, LAT_MID = 8, 4096  # bytes: the latency rows' sizes
BW_MID, BW_LARGE = 65536, 1 << 20  # bytes: the bandwidth rows' sizes
LAT_SIZES = "8,4K"
BW_SIZES = "64K,1M"


@dataclass(frozen=True)
class Measure:
    """The same sizes, counts and warmup for every transport. quick (tests, emulated links): fewer
    messages, above all at 1 MiB, where a Soft-RoCE link under TCG moves ~10 MB/s and a bandwidth
    row of 100 + 50 messages took 20-120 s."""

    quick: bool = False

    def row_options(self, backend: str, op: str, pattern: str, sizes: str | None = None) -> list[tuple[str, str]]:
        lat = pattern == "lat"
        if lat:
            iters, warmup = ("200", "50") if self.quick else ("5000", "50")
        else:
            iters, warmup = ("30", "10") if self.quick else ("1000", "50")
        return [("backend", backend), ("op", op), ("pattern", pattern), ("sizes", sizes or (LAT_SIZES if lat else BW_SIZES)),
                ("iters", iters), ("warmup", warmup)]


DEFAULT = Measure()
