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
  waited for the host: **sync** when the host was inside a synchronizing call at ``g0``;
  **input** when the host spent most of ``[g0, launch)`` waiting for data
  (``enumerate(DataLoader)…__next__``); **host** otherwise. A gap ended by an activity without a
  launch call is **unattributed**. The final gap (after the last activity, to the region's end)
  has no activity ending it and is judged by what the host was doing: sync if it was inside a
  sync at ``g0``, input if it waited for data most of the gap, else host. Gaps that begin inside
  a long sync with no device activity recorded (:data:`MISSING_ACTIVITY_MIN_NS`) and every gap of
  a trace whose clocks disagree are unattributed.
* **Label.** ``device-bound`` when idle < :data:`DEVICE_BOUND_IDLE_FRACTION` of the region;
  otherwise the cause with most idle: ``host-bound``, ``sync-bound``, ``input-bound``,
  ``dependency-bound``, or ``undetermined`` when most idle is unattributed.
* **Per step, without overlap.** Step k owns the device timeline from the start of its first
  activity to the start of step k + 1's first activity (the first step from the region's start,
  the last to its end; a step with no activity owns nothing): shares partition the region, so the
  steps' busy and idle (by cause) add up to the run's exactly.

Everything is arithmetic on sorted numpy arrays (:class:`~asynctrace.analysis.timeline.Cover`):
one merge of the activities, one vectorised classification of the gaps, binary searches for
the per-step shares. Only the evidence lists (host frames at the longest gaps, at most
:data:`FRAME_SAMPLE_GAPS`) loop in Python.

:func:`bound_of_records` gives the same label, from the same rule and thresholds, to a live
session's step records, which have no per-gap timeline (see its docstring).
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
    Bound,
    BoundEvidence,
    HostFrame,
    IdleByCause,
    KernelTime,
    ReportWarning,
    StepBound,
    SyncCost,
    WaitedOn,
)
from asynctrace.analysis.launches import LaunchLinks
from asynctrace.analysis.queue import QueueSeries, launch_cover
from asynctrace.analysis.steps import SYNC_KINDS, StepWindow, host_span
from asynctrace.analysis.syncs import SyncSummary, _ThreadFrames
from asynctrace.analysis.timeline import ClassCover, Cover, start_order, union_runs
from asynctrace.records import StepRecord
from asynctrace.traces.model import RangeKind, Trace

__all__ = [
    "CAUSES",
    "DEVICE_BOUND_IDLE_FRACTION",
    "FRAME_SAMPLE_GAPS",
    "LABELS",
    "LAUNCH_GAP_NS",
    "MISSING_ACTIVITY_BUSY_FRACTION",
    "MISSING_ACTIVITY_MIN_NS",
    "RECORDS_BEHIND_FRACTION",
    "RECORDS_FULL_IN_FLIGHT",
    "SYNC_COST_FRACTION",
    "Bound",
    "BoundEvidence",
    "HostFrame",
    "IdleByCause",
    "IdleGaps",
    "KernelTime",
    "RecordsBound",
    "ReportWarning",
    "StepBound",
    "SyncCost",
    "TraceBound",
    "WaitedOn",
    "advice_for",
    "bound_of_records",
    "bound_of_trace",
    "label_of",
]

I64 = npt.NDArray[np.int64]

#: idle below this share of the region: the device is the bottleneck (device-bound)
DEVICE_BOUND_IDLE_FRACTION = 0.15
#: host gaps shorter than this between kernels are launch overhead, longer ones host work
LAUNCH_GAP_NS = 50_000
#: syncs costing at least this share of the step make "over-synchronized" the verdict
SYNC_COST_FRACTION = 0.05
#: a sync at least this long ...
MISSING_ACTIVITY_MIN_NS = 1_000_000
#: ... during which the device is busy less than this share of it: activity is missing
MISSING_ACTIVITY_BUSY_FRACTION = 0.01
#: longest gaps of the leading cause whose host frames are looked up (the evidence)
FRAME_SAMPLE_GAPS = 64
#: records: run-ahead at a step's end above this share of the step: the device is behind
RECORDS_BEHIND_FRACTION = 0.05
#: records: this many steps in flight: the queue holds whole steps, the device is behind
RECORDS_FULL_IN_FLIGHT = 2

LABELS = (
    "device-bound",
    "host-bound",
    "sync-bound",
    "input-bound",
    "dependency-bound",
    "undetermined",
)
_LABEL_OF_CAUSE = {
    "host": "host-bound",
    "sync": "sync-bound",
    "input": "input-bound",
    "dependency": "dependency-bound",
    "unattributed": "undetermined",
}
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
    #: sync cost (idle opened + wait) / region
    sync_cost_fraction: float
    #: the clocks disagree: delay and run-ahead verdicts are withheld
    clocks_disagree: bool = False
    #: the gaps themselves (not in the report's JSON)
    gaps: IdleGaps | None = None


