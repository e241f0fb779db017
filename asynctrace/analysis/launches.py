"""Launch linking: which host call put each device activity in the queue, and how long it waited.

Each device activity is joined to the runtime call that launched it by its correlation id within
one process. Launching calls are the runtime kinds ``LAUNCH``, ``MEMCPY``, ``MEMSET``,
``GRAPH_LAUNCH`` and ``BLOCKING_MEMCPY`` (a blocking ``cudaMemcpy`` also enqueues the copy it
waits for). A graph launch has one correlation id for all the kernels of the graph, so many
activities may share one launch call.

Figures per matched activity (definitions in docs/analysis.md):

* ``launch_to_start_ns`` = device start − launch call start;
* ``queue_delay_ns`` = device start − launch call end, clamped at 0.

Activities with no launch call are counted as unmatched and never dropped silently.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.traces.model import RuntimeKind, Trace

__all__ = [
    "LAUNCHING_KINDS",
    "LaunchLinks",
    "LaunchStats",
    "Percentiles",
    "activity_delays",
    "launch_stats",
    "link_launches",
    "percentiles",
]

I64 = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

LAUNCHING_KINDS: tuple[RuntimeKind, ...] = (
    RuntimeKind.LAUNCH,
    RuntimeKind.MEMCPY,
    RuntimeKind.MEMSET,
    RuntimeKind.GRAPH_LAUNCH,
    RuntimeKind.BLOCKING_MEMCPY,
)


class LaunchLinks(msgspec.Struct, frozen=True, eq=False):
    """Per activity (aligned with ``trace.activities``): its launch call, or -1.

    ``launch_index`` indexes ``trace.runtime``; the time columns hold 0 where unmatched, so read
    them through ``matched``.
    """

    launch_index: I64
    launch_start_ns: I64
    launch_end_ns: I64

    @property
    def matched(self) -> BoolArray:
        return self.launch_index >= 0

    @property
    def n_matched(self) -> int:
        return int(np.count_nonzero(self.matched))

    @property
    def n_unmatched(self) -> int:
        return len(self.launch_index) - self.n_matched


class Percentiles(msgspec.Struct, frozen=True, kw_only=True):
    """Nearest-rank percentiles of a set of integer ns values (all 0 for an empty set)."""

    p50: int = 0
    p90: int = 0
    p99: int = 0
    max: int = 0


class LaunchStats(msgspec.Struct, frozen=True, kw_only=True):
    matched: int
    unmatched: int
    queue_delay_ns: Percentiles
    launch_to_start_ns: Percentiles


def percentiles(values: npt.NDArray[np.int64]) -> Percentiles:
    """Nearest-rank percentiles: the p-th is the value at rank ``ceil(p/100 · n)`` (1-based).

    Nearest rank keeps every figure an observed integer ns value, with no interpolation.
    """
    n = len(values)
    if n == 0:
        return Percentiles()
    s = np.sort(values)

    def rank(p: int) -> int:
        # integer arithmetic: ceil(p*n/100) without float rounding
        return int(s[max(-(-p * n // 100), 1) - 1])

    return Percentiles(p50=rank(50), p90=rank(90), p99=rank(99), max=int(s[-1]))


def link_launches(trace: Trace) -> LaunchLinks:
    """Join every activity to its launch call by (process, correlation id); vectorised.

    Loaders differ on what an activity's ``pid`` holds (the process, or the device as Kineto
    writes it); where an activity's pid is not a process with launch calls and the trace has
    exactly one such process, the activity is joined within that process.
    """
    act = trace.activities
    rt = trace.runtime
    n = len(act)
    none = np.full(n, -1, dtype=np.int64)
    zeros = np.zeros(n, dtype=np.int64)
    launcher = np.isin(rt.kind, np.array([int(k) for k in LAUNCHING_KINDS], dtype=np.uint8))
    launcher &= rt.correlation >= 0
    l_idx = np.flatnonzero(launcher)
    if n == 0 or len(l_idx) == 0:
        return LaunchLinks(none, zeros, zeros.copy())
    l_pid = rt.pid[l_idx]
    l_corr = rt.correlation[l_idx]
    a_pid = act.pid
    a_corr = act.correlation
    # (a comparison, not len(np.unique(l_pid)) == 1: unique's hash path imports numpy.ma, ~9 ms)
    if bool((l_pid == l_pid[0]).all()):
        # one launching process (the common case): the correlation id alone is the key
        l_key, a_key = l_corr, a_corr
    else:
        # Factorise (pid, correlation) pairs into one int64 key without overflow.
        _pids, pid_inv = np.unique(np.concatenate([l_pid, a_pid]), return_inverse=True)
        corrs, corr_inv = np.unique(np.concatenate([l_corr, a_corr]), return_inverse=True)
        key = pid_inv.astype(np.int64) * len(corrs) + corr_inv.astype(np.int64)
        l_key, a_key = key[: len(l_idx)], key[len(l_idx) :]
    # Duplicate launch rows for one key (some exports write two): the earliest start wins.
    order = np.lexsort((rt.start_ns[l_idx], l_key))
    sorted_key = l_key[order]
    pos = np.searchsorted(sorted_key, a_key, side="left")
    pos_c = np.minimum(pos, len(sorted_key) - 1)
    hit = (pos < len(sorted_key)) & (sorted_key[pos_c] == a_key) & (a_corr >= 0)
    index = np.where(hit, l_idx[order[pos_c]], -1).astype(np.int64)
    safe = np.where(hit, index, 0)
    start = np.where(hit, rt.start_ns[safe], 0).astype(np.int64)
    end = np.where(hit, rt.start_ns[safe] + rt.dur_ns[safe], 0).astype(np.int64)
    return LaunchLinks(index, start, end)


def activity_delays(trace: Trace, links: LaunchLinks) -> tuple[I64, I64]:
    """Per activity (aligned with ``trace.activities``): ``(queue_delay_ns,
    launch_to_start_ns)``; read them through ``links.matched`` (0 where unmatched).

    ``queue_delay_ns`` = device start − launch call end, clamped at 0; ``launch_to_start_ns`` =
    device start − launch call start (docs/analysis.md).
    """
    m = links.matched
    start = trace.activities.start_ns
    to_start = np.where(m, start - links.launch_start_ns, 0)
    delay = np.where(m, np.maximum(start - links.launch_end_ns, 0), 0)
    return delay.astype(np.int64), to_start.astype(np.int64)


def launch_stats(trace: Trace, links: LaunchLinks) -> LaunchStats:
    """Matched/unmatched counts and the percentiles of both launch delays."""
    m = links.matched
    delay_all, to_start_all = activity_delays(trace, links)
    delay, to_start = delay_all[m], to_start_all[m]
    return LaunchStats(
        matched=int(np.count_nonzero(m)),
        unmatched=int(len(m) - np.count_nonzero(m)),
        queue_delay_ns=percentiles(delay),
        launch_to_start_ns=percentiles(to_start),
    )
