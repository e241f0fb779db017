"""What bounds a run and each of its steps: the device, the host, syncs, input or dependencies.

Definitions (docs/how-it-works.md and docs/analysis.md say the same, with examples):

* **Region.** From the first step's host start to the later of the last step's host end and the
  last end of the work launched in a step; the whole trace when it has no steps (first to last
  event, host or device).
* **Device timeline.** The union of all activities of all streams of the device over the region
  (a trace with activities on several devices: the device with most activities). **Busy** is
  its length, **idle** the rest of the region.
* **Cause of an idle gap** ``[g0, g1)``, through the launch call of the activity that ends it
  (the first to start at ``g1``): that call ended before ``g0`` → the work was already queued,
  **dependency** (another stream, an event, a collective, launch latency). Otherwise the device
  waited for the host: **sync** when the host was inside a synchronizing call at ``g0``; else
  **input** for the time of ``[g0, launch)`` the host spent waiting for data
  (``enumerate(DataLoader)…__next__``) and **host** for the rest (split by overlap). A gap
  ended by an activity without a launch call is **unattributed**. The final gap (after the
  last activity, to the region's end) has no activity ending it and is judged by what the host
  was doing: sync if it was inside a sync at ``g0``, else its data waits input and the rest
  host. Gaps that begin inside
  a long sync with no device activity recorded (:data:`MISSING_ACTIVITY_MIN_NS`) and every gap of
  a trace whose clocks disagree are unattributed.
* **Label.** ``device-bound`` when idle < :data:`DEVICE_BOUND_IDLE_FRACTION` of the region;
  otherwise the cause with most idle: ``host-bound``, ``sync-bound``, ``input-bound``,
  ``dependency-bound``, or ``undetermined`` when most idle is unattributed.
* **Per step, without overlap.** Step k owns the device timeline from the start of its first
  activity to the start of step k + 1's first activity (the first step from the region's start,
  the last to its end; a step with no activity owns nothing), except that idle just before a
  step's first activity is the step's from its host start: shares partition the region, so the
  steps' busy and idle (by cause) add up to the whole region's exactly.
* **Steady state.** The run's figures and label leave out the warm-up
  (:mod:`asynctrace.analysis.warmup`): a whole trace's region begins where it ends, and the
  warm-up steps are left out (the steady steps add up to the run). Where the clocks disagree
  the region is the device's own span.

Everything is arithmetic on sorted numpy arrays (:class:`~asynctrace.analysis.timeline.Cover`):
one merge of the activities, one vectorised classification of the gaps, binary searches for
the per-step shares; the host frames are measured per host thread (a loop over threads, not
gaps).

:func:`asynctrace.analysis.records_bound.bound_of_records` gives the same label, from the same
rule and thresholds (:mod:`asynctrace.analysis._bound_rule`), to a live session's step records,
which have no per-gap timeline; :mod:`asynctrace.analysis.advice` writes the advice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace._frames import is_user_frame, site_of
from asynctrace.analysis._bound_model import (
    CAUSES,
    LAUNCH_GAP_NS,
    Bound,
    BoundEvidence,
    HostFrame,
    IdleByCause,
    KernelTime,
    ReportWarning,
    StepBound,
    SyncCost,
    WaitedOn,
    WarmUp,
)
from asynctrace.analysis._bound_rule import (
    DEVICE_BOUND_IDLE_FRACTION,
    LABELS,
    label_of,
    pct,
    pcts,
    run_bound,
    step_bound,
)
from asynctrace.analysis.defaults import DEFAULT_QUEUE_CAP
from asynctrace.analysis.kernels import (
    DeviceTime,
    device_times,
    labelled_device,
    start_order_on_ties,
)
from asynctrace.analysis.launches import LaunchLinks
from asynctrace.analysis.queue import QueueSeries, launch_cover
from asynctrace.analysis.steps import SYNC_KINDS, StepWindow, host_span, window_of
from asynctrace.analysis.syncs import SyncSummary
from asynctrace.analysis.timeline import (
    ClassCover,
    Cover,
    innermost_at,
    sorted_unique,
    start_order,
    union_runs,
    unique_inverse,
)
from asynctrace.records.units import format_ns
from asynctrace.traces.model import RangeKind, Trace

__all__ = [
    "CAUSES",
    "DEVICE_BOUND_IDLE_FRACTION",
    "LABELS",
    "LAUNCH_GAP_NS",
    "MISSING_ACTIVITY_BUSY_FRACTION",
    "MISSING_ACTIVITY_MIN_NS",
    "Bound",
    "BoundEvidence",
    "HostFrame",
    "IdleByCause",
    "IdleGaps",
    "KernelTime",
    "ReportWarning",
    "StepBound",
    "SyncCost",
    "TraceBound",
    "WaitedOn",
    "bound_of_trace",
    "label_of",
]

I64 = npt.NDArray[np.int64]

#: a sync at least this long ...
MISSING_ACTIVITY_MIN_NS = 1_000_000
#: ... during which the device is busy less than this share of it: activity is missing
MISSING_ACTIVITY_BUSY_FRACTION = 0.01

#: data waits in a trace: the profiler's range around a DataLoader iterator's __next__
_DATA_WAIT = re.compile(r"enumerate\(DataLoader\).*__next__")
_DATA_MARK = "DataLoader"

# gap classes (host split into launch gaps and host work)
_H_SHORT, _H_LONG, _SYNC, _INPUT, _DEP, _UNATTR = range(6)
#: gap class → index in CAUSES
_CAUSE_OF_CLASS = np.array([0, 0, 1, 2, 3, 4], np.uint8)


class IdleGaps(msgspec.Struct, frozen=True, eq=False):
    """Every idle gap of the device timeline, sorted: for views that draw them (annotate slices,
    timelines). ``cause`` indexes :data:`CAUSES`; ``launch_gap`` marks host gaps shorter than
    :data:`LAUNCH_GAP_NS`; ``step`` is the index (in the report's steps) of the step whose share
    holds the gap's start, -1 without steps."""

    start_ns: I64
    end_ns: I64
    cause: npt.NDArray[np.uint8]
    launch_gap: npt.NDArray[np.bool_]
    step: I64


class TraceBound(msgspec.Struct, frozen=True, kw_only=True):
    run: Bound
    steps: list[StepBound]
    warnings: list[ReportWarning]
    #: what the syncs cost over the run's region (:func:`_sync_cost`; its evidence's
    #: ``sync_cost_pct``)
    sync_cost_ns: int = 0
    #: the clocks disagree: delay and run-ahead verdicts are withheld
    clocks_disagree: bool = False
    #: the gaps themselves (not in the report's JSON)
    gaps: IdleGaps | None = None
    #: device time per activity name over the run's region (``Report.trace.kernels``)
    kernels: list[DeviceTime] = msgspec.field(default_factory=list)


# --- traces -----------------------------------------------------------------------------------
#
# bound_of_trace runs these stages, each a pure function of what the earlier ones give:
#
#   _device_timeline  the region, the device's activities in it, their union (busy), the gaps
#   _host_waits       the host's syncs, data waits and time blocked at the cap, as Covers
#   _checks           the warnings, whether the clocks disagree, syncs with activity missing
#   _gap_causes       each gap's class, and the gaps by class (a ClassCover)
#   _step_shares      the steps' shares of the timeline (boundaries at first activities)
#   _region_share     the whole region as one share (the run's figures)
#   _share_bound      one share's label and evidence; _trace_run adds the run's lists, advice


def _classes_to_cause(v: I64) -> IdleByCause:
    return IdleByCause(
        host=int(v[_H_SHORT] + v[_H_LONG]),
        sync=int(v[_SYNC]),
        input=int(v[_INPUT]),
        dependency=int(v[_DEP]),
        unattributed=int(v[_UNATTR]),
    )


def _region(
    trace: Trace, links: LaunchLinks, windows: Sequence[StepWindow], on_dev: npt.NDArray[np.bool_]
) -> tuple[int, int]:
    """(r0, r1): the region (module docstring)."""
    act = trace.activities
    a_end = act.start_ns + act.dur_ns
    if windows and windows[0].source != "trace":
        r0 = windows[0].start_ns
        h1 = max(w.end_ns for w in windows)
        ls = links.launch_start_ns
        launched = links.matched & on_dev & (ls >= r0) & (ls < h1)
        r1 = max(h1, int(a_end[launched].max())) if launched.any() else h1
        return r0, r1
    span = host_span(trace)
    starts = [span[0]] if span else []
    ends = [span[1]] if span else []
    if len(act):
        starts.append(int(act.start_ns.min()))
        ends.append(int(a_end.max()))
    if not starts:
        return 0, 0
    return min(starts), max(ends)


class _Timeline(msgspec.Struct, frozen=True, eq=False):
    """The device timeline over the region and its idle gaps."""

    r0: int
    r1: int
    #: max(r1 - r0, 0), a Python int: a hostile trace's region can exceed int64
    region: int
    #: activities in the trace (of every device): none means it ran on the CPU
    n_act: int
    #: the device's activities in the region, clipped to it ([s, e)), sorted by s, none empty
    rows: npt.NDArray[np.intp]
    s: I64
    e: I64
    busy: Cover
    #: the idle gaps [g0, g1), sorted; ender: the row of the activity ending each, -1 for the
    #: final gap (after the last activity)
    g0: I64
    g1: I64
    ender: npt.NDArray[np.intp]


def _device_timeline(
    trace: Trace,
    links: LaunchLinks,
    windows: Sequence[StepWindow],
    *,
    device_clock: bool = False,
    warmup_end_ns: int | None = None,
) -> _Timeline:
    """The union of the device's activities over the region, and the idle gaps between.

    ``device_clock`` (the clocks disagree): the region is the device's own span, first start
    to last end of its activities, so that busy is measured on one clock. ``warmup_end_ns``
    (a whole trace as one step): the region begins where the warm-up ends."""
    act = trace.activities
    a_start, a_end = act.start_ns, act.start_ns + act.dur_ns
    on_dev = labelled_device(trace)
    r0, r1 = _region(trace, links, windows, on_dev)
    if device_clock and on_dev.any():
        r0, r1 = int(a_start[on_dev].min()), int(a_end[on_dev].max())
    elif warmup_end_ns is not None and r0 < warmup_end_ns < r1:
        r0 = warmup_end_ns
    rows = np.flatnonzero(on_dev & (a_end > r0) & (a_start < r1))
    s, e = np.maximum(a_start[rows], r0), np.minimum(a_end[rows], r1)
    nz = e > s
    rows, s, e = rows[nz], s[nz], e[nz]
    order = start_order(s)  # the model keeps tables sorted by start
    if order is not None:
        rows, s, e = rows[order], s[order], e[order]
    if len(s):
        heads, me = union_runs(s, e)
        busy = Cover._from_disjoint(s[heads], me)
        g0, g1, ender = (
            np.r_[r0, me[:-1]],
            s[heads],
            _first_to_start(trace, links, rows, s, e, heads),
        )
    else:
        busy = Cover.of([], [])
        g0 = g1 = np.zeros(0, np.int64)
        ender = np.zeros(0, np.intp)
    last_end = int(busy.end_ns[-1]) if len(busy) else r0
    if r1 > last_end:
        g0, g1, ender = np.r_[g0, last_end], np.r_[g1, r1], np.r_[ender, -1]
    keep = g1 > g0
    return _Timeline(
        r0=r0,
        r1=r1,
        region=max(r1 - r0, 0),
        n_act=len(act),
        rows=rows,
        s=s,
        e=e,
        busy=busy,
        g0=g0[keep],
        g1=g1[keep],
        ender=ender[keep].astype(np.intp),
    )


def _first_to_start(
    trace: Trace,
    links: LaunchLinks,
    rows: npt.NDArray[np.intp],
    s: I64,
    e: I64,
    heads: npt.NDArray[np.intp],
) -> npt.NDArray[np.intp]:
    """The row of the activity that starts each run at ``heads``: where several start at once,
    the first by (end, stream, name, launch call), so that the choice is the same whatever the
    order of the trace's rows."""
    ender = rows[heads]
    nxt = heads + 1
    tied = heads[(nxt < len(s)) & (s[np.minimum(nxt, len(s) - 1)] == s[heads])] if len(s) else heads
    if not len(tied):
        return ender
    act = trace.activities
    ends = np.searchsorted(s, s[tied], side="right")
    for i, h, k in zip(
        np.searchsorted(heads, tied).tolist(), tied.tolist(), ends.tolist(), strict=True
    ):
        j = min(
            range(h, k),
            key=lambda j: (
                int(e[j]),
                int(act.stream[rows[j]]),
                trace.name_of(int(act.name[rows[j]])),
                int(links.launch_start_ns[rows[j]]),
                int(links.launch_end_ns[rows[j]]),
            ),
        )
        ender[i] = rows[j]
    return ender


class _HostWaits(msgspec.Struct, frozen=True, eq=False):
    """When the host waited: in synchronizing calls (each, and their union), for data, and in
    launch calls while a stream's queue was at the cap."""

    #: runtime rows that synchronize
    is_sync: npt.NDArray[np.bool_]
    sync_start: I64
    sync_end: I64
    sync: Cover
    data: Cover
    blocked: Cover


def _host_waits(
    trace: Trace, queues: Mapping[str, tuple[QueueSeries, QueueSeries]] | None, cap: int
) -> _HostWaits:
    """The host's syncs, its data waits (``enumerate(DataLoader)…__next__`` ranges) and its time
    blocked at the cap."""
    rt = trace.runtime
    is_sync = np.isin(rt.kind, np.array([int(k) for k in SYNC_KINDS], dtype=np.uint8))
    sy_s = rt.start_ns[is_sync]
    sy_e = sy_s + rt.dur_ns[is_sync]
    r = trace.ranges
    data_name = np.array(
        [_DATA_MARK in x and bool(_DATA_WAIT.search(x)) for x in trace.strings] or [False], bool
    )
    is_data = (
        ((r.kind == RangeKind.OP) | (r.kind == RangeKind.ANNOTATION)) & data_name[r.name]
        if len(r)
        else np.zeros(0, bool)
    )
    return _HostWaits(
        is_sync=is_sync,
        sync_start=sy_s,
        sync_end=sy_e,
        sync=Cover.of(sy_s, sy_e),
        data=Cover.of(r.start_ns[is_data], r.start_ns[is_data] + r.dur_ns[is_data]),
        blocked=_blocked_at_cap(trace, queues, cap),
    )


def _clock_mismatch(trace: Trace, links: LaunchLinks) -> ReportWarning | None:
    """A warning where the host's and the device's clocks cannot both be right."""
    matched = links.matched
    span = host_span(trace)
    if not matched.any() or span is None:
        return None
    act = trace.activities
    h0, h1 = span
    first_dev = int(act.start_ns[matched].min())
    last_dev = int((act.start_ns + act.dur_ns)[matched].max())
    l2s = np.sort(act.start_ns[matched] - links.launch_start_ns[matched])
    p50 = int(l2s[(len(l2s) - 1) // 2])
    if first_dev > h1:
        where = (
            f"the first device activity starts {format_ns(first_dev - h1)} after the last host "
            "event ends"
        )
    elif last_dev < h0:
        where = (
            f"the last device activity ends {format_ns(h0 - last_dev)} before the first host event"
        )
    elif h1 > h0 and p50 > h1 - h0:
        where = "launch-to-start delays exceed the whole host span"
    else:
        return None
    return ReportWarning(
        code="clock-mismatch",
        message=(
            f"the host and device clocks cannot both be right: every host event lies within "
            f"{format_ns(h1 - h0)}, {where}, and the median launch-to-start delay is "
            f"{format_ns(p50)}; "
            "launch delays, queue depth, run-ahead and the idle causes are withheld"
        ),
    )


def _missing_activity(
    trace: Trace, host: _HostWaits, tl: _Timeline
) -> tuple[Cover, ReportWarning | None]:
    """The long syncs during which the device is (almost) never busy, and a warning naming
    the longest."""
    ls0, ls1 = host.sync_start, host.sync_end
    long_sync = (ls1 - ls0) >= MISSING_ACTIVITY_MIN_NS
    if not long_sync.any():
        return Cover.of([], []), None
    ls0, ls1 = ls0[long_sync], ls1[long_sync]
    dry = tl.busy.between(ls0, ls1) < MISSING_ACTIVITY_BUSY_FRACTION * (ls1 - ls0)
    if not dry.any():
        return Cover.of([], []), None
    j = int(np.argmax(np.where(dry, ls1 - ls0, -1)))
    name = trace.name_of(int(trace.runtime.name[host.is_sync][long_sync][j]))
    return Cover.of(ls0[dry], ls1[dry]), ReportWarning(
        code="missing-activity",
        message=(
            f"{int(dry.sum())} sync(s) wait while no device activity is recorded "
            f"(longest: {name} waits {format_ns(int(ls1[j] - ls0[j]))} of the "
            f"{format_ns(tl.region)} traced): device activity is missing (graph replays not "
            "traced, another process's work, a profiler that dropped records); idle inside "
            "those waits is unattributed"
        ),
    )


def _activity_before_launch(trace: Trace, links: LaunchLinks) -> ReportWarning | None:
    """A warning where device activities start before their launch calls (skewed clocks)."""
    a_start = trace.activities.start_ns
    before = links.matched & (a_start < links.launch_start_ns)
    if not before.any():
        return None
    skew = int((links.launch_start_ns[before] - a_start[before]).max())
    return ReportWarning(
        code="activity-before-launch",
        message=(
            f"{int(before.sum())} device activities start before their launch call (by up to "
            f"{format_ns(skew)}): the device and host clocks are skewed; queue figures take such "
            "activities to start when their call started"
        ),
    )


class _Checks(msgspec.Struct, frozen=True, eq=False):
    """What makes some figures unreliable, and what the gap causes must then withhold."""

    warnings: list[ReportWarning]
    #: every gap is unattributed
    clocks_disagree: bool
    #: long syncs with (almost) no device activity: gaps mostly inside them are unattributed
    missing: Cover


def _checks(
    trace: Trace, links: LaunchLinks, tl: _Timeline, host: _HostWaits, clock: ReportWarning | None
) -> _Checks:
    """The warnings, in the report's order, and what they withhold from the gap causes
    (``clock``: the clock-mismatch warning, found first: the timeline depends on it)."""
    missing, dry = _missing_activity(trace, host, tl)
    found = (clock, dry, _activity_before_launch(trace, links))
    return _Checks(
        warnings=[w for w in found if w is not None],
        clocks_disagree=clock is not None,
        missing=missing,
    )


class _Causes(msgspec.Struct, frozen=True, eq=False):
    """Each gap's class (``_H_SHORT`` … ``_UNATTR``: its larger part, for the views that draw
    gaps and the gap counts), and the idle by class as a ClassCover: a gap the host was
    fetching data in for part of the time is split, its input part (the overlap with the data
    waits) input, the rest host."""

    cls: I64
    by_class: ClassCover


def _gap_causes(links: LaunchLinks, tl: _Timeline, host: _HostWaits, checks: _Checks) -> _Causes:
    """Each gap's class, through the launch call of the activity ending it (module docstring),
    and the idle by class, split by overlap where the host fetched data for part of a gap."""
    g0, g1, ender = tl.g0, tl.g1, tl.ender
    final = ender < 0
    cls = np.full(len(g0), _UNATTR, np.int64)
    safe = np.where(final, 0, ender)
    li = np.where(final, -1, links.launch_index[safe] if tl.n_act else -1)
    has = li >= 0
    l_start = np.where(has, links.launch_start_ns[safe] if tl.n_act else 0, 0)
    l_end = np.where(has, links.launch_end_ns[safe] if tl.n_act else 0, 0)
    dep = has & (l_end < g0)
    waited = (has & ~dep) | final
    upto = np.where(final, g1, np.maximum(l_start, g0))
    in_sync = host.sync.contains(g0)
    length = g1 - g0
    # the device waited for the host: the host's data waits in [g0, upto) are input idle
    cand = waited & ~in_sync
    fetched = Cover.of([], [])
    data_ns = np.zeros(len(g0), np.int64)
    if len(host.data) and cand.any():
        fetched = Cover.of(g0[cand], upto[cand]).intersect(host.data)
        data_ns[cand] = fetched.between(g0[cand], g1[cand])
    cls[dep] = _DEP
    cls[waited & in_sync] = _SYNC
    cls[cand & (2 * data_ns > length)] = _INPUT
    on_host = cand & (2 * data_ns <= length)
    cls[on_host & (length < LAUNCH_GAP_NS)] = _H_SHORT
    cls[on_host & (length >= LAUNCH_GAP_NS)] = _H_LONG
    if len(checks.missing):
        # idle mostly inside a wait with no activity recorded: the device may well have been
        # busy with work the trace lacks
        cls[2 * checks.missing.between(g0, g1) > length] = _UNATTR
    if checks.clocks_disagree:
        cls[:] = _UNATTR
    split = cand & (data_ns > 0) & (cls != _UNATTR)
    if not split.any():
        return _Causes(cls=cls, by_class=ClassCover.of_disjoint(g0, g1, cls, 6))
    # split gaps: their input pieces, and the rest as host (short or long by the gap's length)
    inp = fetched.intersect(Cover.of(g0[split], g1[split]))
    rest = Cover.of(g0[split], g1[split]).subtract(inp)
    rest_gap = np.searchsorted(g0, rest.start_ns, side="right") - 1
    rest_cls = np.where(length[rest_gap] < LAUNCH_GAP_NS, _H_SHORT, _H_LONG)
    ps = np.concatenate([g0[~split], inp.start_ns, rest.start_ns])
    pe = np.concatenate([g1[~split], inp.end_ns, rest.end_ns])
    pc = np.concatenate([cls[~split], np.full(len(inp), _INPUT, np.int64), rest_cls])
    order = np.argsort(ps, kind="stable")
    return _Causes(cls=cls, by_class=ClassCover.of_disjoint(ps[order], pe[order], pc[order], 6))


def _blocked_at_cap(
    trace: Trace, queues: Mapping[str, tuple[QueueSeries, QueueSeries]] | None, cap: int
) -> Cover:
    """The host in a launch call while some stream's queue is full."""
    cs, ce = [], []
    for depth, _flight in (queues or {}).values():
        t, v = depth.time_ns, depth.value
        if len(t) > 1:
            full = np.flatnonzero(v[:-1] >= cap)
            cs.append(t[full])
            ce.append(t[full + 1])
    if not cs:
        return Cover.of([], [])
    cap_cover = Cover.of(np.concatenate(cs), np.concatenate(ce))
    return cap_cover.intersect(launch_cover(trace)) if len(cap_cover) else cap_cover


def _share_bounds(
    trace: Trace,
    links: LaunchLinks,
    tl: _Timeline,
    w_start: I64,
    w_end: I64,
    *,
    one_clock: bool = True,
) -> I64:
    """The boundaries of the steps' shares (n + 1): each at its step's first activity, the first
    at the region's start, the last at its end; a step with no activity owns nothing.

    Where the device was idle just before a step's first activity, the idle gap that ends there
    is split at the step's host start: the part before it the previous step's (its host was
    still at work), the part after it this step's (the device waited for this step's fetch and
    launches). ``one_clock`` False (the clocks disagree): at the first activity, as host and
    device times cannot be compared."""
    n_steps = len(w_start)
    firsts = np.full(n_steps, tl.r1, np.int64)
    rows = tl.rows
    m_rows = rows[np.isin(rows, np.flatnonzero(links.matched))] if len(rows) else rows
    if len(m_rows):
        ls = links.launch_start_ns[m_rows]
        k = window_of(ls, w_start, w_end)
        ok = k >= 0
        ks, first_s = k[ok], np.maximum(trace.activities.start_ns[m_rows][ok], tl.r0)
        if len(ks):
            np.minimum.at(firsts, ks, first_s)
    if one_clock and len(tl.busy) and n_steps > 1:
        f = firsts[1:]
        k = tl.busy.index_at(f)
        # the device's run starts at this first activity: idle since the run before it
        idle_before = (k >= 0) & (tl.busy.start_ns[np.maximum(k, 0)] == f) & (f > tl.r0)
        prev_end = np.where(k > 0, tl.busy.end_ns[np.maximum(k - 1, 0)], tl.r0)
        moved = np.minimum(np.maximum(w_start[1:], prev_end), f)
        firsts[1:] = np.where(idle_before, moved, f)
    bounds = np.r_[tl.r0, firsts[1:], tl.r1].astype(np.int64)
    bounds[1:] = np.minimum.accumulate(bounds[1:][::-1])[::-1]
    clipped: I64 = np.clip(bounds, tl.r0, tl.r1)
    return clipped


class _Shares(msgspec.Struct, frozen=True, eq=False):
    """The figures of consecutive shares of the timeline, one entry per share: the steps' or
    the whole region as one share (the run)."""

    #: each share's start, end and length, as Python ints (a hostile trace's region exceeds
    #: int64: the run's length is given, not computed)
    start: list[int]
    end: list[int]
    region: list[int]
    busy: I64
    #: idle by gap class, (6, n)
    cls: I64
    launch_gaps: I64
    host_work_gaps: I64
    #: over the host's window (a step's, or the region): blocked at the cap, sync and data waits
    blocked: I64
    sync_wait: I64
    #: what the sync wait is a share of: the window's length
    sync_span: list[int]
    #: what the syncs cost in the share (:func:`_sync_cost`)
    sync_cost: I64
    data_wait: I64
    #: each gap's share (index)
    gap_share: npt.NDArray[np.intp]


class _SyncIdle(msgspec.Struct, frozen=True, eq=False):
    """The idle that prices the syncs (docs/how-it-works.md, "What a sync costs")."""

    #: the sync idle: the gaps that begin while the host is in a sync
    opened: Cover
    #: the syncs' waits (every call, as one cover) inside the idle known to be the device's
    #: waiting, for the host or for other work (host, input and dependency idle); not inside
    #: unattributed idle, which is not known to be
    waited: Cover


def _call_spans(syncs: SyncSummary) -> tuple[I64, I64]:
    """Each sync call's [start, end), in the order of ``syncs.calls``."""
    calls = syncs.calls
    start = np.fromiter((c.start_ns for c in calls), np.int64, len(calls))
    dur = np.fromiter((c.dur_ns for c in calls), np.int64, len(calls))
    return start, start + dur


def _overlap(a: Cover, b_s: I64, b_e: I64) -> Cover:
    """The part of the sorted, disjoint ``[b_s, b_e)`` inside ``a``: each of ``a``'s
    intervals clipped to each of those it overlaps (binary searches from the side of ``a``,
    the fewer: the syncs, whose waits can span many gaps)."""
    if not len(a) or not len(b_s):
        return Cover.of([], [])
    first = np.searchsorted(b_e, a.start_ns, side="right")
    n = np.maximum(np.searchsorted(b_s, a.end_ns, side="left") - first, 0)
    i = np.repeat(np.arange(len(a)), n)
    # the intervals of b over each of a's: first, first + 1, ... (n of them)
    j = np.repeat(first - np.cumsum(n) + n, n) + np.arange(len(i))
    s, e = np.maximum(a.start_ns[i], b_s[j]), np.minimum(a.end_ns[i], b_e[j])
    return Cover.of(s, e)  # sorted already; touching pieces join


def _sync_idle(causes: _Causes, calls: tuple[I64, I64]) -> _SyncIdle:
    """The sync idle, and the syncs' waits inside the idle a wait costs in."""
    bc = causes.by_class
    sync = bc.cls == _SYNC
    known = (bc.cls != _SYNC) & (bc.cls != _UNATTR)
    return _SyncIdle(
        opened=Cover._from_disjoint(bc.start_ns[sync], bc.end_ns[sync]),
        waited=_overlap(Cover.of(*calls), bc.start_ns[known], bc.end_ns[known]),
    )


def _sync_cost(opened_ns: I64, waited: Cover, lo: I64, hi: I64) -> I64:
    """What syncs cost over each stretch ``[lo, hi)`` (docs/how-it-works.md, "What a sync
    costs"): ``opened_ns``, the sync idle they opened (a share's: the sync idle in it; a site's
    calls': the sync gaps that began inside one), plus their wait inside the idle the device is
    known to spend waiting, ``waited`` (:class:`_SyncIdle`), in the stretch. A share's is never
    above its idle, and shares that tile the region cost what the region costs."""
    return opened_ns + waited.between(lo, hi)


class _Parts(msgspec.Struct, frozen=True, eq=False):
    """What the shares' figures are measured on."""

    busy: Cover
    causes: _Causes
    host: _HostWaits
    sync_idle: _SyncIdle


def _shares(
    parts: _Parts,
    lo: I64,
    hi: I64,
    window: tuple[I64, I64],
    gap_share: npt.NDArray[np.intp],
    sync_wait: I64 | None = None,
) -> _Shares:
    """The figures of the shares ``[lo, hi)`` of the timeline, whose host windows are
    ``window`` (their sync wait: ``sync_wait`` where given); ``gap_share``: each gap's share,
    -1 for a gap outside every share (the gap counts are of the gaps in the share)."""
    w_start, w_end = window
    n = len(lo)
    cls = np.where(gap_share >= 0, parts.causes.cls, -1)
    return _Shares(
        start=lo.tolist(),
        end=hi.tolist(),
        region=(hi - lo).tolist(),
        busy=parts.busy.between(lo, hi),
        cls=parts.causes.by_class.between(lo, hi),
        launch_gaps=np.bincount(gap_share[cls == _H_SHORT], minlength=n),
        host_work_gaps=np.bincount(gap_share[cls == _H_LONG], minlength=n),
        blocked=parts.host.blocked.between(w_start, w_end),
        sync_wait=parts.host.sync.between(w_start, w_end) if sync_wait is None else sync_wait,
        sync_span=(w_end - w_start).tolist(),
        sync_cost=_sync_cost(
            parts.sync_idle.opened.between(lo, hi), parts.sync_idle.waited, lo, hi
        ),
        data_wait=parts.host.data.between(w_start, w_end),
        gap_share=gap_share,
    )


def _step_shares(
    trace: Trace,
    links: LaunchLinks,
    tl: _Timeline,
    parts: _Parts,
    windows: Sequence[StepWindow],
    step_sync_wait_ns: Sequence[int],
    *,
    one_clock: bool = True,
) -> _Shares:
    """The steps' shares (at least one step); their sync wait: ``step_sync_wait_ns`` where it
    has one per step (each step's, clipped to it), else the syncs inside each window."""
    w_start = np.array([w.start_ns for w in windows], np.int64)
    w_end = np.array([w.end_ns for w in windows], np.int64)
    bounds = _share_bounds(trace, links, tl, w_start, w_end, one_clock=one_clock)
    gap_step = np.clip(np.searchsorted(bounds, tl.g0, side="right") - 1, 0, len(windows) - 1)
    given = len(step_sync_wait_ns) == len(windows)
    waits = np.array(step_sync_wait_ns, np.int64) if given else None
    return _shares(parts, bounds[:-1], bounds[1:], (w_start, w_end), gap_step, waits)


def _region_share(
    tl: _Timeline, parts: _Parts, steps: _Shares | None, first_step: int = 0
) -> _Shares:
    """The run's share: the region from the start of step ``first_step``'s share (the first
    steady step, after the warm-up steps) to its end; its sync wait the steady steps' where
    there are steps."""
    start = steps.start[first_step] if steps is not None and first_step else tl.r0
    lo, hi = np.array([start], np.int64), np.array([tl.r1], np.int64)
    wait = np.array([steps.sync_wait[first_step:].sum()], np.int64) if steps is not None else None
    # the gaps with idle in the region: those its idle figures (and the run's lists) measure
    in_region = np.where(tl.g1 > start, 0, -1).astype(np.intp)
    whole = _shares(parts, lo, hi, (lo, hi), in_region, wait)
    # its length as _Timeline has it (a Python int, never below 0)
    region = tl.region if start == tl.r0 else max(tl.r1 - start, 0)
    return msgspec.structs.replace(whole, region=[region], sync_span=[region])


def _share_bound(sh: _Shares, k: int) -> StepBound:
    """Share ``k``'s label and figures."""
    region, busy = sh.region[k], int(sh.busy[k])
    idle = _classes_to_cause(sh.cls[:, k])
    label, lead = label_of(region, busy, idle)
    wait = int(sh.sync_wait[k])
    evidence = BoundEvidence(
        busy_pct=pct(busy, region),
        idle_pct_by_cause=pcts(idle, region),
        leading_cause=lead,
        launch_gaps=int(sh.launch_gaps[k]),
        launch_gaps_ns=int(sh.cls[_H_SHORT, k]),
        host_work_gaps=int(sh.host_work_gaps[k]),
        host_work_ns=int(sh.cls[_H_LONG, k]),
        blocked_at_cap_ns=int(sh.blocked[k]),
        sync_wait_ns=wait,
        sync_wait_pct=pct(wait, sh.sync_span[k]),
        sync_cost_pct=pct(int(sh.sync_cost[k]), region),
        data_wait_ns=int(sh.data_wait[k]),
    )
    return step_bound(label, sh.start[k], sh.end[k], region, busy, idle, evidence)


def _trace_run(
    trace: Trace,
    tl: _Timeline,
    parts: _Parts,
    whole: _Shares,
    syncs: SyncSummary,
    group_keys: Sequence[str],
    group_of: npt.NDArray[np.intp] | None,
    *,
    kernels: Sequence[DeviceTime],
    clock: ReportWarning | None = None,
) -> Bound:
    """The run's bound: the region's (its share ``whole``: the steady state), with the run's
    lists (host frames, sync sites, the top of ``kernels``, waits) and advice."""
    share = _share_bound(whole, 0)
    causes = parts.causes
    lo = whole.start[0]
    steady = tl.g1 > lo
    g0, g1, cls = np.maximum(tl.g0[steady], lo), tl.g1[steady], causes.cls[steady]
    frames, explained = _host_frames(trace, causes.by_class, lo, tl.r1, share.evidence)
    notes = list(share.evidence.notes)
    if clock is not None:
        notes.append(
            "the host and device clocks disagree: busy is measured over the device's own span "
            "(its first to its last activity); the idle causes, run-ahead and steps in flight, "
            "which compare the two clocks, are withheld, and so are queue depth and launch "
            "delays"
        )
    evidence = msgspec.structs.replace(
        share.evidence,
        host_frames=frames,
        host_explained_pct=explained,
        sync_sites=_sync_costs(syncs, parts.sync_idle, (g0, g1, cls), (lo, tl.r1)),
        top_kernels=_top_kernels(kernels),
        waited_on=_waited_on(trace, g0, g1, cls, tl.ender[steady], group_keys, group_of),
        notes=notes,
    )
    share = msgspec.structs.replace(share, evidence=evidence)
    # a trace without device activity ran on the CPU (or recorded none): say what that means
    return run_bound(share, asynchronous=tl.n_act > 0, clocks_disagree=clock is not None)


def _idle_gaps(tl: _Timeline, causes: _Causes, steps: _Shares | None) -> IdleGaps:
    """The gaps for the views, each with its cause and step (-1 without steps)."""
    return IdleGaps(
        start_ns=tl.g0,
        end_ns=tl.g1,
        cause=_CAUSE_OF_CLASS[causes.cls],
        launch_gap=causes.cls == _H_SHORT,
        step=(
            steps.gap_share.astype(np.int64)
            if steps is not None
            else np.full(len(tl.g0), -1, np.int64)
        ),
    )


def bound_of_trace(
    trace: Trace,
    links: LaunchLinks,
    windows: Sequence[StepWindow],
    *,
    syncs: SyncSummary,
    queues: Mapping[str, tuple[QueueSeries, QueueSeries]] | None = None,
    cap: int = DEFAULT_QUEUE_CAP,
    step_sync_wait_ns: Sequence[int] = (),
    group_keys: Sequence[str] = (),
    group_of: npt.NDArray[np.intp] | None = None,
    warmup: WarmUp | None = None,
) -> TraceBound:
    """The run's and every step's label, with figures, evidence, advice and warnings.

    ``warmup`` (:func:`~asynctrace.analysis.warmup.find_warmup`): the run's figures and label
    describe the steady state after it — a whole trace's region begins where it ends, and with
    steps the run leaves out its ``steps`` leading steps (each step keeps its own figures; the
    steady steps' add up to the run's)."""
    clock = _clock_mismatch(trace, links)
    whole_trace = not windows or windows[0].source == "trace"
    w_end = warmup.end_ns if warmup is not None and whole_trace and clock is None else None
    tl = _device_timeline(
        trace, links, windows, device_clock=clock is not None, warmup_end_ns=w_end
    )
    host = _host_waits(trace, queues, cap)
    checks = _checks(trace, links, tl, host, clock)
    causes = _gap_causes(links, tl, host, checks)
    parts = _Parts(
        busy=tl.busy, causes=causes, host=host, sync_idle=_sync_idle(causes, _call_spans(syncs))
    )
    per = (
        _step_shares(trace, links, tl, parts, windows, step_sync_wait_ns, one_clock=clock is None)
        if windows
        else None
    )
    left_out = warmup.steps if warmup is not None and not whole_trace else 0
    notes: list[str] = []
    if left_out >= len(windows) > 0:
        notes.append(f"warm-up lasts through all {len(windows)} step(s): these figures include it")
        left_out = 0
    elif left_out:
        notes.append(f"warm-up: the first {left_out} step(s) are left out of the run's figures")
    whole = _region_share(tl, parts, per, left_out)
    # one definition of time per name, over the run's region: the report's table, whose busy
    # times add up to the run's busy time, and the top kernels of its evidence
    kernels = device_times(trace, start_ns=whole.start[0], end_ns=whole.end[0])
    run = _trace_run(
        trace, tl, parts, whole, syncs, group_keys, group_of, kernels=kernels, clock=clock
    )
    if notes:
        ev = msgspec.structs.replace(run.evidence, notes=[*run.evidence.notes, *notes])
        run = msgspec.structs.replace(run, evidence=ev)
    return TraceBound(
        run=run,
        steps=[_share_bound(per, k) for k in range(len(windows))] if per is not None else [],
        warnings=checks.warnings,
        sync_cost_ns=int(whole.sync_cost[0]),
        clocks_disagree=checks.clocks_disagree,
        gaps=_idle_gaps(tl, causes, per),
        kernels=kernels,
    )


def _sync_costs(
    syncs: SyncSummary,
    idle: _SyncIdle,
    gaps: tuple[I64, I64, I64],
    region: tuple[int, int],
) -> list[SyncCost]:
    """Per (site, op), over the run's region ``[lo, hi)``: its calls there (those that overlap
    it), their wait there, the sync idle opened while the host was in one of them (``gaps``:
    the region's gaps, their start clipped to it) and what they cost (:func:`_sync_cost`)."""
    lo, hi = region
    c_start, c_end = _call_spans(syncs)
    inside = (c_start < hi) & (np.maximum(c_end, c_start + 1) > lo)
    calls = [c for c, x in zip(syncs.calls, inside.tolist(), strict=True) if x]
    if not calls:
        return []
    c_start, c_end = c_start[inside], c_end[inside]
    keys: dict[tuple[str, str], int] = {}
    c_key = np.array([keys.setdefault((c.site, c.op), len(keys)) for c in calls], np.intp)
    # a blocking copy where any call of the (site, op) is one (one op is one kind in practice)
    copies = {(c.site, c.op) for c in calls if c.kind == "blocking-copy"}
    g0, g1, cls = gaps
    sg = np.flatnonzero(cls == _SYNC)
    # the sync idle each call opened
    opened = np.zeros(len(calls), np.int64)
    if len(sg):
        # calls that start together in the order of their end and (site, op), not of the rows
        rank = np.empty(len(keys), np.intp)
        rank[[i for _, i in sorted(keys.items())]] = np.arange(len(keys))
        order = np.lexsort((rank[c_key], c_end, c_start))
        cs, ce = c_start[order], c_end[order]
        reach = np.maximum.accumulate(ce)
        # the call reaching furthest among those started so far (the one that covers g0 when
        # the latest-started call has already returned)
        far = np.maximum.accumulate(np.where(ce == reach, np.arange(len(cs)), 0))
        j = np.searchsorted(cs, g0[sg], side="right") - 1
        jj = np.maximum(j, 0)
        pick = np.where(ce[jj] > g0[sg], jj, far[jj])
        got = (j >= 0) & (ce[pick] > g0[sg])
        np.add.at(opened, order[pick[got]], (g1 - g0)[sg][got])
    # integer sums: float weights would overflow (and warn) on a hostile file's durations
    w_s, w_e = np.maximum(c_start, lo), np.minimum(c_end, hi)
    wait = np.zeros(len(keys), np.int64)
    np.add.at(wait, c_key, w_e - w_s)
    idle_ns = np.zeros(len(keys), np.int64)
    np.add.at(idle_ns, c_key, opened)
    cost = np.zeros(len(keys), np.int64)
    np.add.at(cost, c_key, _sync_cost(opened, idle.waited, w_s, w_e))
    # calls of one (site, op) that overlap (on two threads) wait together: that wait costs
    # once, measured over their union
    srt = np.lexsort((w_s, c_key))
    k_s, s_s, e_s = c_key[srt], w_s[srt], w_e[srt]
    twice = (k_s[1:] == k_s[:-1]) & (s_s[1:] < e_s[:-1])
    for i in sorted_unique(k_s[1:][twice]).tolist():
        mine = c_key == i
        u = Cover.of(w_s[mine], w_e[mine])
        # each call's opened idle to the stretch of the union that holds it
        held = np.zeros(len(u), np.int64)
        np.add.at(held, np.maximum(u.index_at(w_s[mine]), 0), opened[mine])
        cost[i] = int(_sync_cost(held, idle.waited, u.start_ns, u.end_ns).sum())
    count = np.bincount(c_key, minlength=len(keys))
    out = [
        SyncCost(
            site=site,
            op=op,
            count=int(count[i]),
            wait_ns=int(wait[i]),
            idle_ns=int(idle_ns[i]),
            cost_ns=int(cost[i]),
            kind="blocking-copy" if (site, op) in copies else "sync",
        )
        for (site, op), i in keys.items()
    ]
    out.sort(key=lambda c: (-c.cost_ns, -c.count, c.site, c.op))
    return out[:10]


#: the layers of host events, in the order a segment's frame is named by: the runtime call
#: the host sat in, else the user's innermost Python frame, any Python frame, the operator, the
#: annotation or NVTX range
_RT, _USER, _PY, _OP, _ANN = range(5)
#: the idle the frames explain, by leading cause: the host's when the device waited on
#: the host (host, sync, input); where it waited on other work, or its cause is unknown, what
#: the host did then explains nothing, and the frames are those of the host idle
_FRAME_CLASSES = {
    "host": (_H_SHORT, _H_LONG),
    "sync": (_SYNC,),
    "input": (_INPUT,),
    "dependency": (_H_SHORT, _H_LONG),
    "unattributed": (_H_SHORT, _H_LONG),
}


def _thread_layers(trace: Trace) -> list[tuple[int, I64, I64, I64, npt.NDArray[np.int32]]]:
    """Every host event that can name a frame, as (layer, thread key, start, end, name), on
    the threads that call the runtime: they issue the device's work; a thread that never does
    (a Python thread waiting on a lock) is not what the device waits on. None without runtime
    calls."""
    strings = trace.strings
    rt, r, py = trace.runtime, trace.ranges, trace.python_frames
    if not len(rt):
        return []

    def key(pid: I64, tid: I64) -> I64:
        k: I64 = (pid.astype(np.int64) << 32) ^ (tid.astype(np.int64) & 0xFFFFFFFF)
        return k

    out = [(_RT, key(rt.pid, rt.tid), rt.start_ns, rt.start_ns + rt.dur_ns, rt.name)]
    if len(py):
        used = sorted_unique(py.name)
        user_ids = used[[is_user_frame(strings[int(i)]) for i in used.tolist()]]
        u = np.isin(py.name, user_ids)
        k, s, e = key(py.pid, py.tid), py.start_ns, py.start_ns + py.dur_ns
        if u.any():
            out.append((_USER, k[u], s[u], e[u], py.name[u]))
        out.append((_PY, k, s, e, py.name))
    if len(r):
        op = r.kind == RangeKind.OP
        ann = (r.kind == RangeKind.ANNOTATION) | (r.kind == RangeKind.NVTX)
        for layer, on in ((_OP, op), (_ANN, ann)):
            if on.any():
                k = key(r.pid[on], r.tid[on])
                out.append((layer, k, r.start_ns[on], (r.start_ns + r.dur_ns)[on], r.name[on]))
    launching = sorted_unique(key(rt.pid, rt.tid))
    return [
        (ly, k[m], s[m], e[m], n[m]) for ly, k, s, e, n in out if (m := np.isin(k, launching)).any()
    ]


def _by_name_on_ties(
    trace: Trace, parts: list[tuple[int, I64, I64, I64, npt.NDArray[np.int32]]]
) -> list[tuple[int, I64, I64, I64, npt.NDArray[np.int32]]]:
    """Each layer's events in the order of :func:`start_order_on_ties`: where two events of a
    thread share their start and end, the innermost is the same whatever the rows' order."""
    out = []
    for layer, k, s, e, name in parts:
        order = start_order_on_ties(trace, s, e, name)
        out.append((layer, k[order], s[order], e[order], name[order]))
    return out


_Layer = tuple[int, I64, I64, I64, npt.NDArray[np.int32]]


def _thread_segments(idle: Cover, parts: list[_Layer], n_str: int) -> tuple[I64, I64, I64]:
    """The idle cut into segments by every host event's bounds, each with the key of its
    innermost frame (layer, name and, for a runtime call, the user's line around it), one host
    thread at a time: (start, end, key) of the framed segments."""
    seg_s: list[I64] = []
    seg_e: list[I64] = []
    seg_key: list[I64] = []
    threads = (
        sorted_unique(np.concatenate([p[1] for p in parts])) if parts else np.zeros(0, np.int64)
    )
    for th in threads.tolist():
        mine = [(layer, s[k == th], e[k == th], n[k == th]) for layer, k, s, e, n in parts]
        mine = [m for m in mine if len(m[1])]
        # only the idle this thread has events in: the rest has no frame of it
        mine_idle = idle.intersect(
            Cover.of(np.concatenate([m[1] for m in mine]), np.concatenate([m[2] for m in mine]))
        )
        cuts = sorted_unique(
            np.concatenate(
                [mine_idle.start_ns, mine_idle.end_ns, *(np.r_[s, e] for _, s, e, _ in mine)]
            )
        )
        a, b = cuts[:-1], cuts[1:]
        inside = mine_idle.contains(a)
        a, b = a[inside], b[inside]
        got = np.full((5, len(a)), -1, np.int64)
        for layer, s, e, n in mine:
            i = innermost_at(s, e, a)
            got[layer] = np.where(i >= 0, n[np.maximum(i, 0)], -1)
        rt_, user, py_, op, ann = got
        # the frame's layer and name, and (for a runtime call) the user's line around it
        has = [rt_ >= 0, user >= 0, py_ >= 0, op >= 0, ann >= 0]
        layer_of = np.select(has, [_RT, _USER, _PY, _OP, _ANN], -1)
        name_of = np.select(has, [rt_, user, py_, op, ann], -1)
        site = np.where(rt_ >= 0, user, -1)
        framed = layer_of >= 0
        seg_s.append(a[framed])
        seg_e.append(b[framed])
        seg_key.append((layer_of[framed] * n_str + name_of[framed]) * n_str + site[framed] + 1)
    empty = np.zeros(0, np.int64)
    return (
        np.concatenate(seg_s) if seg_s else empty,
        np.concatenate(seg_e) if seg_e else empty,
        np.concatenate(seg_key) if seg_key else empty,
    )


def _bare_rows(trace: Trace, idle: Cover, framed: Cover, hi: int) -> list[HostFrame]:
    """The idle no host event covers, as rows: before the trace's last host event the host ran
    something unrecorded; after it (a step range outliving the record window) nothing was
    recorded at all. Each with the number of idle gaps it lies in."""
    bare = idle.total_ns - framed.total_ns
    if bare <= 0:
        return []
    last = _last_host_event_end(trace)
    after = idle.clip(last, hi) if last is not None else Cover.of([], [])
    tail = after.subtract(framed) if len(after) else after
    uncovered = idle.subtract(framed)
    gap_of = np.searchsorted(idle.start_ns, uncovered.start_ns, side="right") - 1
    in_tail = tail.contains(uncovered.start_ns)
    rows = []
    for label, part, mask in (
        ("(no host frame)", bare - tail.total_ns, ~in_tail),
        ("(nothing recorded: after the last host event)", tail.total_ns, in_tail),
    ):
        if part > 0:
            gaps = len(sorted_unique(gap_of[mask]))
            rows.append(HostFrame(frame=label, site="", idle_ns=part, gaps=gaps))
    return rows


def _host_frames(
    trace: Trace, by_class: ClassCover, lo: int, hi: int, ev: BoundEvidence
) -> tuple[list[HostFrame], float | None]:
    """What the host was in while the device idled for the leading cause: each frame's time
    inside that idle, measured (on every host thread, the innermost frame of each moment gets
    it: the runtime call the host sat in, named with the user's line around it, else the
    user's Python frame, any Python frame, the operator), and the share of the idle the listed
    frames cover (None where the trace has no host events to measure it from)."""
    want = np.isin(by_class.cls, _FRAME_CLASSES[ev.leading_cause])
    ps = np.maximum(by_class.start_ns[want], lo)
    pe = np.minimum(by_class.end_ns[want], hi)
    keep = pe > ps
    idle = Cover._from_disjoint(ps[keep], pe[keep])
    layers = _thread_layers(trace)
    if not layers:
        return [], None
    if idle.total_ns == 0:
        return [], 0.0
    # each layer's events that overlap the idle, by thread
    parts = []
    for layer, k, s, e, name in layers:
        on = (e > s) & (idle.between(s, e) > 0)
        if on.any():
            parts.append((layer, k[on], s[on], e[on], name[on]))
    n_str = len(trace.strings) + 1
    s_all, e_all, k_all = _thread_segments(idle, _by_name_on_ties(trace, parts), n_str)
    # one entry per (frame, site) as shown
    uniq, inv = unique_inverse(k_all)
    label_of: dict[tuple[str, str], int] = {}
    label_id = np.array(
        [
            label_of.setdefault(_frame_label(trace, int(u), n_str), len(label_of))
            for u in uniq.tolist()
        ],
        np.intp,
    )
    lab = label_id[inv] if len(inv) else np.zeros(0, np.intp)
    total = np.bincount(lab, weights=e_all - s_all, minlength=len(label_of)).astype(np.int64)
    gap = np.searchsorted(idle.start_ns, s_all, side="right") - 1
    pairs = sorted_unique(lab.astype(np.int64) * (len(idle) + 1) + gap)
    gaps = np.bincount(pairs // (len(idle) + 1), minlength=len(label_of))
    framed_cover = Cover.of(s_all, e_all)
    rows = [
        HostFrame(frame=f, site=st, idle_ns=int(total[i]), gaps=int(gaps[i]))
        for (f, st), i in label_of.items()
    ]
    rows += _bare_rows(trace, idle, framed_cover, hi)
    rows.sort(key=lambda h: (-h.idle_ns, h.frame, h.site))
    listed = rows[:5]
    ids = [label_of[(h.frame, h.site)] for h in listed if (h.frame, h.site) in label_of]
    sel = np.isin(lab, np.array(ids, np.intp))
    explained = Cover.of(s_all[sel], e_all[sel]).total_ns
    return listed, pct(explained, idle.total_ns)


def _last_host_event_end(trace: Trace) -> int | None:
    """The end of the trace's last host event other than a step range (which can outlive what
    the profiler recorded)."""
    r = trace.ranges
    ends = [
        (s + d).max()
        for s, d in (
            (trace.runtime.start_ns, trace.runtime.dur_ns),
            (trace.python_frames.start_ns, trace.python_frames.dur_ns),
            (
                r.start_ns[(r.kind != RangeKind.STEP) & (r.kind != RangeKind.GPU_ANNOTATION)],
                r.dur_ns[(r.kind != RangeKind.STEP) & (r.kind != RangeKind.GPU_ANNOTATION)],
            ),
        )
        if len(s)
    ]
    return int(max(ends)) if ends else None


def _frame_label(trace: Trace, key: int, n_str: int) -> tuple[str, str]:
    """A segment key's (frame, site) as the evidence shows them."""
    site_id = key % n_str - 1
    name = (key // n_str) % n_str
    layer = key // (n_str * n_str)
    text = trace.name_of(name)
    if layer == _RT:
        return text, site_of(trace.name_of(site_id)) if site_id >= 0 else ""
    if layer in (_USER, _PY):
        fn = text.split("): ", 1)[1] if "): " in text else text
        return fn, site_of(text) if layer == _USER else ""
    return text, ""


def _top_kernels(kernels: Sequence[DeviceTime]) -> list[KernelTime]:
    """The five names of most device time (``total_ns``), equal totals in the names' order."""
    top = sorted(kernels, key=lambda k: (-k.total_ns, k.name))[:5]
    return [KernelTime(name=k.name, count=k.count, total_ns=k.total_ns) for k in top]


def _waited_on(
    trace: Trace,
    g0: I64,
    g1: I64,
    cls: I64,
    ender: npt.NDArray[np.intp],
    group_keys: Sequence[str],
    group_of: npt.NDArray[np.intp] | None,
) -> list[WaitedOn]:
    d = np.flatnonzero(cls == _DEP)
    if not len(d):
        return []
    rows = ender[d]
    act = trace.activities
    if group_of is not None and len(group_keys):
        stream_id = group_of[rows].astype(np.int64)
        keys = list(group_keys)
    else:
        uniq_s, inv_s = unique_inverse(act.stream[rows])
        stream_id = inv_s.reshape(-1).astype(np.int64)
        keys = [str(int(x)) for x in uniq_s.tolist()]
    names = act.name[rows].astype(np.int64)
    pair = stream_id * (int(names.max()) + 1) + names
    uniq, inv = unique_inverse(pair)
    inv = inv.reshape(-1)
    idle = np.bincount(inv, weights=g1[d] - g0[d]).astype(np.int64)
    gaps = np.bincount(inv)
    width = int(names.max()) + 1
    # equal idle by stream, then the name's text (a name's index follows the rows' order)
    text = [trace.name_of(int(u) % width) for u in uniq.tolist()]
    top = np.array(
        sorted(range(len(uniq)), key=lambda i: (-int(idle[i]), int(uniq[i]) // width, text[i]))[:5],
        np.intp,
    )
    return [
        WaitedOn(
            stream=keys[int(uniq[i]) // width],
            name=trace.name_of(int(uniq[i]) % width),
            gaps=int(gaps[i]),
            idle_ns=int(idle[i]),
        )
        for i in top.tolist()
    ]
