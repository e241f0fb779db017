"""Synchronizing host calls: each one with its wait, step, thread and Python call site.

A sync is a synchronizing host interval of :func:`~asynctrace.analysis.steps.sync_rows`: a
runtime call of kind ``SYNC`` (stream/device/event synchronize) or ``BLOCKING_MEMCPY`` (a
``cudaMemcpy``, or a queued copy to or from pageable memory: ``kind="blocking-copy"``), and in a
trace without device activity the operators that would synchronize an accelerator
(``aten::item``, ``aten::nonzero``...). Device-side ``cuda_sync`` records
(``Trace.device_syncs``) describe the same waits and are not counted again.

Where the trace has Python frames (``with_stack=True``) a sync's **site** is the innermost user
frame on the same thread that encloses the call, written ``file:line``; frames in a ``torch``,
``site-packages`` or ``dist-packages`` folder, built-ins (``<built-in ...>``, ``<frozen ...>``) and
asynctrace's own modules are not user frames (whole folder names: ``~/pytorch/train.py`` is).
Without frames the site is empty and calls aggregate by API name only.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from asynctrace._frames import is_user_frame, site_of
from asynctrace.analysis.steps import (
    SYNC_KIND_NAMES,
    StepWindow,
    SyncRows,
    sync_rows,
    window_of,
)
from asynctrace.traces.model import I32, I64, Trace

__all__ = ["SyncCall", "SyncSiteStats", "SyncSummary", "find_syncs", "is_user_frame", "site_of"]


class SyncCall(msgspec.Struct, frozen=True, kw_only=True):
    op: str
    start_ns: int
    dur_ns: int
    pid: int
    tid: int
    #: the step whose host span contains the call's start, None if none does
    step: int | None
    #: "file.py:123", "" when the trace has no user frame for it
    site: str
    #: "sync" (a synchronize call, ``.item()`` and friends) or "blocking-copy" (a copy to or
    #: from pageable memory, or to the CPU, that holds the host until it ends)
    kind: str = "sync"


class SyncSiteStats(msgspec.Struct, frozen=True, kw_only=True):
    site: str
    op: str
    count: int
    total_ns: int
    #: distinct steps in which the site synchronized
    steps: int


class SyncSummary(msgspec.Struct, frozen=True, kw_only=True):
    count: int
    total_ns: int
    #: by (site, op), largest total first
    sites: list[SyncSiteStats]
    calls: list[SyncCall] = msgspec.field(default_factory=list)
    #: device-side sync records in the trace (not counted in ``count``)
    device_records: int = 0


def find_syncs(
    trace: Trace, *, windows: Sequence[StepWindow] = (), rows: SyncRows | None = None
) -> SyncSummary:
    """Every synchronizing call, attributed to a step and a user call site; ``rows``: the
    trace's :func:`~asynctrace.analysis.steps.sync_rows`, where the caller has them."""
    if rows is None:
        rows = sync_rows(trace)
    threads: dict[tuple[int, int], _ThreadFrames] = {}
    py = trace.python_frames
    if len(py) and len(rows):
        user_name = np.array([is_user_frame(s) for s in trace.strings] or [False], dtype=bool)
        user = user_name[py.name]
        f_pid, f_tid = py.pid[user], py.tid[user]
        f_start = py.start_ns[user]
        f_end = f_start + py.dur_ns[user]
        f_name = py.name[user]
        for pid, tid in set(zip(rows.pid.tolist(), rows.tid.tolist(), strict=True)):
            on = (f_pid == pid) & (f_tid == tid)
            if on.any():
                threads[pid, tid] = _ThreadFrames(f_start[on], f_end[on], f_name[on])
    steps = _steps_of(rows.start, windows)
    calls: list[SyncCall] = []
    columns = (
        rows.start.tolist(),
        rows.end.tolist(),
        rows.pid.tolist(),
        rows.tid.tolist(),
        rows.name.tolist(),
        rows.kind.tolist(),
        steps,
    )
    for start, end, pid, tid, name_id, kind, step in zip(*columns, strict=True):
        site = ""
        frames = threads.get((pid, tid))
        if frames is not None:
            name = frames.innermost(start, end, trace.strings)
            if name >= 0:
                site = site_of(trace.name_of(name))
        calls.append(
            SyncCall(
                op=trace.name_of(name_id),
                start_ns=start,
                dur_ns=end - start,
                pid=pid,
                tid=tid,
                step=step,
                site=site,
                kind=SYNC_KIND_NAMES[kind],
            )
        )
    # a stable order whatever order the rows came in (ties in start time included)
    calls.sort(key=lambda c: (c.start_ns, c.pid, c.tid, c.op, c.dur_ns))
    groups: dict[tuple[str, str], list[SyncCall]] = {}
    for c in calls:
        groups.setdefault((c.site, c.op), []).append(c)
    sites = [
        SyncSiteStats(
            site=site,
            op=op,
            count=len(cs),
            total_ns=sum(c.dur_ns for c in cs),
            steps=len({c.step for c in cs if c.step is not None}),
        )
        for (site, op), cs in groups.items()
    ]
    sites.sort(key=lambda s: (-s.total_ns, -s.count, s.site, s.op))
    return SyncSummary(
        count=len(calls),
        total_ns=sum(c.dur_ns for c in calls),
        sites=sites,
        calls=calls,
        device_records=len(trace.device_syncs),
    )


