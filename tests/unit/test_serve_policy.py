# SPDX-License-Identifier: BSD-3-Clause
"""serve's limits and the shared key's MACs, on their own (the integration tests drive them through
a real serve; these pin the rules)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from fabscope.errors import FabscopeError
from fabscope.serve.policy import Limits, RateLimiter, Refusal, check_request, parse_config, source_allowed
from fabscope.session import auth

CORE = {"backend": "tcp", "op": "send", "pattern": "lat", "sizes": "8,1K", "iters": "1000", "duration": "0",
        "warmup": "100", "warmup-time": "1", "tx-depth": "64", "poll": "auto"}


def config(**core: str) -> dict[str, object]:
    return {"type": "config", "core": {**CORE, **core}, "backend": {}}


def test_a_config_as_the_engine_writes_it_passes_the_default_limits() -> None:
    req = parse_config(config())
    assert req.sizes == [8, 1024] and req.iters == 1000 and req.seconds == 2.0
    check_request(req, Limits())


@pytest.mark.parametrize("sizes", ["1:4G", "8,4k", "8,,16", "0x10", "8 ", "4KiB", "-1", "1" * 30])
def test_sizes_not_in_the_engines_own_form_are_refused(sizes: str) -> None:
    """The engine would parse some of these (a range, lower case, KiB) to a different, larger value
    than a naive reader: only the exact form fs_opt_format writes is accepted."""
    with pytest.raises(Refusal):
        parse_config(config(sizes=sizes))


@pytest.mark.parametrize(("name", "value"), [("iters", "1e9"), ("iters", "5_000"), ("duration", "nan"),
                                              ("duration", "inf"), ("duration", "0x10"), ("warmup-time", "-1")])
def test_numbers_not_in_the_engines_own_form_are_refused(name: str, value: str) -> None:
    with pytest.raises(Refusal):
        parse_config(config(**{name: value}))


def test_non_string_settings_and_missing_parts_are_refused() -> None:
    with pytest.raises(Refusal):
        parse_config({"type": "config", "core": {"sizes": 8}, "backend": {}})
    with pytest.raises(Refusal):
        parse_config({"type": "config", "core": {}})
    with pytest.raises(Refusal):
        parse_config({"type": "size"})


def test_memory_counts_both_buffers_and_the_samples() -> None:
    req = parse_config(config(sizes="8M", iters="1000"))
    assert req.memory == 2 * (8 << 20) + 8 * 1000
    with pytest.raises(Refusal, match="--max-memory 32M") as info:
        check_request(req, Limits(max_memory=16 << 20))
    assert info.value.exit_code == 2 and info.value.reason == "max-memory"


def test_memory_counts_the_rsocket_buffers_both_ends_use() -> None:
    """--rsocket-sndbuf/--rsocket-rcvbuf are shared: serve's host registers them too."""
    msg = config(sizes="8", iters="1000")
    msg["backend"] = {"rsocket-sndbuf": "512M", "rsocket-rcvbuf": "512M", "rsocket-sqsize": "0"}
    req = parse_config(msg)
    assert req.memory == 2 * 65536 + 8 * 1000 + (1 << 30)
    with pytest.raises(Refusal, match="socket buffers asked for both ends") as info:
        check_request(req, Limits())
    assert info.value.reason == "max-memory"
    msg["backend"] = {"rsocket-sndbuf": "lots"}
    with pytest.raises(Refusal, match="--rsocket-sndbuf 'lots'"):
        parse_config(msg)


def test_rate_limit_is_a_sliding_minute_per_address() -> None:
    rl = RateLimiter(2)
    rl.admit("10.0.0.1", now=0.0)
    rl.admit("10.0.0.1", now=1.0)
    rl.admit("10.0.0.2", now=1.0)  # another client has its own budget
    with pytest.raises(Refusal, match="--max-runs-per-minute 4"):
        rl.admit("10.0.0.1", now=30.0)
    rl.admit("10.0.0.1", now=60.5)  # the first run left the window


def test_allow_matches_ipv4_clients_of_a_dual_stack_listener() -> None:
    nets = [ipaddress.ip_network("10.0.0.0/8")]
    assert source_allowed("::ffff:10.1.2.3", nets)
    assert not source_allowed("127.0.0.1", nets)
    assert not source_allowed("not-an-address", nets)
    assert source_allowed("127.0.0.1", None)


def test_macs_bind_role_service_and_both_nonces(tmp_path: Path) -> None:
    key = auth.load_key(auth.random_key_file(tmp_path / "k"))
    sn, cn = auth.new_nonce(), auth.new_nonce()
    good = auth.mac(key, "client", "engine", sn, cn)
    assert auth.verify(key, "client", "engine", sn, cn, good)
    for role, service, a, b in (("server", "engine", sn, cn), ("client", "doctor", sn, cn),
                                ("client", "engine", auth.new_nonce(), cn), ("client", "engine", sn, auth.new_nonce())):
        assert not auth.verify(key, role, service, a, b, good)
    for junk in (None, 7, "", good.upper(), good[:-1], "é" * 64):
        assert not auth.verify(key, "client", "engine", sn, cn, junk)
    assert key.secret.hex() not in repr(key) and key.key_id in repr(key)


def test_key_file_rules(tmp_path: Path) -> None:
    path = auth.random_key_file(tmp_path / "k")
    text_key = tmp_path / "t"
    text_key.write_text("0123456789abcdef0123\n")
    text_key.chmod(0o600)
    assert auth.load_key(text_key).secret == b"0123456789abcdef0123"  # the newline is not the key
    path.chmod(0o640)
    with pytest.raises(FabscopeError, match="chmod 600"):
        auth.load_key(path)
    with pytest.raises(FabscopeError, match="not a regular file"):
        auth.load_key(tmp_path)