class RecordsBound(msgspec.Struct, frozen=True, kw_only=True):
    run: Bound
    steps: list[StepBound]


# --- the rule ---------------------------------------------------------------------------------


def label_of(region_ns: int, busy_ns: int, idle: IdleByCause) -> tuple[str, str]:
    """(label, leading cause): device-bound below the idle threshold, else the leading cause."""
    by = idle.as_dict()
    leading = max(CAUSES, key=lambda c: (by[c], -CAUSES.index(c)))
    if region_ns <= 0:
        return "undetermined", leading
    if region_ns - busy_ns < DEVICE_BOUND_IDLE_FRACTION * region_ns:
        return "device-bound", leading
    return _LABEL_OF_CAUSE[leading], leading


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else 0.0


def _ms(ns: float) -> str:
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e3:.1f} µs"


def _short(name: str, limit: int = 60) -> str:
    """A kernel's name without its argument list and leading ``void``, cut to ``limit``."""
    head = name.split("(", 1)[0].removeprefix("void ").strip() or name
    return head if len(head) <= limit else head[: limit - 1] + "…"


def advice_for(label: str, b: Bound | None = None, *, asynchronous: bool = True) -> list[str]:
    """One concrete next step for a label, naming what the evidence names."""
    if b is None:
        return []
    e = b.evidence
    out: list[str]
    if label == "device-bound":
        kernels = ", ".join(
            f"{_short(k.name)} ({_ms(k.total_ns)}, ×{k.count})" for k in e.top_kernels[:3]
        )
        out = [
            f"the device is busy {e.busy_pct:.0f}% of the time: speed up its top kernels"
            + (f" — {kernels}" if kernels else "")
            + " (mixed precision / tensor cores, fusion, better shapes); the host is not the limit"
        ]
    elif label == "host-bound":
        if e.launch_gaps_ns >= e.host_work_ns:
            out = [
                f"launch overhead: {e.launch_gaps} gaps under {LAUNCH_GAP_NS // 1000} µs "
                f"between kernels ({_ms(e.launch_gaps_ns)} idle) — capture the step in a CUDA "
                'graph (torch.compile(mode="reduce-overhead"), torch.cuda.graphs), or launch '
                "fewer, larger kernels (fusion, torch.compile)"
            ]
        else:
            frames = ", ".join(
                f"{f.frame}" + (f" ({f.site})" if f.site else "") + f" {_ms(f.idle_ns)}"
                for f in e.host_frames[:3]
            )
            out = [
                f"host work: the device waits {_ms(e.host_work_ns)} in {e.host_work_gaps} gaps "
                "while the host computes"
                + (f" — in {frames}" if frames else "")
                + ": move that work out of the step, overlap it with device work, or make it "
                "cheaper"
            ]
    elif label == "sync-bound":
        sites = ", ".join(
            f"{s.site or s.op} ({s.op} ×{s.count}, costs {_ms(s.cost_ns)})"
            for s in e.sync_sites[:3]
        )
        out = [
            "syncs stall the pipeline"
            + (f" at {sites}" if sites else "")
            + ": keep the loss on the device (accumulate it, call .item() once per log "
            "interval), copy with non_blocking=True from pinned memory, and avoid "
            "boolean-mask indexing / nonzero() in the step"
        ]
    elif label == "input-bound":
        out = [
            f"the device waits {_ms(b.idle_ns_by_cause.input)} for data: raise "
            "DataLoader(num_workers=...), set pin_memory=True, prefetch (prefetch_factor, "
            "copy the next batch to the device with non_blocking=True while this one runs)"
        ]
    elif label == "dependency-bound":
        waited = ", ".join(
            f"stream {w.stream} ({_short(w.name)}, {_ms(w.idle_ns)})" for w in e.waited_on[:3]
        )
        out = [
            "queued work waited on other work"
            + (f": {waited}" if waited else "")
            + " — overlap communication with computation (bucketing, async collectives), "
            "check event waits between streams, and the launch latency of graph replays"
        ]
    else:
        out = [
            f"{_ms(b.idle_ns_by_cause.unattributed)} of idle has no launch to explain it "
            "(activity missing, unlinked launches or clocks that disagree): re-record with "
            "the device activity of every stream (and graph replays) traced"
        ]
    if not asynchronous:
        out.append(
            "the CPU backend is synchronous: this label is about the host (there is no queue "
            "to run ahead); on an accelerator the same loop may be bound differently"
        )
    return out


