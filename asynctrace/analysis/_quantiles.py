"""The median and the nearest-rank percentile every figure is reported with (a leaf: it imports
nothing, so the live summary and ``asynctrace report`` pay nothing for it; ``statistics`` would
bring ``random`` and ``fractions`` along, ~3 ms on every command)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, SupportsInt

__all__ = ["median", "nearest_rank"]


class _Sorted(Protocol):
    """Sorted values: a list, or a numpy array (not imported here)."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int, /) -> SupportsInt: ...


def median(values: Iterable[float]) -> float:
    """``statistics.median`` of non-empty ``values``, same arithmetic and type: the middle
    value, or the mean of the two middle ones (never rounded to an observed value)."""
    data = sorted(values)
    n = len(data)
    if n % 2 == 1:
        return data[n // 2]
    return (data[n // 2 - 1] + data[n // 2]) / 2


def nearest_rank(sorted_values: _Sorted, p: int) -> int:
    """The value at 1-based rank ``ceil(p/100 · n)`` of non-empty sorted values (integer
    arithmetic, no float rounding): always an observed value."""
    n = len(sorted_values)
    return int(sorted_values[max(-(-p * n // 100), 1) - 1])
