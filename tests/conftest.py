"""Shared helpers: run the real engine and the real CLI, never mocks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))


def engine_bin() -> Path:
    env = os.environ.get("FABSCOPE_ENGINE")
    if env:
        return Path(env)
    for cand in (Path(sys.prefix) / "bin" / "fabscope-engine", REPO / "build" / "engine" / "fabscope-engine"):
        if cand.exists():
            return cand
    pytest.fail("fabscope-engine is not built: run `make setup`")


def fabscope(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it (a subprocess), so exit codes and stderr are the real ones."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO / "python"), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "fabscope", *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


@pytest.fixture(scope="session")
def engine() -> Path:
    return engine_bin()