def _pcts(idle: IdleByCause, whole: int) -> dict[str, float]:
    """Each cause's idle time as a percentage of ``whole``."""
    return {c: _pct(v, whole) for c, v in idle.as_dict().items()}


def _step_bound(
    label: str,
    start: int,
    end: int,
    region: int,
    busy: int,
    idle: IdleByCause,
    evidence: BoundEvidence,
) -> StepBound:
    """A step's bound (of a trace or of a session's records): its share ``[start, end)``,
    ``region`` ns long, ``busy`` of them busy."""
    return StepBound(
        label=label,
        share_start_ns=start,
        share_end_ns=end,
        region_ns=region,
        busy_ns=busy,
        idle_ns=idle.total(),
        idle_ns_by_cause=idle,
        evidence=evidence,
    )


def _run_bound(whole: StepBound, *, asynchronous: bool) -> Bound:
    """A run's bound (of a trace or of a session's records): its whole region's, taken as one
    share, with advice."""
    run = Bound(
        label=whole.label,
        region_ns=whole.region_ns,
        busy_ns=whole.busy_ns,
        idle_ns=whole.idle_ns,
        idle_ns_by_cause=whole.idle_ns_by_cause,
        evidence=whole.evidence,
    )
    return msgspec.structs.replace(
        run, advice=advice_for(run.label, run, asynchronous=asynchronous)
    )


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


def _on_device(trace: Trace) -> npt.NDArray[np.bool_]:
    """The activities of the device with most activities."""
    act = trace.activities
    if not len(act):
        return np.zeros(0, bool)
    devs, inv = np.unique(act.device, return_inverse=True)
    on: npt.NDArray[np.bool_] = act.device == devs[int(np.argmax(np.bincount(inv.reshape(-1))))]
    return on


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


