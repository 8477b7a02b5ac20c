# SPDX-License-Identifier: BSD-3-Clause
"""The shared argparse type= helpers: what each accepts, and that each refusal is an argparse
message naming the argument, the value and what is allowed."""

from __future__ import annotations

import argparse
import ipaddress
import os
from pathlib import Path

import pytest

from fabscope import argtypes
from fabscope.errors import FabscopeError


def parse_error(helper: argparse._ActionType, value: str, capsys: pytest.CaptureFixture[str]) -> str:
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--opt", type=helper)
    with pytest.raises(SystemExit) as exc:
        p.parse_args([f"--opt={value}"])
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e400", "0x10", "", "abc", "1,5", "\udcff"])
def test_finite_float_refuses_what_is_not_a_finite_number(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = parse_error(argtypes.finite_float(0.1, 3600, unit=" s"), value, capsys)
    assert "argument --opt" in err and "not a finite number" in err and "0.1 s to 3600 s" in err


def test_finite_float_range_and_forms() -> None:
    f = argtypes.finite_float(0.1, 3600)
    assert f("2.5") == 2.5 and f("1e3") == 1000.0 and f(" 7 ") == 7.0
    for bad in ("0.05", "3601", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"out of range; allowed 0\.1 to 3600"):
            f(bad)


def test_int_range_and_port() -> None:
    f = argtypes.int_range(1, 10)
    assert f("10") == 10 and f("+3") == 3
    for bad in ("1e3", "1.0", "0x1", "", "11", "0", "9" * 5000):
        with pytest.raises(argparse.ArgumentTypeError):
            f(bad)
    assert argtypes.port()("65535") == 65535
    with pytest.raises(argparse.ArgumentTypeError, match="70000 is out of range; allowed 1 to 65535"):
        argtypes.port()("70000")
    assert argtypes.port(allow_zero=True)("0") == 0


def test_byte_size_follows_the_engine_grammar() -> None:
    f = argtypes.byte_size(0, 1 << 40)
    assert [f(v) for v in ("8", "4K", "4k", "4KiB", "4KB", "8M", "2G")] == [8, 4096, 4096, 4096, 4096, 8 << 20, 2 << 30]
    for bad in ("", "-1", "1.5K", "4T", "K", "4 K"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
            f(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="out of range"):
        argtypes.byte_size(1, 1024)("2K")


def test_cidr_list() -> None:
    nets = argtypes.cidr_list("10.0.0.0/8, 192.168.1.7,fd00::/64")
    assert nets == [ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("192.168.1.7/32"),
                    ipaddress.ip_network("fd00::/64")]
    with pytest.raises(argparse.ArgumentTypeError, match=r"did you mean 10\.0\.0\.0/8"):
        argtypes.cidr_list("10.0.0.1/8")
    for bad in ("", "10.0.0.0/8,", "10.0.0.0/33", "eth0"):
        with pytest.raises(argparse.ArgumentTypeError):
            argtypes.cidr_list(bad)


def test_hosts_and_host_port() -> None:
    assert argtypes.host_list("fs-a,fs-b,10.0.0.1,::1") == ["fs-a", "fs-b", "10.0.0.1", "::1"]
    for bad in ("fs-a,,fs-b", "fs-a,fs-a", "-bad", "a_b", "\udcff", "x" * 300, ""):
        with pytest.raises(argparse.ArgumentTypeError):
            argtypes.host_list(bad)
    hp = argtypes.host_port(18515)
    assert hp("node1:4000") == "node1:4000" and hp("[fe80::1]:9") == "[fe80::1]:9" and hp("node1") == "node1"
    for bad in ("node1:0", "node1:99999", "node1:x", "bad host", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            hp(bad)


def test_files_and_directories(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text("k")
    assert argtypes.existing_file(str(f)) == f
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        argtypes.existing_file(str(tmp_path / "nope"))
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        argtypes.existing_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError):
        argtypes.existing_file("n" * 5000)
    assert argtypes.existing_dir(str(tmp_path)) == tmp_path
    assert argtypes.output_dir(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # checked, not created
    with pytest.raises(argparse.ArgumentTypeError, match="not a directory"):
        argtypes.output_dir(str(f / "below-a-file"))
    with pytest.raises(argparse.ArgumentTypeError, match="longer than"):
        argtypes.output_dir(str(tmp_path / ("n" * 300)))


def test_key_value_and_text() -> None:
    assert argtypes.key_value("UCX_NET_DEVICES=mlx5_0:1") == ("UCX_NET_DEVICES", "mlx5_0:1")
    assert argtypes.key_value("btl_tcp_if_include=") == ("btl_tcp_if_include", "")
    for bad in ("novalue", "=x", "1ABC=x", "A B=x"):
        with pytest.raises(argparse.ArgumentTypeError, match="KEY=VALUE"):
            argtypes.key_value(bad)
    t = argtypes.text(8)
    assert t("label") == "label"
    for bad in ("", "123456789", "a\nb"):
        with pytest.raises(argparse.ArgumentTypeError):
            t(bad)


def test_shown_is_printable_and_bounded() -> None:
    weird = os.fsdecode(b"\xff\x01") + "x" * 500
    text = argtypes.shown(weird)
    text.encode("utf-8")  # no lone surrogate left: prints on any UTF-8 stream
    assert "\\udcff" in text and "\\x01" in text and "(502 characters)" in text and len(text) < 120


def test_check_outside_argparse_names_the_flag() -> None:
    assert argtypes.check(argtypes.port(), "--port", "80") == 80
    with pytest.raises(FabscopeError) as exc:
        argtypes.check(argtypes.port(), "--port", "80000")
    assert exc.value.exit_code == 2 and exc.value.message.startswith("argument --port: 80000")


def test_unrecognized_arguments_are_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    p = argtypes.ArgumentParser(prog="t")
    with pytest.raises(SystemExit):
        p.parse_args(["", "\udcff"])
    assert "unrecognized arguments: '' '\\udcff'" in capsys.readouterr().err
