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
from asynctrace.analysis.timeline import Cover
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
    act = trace.activities
    rt = trace.runtime
    n_act = len(act)
    a_start = act.start_ns
    a_end = act.start_ns + act.dur_ns
    if n_act:
        devs, inv = np.unique(act.device, return_inverse=True)
        dev = devs[int(np.argmax(np.bincount(inv.reshape(-1))))]
        on_dev = act.device == dev
    else:
        on_dev = np.zeros(0, bool)
    r0, r1 = _region(trace, links, windows, on_dev)
    region = max(r1 - r0, 0)

    # the device timeline, clipped to the region
    rows = np.flatnonzero(on_dev & (a_end > r0) & (a_start < r1))
    s = np.maximum(a_start[rows], r0)
    e = np.minimum(a_end[rows], r1)
    if len(s) > 1 and bool((s[1:] < s[:-1]).any()):  # the model keeps tables sorted by start
        order = np.argsort(s, kind="stable")
        rows, s, e = rows[order], s[order], e[order]
    nz = e > s
    rows, s, e = rows[nz], s[nz], e[nz]
    if len(s):
        reach = np.maximum.accumulate(e)
        heads = np.flatnonzero(np.r_[True, s[1:] > reach[:-1]])
        ms = s[heads]
        me = reach[np.r_[heads[1:] - 1, len(s) - 1]]
        busy = Cover._from_disjoint(ms, me)
        g0 = np.r_[r0, me[:-1]]
        g1 = ms.copy()
        ender = rows[heads]
        last_end = int(me[-1])
    else:
        busy = Cover.of([], [])
        g0 = g1 = np.zeros(0, np.int64)
        ender = np.zeros(0, np.intp)
        last_end = r0
    if r1 > last_end:
        g0 = np.r_[g0, last_end]
        g1 = np.r_[g1, r1]
        ender = np.r_[ender, -1]
    keep = g1 > g0
    g0, g1, ender = g0[keep], g1[keep], ender[keep].astype(np.intp)
    final = ender < 0
    busy_total = busy.total_ns

    # host-side covers
    is_sync = np.isin(rt.kind, np.array([int(k) for k in SYNC_KINDS], dtype=np.uint8))
    sy_s = rt.start_ns[is_sync]
    sy_e = sy_s + rt.dur_ns[is_sync]
    sync_cover = Cover.of(sy_s, sy_e)
    r = trace.ranges
    data_name = np.array(
        [_DATA_MARK in x and bool(_DATA_WAIT.search(x)) for x in trace.strings] or [False], bool
    )
    is_data = (
        ((r.kind == RangeKind.OP) | (r.kind == RangeKind.ANNOTATION)) & data_name[r.name]
        if len(r)
        else np.zeros(0, bool)
    )
    data_cover = Cover.of(r.start_ns[is_data], r.start_ns[is_data] + r.dur_ns[is_data])

    # warnings
    warnings: list[ReportWarning] = []
    matched = links.matched
    clocks_disagree = False
    span = host_span(trace)
    if matched.any() and span is not None:
        h0, h1 = span
        first_dev = int(a_start[matched].min())
        last_dev = int(a_end[matched].max())
        l2s = np.sort(a_start[matched] - links.launch_start_ns[matched])
        p50 = int(l2s[(len(l2s) - 1) // 2])
        if first_dev > h1 or last_dev < h0 or (h1 > h0 and p50 > h1 - h0):
            clocks_disagree = True
            if first_dev > h1:
                where = (
                    f"the first device activity starts {_ms(first_dev - h1)} after the last "
                    "host event ends"
                )
            elif last_dev < h0:
                where = (
                    f"the last device activity ends {_ms(h0 - last_dev)} before the first "
                    "host event"
                )
            else:
                where = "launch-to-start delays exceed the whole host span"
            warnings.append(
                ReportWarning(
                    code="clock-mismatch",
                    message=(
                        f"the host and device clocks cannot both be right: every host event "
                        f"lies within {_ms(h1 - h0)}, {where}, and the median launch-to-start "
                        f"delay is {_ms(p50)}; launch delays, run-ahead and the idle causes "
                        "are withheld"
                    ),
                )
            )
    long_sync = (sy_e - sy_s) >= MISSING_ACTIVITY_MIN_NS
    missing_cover = Cover.of([], [])
    if long_sync.any():
        ls0, ls1 = sy_s[long_sync], sy_e[long_sync]
        busy_in = busy.between(ls0, ls1)
        dry = busy_in < MISSING_ACTIVITY_BUSY_FRACTION * (ls1 - ls0)
        if dry.any():
            missing_cover = Cover.of(ls0[dry], ls1[dry])
            j = int(np.argmax(np.where(dry, ls1 - ls0, -1)))
            names = rt.name[is_sync][long_sync]
            warnings.append(
                ReportWarning(
                    code="missing-activity",
                    message=(
                        f"{int(dry.sum())} sync(s) wait while no device activity is recorded "
                        f"(longest: {trace.name_of(int(names[j]))} waits "
                        f"{_ms(int(ls1[j] - ls0[j]))} of the {_ms(region)} traced): device "
                        "activity is missing (graph replays not traced, another process's "
                        "work, a profiler that dropped records); idle inside those waits is "
                        "unattributed"
                    ),
                )
            )
    before = matched & (a_start < links.launch_start_ns)
    if before.any():
        skew = int((links.launch_start_ns[before] - a_start[before]).max())
        warnings.append(
            ReportWarning(
                code="activity-before-launch",
                message=(
                    f"{int(before.sum())} device activities start before their launch call "
                    f"(by up to {_ms(skew)}): the device and host clocks are skewed; queue "
                    "figures take such activities to start when their call started"
                ),
            )
        )

    # classify the gaps
    cls = np.full(len(g0), _UNATTR, np.int64)
    safe = np.where(final, 0, ender)
    li = np.where(final, -1, links.launch_index[safe] if n_act else -1)
    has = li >= 0
    l_start = np.where(has, links.launch_start_ns[safe] if n_act else 0, 0)
    l_end = np.where(has, links.launch_end_ns[safe] if n_act else 0, 0)
    dep = has & (l_end < g0)
    waited = (has & ~dep) | final
    upto = np.where(final, g1, np.maximum(l_start, g0))
    in_sync = sync_cover.contains(g0)
    data = (upto > g0) & (2 * data_cover.between(g0, upto) > (upto - g0))
    length = g1 - g0
    cls[dep] = _DEP
    cls[waited & in_sync] = _SYNC
    cls[waited & ~in_sync & data] = _INPUT
    host = waited & ~in_sync & ~data
    cls[host & (length < LAUNCH_GAP_NS)] = _H_SHORT
    cls[host & (length >= LAUNCH_GAP_NS)] = _H_LONG
    if len(missing_cover):
        # idle mostly inside a wait with no activity recorded: the device may well have been
        # busy with work the trace lacks
        cls[2 * missing_cover.between(g0, g1) > length] = _UNATTR
    if clocks_disagree:
        cls[:] = _UNATTR
    covers = [Cover._from_disjoint(g0[cls == c], g1[cls == c]) for c in range(6)]

    # blocked at the cap: host in a launch call while some stream's queue is full
    cap_cover = Cover.of([], [])
    if queues:
        cs, ce = [], []
        for depth, _flight in queues.values():
            t, v = depth.time_ns, depth.value
            if len(t) > 1:
                full = np.flatnonzero(v[:-1] >= cap)
                cs.append(t[full])
                ce.append(t[full + 1])
        if cs:
            cap_cover = Cover.of(np.concatenate(cs), np.concatenate(ce))
    blocked = cap_cover.intersect(launch_cover(trace)) if len(cap_cover) else cap_cover

    # per-step shares: boundaries at each step's first activity
    n_steps = len(windows)
    if n_steps:
        w_start = np.array([w.start_ns for w in windows], np.int64)
        w_end = np.array([w.end_ns for w in windows], np.int64)
        firsts = np.full(n_steps, r1, np.int64)
        m_rows = rows[np.isin(rows, np.flatnonzero(matched))] if len(rows) else rows
        if len(m_rows):
            ls = links.launch_start_ns[m_rows]
            k = np.searchsorted(w_start, ls, side="right") - 1
            ok = (k >= 0) & (ls < w_end[np.maximum(k, 0)])
            ks, first_s = k[ok], np.maximum(a_start[m_rows][ok], r0)
            if len(ks):
                np.minimum.at(firsts, ks, first_s)
        bounds = np.r_[r0, firsts[1:], r1].astype(np.int64)
        bounds[1:] = np.minimum.accumulate(bounds[1:][::-1])[::-1]
        bounds = np.clip(bounds, r0, r1)
        lo, hi = bounds[:-1], bounds[1:]
        s_busy = busy.between(lo, hi)
        s_cls = np.stack([c.between(lo, hi) for c in covers])  # (6, n_steps)
        gk = np.searchsorted(bounds, g0, side="right") - 1
        gk = np.clip(gk, 0, n_steps - 1)
        short_n = np.bincount(gk[cls == _H_SHORT], minlength=n_steps)
        long_n = np.bincount(gk[cls == _H_LONG], minlength=n_steps)
        s_blocked = blocked.between(w_start, w_end)
        s_data = data_cover.between(w_start, w_end)
        if len(step_sync_wait_ns) == n_steps:
            s_wait = np.array(step_sync_wait_ns, np.int64)
        else:
            s_wait = sync_cover.between(w_start, w_end)

    # run figures
    run_cls = np.array([c.total_ns for c in covers], np.int64)
    idle = _classes_to_cause(run_cls)
    idle_total = idle.total()
    # busy + idle = region exactly (gaps and busy partition [r0, r1))
    # sync wait inside the steps (each step's, clipped to it), else over the region
    sync_wait_total = int(s_wait.sum()) if n_steps else int(sync_cover.between(r0, r1))
    costs = _sync_costs(syncs, g0, g1, cls)
    # what syncs cost the steps: their wait plus the sync idle they opened
    sync_cost_total = sync_wait_total + int(run_cls[_SYNC])
    label, leading = label_of(region, busy_total, idle)
    evidence = BoundEvidence(
        busy_pct=_pct(busy_total, region),
        idle_pct_by_cause={c: _pct(v, region) for c, v in idle.as_dict().items()},
        leading_cause=leading,
        launch_gaps=int(np.count_nonzero(cls == _H_SHORT)),
        launch_gaps_ns=int(run_cls[_H_SHORT]),
        host_work_gaps=int(np.count_nonzero(cls == _H_LONG)),
        host_work_ns=int(run_cls[_H_LONG]),
        blocked_at_cap_ns=int(blocked.between(r0, r1)),
        sync_wait_ns=int(sync_wait_total),
        sync_wait_pct=_pct(int(sync_wait_total), region),
        sync_cost_pct=_pct(sync_cost_total, region),
        data_wait_ns=int(data_cover.between(r0, r1)),
        host_frames=_host_frames(trace, g0, g1, cls, leading),
        sync_sites=costs,
        top_kernels=_top_kernels(trace, rows, s, e),
        waited_on=_waited_on(trace, g0, g1, cls, ender, group_keys, group_of),
    )
    run = Bound(
        label=label,
        region_ns=region,
        busy_ns=busy_total,
        idle_ns=idle_total,
        idle_ns_by_cause=idle,
        evidence=evidence,
    )
    # a trace without device activity ran on the CPU (or recorded none): say what that means
    run = msgspec.structs.replace(run, advice=advice_for(label, run, asynchronous=n_act > 0))

    steps: list[StepBound] = []
    for k in range(n_steps):
        share = int(hi[k] - lo[k])
        sb = int(s_busy[k])
        sidle = _classes_to_cause(s_cls[:, k])
        slabel, slead = label_of(share, sb, sidle)
        wait = int(s_wait[k])
        steps.append(
            StepBound(
                label=slabel,
                share_start_ns=int(lo[k]),
                share_end_ns=int(hi[k]),
                region_ns=share,
                busy_ns=sb,
                idle_ns=sidle.total(),
                idle_ns_by_cause=sidle,
                evidence=BoundEvidence(
                    busy_pct=_pct(sb, share),
                    idle_pct_by_cause={c: _pct(v, share) for c, v in sidle.as_dict().items()},
                    leading_cause=slead,
                    launch_gaps=int(short_n[k]),
                    launch_gaps_ns=int(s_cls[_H_SHORT, k]),
                    host_work_gaps=int(long_n[k]),
                    host_work_ns=int(s_cls[_H_LONG, k]),
                    blocked_at_cap_ns=int(s_blocked[k]),
                    sync_wait_ns=wait,
                    sync_wait_pct=_pct(wait, int(w_end[k] - w_start[k])),
                    sync_cost_pct=_pct(wait + int(s_cls[_SYNC, k]), share),
                    data_wait_ns=int(s_data[k]),
                ),
            )
        )
    cause_of_class = np.array([0, 0, 1, 2, 3, 4], np.uint8)  # classes → CAUSES index
    return TraceBound(
        run=run,
        steps=steps,
        warnings=warnings,
        sync_cost_fraction=sync_cost_total / region if region > 0 else 0.0,
        clocks_disagree=clocks_disagree,
        gaps=IdleGaps(
            start_ns=g0,
            end_ns=g1,
            cause=cause_of_class[cls],
            launch_gap=cls == _H_SHORT,
            step=gk.astype(np.int64) if n_steps else np.full(len(g0), -1, np.int64),
        ),
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
    return RecordsBound(run=_records_run(sums, asynchronous=asynchronous), steps=per)