def _device_timeline(trace: Trace, links: LaunchLinks, windows: Sequence[StepWindow]) -> _Timeline:
    """The union of the device's activities over the region, and the idle gaps between."""
    act = trace.activities
    a_start, a_end = act.start_ns, act.start_ns + act.dur_ns
    on_dev = _on_device(trace)
    r0, r1 = _region(trace, links, windows, on_dev)
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
        g0, g1, ender = np.r_[r0, me[:-1]], s[heads], rows[heads]
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
            f"the first device activity starts {_ms(first_dev - h1)} after the last host event ends"
        )
    elif last_dev < h0:
        where = f"the last device activity ends {_ms(h0 - last_dev)} before the first host event"
    elif h1 > h0 and p50 > h1 - h0:
        where = "launch-to-start delays exceed the whole host span"
    else:
        return None
    return ReportWarning(
        code="clock-mismatch",
        message=(
            f"the host and device clocks cannot both be right: every host event lies within "
            f"{_ms(h1 - h0)}, {where}, and the median launch-to-start delay is {_ms(p50)}; "
            "launch delays, run-ahead and the idle causes are withheld"
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
            f"(longest: {name} waits {_ms(int(ls1[j] - ls0[j]))} of the {_ms(tl.region)} "
            "traced): device activity is missing (graph replays not traced, another process's "
            "work, a profiler that dropped records); idle inside those waits is unattributed"
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
            f"{_ms(skew)}): the device and host clocks are skewed; queue figures take such "
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


def _checks(trace: Trace, links: LaunchLinks, tl: _Timeline, host: _HostWaits) -> _Checks:
    """The warnings, in the report's order, and what they withhold from the gap causes."""
    clock = _clock_mismatch(trace, links)
    missing, dry = _missing_activity(trace, host, tl)
    found = (clock, dry, _activity_before_launch(trace, links))
    return _Checks(
        warnings=[w for w in found if w is not None],
        clocks_disagree=clock is not None,
        missing=missing,
    )


class _Causes(msgspec.Struct, frozen=True, eq=False):
    """Each gap's class (``_H_SHORT`` … ``_UNATTR``), and the gaps by class as a ClassCover."""

    cls: I64
    by_class: ClassCover


def _gap_causes(links: LaunchLinks, tl: _Timeline, host: _HostWaits, checks: _Checks) -> _Causes:
    """Each gap's class, through the launch call of the activity ending it (module docstring)."""
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
    data = (upto > g0) & (2 * host.data.between(g0, upto) > (upto - g0))
    length = g1 - g0
    cls[dep] = _DEP
    cls[waited & in_sync] = _SYNC
    cls[waited & ~in_sync & data] = _INPUT
    on_host = waited & ~in_sync & ~data
    cls[on_host & (length < LAUNCH_GAP_NS)] = _H_SHORT
    cls[on_host & (length >= LAUNCH_GAP_NS)] = _H_LONG
    if len(checks.missing):
        # idle mostly inside a wait with no activity recorded: the device may well have been
        # busy with work the trace lacks
        cls[2 * checks.missing.between(g0, g1) > length] = _UNATTR
    if checks.clocks_disagree:
        cls[:] = _UNATTR
    return _Causes(cls=cls, by_class=ClassCover.of_disjoint(g0, g1, cls, 6))


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


def _share_bounds(trace: Trace, links: LaunchLinks, tl: _Timeline, w_start: I64, w_end: I64) -> I64:
    """The boundaries of the steps' shares (n + 1): each at its step's first activity, the first
    at the region's start, the last at its end; a step with no activity owns nothing."""
    n_steps = len(w_start)
    firsts = np.full(n_steps, tl.r1, np.int64)
    rows = tl.rows
    m_rows = rows[np.isin(rows, np.flatnonzero(links.matched))] if len(rows) else rows
    if len(m_rows):
        ls = links.launch_start_ns[m_rows]
        k = np.searchsorted(w_start, ls, side="right") - 1
        ok = (k >= 0) & (ls < w_end[np.maximum(k, 0)])
        ks, first_s = k[ok], np.maximum(trace.activities.start_ns[m_rows][ok], tl.r0)
        if len(ks):
            np.minimum.at(firsts, ks, first_s)
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
    data_wait: I64
    #: each gap's share (index)
    gap_share: npt.NDArray[np.intp]


class _Parts(msgspec.Struct, frozen=True, eq=False):
    """What the shares' figures are measured on."""

    busy: Cover
    causes: _Causes
    host: _HostWaits


def _shares(
    parts: _Parts,
    lo: I64,
    hi: I64,
    window: tuple[I64, I64],
    gap_share: npt.NDArray[np.intp],
    sync_wait: I64 | None = None,
) -> _Shares:
    """The figures of the shares ``[lo, hi)`` of the timeline, whose host windows are
    ``window`` (their sync wait: ``sync_wait`` where given); ``gap_share``: each gap's share."""
    w_start, w_end = window
    cls, n = parts.causes.cls, len(lo)
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
) -> _Shares:
    """The steps' shares (at least one step); their sync wait: ``step_sync_wait_ns`` where it
    has one per step (each step's, clipped to it), else the syncs inside each window."""
    w_start = np.array([w.start_ns for w in windows], np.int64)
    w_end = np.array([w.end_ns for w in windows], np.int64)
    bounds = _share_bounds(trace, links, tl, w_start, w_end)
    gap_step = np.clip(np.searchsorted(bounds, tl.g0, side="right") - 1, 0, len(windows) - 1)
    given = len(step_sync_wait_ns) == len(windows)
    waits = np.array(step_sync_wait_ns, np.int64) if given else None
    return _shares(parts, bounds[:-1], bounds[1:], (w_start, w_end), gap_step, waits)


def _region_share(tl: _Timeline, parts: _Parts, steps: _Shares | None) -> _Shares:
    """The whole region as one share: the run's figures; its sync wait the steps' where any."""
    lo, hi = np.array([tl.r0], np.int64), np.array([tl.r1], np.int64)
    wait = np.array([steps.sync_wait.sum()], np.int64) if steps is not None else None
    whole = _shares(parts, lo, hi, (lo, hi), np.zeros(len(tl.g0), np.intp), wait)
    # its length as _Timeline has it (a Python int, never below 0)
    return msgspec.structs.replace(whole, region=[tl.region], sync_span=[tl.region])


def _share_bound(sh: _Shares, k: int) -> StepBound:
    """Share ``k``'s label and figures."""
    region, busy = sh.region[k], int(sh.busy[k])
    idle = _classes_to_cause(sh.cls[:, k])
    label, lead = label_of(region, busy, idle)
    wait = int(sh.sync_wait[k])
    evidence = BoundEvidence(
        busy_pct=_pct(busy, region),
        idle_pct_by_cause=_pcts(idle, region),
        leading_cause=lead,
        launch_gaps=int(sh.launch_gaps[k]),
        launch_gaps_ns=int(sh.cls[_H_SHORT, k]),
        host_work_gaps=int(sh.host_work_gaps[k]),
        host_work_ns=int(sh.cls[_H_LONG, k]),
        blocked_at_cap_ns=int(sh.blocked[k]),
        sync_wait_ns=wait,
        sync_wait_pct=_pct(wait, sh.sync_span[k]),
        sync_cost_pct=_pct(wait + int(sh.cls[_SYNC, k]), region),
        data_wait_ns=int(sh.data_wait[k]),
    )
    return _step_bound(label, sh.start[k], sh.end[k], region, busy, idle, evidence)


def _trace_run(
    trace: Trace,
    tl: _Timeline,
    causes: _Causes,
    whole: _Shares,
    syncs: SyncSummary,
    group_keys: Sequence[str],
    group_of: npt.NDArray[np.intp] | None,
) -> Bound:
    """The run's bound: the region's, with the run's lists (host frames, sync sites, kernels,
    waits) and advice."""
    share = _share_bound(whole, 0)
    g0, g1, cls = tl.g0, tl.g1, causes.cls
    evidence = msgspec.structs.replace(
        share.evidence,
        host_frames=_host_frames(trace, g0, g1, cls, share.evidence.leading_cause),
        sync_sites=_sync_costs(syncs, g0, g1, cls),
        top_kernels=_top_kernels(trace, tl.rows, tl.s, tl.e),
        waited_on=_waited_on(trace, g0, g1, cls, tl.ender, group_keys, group_of),
    )
    share = msgspec.structs.replace(share, evidence=evidence)
    # a trace without device activity ran on the CPU (or recorded none): say what that means
    return _run_bound(share, asynchronous=tl.n_act > 0)


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
    cap: int = 1022,
    step_sync_wait_ns: Sequence[int] = (),
    group_keys: Sequence[str] = (),
    group_of: npt.NDArray[np.intp] | None = None,
) -> TraceBound:
    """The run's and every step's label, with figures, evidence, advice and warnings."""
    tl = _device_timeline(trace, links, windows)
    host = _host_waits(trace, queues, cap)
    checks = _checks(trace, links, tl, host)
    causes = _gap_causes(links, tl, host, checks)
    parts = _Parts(busy=tl.busy, causes=causes, host=host)
    per = _step_shares(trace, links, tl, parts, windows, step_sync_wait_ns) if windows else None
    whole = _region_share(tl, parts, per)
    # what syncs cost: their wait plus the sync idle they opened
    cost = int(whole.sync_wait[0]) + int(whole.cls[_SYNC, 0])
    return TraceBound(
        run=_trace_run(trace, tl, causes, whole, syncs, group_keys, group_of),
        steps=[_share_bound(per, k) for k in range(len(windows))] if per is not None else [],
        warnings=checks.warnings,
        sync_cost_fraction=cost / tl.region if tl.region > 0 else 0.0,
        clocks_disagree=checks.clocks_disagree,
        gaps=_idle_gaps(tl, causes, per),
    )