def _steps_of(start: I64, windows: Sequence[StepWindow]) -> list[int | None]:
    """Per call start: the step of the window whose span holds it (:func:`window_of`: where
    windows overlap, the one that started last), None if none does."""
    w_start = np.array([w.start_ns for w in windows], np.int64)
    w_end = np.array([w.end_ns for w in windows], np.int64)
    numbers = [w.step for w in windows]
    return [numbers[k] if k >= 0 else None for k in window_of(start, w_start, w_end).tolist()]


class _ThreadFrames:
    """One thread's user frames, sorted by start, with the largest end of each block of
    ``_BLOCK`` frames: the innermost frame enclosing a call is then found in
    O(block + frames / block) instead of a scan of every frame that started before it."""

    __slots__ = ("block_end", "end", "name", "start")

    def __init__(self, start: I64, end: I64, name: I32) -> None:
        self.start, self.end, self.name = start, end, name
        self.block_end = np.maximum.reduceat(end, np.arange(0, len(end), _BLOCK))

    def innermost(self, start: int, end: int, strings: Sequence[str]) -> int:
        """The name id of the innermost frame with ``frame.start <= start`` and
        ``frame.end >= end``: the latest start, then the earliest end; among frames with the
        same start and end, the name that sorts last, so that the order the events came in does
        not matter. -1 when none encloses the call."""
        k = int(np.searchsorted(self.start, start, side="right"))  # frames [0, k) start in time
        if k == 0:
            return -1
        lo = (k - 1) // _BLOCK * _BLOCK
        hit = np.flatnonzero(self.end[lo:k] >= end)
        if len(hit):
            j = lo + int(hit[-1])
        else:
            blocks = np.flatnonzero(self.block_end[: lo // _BLOCK] >= end)
            if not len(blocks):
                return -1
            b = int(blocks[-1]) * _BLOCK
            j = b + int(np.flatnonzero(self.end[b : b + _BLOCK] >= end)[-1])
        # j is the last enclosing frame in start order; others with the same start are adjacent
        first = int(np.searchsorted(self.start, self.start[j], side="left"))
        last = int(np.searchsorted(self.start, self.start[j], side="right"))
        if last - first == 1:
            return int(self.name[j])
        ends = self.end[first:last]
        names = self.name[first:last]
        enclosing = ends >= end
        tightest = ends[enclosing].min()
        tied = names[enclosing & (ends == tightest)]
        return int(max(tied.tolist(), key=lambda n: strings[n]))


_BLOCK = 1024
