"""Durations as people read them: one formatter for every view, message and table.

:func:`format_ns` writes a duration in the largest unit that keeps it at least 1 (ns, µs, ms,
s), with three significant digits (``12 ns``, ``4.43 ms``, ``250 µs``, ``1.20 s``); the unit is
chosen on the rounded text, so 999.6 µs is ``1.00 ms``, never ``1000 µs``. :func:`format_column`
writes a fixed-unit table column (every row in one unit, three decimals, no unit text: the
column's head names it). Both are formatting, not figures: a view may call them.
"""

from __future__ import annotations

__all__ = ["UNITS", "format_column", "format_ns"]

#: each unit and its length in ns, smallest first
UNITS = (("ns", 1.0), ("µs", 1e3), ("ms", 1e6), ("s", 1e9))
_SCALE = dict(UNITS)


def _three_digits(v: float) -> str:
    """``v`` (≥ 1 in magnitude, or 0) to three significant digits, never in exponent form."""
    a = abs(v)
    if a >= 99.95:
        return f"{v:.0f}"
    if a >= 9.995:
        return f"{v:.1f}"
    return f"{v:.2f}"


def format_ns(ns: float | None) -> str:
    """A duration in the largest unit that keeps it ≥ 1 as printed, three significant digits
    (``-`` for None); whole nanoseconds below 1 µs."""
    if ns is None:
        return "-"
    if not abs(ns) >= 999.5:  # NaN too stays in ns
        return f"{ns:.0f} ns"
    text, unit = "", "ns"
    for name, scale in UNITS[1:]:
        text, unit = _three_digits(ns / scale), name
        if abs(float(text)) < 1000:
            break
    return f"{text} {unit}"


def format_column(ns: float | None, unit: str = "ms", *, missing: str = "-") -> str:
    """A duration in one fixed ``unit`` (a table's column), three decimals, no unit text;
    ``missing`` for None."""
    if ns is None:
        return missing
    return f"{ns / _SCALE[unit]:.3f}"