def _sync_costs(syncs: SyncSummary, g0: I64, g1: I64, cls: I64) -> list[SyncCost]:
    """Per (site, op): calls, wait, the sync idle opened while the host was in one of them."""
    calls = syncs.calls
    if not calls:
        return []
    c_start = np.array([c.start_ns for c in calls], np.int64)
    c_end = c_start + np.array([c.dur_ns for c in calls], np.int64)
    keys: dict[tuple[str, str], int] = {}
    c_key = np.array([keys.setdefault((c.site, c.op), len(keys)) for c in calls], np.intp)
    opened = np.zeros(len(keys), np.int64)
    sg = np.flatnonzero(cls == _SYNC)
    if len(sg):
        order = np.argsort(c_start, kind="stable")
        cs, ce = c_start[order], c_end[order]
        reach = np.maximum.accumulate(ce)
        # the call reaching furthest among those started so far (the one that covers g0 when
        # the latest-started call has already returned)
        far = np.maximum.accumulate(np.where(ce == reach, np.arange(len(cs)), 0))
        j = np.searchsorted(cs, g0[sg], side="right") - 1
        jj = np.maximum(j, 0)
        pick = np.where(ce[jj] > g0[sg], jj, far[jj])
        got = (j >= 0) & (ce[pick] > g0[sg])
        np.add.at(opened, c_key[order[pick[got]]], (g1 - g0)[sg][got])
    wait = np.bincount(c_key, weights=c_end - c_start, minlength=len(keys)).astype(np.int64)
    count = np.bincount(c_key, minlength=len(keys))
    out = [
        SyncCost(
            site=site,
            op=op,
            count=int(count[i]),
            wait_ns=int(wait[i]),
            idle_ns=int(opened[i]),
            cost_ns=int(wait[i] + opened[i]),
        )
        for (site, op), i in keys.items()
    ]
    out.sort(key=lambda c: (-c.cost_ns, -c.count, c.site, c.op))
    return out[:10]


