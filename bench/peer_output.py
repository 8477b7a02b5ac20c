# SPDX-License-Identifier: BSD-3-Clause
"""What the peer tools print, read into figures: one module that the host benches and the guest half
of the Soft-RoCE middleware bench (tests/softroce/middleware_bench.py, which decides from the peer's
figures whether a chain needs more repeats) both import. Nothing here but the standard library.

Checked against ucx_perftest 1.13.1, fi_pingpong of libfabric 1.17, bench/osu_pingpong.c and rstream
of rdma-core 44."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

MIB = 1048576 / 1e6  # ucx_perftest "MB/s" are MiB/s (perftest_run.c divides by 1024*1024)


class BenchError(Exception):
    """A measurement that produced no figure; the message says what was run and what it printed."""


def tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# A moment average (the last report interval's) is "inf" when that interval holds no iteration: the
# run ended right on a report (seen at 20,000 messages: "Final: 20000 361.500 inf 575.822 0.00 ...").
_UCX_NUM = r"\s+([0-9.]+|inf|-?nan)"
_UCX_FINAL = re.compile(r"^Final:\s+(\d+)" + _UCX_NUM * 7 + r"\s*$", re.M)


def parse_ucx_perftest(text: str, kind: str) -> dict[str, float]:
    """The 'Final:' row: iterations, latency p50 / average / overall (us, half round trip for
    *_lat), bandwidth average / overall (MiB/s), message rate average / overall."""
    m = _UCX_FINAL.search(text)
    if not m:
        raise BenchError("no 'Final:' row in ucx_perftest output:\n" + tail(text, 12))
    g = [float(x) for x in m.groups()]
    # Only whole-run figures are read: typical (the lower median of the last 2,048 iterations, the
    # whole run at the benches' 1,000) and overall; never a last interval's moment average.
    out = ({"lat_p50_us": g[1], "lat_mean_us": g[3], "samples": g[0]} if kind == "lat"
           else {"bw_MBps": g[5] * MIB, "msgs": g[0]})
    if not all(math.isfinite(v) and v > 0 for v in out.values()):
        raise BenchError("ucx_perftest's 'Final:' row has no usable figure (a run of no iterations, or an output "
                         "this parser does not know: see bench/peer_output.py):\n" + tail(text, 4))
    return out


_FI_ROW = re.compile(r"^(\S+)\s+(\S+)\s+([=+-]\S+)\s+(\S+)\s+([0-9.]+)s\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$", re.M)


def parse_fi_pingpong(text: str) -> dict[str, float]:
    """bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec; usec/xfer = elapsed / iterations
    / 2, i.e. the MEAN half round trip over the whole loop (no warmup)."""
    rows = _FI_ROW.findall(text)
    if not rows:
        raise BenchError("no result row in fi_pingpong output:\n" + tail(text, 12))
    row = rows[-1]
    if not row[2].startswith("="):
        raise BenchError(f"fi_pingpong: sent {row[1]} but acked {row[2]}")
    return {"lat_mean_us": float(row[6]), "seconds": float(row[4])}


def parse_osu(text: str) -> dict[str, float]:
    for line in text.splitlines():
        if line.startswith("osu_pingpong "):
            kv = dict(p.split("=", 1) for p in line.split()[2:] if "=" in p)
            try:
                if line.split()[1] == "lat":
                    return {
                        "lat_p50_us": float(kv["p50_us"]),
                        "lat_mean_us": float(kv["mean_us"]),
                        "lat_min_us": float(kv["min_us"]),
                        "samples": float(kv["iters"]),
                    }
                return {"bw_MBps": float(kv["MBps"])}
            except (KeyError, ValueError):
                break
    raise BenchError("no 'osu_pingpong' result line in:\n" + tail(text, 12))


_RSTREAM_ROW = re.compile(r"^custom\s+\S+\s+\S+\s+\S+\s+\S+\s+([0-9.]+)s\s+([0-9.]+)\s+([0-9.]+)\s*$", re.M)


def parse_rstream(text: str, moved: int = 0) -> dict[str, float]:
    """rstream's custom row: name bytes xfers iters total time Gb/sec usec/xfer. usec/xfer is the
    whole loop's time / iterations / transfers / 2 (the MEAN half round trip when -C 1). The bytes
    of both directions (-C N one way, then N back: `moved` = 2 x N x size) over the whole time give
    the bandwidth: rstream's own Gb/sec has two decimals, steps of 12.5 MB/s / 10 % here, while its
    time (two decimals of seconds) is 0.2 % of a 3 s run."""
    m = _RSTREAM_ROW.search(text)
    if not m:
        raise BenchError("no result row in rstream output:\n" + tail(text, 12))
    secs = float(m.group(1))
    out = {"lat_mean_us": float(m.group(3)), "seconds": secs}
    if moved and secs > 0:
        out["bw_MBps"] = moved / secs / 1e6
    return out


PARSERS: dict[str, Callable[..., dict[str, float]]] = {
    "ucx_perftest": parse_ucx_perftest,
    "fi_pingpong": parse_fi_pingpong,
    "osu_pingpong": parse_osu,
    "rstream": parse_rstream,
}


def peer_figure(spec: dict[str, Any], rc: int | None, text: str) -> float | None:
    """One peer run's compared figure by `spec` ({"parser": a key of PARSERS, "kwargs": {...},
    "metric": "lat_p50_us" ...}), None when the run failed or printed no such figure."""
    if rc != 0:
        return None
    try:
        v = PARSERS[spec["parser"]](text, **spec.get("kwargs", {})).get(spec["metric"])
    except BenchError:
        return None
    return float(v) if v else None
