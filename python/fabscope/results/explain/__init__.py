# SPDX-License-Identifier: BSD-3-Clause
"""Why the number is what it is: the one decision over the facts a record carries (issue 20).

The engine gathers facts around the measured phase (the transport's own report: TCP MSS, path MTU,
netdev MTU and the segments retransmitted during the phase, TCP_INFO; the counter snapshot before
and after; the host section). This package decides, once, from a parsed record, and
``parse_record`` attaches the result (``Result.explanation``; ``Result.to_json`` writes it out) the way it
attaches the path verdict; every output renders that object and nobody re-derives a cause.

Each cause is ``seen`` (with the facts that show it, what it plausibly cost, and the fix),
``clear`` (checked: not there), or ``unchecked`` (and why not). Never silence: a cause this
module cannot check on a record still appears, saying why. A cause that fires on a clean run is a
bug (tests/integration/test_explain_runs.py plants each and proves silence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..counters import Counters
from ..delay import DelayReference
from .ceiling import _expected, with_bandwidth_reference, with_reference
from .host import _buffers, _cpu, _placement, where_engines_ran
from .model import CAUSES, STATES, BandwidthReference, Cause, Explanation, LatencyReference
from .packets import (
    RDMA_CONGESTION_COUNTERS,
    RDMA_LOSS_COUNTERS,
    RDMA_STRAY_RETRIES,
    RETRANS_SHARE,
    _link,
    _mtu,
    _retransmission,
    _segmentation,
)
from .path import _delay, _route, with_delay_reference

# The package's face: the explanation's types, the decision and the references (every output and
# the history read these), and the thresholds and counter names other parts of fabscope judge by.
__all__ = ["CAUSES", "RDMA_CONGESTION_COUNTERS", "RDMA_LOSS_COUNTERS", "RDMA_STRAY_RETRIES", "RETRANS_SHARE",
           "STATES", "BandwidthReference", "Cause", "DelayReference", "Explanation", "LatencyReference", "explain",
           "where_engines_ran", "with_bandwidth_reference", "with_delay_reference", "with_reference"]


def explain(rec: Mapping[str, Any], counters: Counters | None = None) -> Explanation:
    """The explanation of one ``fabscope.result`` record (with its ``path`` already attached);
    ``counters``: the record's, when the caller has parsed them already (``parse_record`` has)."""
    counters = Counters.of_record(rec) if counters is None else counters
    expected, basis, frac = _expected(rec)
    causes = (_segmentation(rec), _retransmission(rec, counters), _mtu(rec), _placement(rec), _cpu(rec),
              _buffers(rec), _link(rec, counters), _delay(rec), _route(rec))
    return Explanation(expected_gbps=expected, expected_basis=basis, achieved_fraction=frac, causes=causes)
