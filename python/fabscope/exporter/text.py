# SPDX-License-Identifier: BSD-3-Clause
"""The Prometheus text exposition (format 0.0.4), written straight from the collector's series.

prometheus_client's ``generate_latest`` re-validates and re-escapes every label of every sample at
every scrape; for 64 ports (~3,500 samples) that was twice the rest of the scrape together
(bench/exporter_scrape.py). Here a series' ``name{labels} `` prefix is formatted once and kept
(:func:`series`), a family's HELP/TYPE lines too (:func:`_header`), and a scrape only formats the
values. The bytes are the ones ``generate_latest`` writes for the same families: labels sorted by
name, label values and help texts escaped the same way, values in its Go-style float format
(prometheus_client's own ``floatToGoString``), a counter family named ``NAME_total``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from prometheus_client.utils import floatToGoString

__all__ = ["CONTENT_TYPE", "Exposition", "series", "value_text"]

#: What the text format is served as (prometheus_client's CONTENT_TYPE_PLAIN_0_0_4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Series prefixes kept at most (64 ports x ~55 series is ~3,500).
_MAX_SERIES = 1 << 17



_go_float: Callable[[float], str] = floatToGoString
_EXACT = 1 << 53  # integers below convert to float exactly


def value_text(v: float) -> str:
    """A sample's value as prometheus_client writes it (``floatToGoString``: ``12.0``, ``1.5e+06``).
    A count is formatted from its digits, the same text without the float round trip (a third of
    the time; tests/unit/test_exporter.py compares the two)."""
    if type(v) is not int or not 0 <= v < _EXACT:
        return _go_float(v)
    digits = str(v)
    if len(digits) <= 6:
        return f"{digits}.0"
    # Go switches to an exponent from 10^6 on: 1234567 -> 1.234567e+06, 5000000 -> 5e+06
    return f"{f'{digits[0]}.{digits[1:]}'.rstrip('0').rstrip('.')}e+{len(digits) - 1:02d}"


def _label_value(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


@lru_cache(maxsize=_MAX_SERIES)
def series(sample: str, names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """``'name{a="x",b="y"} '``: the start of a sample line, labels sorted by name."""
    if not names:
        return f"{sample} "
    pairs = sorted(zip(names, values, strict=True))
    return sample + "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs) + "} "


@lru_cache(maxsize=4096)
def _header(name: str, kind: str, help_text: str) -> str:
    shown = f"{name}_total" if kind == "counter" else name
    escaped = help_text.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {shown} {escaped}\n# TYPE {shown} {kind}\n"


class Exposition:
    """The families of one scrape in the order they were first asked for, each a list of sample
    lines. ``lines(name, kind, help)`` gives a family's list to append ``prefix + value + "\\n"``
    to; ``help`` may be a function, called only when the family is created."""

    def __init__(self) -> None:
        self._headers: dict[str, str] = {}
        #: name -> the family's sample lines, for loops that look a family up per sample (a
        #: family not there yet, or still empty, goes through lines())
        self.families: dict[str, list[str]] = {}

    def lines(self, name: str, kind: str, help_text: str | Callable[[], str]) -> list[str]:
        fam = self.families.get(name)
        if fam is None:
            text = help_text() if callable(help_text) else help_text
            self._headers[name] = _header(name, kind, text)
            fam = self.families[name] = []
        return fam

    def add(self, name: str, kind: str, help_text: str, labels: dict[str, str], value: float) -> None:
        """One sample of a family (labels as a mapping): for the few series that are not per port."""
        sample = f"{name}_total" if kind == "counter" else name
        self.lines(name, kind, help_text).append(
            series(sample, tuple(labels), tuple(labels.values())) + value_text(value) + "\n")

    def text(self) -> bytes:
        parts: list[str] = []
        for name, lines in self.families.items():
            parts.append(self._headers[name])
            parts += lines
        return "".join(parts).encode()
