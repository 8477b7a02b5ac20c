# SPDX-License-Identifier: BSD-3-Clause
"""fabscope.testbed.preflight: the root and PATH rules the netns and Slurm testbeds share, and
the HOST=VALUE argument type of `fabscope testbed netns up`. No root, no network: the uid is
the one thing faked (this suite may run as root or not)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from fabscope import argtypes
from fabscope.testbed import netns, preflight


class _StepError(RuntimeError):
    pass


def test_require_root_passes_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    preflight.require_root(_StepError, "making a bridge needs root", "sudo make-bridge")


def test_require_root_raises_the_callers_error_with_why_uid_and_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1234)
    with pytest.raises(_StepError) as err:
        preflight.require_root(_StepError, "making a bridge needs root", "sudo make-bridge")
    assert str(err.value) == ("making a bridge needs root; this process runs as uid 1234. "
                              "Run it as root, e.g. `sudo make-bridge`")


def test_not_on_path_names_the_missing_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("have-a", "have-b"):
        tool = tmp_path / name
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert preflight.not_on_path(["lack-z", "have-a", "lack-y", "have-b"]) == ["lack-z", "lack-y"]
    assert preflight.not_on_path(["have-a"]) == []


def test_host_value_arg_keeps_good_text_and_explains_bad() -> None:
    seen: list[str] = []

    def check_value(text: str) -> None:
        seen.append(text)
        if text != "ok":
            raise argparse.ArgumentTypeError(f"{argtypes.shown(text)} is not ok")

    parse = netns._host_value_arg("THING", "fs-b=ok", check_value)
    assert parse("fs-a=ok") == "fs-a=ok" and seen == ["ok"]
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'fs-a' is not HOST=THING, e.g. fs-b=ok$"):
        parse("fs-a")
    with pytest.raises(argparse.ArgumentTypeError, match="is not a testbed host name"):
        parse("fs-z=ok")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'bad' is not ok$"):
        parse("fs-a=bad")
