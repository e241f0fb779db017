"""The per-step split: host (frontend) time vs device time, syncs, run-ahead, queue.

Steps are, in order of preference: the ``ProfilerStep#N`` ranges; else NVTX ranges named like
steps; else user annotations named like steps (outermost ones only; torch's own
``Optimizer.step#…`` annotations are not user steps); else, where torch annotated optimizer
steps (a profile taken without a schedule), each outermost ``Optimizer.step#…`` ends a step,
which starts where the previous one ended (the first at the first host event; what follows the
last optimizer step is not a step); where several optimizers step in a repeating order (Shampoo
then EMA), the last of each repetition ends the step; else the whole trace as one step. Every
step is kept, the last one included, at ns precision.

A device activity belongs to the step in which its **launch call started** (so work queued in
step N and executed during step N+1 is N's); a sync call, to the step in which it started.
Where step windows overlap, that is the one that started last (:func:`window_of`, the one rule
of every table and the bound). Unmatched activities belong to no step.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis.launches import LaunchLinks
from asynctrace.analysis.queue import QueueSeries, depth_max_between
from asynctrace.records import StepRecord
from asynctrace.records.known_syncs import BLOCKING_COPY_OPS, TRACE_SYNC_OPS
from asynctrace.traces.model import RangeKind, RuntimeKind, Trace

__all__ = [
    "SYNC_KINDS",
    "SYNC_KIND_NAMES",
    "StepSplit",
    "StepWindow",
    "SyncRows",
    "TraceStep",
    "host_span",
    "split_steps",
    "step_windows",
    "sync_rows",
    "union_length",
    "window_of",
    "without_clock_figures",
]

I64 = npt.NDArray[np.int64]

#: runtime kinds whose calls block the host until device work completes
SYNC_KINDS: tuple[RuntimeKind, ...] = (RuntimeKind.SYNC, RuntimeKind.BLOCKING_MEMCPY)
#: SyncRows.kind: a synchronize call (or an op that reads a value to the host), a blocking copy
SYNC, BLOCKING_COPY = 0, 1
#: the names of those kinds (``SyncCall.kind``), indexed by them
SYNC_KIND_NAMES = ("sync", "blocking-copy")

_STEP_NAME = re.compile(r"(?i)(?:^|[^a-z])step(?:[^a-z]|$)|profilerstep")
_LAST_INT = re.compile(r"(\d+)(?!.*\d)")
#: the annotation torch.optim puts around every ``optimizer.step()``
_OPTIMIZER_STEP = re.compile(r"^Optimizer\.step#")


class SyncRows(msgspec.Struct, frozen=True, eq=False):
    """The trace's synchronizing host intervals, sorted by start (docs/how-it-works.md, "Blocking
    copy"): its runtime calls of :data:`SYNC_KINDS` (a loader makes a queued copy to or from
    pageable memory one, ``BLOCKING_MEMCPY``); and, in a trace with no device activity (the CPU,
    where torch's ops leave no runtime call), the operators of
    :data:`~asynctrace.records.known_syncs.TRACE_SYNC_OPS` (``aten::item``, ``aten::nonzero``...),
    the outermost one of each nest. ``kind``: :data:`BLOCKING_COPY` for a ``BLOCKING_MEMCPY``
    and for a synchronize inside a copy operator of its thread (``aten::to``, ``_to_copy``,
    ``copy_``), else :data:`SYNC`."""

    start: I64
    end: I64
    pid: I64
    tid: I64
    name: npt.NDArray[np.int32]
    kind: npt.NDArray[np.uint8]

    def __len__(self) -> int:
        return len(self.start)


def sync_rows(trace: Trace) -> SyncRows:
    """The trace's synchronizing host intervals (:class:`SyncRows`)."""
    rt = trace.runtime
    syncing = np.zeros(256, dtype=bool)
    syncing[[int(k) for k in SYNC_KINDS]] = True
    is_sync = syncing[rt.kind]
    parts = [
        (
            rt.start_ns[is_sync],
            rt.dur_ns[is_sync],
            rt.pid[is_sync],
            rt.tid[is_sync],
            rt.name[is_sync],
            np.where(rt.kind[is_sync] == int(RuntimeKind.BLOCKING_MEMCPY), BLOCKING_COPY, SYNC),
        )
    ]
    r = trace.ranges
    if len(r) and len(parts[0][0]):
        # a synchronize inside a copy operator (``aten::to``, ``copy_``: a copy to the host
        # without non_blocking) is the copy's wait
        s0, d0, p0, t0, n0, k0 = parts[0]
        copy_op = _named(trace, BLOCKING_COPY_OPS)
        ops = np.flatnonzero((r.kind == RangeKind.OP) & copy_op[r.name])
        inside = _enclosed(
            s0, s0 + d0, p0, t0, r.start_ns[ops], r.dur_ns[ops], r.pid[ops], r.tid[ops]
        )
        parts[0] = (s0, d0, p0, t0, n0, np.where(inside, BLOCKING_COPY, k0))
    if not len(trace.activities) and len(r):
        named = _named(trace, {f"aten::{op}" for op in TRACE_SYNC_OPS})
        ops = np.flatnonzero((r.kind == RangeKind.OP) & named[r.name])
        ops = ops[_outermost_per_thread(r.start_ns[ops], r.dur_ns[ops], r.pid[ops], r.tid[ops])]
        parts.append(
            (
                r.start_ns[ops],
                r.dur_ns[ops],
                r.pid[ops],
                r.tid[ops],
                r.name[ops],
                np.full(len(ops), SYNC),
            )
        )
    start, dur, pid, tid, name, kind = (np.concatenate(c) for c in zip(*parts, strict=True))
    order = np.argsort(start, kind="stable")
    return SyncRows(
        start=start[order].astype(np.int64),
        end=(start + dur)[order].astype(np.int64),
        pid=pid[order].astype(np.int64),
        tid=tid[order].astype(np.int64),
        name=name[order].astype(np.int32),
        kind=kind[order].astype(np.uint8),
    )


def _named(trace: Trace, names: Container[str]) -> npt.NDArray[np.bool_]:
    """Per string id: whether the string is one of ``names``."""
    return np.array([x in names for x in trace.strings] or [False], dtype=bool)


def _enclosed(
    start: I64, end: I64, pid: I64, tid: I64, o_start: I64, o_dur: I64, o_pid: I64, o_tid: I64
) -> npt.NDArray[np.bool_]:
    """Per interval: whether one of the ``o_`` intervals of its thread encloses it (one that
    started at or before it reaches at least its end)."""
    out = np.zeros(len(start), bool)
    if not len(o_start):
        return out
    o_end = o_start + o_dur
    for p, t in set(zip(pid.tolist(), tid.tolist(), strict=True)):
        mine = np.flatnonzero((pid == p) & (tid == t))
        theirs = np.flatnonzero((o_pid == p) & (o_tid == t))
        if not len(theirs):
            continue
        order = theirs[np.argsort(o_start[theirs], kind="stable")]
        reach = np.maximum.accumulate(o_end[order])
        k = np.searchsorted(o_start[order], start[mine], side="right") - 1
        out[mine] = (k >= 0) & (reach[np.maximum(k, 0)] >= end[mine])
    return out


def _outermost_per_thread(start: I64, dur: I64, pid: I64, tid: I64) -> npt.NDArray[np.intp]:
    """The rows not inside an earlier (or equal, wider) row of the same thread: one interval
    per nest (``aten::item`` around its ``aten::_local_scalar_dense``)."""
    if not len(start):
        return np.zeros(0, np.intp)
    end = start + dur
    order = np.lexsort((-end, start, tid, pid))
    p, t, e = pid[order], tid[order], end[order]
    new_thread = np.r_[True, (p[1:] != p[:-1]) | (t[1:] != t[:-1])]
    # the furthest end reached so far on the thread, before each row
    keep = np.ones(len(order), bool)
    thread_id = np.cumsum(new_thread) - 1
    for k in np.unique(thread_id).tolist():
        rows = np.flatnonzero(thread_id == k)
        reach = np.maximum.accumulate(e[rows])
        before = np.r_[np.iinfo(np.int64).min, reach[:-1]]
        keep[rows] = e[rows] > before
    kept: npt.NDArray[np.intp] = np.sort(order[keep])
    return kept


class StepWindow(msgspec.Struct, frozen=True):
    step: int
    start_ns: int
    end_ns: int
    name: str
    #: "profiler", "nvtx", "annotation" or "trace" (the whole trace as one step)
    source: str


class TraceStep(msgspec.Struct, frozen=True, kw_only=True):
    """What a trace knows of a step beyond its :class:`~asynctrace.records.StepRecord` (the one
    step record of sessions and traces): the trace-only extras, aligned with the report's steps
    (definitions in docs/how-it-works.md)."""

    name: str
    #: host end of the step (its start is the step record's ``start_ns``)
    end_ns: int
    #: activities attributed to the step (through their launch call)
    activities: int
    #: first start and last end of those activities; None when there are none
    device_start_ns: int | None
    device_end_ns: int | None
    #: highest queue depth of any stream during the step's host span
    queue_max: int


class StepSplit(msgspec.Struct, frozen=True, kw_only=True):
    """A trace's steps: the step records (figures shared with sessions) and, index for index,
    the trace-only extras."""

    steps: list[StepRecord]
    extras: list[TraceStep]


def union_length(start: I64, end: I64) -> int:
    """Total length covered by the intervals [start, end) (vectorised)."""
    if len(start) == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    prev = np.concatenate([[s[0]], reach[:-1]])
    return int(np.maximum(e - np.maximum(s, prev), 0).sum())


def _step_number(name: str, fallback: int) -> int:
    m = _LAST_INT.search(name)
    return int(m.group(1)) if m else fallback


def _outermost(idx: npt.NDArray[np.intp], start: I64, end: I64) -> list[int]:
    kept: list[int] = []
    reach = -(2**62)
    for i in idx[np.argsort(start[idx], kind="stable")].tolist():
        if start[i] >= reach:
            kept.append(i)
            reach = int(end[i])
    return kept


def step_windows(trace: Trace) -> list[StepWindow]:
    """The trace's steps, by start time (see the module doc for the order of preference)."""
    r = trace.ranges
    end = r.start_ns + r.dur_ns
    prof = np.flatnonzero(r.kind == RangeKind.STEP)
    if len(prof):
        order = prof[np.argsort(r.start_ns[prof], kind="stable")]
        return [
            StepWindow(
                step=int(r.step[i])
                if r.step[i] >= 0
                else _step_number(trace.name_of(int(r.name[i])), k),
                start_ns=int(r.start_ns[i]),
                end_ns=int(end[i]),
                name=trace.name_of(int(r.name[i])),
                source="profiler",
            )
            for k, i in enumerate(order.tolist())
        ]
    optimizer = np.array(
        [bool(_OPTIMIZER_STEP.match(s)) for s in trace.strings] or [False], dtype=bool
    )
    steplike = (
        np.array([bool(_STEP_NAME.search(s)) for s in trace.strings] or [False], dtype=bool)
        & ~optimizer
    )
    for kind, source in ((RangeKind.NVTX, "nvtx"), (RangeKind.ANNOTATION, "annotation")):
        cand = np.flatnonzero((r.kind == kind) & steplike[r.name] if len(r) else np.zeros(0, bool))
        if len(cand):
            return [
                StepWindow(
                    step=_step_number(trace.name_of(int(r.name[i])), k),
                    start_ns=int(r.start_ns[i]),
                    end_ns=int(end[i]),
                    name=trace.name_of(int(r.name[i])),
                    source=source,
                )
                for k, i in enumerate(_outermost(cand, r.start_ns, end))
            ]
    span = host_span(trace)
    if span is None:
        return []
    lo, hi = span
    opt = np.flatnonzero(
        ((r.kind == RangeKind.ANNOTATION) | (r.kind == RangeKind.OP)) & optimizer[r.name]
        if len(r)
        else np.zeros(0, bool)
    )
    if len(opt):
        outer = _outermost(opt, r.start_ns, end)
        # a last optimizer step cut by the end of the profile (duration 0) did not finish
        while outer and r.dur_ns[outer[-1]] == 0:
            outer.pop()
        if not outer:
            return [StepWindow(step=0, start_ns=lo, end_ns=hi, name="whole trace", source="trace")]
        names = [int(r.name[i]) for i in outer]
        # several optimizers stepped in turn (Shampoo then EMA; a GAN's D five times, then
        # G) make one iteration: the step ends with the last of the repeating group
        p = _period(names)
        windows = []
        begin = lo
        for k, i in enumerate(outer[p - 1 :: p]):
            finish = int(end[i])
            windows.append(
                StepWindow(
                    step=k,
                    start_ns=begin,
                    end_ns=finish,
                    name=trace.name_of(int(r.name[i])),
                    source="optimizer",
                )
            )
            begin = finish
        return windows
    return [StepWindow(step=0, start_ns=lo, end_ns=hi, name="whole trace", source="trace")]


def _period(names: list[int]) -> int:
    """The shortest p with ``names[i] == names[i + p]`` throughout (a last group may be cut
    short); ``len(names)`` when the sequence does not repeat. n − the longest proper border
    (Knuth–Morris–Pratt's prefix function): linear in the number of optimizer steps."""
    border = [0] * len(names)
    for i in range(1, len(names)):
        k = border[i - 1]
        while k and names[i] != names[k]:
            k = border[k - 1]
        border[i] = k + 1 if names[i] == names[k] else 0
    return len(names) - border[-1] if names else 1


def host_span(trace: Trace) -> tuple[int, int] | None:
    """First start and last end of the trace's host events (its device activities when it has
    none); None for an empty trace."""
    r = trace.ranges
    # host events only: gpu_user_annotation ranges lie on the device's timeline
    on_host = r.kind != RangeKind.GPU_ANNOTATION
    host: list[tuple[I64, I64]] = [
        (s, d)
        for s, d in (
            (r.start_ns[on_host], r.dur_ns[on_host]),
            (trace.runtime.start_ns, trace.runtime.dur_ns),
            (trace.python_frames.start_ns, trace.python_frames.dur_ns),
        )
        if len(s)
    ]
    if not host and len(trace.activities):
        host = [(trace.activities.start_ns, trace.activities.dur_ns)]
    if not host:
        return None
    return min(int(s.min()) for s, _ in host), max(int((s + d).max()) for s, d in host)


def window_of(times: I64, start: I64, end: I64) -> npt.NDArray[np.intp]:
    """Per time: the index of the step window ``[start, end)`` that holds it, -1 where none
    does (vectorised over the times: binary searches, a loop only over overlapping windows).

    Where windows overlap, a time belongs to the one that **started last** of those holding it
    (of two that started together, the later in the list). That is the bound's hand-over: its
    shares of the device timeline are consecutive, each step's from its first activity to the
    next step's, so once a step has begun the host's work is that step's. It is also the step a
    nest of ranges means: a ``ProfilerStep#N`` that ends a rounding step after the next one
    begins hands its seam to ``N + 1``, and a step range opened inside another is the inner
    step while it lasts (its outer step's again after it ends)."""
    out = np.full(len(times), -1, np.intp)
    if not len(start) or not len(times):
        return out
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    if bool((s[1:] >= e[:-1]).all()):
        # disjoint windows (every trace's usual case): at most one holds a time
        j = np.searchsorted(s, times, side="right") - 1
        held = (j >= 0) & (times < e[np.maximum(j, 0)])
        out[held] = order[j[held]]
        return out
    # segments between consecutive window edges, each owned by the last-started window that
    # covers it: the windows, by start, paint their segments over those of earlier ones
    edges = np.unique(np.r_[s, e])
    owner = np.full(len(edges), -1, np.intp)
    lo, hi = np.searchsorted(edges, s), np.searchsorted(edges, e)
    for k, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
        owner[a:b] = order[k]
    seg = np.searchsorted(edges, times, side="right") - 1
    inside = seg >= 0
    out[inside] = owner[seg[inside]]
    return out


def split_steps(
    trace: Trace,
    links: LaunchLinks,
    *,
    windows: list[StepWindow] | None = None,
    queues: Mapping[str, tuple[QueueSeries, QueueSeries]] | None = None,
    syncs: SyncRows | None = None,
) -> StepSplit:
    """Figures of every step; ``queues`` (from :func:`~asynctrace.analysis.queue.queue_series`)
    gives ``queue_max``, 0 without it; ``syncs``: the trace's :func:`sync_rows`, where the
    caller has them. A step's figures are its own span's: every launch and sync that started in
    it, so where windows overlap, work in the overlap counts in each (the one step of each
    activity and call, in the tables and the bound, is :func:`window_of`'s)."""
    if windows is None:
        windows = step_windows(trace)
    act = trace.activities
    m = np.flatnonzero(links.matched)
    launch = links.launch_start_ns[m]
    order = np.argsort(launch, kind="stable")
    by_launch = m[order]
    launch_sorted = launch[order]
    a_start = act.start_ns
    a_end = act.start_ns + act.dur_ns
    sync_calls = _SyncCalls.of(syncs if syncs is not None else sync_rows(trace))
    records: list[StepRecord] = []
    extras: list[TraceStep] = []
    for w in windows:
        i0, i1 = np.searchsorted(launch_sorted, [w.start_ns, w.end_ns], side="left")
        sel = by_launch[i0:i1]
        dev_start = int(a_start[sel].min()) if len(sel) else None
        dev_end = int(a_end[sel].max()) if len(sel) else None
        count, wait = sync_calls.within(w.start_ns, w.end_ns)
        qmax = 0
        if queues:
            qmax = max(depth_max_between(d, w.start_ns, w.end_ns) for d, _ in queues.values())
        # a whole trace has no step end the host moved on from: no run-ahead
        ahead = dev_end is not None and w.source != "trace"
        records.append(
            StepRecord(
                step=w.step,
                start_ns=w.start_ns,
                frontend_ns=w.end_ns - w.start_ns,
                device_ns=dev_end - dev_start
                if dev_start is not None and dev_end is not None
                else None,
                run_ahead_ns=dev_end - w.end_ns if ahead and dev_end is not None else None,
                sync_count=count,
                sync_wait_ns=wait,
            )
        )
        extras.append(
            TraceStep(
                name=w.name,
                end_ns=w.end_ns,
                activities=len(sel),
                device_start_ns=dev_start,
                device_end_ns=dev_end,
                queue_max=qmax,
            )
        )
    return StepSplit(steps=_with_in_flight(records, extras), extras=extras)


def without_clock_figures(split: StepSplit) -> StepSplit:
    """The steps without the figures that compare host and device clocks (run-ahead, in
    flight): for a trace whose clocks disagree, where they would be wrong."""
    steps = [msgspec.structs.replace(s, run_ahead_ns=None, in_flight=0) for s in split.steps]
    return StepSplit(steps=steps, extras=split.extras)


def _with_in_flight(records: list[StepRecord], extras: list[TraceStep]) -> list[StepRecord]:
    """In flight at each step's host start: earlier steps whose device work ends after it (the
    definition a live session measures with its markers: one figure for both)."""
    dev_ends = np.array(
        [x.device_end_ns if x.device_end_ns is not None else -(2**62) for x in extras], np.int64
    )
    return [
        msgspec.structs.replace(r, in_flight=int(np.count_nonzero(dev_ends[:k] > r.start_ns)))
        for k, r in enumerate(records)
    ]


class _SyncCalls(msgspec.Struct, frozen=True):
    """The trace's synchronizing host intervals (:func:`sync_rows`), sorted by start."""

    start: I64
    end: I64

    @classmethod
    def of(cls, rows: SyncRows) -> _SyncCalls:
        return cls(rows.start, rows.end)

    def within(self, start_ns: int, end_ns: int) -> tuple[int, int]:
        """Calls that started in [start, end), and the host time inside any call, clipped to
        the window (overlaps counted once)."""
        j1 = int(np.searchsorted(self.start, end_ns, side="left"))
        j0 = int(np.searchsorted(self.start, start_ns, side="left"))
        overlap = np.flatnonzero(self.end[:j1] > start_ns)
        wait = union_length(
            np.maximum(self.start[overlap], start_ns), np.minimum(self.end[overlap], end_ns)
        )
        return j1 - j0, wait
