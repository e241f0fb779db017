"""Column helpers that both loaders use.

numpy is imported in the functions, as in :mod:`asynctrace.traces.kineto`: the Kineto reader
files a trace without it, so that ``asynctrace report`` can import numpy in a thread meanwhile.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Literal, overload

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from asynctrace.traces.model import I64

__all__ = ["clamp_durations", "distinct"]


def clamp_durations(dur: I64, what: str, skipped: MutableMapping[str, int]) -> I64:
    """``dur`` with every negative duration (a corrupt event) read as 0, so that the event keeps
    its start and no end precedes it; how many were counted in
    ``skipped["<what>_negative_duration_clamped"]``."""
    import numpy as np

    negative = int(np.count_nonzero(dur < 0))
    if not negative:
        return dur
    key = f"{what}_negative_duration_clamped"
    skipped[key] = skipped.get(key, 0) + negative
    out: I64 = np.maximum(dur, 0)
    return out


@overload
def distinct(values: npt.NDArray[Any]) -> npt.NDArray[Any]: ...
@overload
def distinct(
    values: npt.NDArray[Any], *, counts: Literal[True]
) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp]]: ...
def distinct(
    values: npt.NDArray[Any], *, counts: bool = False
) -> npt.NDArray[Any] | tuple[npt.NDArray[Any], npt.NDArray[np.intp]]:
    """Sorted distinct values (and how often each occurs), as ``np.unique`` gives them: by
    sorting, because ``np.unique``'s hash path imports ``numpy.ma`` the first time it runs
    (9 to 20 ms of an ``asynctrace report`` of 0.2 s)."""
    import numpy as np

    v = np.sort(values, kind="stable")
    first = np.ones(len(v), dtype=np.bool_)
    if len(v):
        first[1:] = v[1:] != v[:-1]
    uniq = v[first]
    if not counts:
        return uniq
    starts = np.flatnonzero(first)
    return uniq, np.diff(np.append(starts, len(v)))
