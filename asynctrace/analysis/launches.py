"""Launch linking: which host call put each device activity in the queue, and how long it waited.

Each device activity is joined to the runtime call that launched it by its correlation id within
one process (where a Kineto trace holds several launching processes, whose ids collide, the
process is found as :func:`link_launches` says). Launching calls are the runtime kinds
``LAUNCH``, ``MEMCPY``, ``MEMSET``, ``GRAPH_LAUNCH`` and ``BLOCKING_MEMCPY`` (a blocking
``cudaMemcpy`` also enqueues the copy it waits for). A graph launch has one correlation id for
all the kernels of the graph, so many activities may share one launch call.

Figures per matched activity (definitions in docs/analysis.md):

* ``launch_to_start_ns`` = device start − launch call start;
* ``queue_delay_ns`` = device start − launch call end, clamped at 0.

Activities with no launch call are counted as unmatched and never dropped silently.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis._quantiles import nearest_rank
from asynctrace.traces.model import RuntimeKind, Trace

__all__ = [
    "DEVICE_PROCESS_SHARE",
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
    return Percentiles(
        p50=nearest_rank(s, 50), p90=nearest_rank(s, 90), p99=nearest_rank(s, 99), max=int(s[-1])
    )


def link_launches(trace: Trace) -> LaunchLinks:
    """Join every activity to its launch call by (process, correlation id); vectorised.

    Loaders differ on what an activity's ``pid`` holds: the process (Nsight Systems), or the
    device, as Kineto writes it (the pid is then the activity's device number). An activity
    whose pid is a launching process is joined within it. One whose pid is its device is
    joined within the one launching process where there is one; where several processes
    launched (their correlation ids are per process and collide), within the process that
    launched its correlation id where only one did; else within the process the other
    activities of its device were joined in (90% of them or more); else to the latest launch
    of its correlation id that started at or before it (the earliest where none did).
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
    a_corr = act.correlation
    # (a comparison, not len(np.unique(l_pid)) == 1: unique's hash path imports numpy.ma, ~9 ms)
    if bool((l_pid == l_pid[0]).all()):
        # one launching process (the common case): the correlation id alone is the key
        pos = _join(l_corr, rt.start_ns[l_idx], a_corr)
    else:
        pos = _join_processes(
            l_pid, l_corr, rt.start_ns[l_idx], act.pid, act.device, a_corr, act.start_ns
        )
    hit = (pos >= 0) & (a_corr >= 0)
    index = np.where(hit, l_idx[np.maximum(pos, 0)], -1).astype(np.int64)
    safe = np.where(hit, index, 0)
    start = np.where(hit, rt.start_ns[safe], 0).astype(np.int64)
    end = np.where(hit, rt.start_ns[safe] + rt.dur_ns[safe], 0).astype(np.int64)
    return LaunchLinks(index, start, end)


def _join(l_key: I64, l_start: I64, a_key: I64) -> I64:
    """Per activity key: the position (in the launch rows) of the launch with that key, the
    earliest where several have it (some exports write a call twice), -1 where none has."""
    order = np.lexsort((l_start, l_key))
    sorted_key = l_key[order]
    pos = np.searchsorted(sorted_key, a_key, side="left")
    pos_c = np.minimum(pos, len(sorted_key) - 1)
    hit = (pos < len(sorted_key)) & (sorted_key[pos_c] == a_key)
    out: I64 = np.where(hit, order[pos_c], -1).astype(np.int64)
    return out


#: a device is taken to belong to one process when this share of its joined activities does
DEVICE_PROCESS_SHARE = 0.9


def _join_processes(
    l_pid: I64,
    l_corr: I64,
    l_start: I64,
    a_pid: I64,
    a_device: npt.NDArray[np.int32],
    a_corr: I64,
    a_start: I64,
) -> I64:
    """:func:`_join` where several processes launched (see :func:`link_launches`)."""
    procs = np.unique(l_pid)
    corrs, corr_inv = np.unique(np.concatenate([l_corr, a_corr]), return_inverse=True)
    corr_inv = corr_inv.reshape(-1).astype(np.int64)
    lc, ac = corr_inv[: len(l_corr)], corr_inv[len(l_corr) :]
    width = len(corrs)
    l_key = np.searchsorted(procs, l_pid).astype(np.int64) * width + lc

    def within(proc: I64) -> I64:
        """Per activity: the launch of its correlation id in process ``proc`` (-1: none)."""
        rank = np.searchsorted(procs, proc)
        known = (rank < len(procs)) & (procs[np.minimum(rank, len(procs) - 1)] == proc)
        found = _join(l_key, l_start, rank.astype(np.int64) * width + ac)
        out: I64 = np.where(known, found, -1)
        return out

    is_proc = np.isin(a_pid, procs)
    pos = np.full(len(a_corr), -1, np.int64)
    pos[is_proc] = within(a_pid)[is_proc]
    # activities whose pid is their device, as Kineto writes it
    on_device = ~is_proc & (a_pid == a_device)
    if not on_device.any():
        return pos
    # the processes that launched each correlation id: one → that one
    pairs = np.unique(lc * len(procs) + np.searchsorted(procs, l_pid))
    pair_corr, pair_proc = pairs // len(procs), pairs % len(procs)
    n_proc = np.bincount(pair_corr, minlength=width)
    only = np.full(width, -1, np.int64)
    single = n_proc[pair_corr] == 1
    only[pair_corr[single]] = pair_proc[single]
    proc_of = np.where(on_device, only[ac], -1)
    # the process each device's unambiguous activities were joined in, where one holds most
    voted = on_device & (proc_of >= 0)
    if voted.any():
        devs, dev_inv = np.unique(a_device[on_device], return_inverse=True)
        dev_of = np.full(len(a_corr), -1, np.int64)
        dev_of[on_device] = dev_inv.reshape(-1)
        votes = np.zeros((len(devs), len(procs)), np.int64)
        np.add.at(votes, (dev_of[voted], proc_of[voted]), 1)
        best = np.argmax(votes, axis=1)
        sure = votes[np.arange(len(devs)), best] >= DEVICE_PROCESS_SHARE * votes.sum(axis=1)
        owner = np.where(sure & (votes.sum(axis=1) > 0), best, -1)
        rest = on_device & (proc_of < 0) & (dev_of >= 0)
        proc_of[rest] = owner[dev_of[rest]]
    resolved = on_device & (proc_of >= 0)
    pos[resolved] = within(procs[np.maximum(proc_of, 0)])[resolved]
    # the rest: the latest launch of the correlation id at or before the activity's start
    left = np.flatnonzero(on_device & (proc_of < 0))
    if len(left):
        times = np.unique(np.concatenate([l_start, a_start[left]]))
        t_width = len(times) + 1
        lk = lc * t_width + np.searchsorted(times, l_start)
        ak = ac[left] * t_width + np.searchsorted(times, a_start[left])
        order = np.argsort(lk, kind="stable")
        j = np.searchsorted(lk[order], ak, side="right") - 1
        ok = (j >= 0) & (lk[order][np.maximum(j, 0)] // t_width == ac[left])
        earliest = _join(lc, l_start, ac[left])
        pos[left] = np.where(ok, order[np.maximum(j, 0)], earliest)
    return pos


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
