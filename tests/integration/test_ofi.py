# SPDX-License-Identifier: BSD-3-Clause
"""libfabric backend over loopback: tcp (rdm and msg), shm, udp; what a provider cannot do."""

from __future__ import annotations

import pytest
from engine_pair import backend_available, check_bandwidth, check_latency, run_client_alone, run_pair

pytestmark = pytest.mark.skipif(not backend_available("ofi"), reason="engine built without libfabric")


@pytest.mark.parametrize("pattern", ["lat", "bw"])
@pytest.mark.parametrize(
    ("provider", "ep", "expect_provider"),
    [
        ("tcp", "rdm", "tcp;ofi_rxm"),
        ("tcp", "msg", "tcp"),
        ("shm", "rdm", "shm"),
        ("udp", "rdm", "udp;ofi_rxd"),
        ("sockets", "rdm", "sockets"),
    ],
)
def test_ofi_send(provider: str, ep: str, expect_provider: str, pattern: str) -> None:
    # sockets: its progress thread sleeps 10 ms per transfer unless told not to (the record notes it)
    env = {"FI_SOCKETS_PE_WAITTIME": "0"} if provider == "sockets" else None
    res = run_pair(
        [
            "--backend",
            "ofi",
            "--provider",
            provider,
            "--ofi-ep",
            ep,
            "--op",
            "send",
            "--pattern",
            pattern,
            "--sizes",
            "8,16K",
            "--iters",
            "200",
            "--warmup",
            "20",
        ],
        env=env,
    )
    assert res.rc == 0, res.stderr + res.server_stderr
    assert len(res.records) == 2
    for rec in res.records:
        (check_latency if pattern == "lat" else check_bandwidth)(rec)
        local = rec["transport"]["local"]
        assert local["provider"] == expect_provider
        assert local["endpoint"] == ep
        assert local["fabric"] and local["domain"] and local["provider_version"]
        if provider != "shm":
            assert local["domain"] == "lo"


