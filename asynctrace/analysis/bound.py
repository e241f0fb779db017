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
    WarmUp,
)
from asynctrace.analysis.launches import LaunchLinks
from asynctrace.analysis.queue import QueueSeries, launch_cover
from asynctrace.analysis.steps import SYNC_KINDS, StepWindow, host_span
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
from asynctrace.records import StepRecord
from asynctrace.traces.model import RangeKind, Trace

__all__ = [
    "CAUSES",
    "DEVICE_BOUND_IDLE_FRACTION",
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
    "bound_columns_of_records",
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


_COMM_KERNEL = re.compile(
    r"nccl|rccl|allreduce|all_reduce|allgather|all_gather|reducescatter|reduce_scatter|"
    r"alltoall|sendrecv|broadcast",
    re.I,
)
_COPY_KERNEL = re.compile(r"memcpy|memset", re.I)
_MATMUL_KERNEL = re.compile(
    r"gemm|cutlass|cublas|conv|xmma|wgrad|dgrad|fprop|matmul|mma|implicit", re.I
)
_ELEMENTWISE_KERNEL = re.compile(
    r"elementwise|vectorized|unrolled|reduce_kernel|softmax|norm|bn_|activation|fill|copy_kernel",
    re.I,
)


def _kernel_advice(top: Sequence[KernelTime], busy_ns: int) -> str:
    """The next step that fits the kernels that fill the busy time: communication, copies,
    matrix products or elementwise work (the largest of them among the top kernels); tensor
    cores and fusion only where those kernels dominate."""
    by = {"comm": 0, "copy": 0, "matmul": 0, "elementwise": 0}
    for k in top:
        for kind, pattern in (
            ("comm", _COMM_KERNEL),
            ("copy", _COPY_KERNEL),
            ("matmul", _MATMUL_KERNEL),
            ("elementwise", _ELEMENTWISE_KERNEL),
        ):
            if pattern.search(k.name):
                by[kind] += k.total_ns
                break
    kind, ns = max(by.items(), key=lambda kv: kv[1])
    share = f"{100 * ns / busy_ns:.0f}%" if busy_ns > 0 else ""
    if ns == 0 or (busy_ns > 0 and ns < 0.3 * busy_ns):
        return "speed up its top kernels (profile them: Nsight Compute, the kernels' shapes)"
    if kind == "comm":
        return (
            f"communication kernels (NCCL) take {share} of the busy time: overlap them with "
            "compute (DDP bucketing, async collectives), communicate less often or less data"
        )
    if kind == "copy":
        return (
            f"copies take {share} of the busy time: keep data on the device, batch small "
            "copies into one, copy from pinned memory"
        )
    if kind == "matmul":
        return (
            f"matrix products and convolutions take {share} of the busy time: run them on "
            "tensor cores (bf16/fp16 autocast, TF32), with shapes in multiples of 8 "
            "(channels_last for convolutions)"
        )
    return (
        f"elementwise and reduction kernels take {share} of the busy time: fuse them "
        "(torch.compile), avoid materializing intermediates"
    )


def advice_for(
    label: str, b: Bound | None = None, *, asynchronous: bool = True, clocks_disagree: bool = False
) -> list[str]:
    """One concrete next step for a label, naming what the evidence names (``clocks_disagree``:
    the trace's host and device clocks disagree, and the idle causes are withheld)."""
    if b is None:
        return []
    e = b.evidence
    out: list[str]
    if clocks_disagree and label == "undetermined":
        out = [
            f"the host and device clocks disagree: the device is busy {e.busy_pct:.0f}% of its "
            f"own span, and the {_ms(b.idle_ns)} idle cannot be tied to what the host did — "
            "re-record with host and device on one clock (one profiler session on one machine; "
            "an export that converts device timestamps to the host clock)"
        ]
    elif label == "device-bound" and not asynchronous:
        # the host ran every op itself: no device, no GPU advice
        out = [
            f"the host's own compute fills {e.busy_pct:.0f}% of the step: profile the step "
            "(torch.profiler, py-spy) and speed up its top ops"
        ]
    elif label == "device-bound":
        kernels = ", ".join(
            f"{_short(k.name)} ({_ms(k.total_ns)}, ×{k.count})" for k in e.top_kernels[:3]
        )
        fit = _kernel_advice(e.top_kernels, b.busy_ns)
        out = [
            f"the device is busy {e.busy_pct:.0f}% of the time: {fit}"
            + (f" — {kernels}" if kernels else "")
            + "; the host is not the limit"
        ]
    elif label == "host-bound":
        if e.launch_gaps and e.launch_gaps_ns >= e.host_work_ns:
            out = [
                f"launch overhead: {e.launch_gaps} gaps under {LAUNCH_GAP_NS // 1000} µs "
                f"between kernels ({_ms(e.launch_gaps_ns)} idle) — capture the step in a CUDA "
                'graph (torch.compile(mode="reduce-overhead"), torch.cuda.graphs), launch '
                "fewer, larger kernels (fusion, torch.compile), or run larger batches"
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
            (f"{s.site} ({s.op} ×{s.count}" if s.site else f"{s.op} (×{s.count}")
            + f", opens {_ms(s.idle_ns)} of idle)"
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


def _run_bound(whole: StepBound, *, asynchronous: bool, clocks_disagree: bool = False) -> Bound:
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
        run,
        advice=advice_for(
            run.label, run, asynchronous=asynchronous, clocks_disagree=clocks_disagree
        ),
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
    devs, inv = unique_inverse(act.device)
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
    on_dev = _on_device(trace)
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
        k = np.searchsorted(w_start, ls, side="right") - 1
        ok = (k >= 0) & (ls < w_end[np.maximum(k, 0)])
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
    whole = _shares(parts, lo, hi, (lo, hi), np.zeros(len(tl.g0), np.intp), wait)
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
    *,
    clock: ReportWarning | None = None,
) -> Bound:
    """The run's bound: the region's (its share ``whole``: the steady state), with the run's
    lists (host frames, sync sites, kernels, waits) and advice."""
    share = _share_bound(whole, 0)
    lo = whole.start[0]
    steady = tl.g1 > lo
    g0, g1, cls = np.maximum(tl.g0[steady], lo), tl.g1[steady], causes.cls[steady]
    busy_rows = tl.e > lo
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
        sync_sites=_sync_costs(syncs, g0, g1, cls),
        top_kernels=_top_kernels(
            trace, tl.rows[busy_rows], np.maximum(tl.s[busy_rows], lo), tl.e[busy_rows]
        ),
        waited_on=_waited_on(trace, g0, g1, cls, tl.ender[steady], group_keys, group_of),
        notes=notes,
    )
    share = msgspec.structs.replace(share, evidence=evidence)
    # a trace without device activity ran on the CPU (or recorded none): say what that means
    return _run_bound(share, asynchronous=tl.n_act > 0, clocks_disagree=clock is not None)


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
    parts = _Parts(busy=tl.busy, causes=causes, host=host)
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
    # what syncs cost: their wait plus the sync idle they opened
    cost = int(whole.sync_wait[0]) + int(whole.cls[_SYNC, 0])
    run = _trace_run(trace, tl, causes, whole, syncs, group_keys, group_of, clock=clock)
    if notes:
        ev = msgspec.structs.replace(run.evidence, notes=[*run.evidence.notes, *notes])
        run = msgspec.structs.replace(run, evidence=ev)
    return TraceBound(
        run=run,
        steps=[_share_bound(per, k) for k in range(len(windows))] if per is not None else [],
        warnings=checks.warnings,
        sync_cost_fraction=cost / whole.region[0] if whole.region[0] > 0 else 0.0,
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
    # a blocking copy where any call of the (site, op) is one (one op is one kind in practice)
    copies = {(c.site, c.op) for c in calls if c.kind == "blocking-copy"}
    opened = np.zeros(len(keys), np.int64)
    sg = np.flatnonzero(cls == _SYNC)
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
        np.add.at(opened, c_key[order[pick[got]]], (g1 - g0)[sg][got])
    # integer sums: float weights would overflow (and warn) on a hostile file's durations
    wait = np.zeros(len(keys), np.int64)
    np.add.at(wait, c_key, c_end - c_start)
    count = np.bincount(c_key, minlength=len(keys))
    out = [
        SyncCost(
            site=site,
            op=op,
            count=int(count[i]),
            wait_ns=int(wait[i]),
            idle_ns=int(opened[i]),
            cost_ns=int(wait[i]) + int(opened[i]),
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


def _name_rank(trace: Trace, names: npt.NDArray[np.integer]) -> I64:
    """Each name index's place in the order of the names' text: a name's index follows the
    order the trace's rows were read in, its text does not (ties broken by it give the same
    result whatever the rows' order)."""
    used, inv = unique_inverse(names)
    texts = [trace.name_of(int(i)) for i in used.tolist()]
    rank = np.empty(len(used), np.int64)
    rank[sorted(range(len(used)), key=texts.__getitem__)] = np.arange(len(used))
    out: I64 = rank[inv.reshape(-1)]
    return out


def _start_order_on_ties(
    trace: Trace, s: I64, e: I64, names: npt.NDArray[np.integer]
) -> npt.NDArray[np.intp]:
    """The order of intervals by start, and where several start together by end (the longer
    first), then by name: the same whatever the order of the trace's rows. Only the tied ones
    are sorted again (few in a real trace)."""
    order = start_order(s)
    if order is None:
        order = np.arange(len(s))
    ss = s[order]
    same = ss[1:] == ss[:-1]
    tied = np.flatnonzero(np.r_[same, False] | np.r_[False, same]) if len(ss) else order[:0]
    if len(tied):
        sub = order[tied]
        order[tied] = sub[np.lexsort((_name_rank(trace, names[sub]), -e[sub], s[sub]))]
    return order


def _by_name_on_ties(
    trace: Trace, parts: list[tuple[int, I64, I64, I64, npt.NDArray[np.int32]]]
) -> list[tuple[int, I64, I64, I64, npt.NDArray[np.int32]]]:
    """Each layer's events in the order of :func:`_start_order_on_ties`: where two events of a
    thread share their start and end, the innermost is the same whatever the rows' order."""
    out = []
    for layer, k, s, e, name in parts:
        order = _start_order_on_ties(trace, s, e, name)
        out.append((layer, k[order], s[order], e[order], name[order]))
    return out


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
    parts = _by_name_on_ties(trace, parts)
    seg_s: list[I64] = []
    seg_e: list[I64] = []
    seg_key: list[I64] = []
    n_str = len(trace.strings) + 1
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
    s_all = np.concatenate(seg_s) if seg_s else np.zeros(0, np.int64)
    e_all = np.concatenate(seg_e) if seg_e else np.zeros(0, np.int64)
    k_all = np.concatenate(seg_key) if seg_key else np.zeros(0, np.int64)
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
    bare = idle.total_ns - framed_cover.total_ns
    rows = [
        HostFrame(frame=f, site=st, idle_ns=int(total[i]), gaps=int(gaps[i]))
        for (f, st), i in label_of.items()
    ]
    if bare > 0:
        # idle no host event covers: before the trace's last host event the host ran
        # something unrecorded; after it (a step range outliving the record window) nothing
        # was recorded at all
        last = _last_host_event_end(trace)
        after = idle.clip(last, hi) if last is not None else Cover.of([], [])
        tail = after.subtract(framed_cover) if len(after) else after
        for label, part in (
            ("(no host frame)", bare - tail.total_ns),
            ("(nothing recorded: after the last host event)", tail.total_ns),
        ):
            if part > 0:
                rows.append(HostFrame(frame=label, site="", idle_ns=part, gaps=0))
        uncovered = idle.subtract(framed_cover)
        gap_of = np.searchsorted(idle.start_ns, uncovered.start_ns, side="right") - 1
        in_tail = tail.contains(uncovered.start_ns)
        for h_i, h in enumerate(rows):
            if h.frame.startswith("("):
                mask = in_tail if h.frame.startswith("(nothing") else ~in_tail
                rows[h_i] = msgspec.structs.replace(h, gaps=len(sorted_unique(gap_of[mask])))
    rows.sort(key=lambda h: (-h.idle_ns, h.frame, h.site))
    listed = rows[:5]
    ids = [label_of[(h.frame, h.site)] for h in listed if (h.frame, h.site) in label_of]
    sel = np.isin(lab, np.array(ids, np.intp))
    explained = Cover.of(s_all[sel], e_all[sel]).total_ns
    return listed, _pct(explained, idle.total_ns)


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


def _top_kernels(trace: Trace, rows: npt.NDArray[np.intp], s: I64, e: I64) -> list[KernelTime]:
    if not len(rows):
        return []
    names = trace.activities.name[rows]
    uniq, inv = unique_inverse(names)
    # summed as floats and held within int64: a hostile trace's durations can sum past it
    total = np.minimum(np.bincount(inv, weights=e - s), 9.2e18).astype(np.int64)
    count = np.bincount(inv)
    # equal totals in the order of the names' text (a name's index follows the rows' order)
    text = [trace.name_of(int(u)) for u in uniq.tolist()]
    top = sorted(range(len(uniq)), key=lambda i: (-int(total[i]), text[i]))[:5]
    return [
        KernelTime(name=trace.name_of(int(uniq[i])), count=int(count[i]), total_ns=int(total[i]))
        for i in top
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


_I64_MAX = np.iinfo(np.int64).max


class _RecordsColumns(msgspec.Struct, frozen=True, eq=False):
    """The step records' figures as int64 columns, and each step's estimate (see
    bound_of_records): its wall time, its idle by cause (busy is the wall time less the idle),
    and whether the device was behind the host."""

    start: I64
    wall: I64
    sync_wait: I64
    data_wait: I64
    host: I64
    sync: I64
    input: I64
    behind: npt.NDArray[np.bool_]


def _exact_sum(v: I64) -> int:
    """The sum of int64 values as a Python int, exact however large (in two 32-bit halves,
    whose int64 sums cannot wrap below 2**31 values)."""
    if not len(v):
        return 0
    return (int((v >> 32).sum()) << 32) + int((v & 0xFFFFFFFF).sum())


def _minus(a: I64, b: I64) -> I64:
    """``a - b`` for ``a >= 0``, saturated at the int64 maximum (a hostile negative ``b``)."""
    over = (b < 0) & (a > _I64_MAX + np.minimum(b, 0))
    out: I64 = np.where(over, _I64_MAX, a - np.where(over, 0, b))
    return out


def _records_columns(steps: Sequence[StepRecord], asynchronous: bool) -> _RecordsColumns:
    """Each step record's idle by cause, of its wall time, and whether the device was behind
    (the estimate bound_of_records describes), as arrays: one pass over the records to read
    their figures, then array arithmetic."""
    n = len(steps)
    fig = np.array(
        [
            (
                st.start_ns,
                st.frontend_ns,
                st.data_wait_ns,
                st.sync_wait_ns,
                0 if st.device_ns is None else st.device_ns,
                st.device_ns is not None,
                0 if st.run_ahead_ns is None else st.run_ahead_ns,
                st.run_ahead_ns is not None,
                st.in_flight,
            )
            for st in steps
        ],
        dtype=np.int64,
    ).reshape(n, 9)
    start, fe, dw, sw, dev, has_dev, ra, has_ra, flight = fig.T
    wall = np.maximum(fe, 0)
    data = np.minimum(np.maximum(dw, 0), wall)
    sync = np.minimum(np.maximum(sw, 0), wall - data)
    zero = np.zeros(n, np.int64)
    if not asynchronous:
        # the host ran every op itself: "busy" is the host's own compute, idle its waits
        return _RecordsColumns(start, wall, sw, dw, zero, sync, data, np.zeros(n, bool))
    behind_ra = (has_ra != 0) & (ra > RECORDS_BEHIND_FRACTION * wall.astype(np.float64))
    late = behind_ra | (flight >= RECORDS_FULL_IN_FLIGHT)
    # the marker window's shortfall (frontend - device), 0 without a device figure
    shortfall = np.where(has_dev != 0, np.maximum(_minus(wall, dev), 0), 0)
    # kept pace: the device waited for the host; markers cannot see how long, so the idle is
    # at least what the host spent not issuing work (data, sync), the marker window's
    # shortfall, and never below the device-bound threshold
    floor = np.ceil(DEVICE_BOUND_IDLE_FRACTION * wall.astype(np.float64)).astype(np.int64)
    idle = np.minimum(wall, np.maximum(np.maximum(shortfall, data + sync), floor))
    s_part = np.minimum(idle, sync)
    i_part = np.minimum(idle - s_part, data)
    # behind: the device still had this step's work queued when the host moved on: it sets
    # the pace, and the idle is the shortfall alone
    host = np.where(late, shortfall, idle - s_part - i_part)
    return _RecordsColumns(
        start,
        wall,
        sw,
        dw,
        host,
        np.where(late, 0, s_part),
        np.where(late, 0, i_part),
        late,
    )


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


def _record_bounds(c: _RecordsColumns) -> list[StepBound]:
    """Each step record's label and figures, from its columns."""
    idle_total = c.host + c.sync + c.input
    busy = c.wall - idle_total
    # label_of, over the columns: the leading cause (most idle; ties to the earlier cause),
    # device-bound below the idle threshold, undetermined without a wall time
    by = np.stack([c.host, c.sync, c.input])  # host, sync, input: the causes a record has
    lead = np.argmax(by, axis=0)
    dev_bound = (c.wall - busy) < DEVICE_BOUND_IDLE_FRACTION * c.wall.astype(np.float64)
    labels = np.where(
        c.wall <= 0, 5, np.where(dev_bound, 0, lead + 1)
    )  # index in LABELS: device, host, sync, input
    # what busy and each cause are of the wall time, as _pct rounds them (Python's round)
    columns = (
        c.start.tolist(),
        c.wall.tolist(),
        busy.tolist(),
        c.host.tolist(),
        c.sync.tolist(),
        c.input.tolist(),
        c.sync_wait.tolist(),
        c.data_wait.tolist(),
        labels.tolist(),
        lead.tolist(),
    )
    out: list[StepBound] = []
    for start, wall, b, h, sy, inp, sw, dw, label, lc in zip(*columns, strict=True):
        idle = IdleByCause(host=h, sync=sy, input=inp)
        evidence = BoundEvidence(
            busy_pct=_pct(b, wall),
            idle_pct_by_cause={
                "host": _pct(h, wall),
                "sync": _pct(sy, wall),
                "input": _pct(inp, wall),
                "dependency": 0.0,
                "unattributed": 0.0,
            },
            leading_cause=CAUSES[lc],
            host_work_ns=h,
            sync_wait_ns=sw,
            sync_wait_pct=_pct(sw, wall),
            sync_cost_pct=_pct(sw, wall),
            data_wait_ns=dw,
            estimated=True,
        )
        out.append(
            StepBound(
                label=LABELS[label],
                share_start_ns=start,
                share_end_ns=start + wall,
                region_ns=wall,
                busy_ns=b,
                idle_ns=h + sy + inp,
                idle_ns_by_cause=idle,
                evidence=evidence,
            )
        )
    return out


def _sum_records(
    steps: Sequence[StepRecord], asynchronous: bool, per_step: bool
) -> tuple[_RecordsSums, list[StepBound]]:
    """The sums over the step records and, with ``per_step``, each step's bound."""
    c = _records_columns(steps, asynchronous)
    total = IdleByCause(host=_exact_sum(c.host), sync=_exact_sum(c.sync), input=_exact_sum(c.input))
    sums = _RecordsSums(
        len(steps),
        int(np.count_nonzero(c.behind)),
        _exact_sum(c.wall),
        total,
        _exact_sum(c.sync_wait),
        _exact_sum(c.data_wait),
    )
    return sums, _record_bounds(c) if per_step else []


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


def bound_columns_of_records(
    steps: Sequence[StepRecord], *, asynchronous: bool
) -> npt.NDArray[np.int64]:
    """Each step record's figures of :func:`bound_of_records` as an ``(n, 7)`` array: its
    region (wall time), busy, and idle by cause in :data:`CAUSES` order; for views that bin
    a long session's steps (no per-step objects: 10⁶ steps in about a second)."""
    c = _records_columns(steps, asynchronous)
    zero = np.zeros(len(steps), np.int64)
    busy = c.wall - (c.host + c.sync + c.input)
    return np.stack([c.wall, busy, c.host, c.sync, c.input, zero, zero], axis=1)


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