def _main_thread(trace: Trace) -> tuple[int, int] | None:
    """The thread with most runtime calls (the one launching the work), as (pid, tid)."""
    rt = trace.runtime
    if len(rt) == 0:
        return None
    tids, counts = np.unique(rt.tid, return_counts=True)
    tid = tids[int(np.argmax(counts))]
    pid = rt.pid[int(np.argmax(rt.tid == tid))]
    return int(pid), int(tid)


def _host_frames(trace: Trace, g0: I64, g1: I64, cls: I64, leading: str) -> list[HostFrame]:
    """The innermost host frames at the longest gaps of the leading cause (time-weighted)."""
    want = {
        "host": (_H_SHORT, _H_LONG),
        "sync": (_SYNC,),
        "input": (_INPUT,),
        "dependency": (_DEP,),
        "unattributed": (_UNATTR,),
    }[leading]
    idx = np.flatnonzero(np.isin(cls, want))
    if not len(idx):
        return []
    length = g1[idx] - g0[idx]
    top = idx[np.argsort(-length, kind="stable")[:FRAME_SAMPLE_GAPS]]
    # a sync gap's frame is the one around the sync the host was in at g0; others at mid-gap
    at = g0[top] if leading == "sync" else g0[top] + (g1[top] - g0[top]) // 2
    thread = _main_thread(trace)
    lookups: list[tuple[_ThreadFrames, bool]] = []
    py = trace.python_frames
    strings = trace.strings
    if thread is not None:
        pid, tid = thread
        if len(py):
            on = (py.pid == pid) & (py.tid == tid)
            if not on.any():
                on = np.ones(len(py), bool)
            fs, fe, fn = py.start_ns[on], py.start_ns[on] + py.dur_ns[on], py.name[on]
            used = np.unique(fn)
            user_ids = used[[is_user_frame(strings[int(i)]) for i in used.tolist()]]
            u = np.isin(fn, user_ids)
            if u.any():
                lookups.append((_ThreadFrames(fs[u], fe[u], fn[u]), True))
            lookups.append((_ThreadFrames(fs, fe, fn), True))
        r = trace.ranges
        ops = (r.kind == RangeKind.OP) & (r.pid == pid) & (r.tid == tid)
        if not ops.any():
            ops = r.kind == RangeKind.OP
        if ops.any():
            lookups.append(
                (
                    _ThreadFrames(r.start_ns[ops], r.start_ns[ops] + r.dur_ns[ops], r.name[ops]),
                    False,
                )
            )
    agg: dict[tuple[str, str], list[int]] = {}
    for t, ln in zip(at.tolist(), (g1[top] - g0[top]).tolist(), strict=True):
        name = -1
        python = False
        for frames, is_python in lookups:
            name = frames.innermost(t, t + 1, strings)
            if name >= 0:
                python = is_python
                break
        if name < 0:
            key = ("(no host frame)", "")
        elif python:
            text = trace.name_of(name)
            fn = text.split("): ", 1)[1] if "): " in text else text
            key = (fn, site_of(text) if is_user_frame(text) else "")
        else:
            key = (trace.name_of(name), "")
        slot = agg.setdefault(key, [0, 0])
        slot[0] += ln
        slot[1] += 1
    out = [HostFrame(frame=f, site=s, idle_ns=v[0], gaps=v[1]) for (f, s), v in agg.items()]
    out.sort(key=lambda h: (-h.idle_ns, h.frame))
    return out[:5]


