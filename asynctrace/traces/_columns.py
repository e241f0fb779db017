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

    from asynctrace.traces.model import I64, RuntimeCalls

__all__ = ["blocking_copies", "clamp_durations", "distinct"]


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


def blocking_copies(
    runtime: RuntimeCalls, act_pid: I64, act_corr: I64, pageable: npt.NDArray[np.bool_]
) -> RuntimeCalls:
    """``runtime`` with each queued copy (``MEMCPY``) whose device copy is to or from pageable
    memory (``pageable``, per activity) made a ``BLOCKING_MEMCPY``: the driver stages a pageable
    copy through a bounce buffer and the call returns only when the copy has ended, ``Async`` or
    not, so the host is held as by ``cudaMemcpy``.

    The copy is joined to its call by correlation id, within the process where the activities
    carry one (Kineto writes the device there: then by correlation id alone)."""
    import msgspec
    import numpy as np

    from asynctrace.traces.model import RuntimeKind

    if not len(runtime) or not bool(pageable.any()):
        return runtime
    p_corr, p_pid = act_corr[pageable], act_pid[pageable]
    queued = (runtime.kind == int(RuntimeKind.MEMCPY)) & (runtime.correlation >= 0)
    by_process = bool(np.isin(p_pid, runtime.pid).all())
    if by_process:
        # (pid, correlation) pairs factorised into one int64 key without overflow
        _p, p_inv = np.unique(np.concatenate([runtime.pid, p_pid]), return_inverse=True)
        c, c_inv = np.unique(np.concatenate([runtime.correlation, p_corr]), return_inverse=True)
        key = p_inv.reshape(-1).astype(np.int64) * len(c) + c_inv.reshape(-1)
        n = len(runtime)
        hit = queued & np.isin(key[:n], key[n:])
    else:
        hit = queued & np.isin(runtime.correlation, p_corr)
    if not bool(hit.any()):
        return runtime
    kind = runtime.kind.copy()
    kind[hit] = int(RuntimeKind.BLOCKING_MEMCPY)
    return msgspec.structs.replace(runtime, kind=kind)
