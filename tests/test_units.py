"""The one duration formatter: the unit is the largest that keeps the printed value ≥ 1."""

from __future__ import annotations

import pytest

from asynctrace.records.units import format_column, format_ns


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (None, "-"),
        (0, "0 ns"),
        (12, "12 ns"),
        (999.4, "999 ns"),
        (999.6, "1.00 µs"),  # the unit is chosen on the rounded text
        (4_430_000, "4.43 ms"),
        (250_000, "250 µs"),
        (99_960, "100 µs"),
        (999_600_000, "1.00 s"),
        (1_200_000_000, "1.20 s"),
        (-58_000_000, "-58.0 ms"),
        (5e12, "5000 s"),
    ],
)
def test_format_ns(ns: float | None, text: str) -> None:
    assert format_ns(ns) == text


def test_format_column() -> None:
    assert format_column(5_579_000) == "5.579"
    assert format_column(1_234_500, "µs") == "1234.500"
    assert format_column(None, missing="—") == "—"