def _top_kernels(trace: Trace, rows: npt.NDArray[np.intp], s: I64, e: I64) -> list[KernelTime]:
    if not len(rows):
        return []
    names = trace.activities.name[rows]
    uniq, inv = np.unique(names, return_inverse=True)
    # summed as floats and held within int64: a hostile trace's durations can sum past it
    total = np.minimum(np.bincount(inv, weights=e - s), 9.2e18).astype(np.int64)
    count = np.bincount(inv)
    top = np.argsort(-total, kind="stable")[:5]
    return [
        KernelTime(name=trace.name_of(int(uniq[i])), count=int(count[i]), total_ns=int(total[i]))
        for i in top.tolist()
    ]


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
        uniq_s, inv_s = np.unique(act.stream[rows], return_inverse=True)
        stream_id = inv_s.reshape(-1).astype(np.int64)
        keys = [str(int(x)) for x in uniq_s.tolist()]
    names = act.name[rows].astype(np.int64)
    pair = stream_id * (int(names.max()) + 1) + names
    uniq, inv = np.unique(pair, return_inverse=True)
    inv = inv.reshape(-1)
    idle = np.bincount(inv, weights=g1[d] - g0[d]).astype(np.int64)
    gaps = np.bincount(inv)
    top = np.lexsort((uniq, -idle))[:5]
    width = int(names.max()) + 1
    return [
        WaitedOn(
            stream=keys[int(uniq[i]) // width],
            name=trace.name_of(int(uniq[i]) % width),
            gaps=int(gaps[i]),
            idle_ns=int(idle[i]),
        )
        for i in top.tolist()
    ]


# --- live session records ---------------------------------------------------------------------


def _int64(v: int) -> int:
    """A sum kept within int64 (the JSON form's integers): saturated, as no real run reaches it."""
    return max(min(v, 2**63 - 1), -(2**63))


class _RecordsSums(msgspec.Struct, frozen=True):
    """Sums over a session's step records, as Python ints (the sums of a hostile file's int64
    figures must not wrap or turn to floats); busy is the region less the idle."""

    steps: int
    #: steps in which the device was behind the host
    behind: int
    region: int
    idle: IdleByCause
    sync_wait: int
    data_wait: int


def _step_estimate(st: StepRecord, wall: int, asynchronous: bool) -> tuple[IdleByCause, bool]:
    """A step record's idle by cause, of its wall time ``wall`` (busy the rest), and whether
    the device was behind the host (see bound_of_records)."""
    data = min(max(st.data_wait_ns, 0), wall)
    sync = min(max(st.sync_wait_ns, 0), wall - data)
    if not asynchronous:
        # the host ran every op itself: "busy" is the host's own compute, idle its waits
        return IdleByCause(sync=sync, input=data), False
    dev = st.device_ns
    ra = st.run_ahead_ns
    behind = ra is not None and ra > RECORDS_BEHIND_FRACTION * wall
    if behind or st.in_flight >= RECORDS_FULL_IN_FLIGHT:
        # the device still had this step's work queued when the host moved on: it sets the pace
        gap = max(0, wall - dev) if dev is not None else 0
        return IdleByCause(host=gap), True
    # the device kept pace: it waited for the host; markers cannot see how long, so the idle
    # is at least what the host spent not issuing work (data, sync), the marker window's
    # shortfall, and never below the device-bound threshold
    shortfall = max(0, wall - dev) if dev is not None else 0
    floor = int(np.ceil(DEVICE_BOUND_IDLE_FRACTION * wall))
    idle_ns = min(wall, max(shortfall, data + sync, floor))
    s_part = min(idle_ns, sync)
    i_part = min(idle_ns - s_part, data)
    return IdleByCause(host=idle_ns - s_part - i_part, sync=s_part, input=i_part), False


def _estimated_evidence(
    region: int,
    busy_ns: int,
    idle: IdleByCause,
    lead: str,
    *,
    sync_wait_ns: int,
    data_wait_ns: int,
    notes: list[str] | None = None,
) -> BoundEvidence:
    """The evidence a session's step records give (a step's or the run's): no timeline, so
    the sync cost is the host's wait."""
    return BoundEvidence(
        busy_pct=_pct(busy_ns, region),
        idle_pct_by_cause=_pcts(idle, region),
        leading_cause=lead,
        host_work_ns=idle.host,
        sync_wait_ns=sync_wait_ns,
        sync_wait_pct=_pct(sync_wait_ns, region),
        sync_cost_pct=_pct(sync_wait_ns, region),
        data_wait_ns=data_wait_ns,
        estimated=True,
        notes=notes if notes is not None else [],
    )


def _record_bound(st: StepRecord, wall: int, idle: IdleByCause) -> StepBound:
    """One step record's label and figures."""
    busy = wall - idle.total()
    label, lead = label_of(wall, busy, idle)
    evidence = _estimated_evidence(
        wall, busy, idle, lead, sync_wait_ns=st.sync_wait_ns, data_wait_ns=st.data_wait_ns
    )
    return _step_bound(label, st.start_ns, st.start_ns + wall, wall, busy, idle, evidence)


def _sum_records(
    steps: Sequence[StepRecord], asynchronous: bool, per_step: bool
) -> tuple[_RecordsSums, list[StepBound]]:
    """The sums over the step records and, with ``per_step``, each step's bound: one pass."""
    per: list[StepBound] = []
    # idle by cause (host, sync, data); the host's own sync and data waits, as recorded
    region = host = sync = data = behind = w_sync = w_data = 0
    for st in steps:
        wall = max(st.frontend_ns, 0)
        idle, late = _step_estimate(st, wall, asynchronous)
        behind += late
        region += wall
        host += idle.host
        sync += idle.sync
        data += idle.input
        w_sync += st.sync_wait_ns
        w_data += st.data_wait_ns
        if per_step:
            per.append(_record_bound(st, wall, idle))
    total = IdleByCause(host=host, sync=sync, input=data)
    return _RecordsSums(len(steps), behind, region, total, w_sync, w_data), per


def _records_run(sums: _RecordsSums, *, asynchronous: bool) -> Bound:
    """The run's label and figures from the sums over its step records."""
    t = sums.idle
    region, busy_ns = _int64(sums.region), _int64(sums.region - t.total())
    idle = IdleByCause(host=_int64(t.host), sync=_int64(t.sync), input=_int64(t.input))
    label, lead = label_of(region, busy_ns, idle)
    notes = [
        "estimated from per-step totals (a live session has no per-gap timeline): "
        f"the device was behind the host in {sums.behind} of {sums.steps} step(s)"
    ]
    if not asynchronous:
        notes.append("the CPU backend is synchronous: busy is the host's own compute")
    if not sums.steps:
        label = "undetermined"
        notes = ["no steps"]
    evidence = _estimated_evidence(
        region,
        busy_ns,
        idle,
        lead,
        sync_wait_ns=_int64(sums.sync_wait),
        data_wait_ns=_int64(sums.data_wait),
        notes=notes,
    )
    whole = _step_bound(label, 0, region, region, busy_ns, idle, evidence)  # (from 0: not kept)
    return _run_bound(whole, asynchronous=asynchronous)


def bound_of_records(
    steps: Sequence[StepRecord], *, asynchronous: bool, per_step: bool = True
) -> RecordsBound:
    """The label of a live session, per step and for the run, from its step records (pure).

    A session has per-step totals, not a timeline, so its idle figures are estimates
    (``evidence.estimated``):

    * the device is **behind** in a step when its run-ahead at the step's end exceeds
      :data:`RECORDS_BEHIND_FRACTION` of the step, or :data:`RECORDS_FULL_IN_FLIGHT` steps
      were in flight at its start: the device had queued work across the step and sets the
      pace; idle is only the marker
      window's shortfall (``frontend − device``, usually 0) → device-bound;
    * otherwise the device **kept pace**, so it waited for the host. How long it was idle is
      not measurable from markers (their window includes that idle); the estimate is the
      largest of the window's shortfall, the host's data and sync waits, and the device-bound
      threshold, attributed to sync (up to the sync wait), input (up to the data wait), and
      host (the rest);
    * on the CPU backend (``asynchronous=False``) ops run synchronously: the label is about the
      host — its sync and data waits are "idle", the rest is its own compute.

    Thresholds, the label rule and advice are the trace analysis's. ``per_step=False``: the
    run's figures only (``steps`` empty), for a summary of a long run that needs no per-step
    objects.
    """
    sums, per = _sum_records(steps, asynchronous, per_step)
    run = _records_run(sums, asynchronous=asynchronous)
    if any(st.phases_ns is not None for st in steps):
        run, per = _with_phases(steps, run, per)
    return RecordsBound(run=run, steps=per)


#: a phase dominates a step (and its evidence says so) above this share of its host time
PHASE_DOMINANT_FRACTION = 0.5
_PHASES = ("data", "forward", "backward", "optimizer", "other")


def _phase_evidence(evidence: BoundEvidence, totals: Sequence[int]) -> BoundEvidence:
    whole = sum(totals)
    if whole <= 0:
        return evidence
    pct = {name: 100.0 * v / whole for name, v in zip(_PHASES, totals, strict=True)}
    notes = list(evidence.notes)
    lead = max(_PHASES, key=lambda n: pct[n])
    if pct[lead] > 100.0 * PHASE_DOMINANT_FRACTION:
        notes.append(f"the {lead} phase dominates: {pct[lead]:.0f}% of the host's step time")
    return msgspec.structs.replace(evidence, phases_pct=pct, notes=notes)


def _with_phases(
    steps: Sequence[StepRecord], run: Bound, per: list[StepBound]
) -> tuple[Bound, list[StepBound]]:
    """The run's and each step's evidence with the share of each phase (records with
    ``phases_ns``), and a note where one phase dominates."""
    totals = [0, 0, 0, 0, 0]
    for i, st in enumerate(steps):
        ph = st.phases_ns
        if ph is None:
            continue
        values = (ph.data, ph.forward, ph.backward, ph.optimizer, ph.other)
        for k, v in enumerate(values):
            totals[k] += v
        if per:
            b = per[i]
            per[i] = msgspec.structs.replace(b, evidence=_phase_evidence(b.evidence, values))
    run = msgspec.structs.replace(run, evidence=_phase_evidence(run.evidence, totals))
    return run, per
