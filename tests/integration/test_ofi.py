"""libfabric backend over loopback: tcp (rdm and msg), shm, udp; what a provider cannot do."""

from __future__ import annotations

import pytest
from engine_pair import backend_available, check_bandwidth, check_latency, run_client_alone, run_pair

pytestmark = pytest.mark.skipif(not backend_available("ofi"), reason="engine built without libfabric")


@pytest.mark.parametrize("pattern", ["lat", "bw"])
@pytest.mark.parametrize(
    ("provider", "ep", "expect_provider"),
    [("tcp", "rdm", "tcp;ofi_rxm"), ("tcp", "msg", "tcp"), ("shm", "rdm", "shm"), ("udp", "rdm", "udp;ofi_rxd")],
)
def test_ofi_send(provider: str, ep: str, expect_provider: str, pattern: str) -> None:
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
        ]
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


def test_ofi_missing_peer() -> None:
    res = run_client_alone(["--backend", "ofi", "--provider", "tcp", "--timeout", "3", "--sizes", "8"])
    assert res.rc == 3, res.stderr
    assert res.elapsed_s < 10
