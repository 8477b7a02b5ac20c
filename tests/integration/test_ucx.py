# SPDX-License-Identifier: BSD-3-Clause
"""UCX backend over loopback: tcp, sm and posix; the selected lanes; name checking; no peer."""

from __future__ import annotations

import pytest
from engine_pair import backend_available, check_bandwidth, check_latency, run_client_alone, run_pair

pytestmark = pytest.mark.skipif(not backend_available("ucx"), reason="engine built without UCX")

SHM_TLS = {"posix", "sysv", "cma", "knem", "xpmem", "self"}


def _local(rec: dict) -> dict:
    return rec["transport"]["local"]


@pytest.mark.parametrize("pattern", ["lat", "bw"])
@pytest.mark.parametrize(
    ("tls", "extra", "expect"),
    [
        ("tcp", ["--device", "lo"], {"tcp"}),
        ("sm,self", [], SHM_TLS),
        ("posix,self", [], {"posix", "self"}),
    ],
)
def test_ucx_transport(tls: str, extra: list[str], expect: set[str], pattern: str) -> None:
    iters = "300" if pattern == "lat" else "200"
    res = run_pair(
        [
            "--backend",
            "ucx",
            "--ucx-tls",
            tls,
            "--op",
            "tag",
            "--pattern",
            pattern,
            "--sizes",
            "8,64K",
            "--iters",
            iters,
            "--warmup",
            "20",
            *extra,
        ]
    )
    assert res.rc == 0, res.stderr + res.server_stderr
    assert [r["size"] for r in res.records] == [8, 65536]
    for rec in res.records:
        (check_latency if pattern == "lat" else check_bandwidth)(rec)
        local = _local(rec)
        assert local["requested"]["UCX_TLS"] == tls
        assert local["lanes"], local
        assert set(local["transports"]) <= expect, local["transports"]
        if tls == "tcp":
            assert local["devices"] == ["lo"], local["devices"]
        else:
            assert local["devices"] == ["memory"], local["devices"]
    # 8 bytes go eager, 64 KiB rendezvous (UCX's thresholds for these transports).
    assert _local(res.records[0])["protocol"].startswith("egr")
    assert _local(res.records[1])["protocol"] == "rndv"


@pytest.mark.parametrize("op", ["am", "write", "read", "fadd", "cswap"])
def test_ucx_ops_shared_memory(op: str) -> None:
    res = run_pair(
        [
            "--backend",
            "ucx",
            "--ucx-tls",
            "sm,self",
            "--op",
            op,
            "--pattern",
            "lat",
            "--sizes",
            "8",
            "--iters",
            "200",
            "--warmup",
            "20",
        ]
    )
    assert res.rc == 0, res.stderr + res.server_stderr
    check_latency(res.records[0])
    assert _local(res.records[0])["lanes"]


@pytest.mark.parametrize("poll", ["busy", "block"])
def test_ucx_am_bibw_large_messages_are_timed(poll: str) -> None:
    """1 MiB active messages go rendezvous; each side must see them arrive one by one. In block
    mode the backend once drained the worker until it was idle, so a whole phase was one receive
    event and no bandwidth could be timed."""
    res = run_pair(["--backend", "ucx", "--ucx-tls", "sm,self", "--op", "am", "--pattern", "bibw", "--poll", poll,
                    "--sizes", "64K,1M", "--iters", "200", "--warmup", "20"])
    assert res.rc == 0, res.stderr + res.server_stderr
    for rec in res.records:
        check_bandwidth(rec)
        assert rec["warnings"] == [], rec["warnings"]
        assert rec["transport"]["poll"] == poll


def test_ucx_unknown_device_is_usage_error() -> None:
    res = run_client_alone(["--backend", "ucx", "--device", "eth9", "--sizes", "8", "--iters", "10"])
    assert res.rc == 2
    assert "eth9" in res.stderr and "lo" in res.stderr, res.stderr


def test_ucx_unknown_transport_is_usage_error() -> None:
    res = run_client_alone(["--backend", "ucx", "--ucx-tls", "rdma_magic", "--sizes", "8", "--iters", "10"])
    assert res.rc == 2
    assert "rdma_magic" in res.stderr and "tcp" in res.stderr, res.stderr


def test_ucx_transport_set_without_am_lane_is_unsupported() -> None:
    res = run_pair(["--backend", "ucx", "--ucx-tls", "cma,self", "--sizes", "8", "--iters", "10"])
    assert res.rc == 6, res.stderr
    assert "cma" in res.stderr


def test_ucx_missing_peer() -> None:
    res = run_client_alone(["--backend", "ucx", "--timeout", "3", "--sizes", "8"])
    assert res.rc == 3, res.stderr
    assert res.elapsed_s < 10
    assert "127.0.0.1" in res.stderr