@pytest.mark.parametrize(("provider", "op"), [("shm", "write"), ("shm", "read"), ("tcp", "write"), ("shm", "fadd")])
def test_ofi_one_sided(provider: str, op: str) -> None:
    res = run_pair(
        [
            "--backend",
            "ofi",
            "--provider",
            provider,
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


def test_ofi_udp_has_no_msg_endpoint() -> None:
    res = run_pair(["--backend", "ofi", "--provider", "udp", "--ofi-ep", "msg", "--sizes", "8", "--iters", "10"])
    assert res.rc == 6
    assert "unsupported by provider udp" in res.stderr


def test_ofi_udp_atomics_refused() -> None:
    res = run_pair(["--backend", "ofi", "--provider", "udp", "--op", "fadd", "--sizes", "8", "--iters", "10"])
    assert res.rc == 6
    assert "unsupported by provider udp;ofi_rxd" in res.stderr


def test_ofi_unknown_provider_is_usage_error() -> None:
    res = run_client_alone(["--backend", "ofi", "--provider", "tcpx9", "--sizes", "8", "--iters", "10"])
    assert res.rc == 2
    assert "tcpx9" in res.stderr and "shm" in res.stderr


def test_ofi_unknown_domain_is_usage_error() -> None:
    res = run_client_alone(["--backend", "ofi", "--provider", "tcp", "--device", "eth9", "--sizes", "8", "--iters", "10"])
    assert res.rc == 2
    assert "eth9" in res.stderr and "lo" in res.stderr


def test_ofi_bind_is_used_or_refused() -> None:
    """--bind opens the endpoint on that address (the fix the domain error names); an address this host
    does not have is exit 2 naming it, never an endpoint somewhere else."""
    res = run_client_alone(["--backend", "ofi", "--provider", "tcp", "--bind", "192.0.2.7", "--sizes", "8"])
    assert res.rc == 2 and "--bind '192.0.2.7': no interface on this host has that address" in res.stderr, res.stderr
    ok = run_pair(["--backend", "ofi", "--provider", "tcp", "--bind", "127.0.0.1", "--sizes", "8", "--iters", "50"])
    assert ok.rc == 0, ok.stderr + ok.server_stderr


def test_ofi_missing_peer() -> None:
    res = run_client_alone(["--backend", "ofi", "--provider", "tcp", "--timeout", "3", "--sizes", "8"])
    assert res.rc == 3, res.stderr
    assert res.elapsed_s < 10


def _inject(provider: str, pattern: str, op: str = "send", extra: tuple[str, ...] = ()) -> list[dict]:
    res = run_pair(
        ["--backend", "ofi", "--provider", provider, "--op", op, "--pattern", pattern, "--sizes", "8,16K",
         "--iters", "200", "--warmup", "20", *extra]
    )
    assert res.rc == 0, res.stderr + res.server_stderr
    return res.records


@pytest.mark.parametrize("provider", ["shm", "tcp"])
def test_ofi_inject_auto_in_lat_only(provider: str) -> None:
    """Latency injects up to the provider's inject_size (as fi_pingpong does), bandwidth does not;
    the record says which, and an injected size still completes every ping-pong."""
    for rec in _inject(provider, "lat"):
        check_latency(rec)
        local = rec["transport"]["local"]
        assert local["provider_inject_size"] > 0
        assert local["inject_bytes"] == local["provider_inject_size"]
    for rec in _inject(provider, "bw"):
        check_bandwidth(rec)
        assert rec["transport"]["local"]["inject_bytes"] == 0


def test_ofi_inject_explicit_send_bw() -> None:
    """An explicit --ofi-inject on a send stream: the injected 8-byte size is still timed at the
    receiver, the 16 KiB one (above the limit) goes out with fi_send."""
    recs = _inject("shm", "bw", extra=("--ofi-inject", "64"))
    for rec in recs:
        check_bandwidth(rec)
        assert rec["transport"]["local"]["inject_bytes"] == 64
        assert rec["bandwidth_measured_at"].startswith("receiver")


def test_ofi_inject_beyond_provider_limit_is_usage_error() -> None:
    res = run_pair(["--backend", "ofi", "--provider", "tcp", "--ofi-inject", "100000", "--sizes", "8", "--iters", "10"])
    assert res.rc == 2, res.stderr
    assert "--ofi-inject 100000" in res.stderr and "injects at most" in res.stderr


@pytest.mark.parametrize(("op", "pattern"), [("read", "lat"), ("write", "bw")])
def test_ofi_inject_refused_where_it_cannot_be_timed(op: str, pattern: str) -> None:
    res = run_pair(["--backend", "ofi", "--provider", "shm", "--op", op, "--pattern", pattern, "--ofi-inject", "8",
                    "--sizes", "8", "--iters", "10"])
    assert res.rc == 2, res.stderr
    assert "--ofi-inject 8" in res.stderr


@pytest.mark.parametrize(("provider", "ep"), [("shm", "rdm"), ("tcp", "rdm"), ("tcp", "msg")])
def test_ofi_write_bandwidth_is_delivery_complete(provider: str, ep: str) -> None:
    """One-sided write bandwidth is timed on completions that mean "visible at the target"
    (FI_DELIVERY_COMPLETE), on both ends of a bibw, also on an accepted msg endpoint."""
    res = run_pair(["--backend", "ofi", "--provider", provider, "--ofi-ep", ep, "--op", "write", "--pattern", "bibw",
                    "--sizes", "64K", "--iters", "300", "--warmup", "20"])
    assert res.rc == 0, res.stderr + res.server_stderr
    rec = res.records[0]
    check_bandwidth(rec)
    for side in ("local", "peer"):
        assert rec["transport"][side]["write_completion"].startswith("delivery-complete"), rec["transport"][side]
    assert rec["bandwidth_measured_at"].startswith("initiator")
