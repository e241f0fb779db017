"""View models: what a picture draws, as msgspec Structs with a JSON form.

Layout only — every number is a figure the analysis computed, or a trace event's own start and
duration. Two views:

* :func:`timeline_window` — one step's window of a trace (drawn from its
  :class:`~asynctrace.analysis.report.Analysis`): the host lane(s) (launch calls, sync
  stalls, or the operators where nothing was launched), the device lane(s) (one per stream),
  queued→executed links (launch call end → activity start) and each stream's queue depth over
  the window. Clipped to the window and capped at ``max_events`` per lane kind (the longest
  events are kept; ``notes`` says so; ``max_events`` is at most :data:`MAX_EVENTS`), so that
  one step of a 400 MB trace stays a small answer. Its cost is that of the window, not of the
  trace: the per-trace arrays it slices (:class:`TimelineIndex`) are made once per analysis
  and each window is found in them by binary search. The TensorBoard plugin serves it as JSON
  (``/step_window``) and draws it with SVG.
* :func:`step_bars` — per step of any report (a trace's or a session's), the parts of the host
  bar and of the device bar (a trace's busy and idle by cause, a session's device time), and
  the run-ahead / in-flight / queue series.

All times are integer ns on the run's clock (``*_ns``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from asynctrace.analysis.queue import QueueSeries
    from asynctrace.analysis.report import Analysis, Report, TraceDetail
    from asynctrace.traces.model import Trace

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_STEPS",
    "MAX_EVENTS",
    "BarPart",
    "DeviceActivity",
    "HostCall",
    "Lane",
    "LaunchLink",
    "QueueTrack",
    "StepBar",
    "StepBars",
    "TimelineIndex",
    "TimelineWindow",
    "WindowCounts",
    "step_bars",
    "timeline_index",
    "timeline_window",
]

#: events per lane kind (host calls, device activities) one window holds at most
DEFAULT_MAX_EVENTS = 4000
#: the most ``max_events`` may be (a larger one is taken as this): a window's answer stays
#: a few MB, whatever is asked
MAX_EVENTS = 50_000
#: steps the per-step bars hold at most (every k-th step beyond: real steps, not averages)
DEFAULT_MAX_STEPS = 2000
#: queued→executed links one window holds at most (evenly sampled beyond)
_MAX_LINKS = 400
#: queue-depth points per stream one window holds at most (maximum per bucket beyond)
_MAX_QUEUE_POINTS = 2000
#: characters of an event name kept (kernel names can be kilobytes of template arguments)
_MAX_NAME = 200

_ACTIVITY_KINDS = ("kernel", "memcpy", "memset")


class Lane(msgspec.Struct, frozen=True, kw_only=True):
    """One lane of the window: a host thread or a device stream."""

    #: "host:<pid>:<tid>" or "device:<stream key>"
    id: str
    label: str
    kind: str  # "host" or "device"


class HostCall(msgspec.Struct, frozen=True, kw_only=True):
    """A call on a host lane: a launch, a sync stall, or an operator the host ran."""

    lane: str
    start_ns: int
    dur_ns: int
    #: "launch", "sync" or "op"
    kind: str
    name: str


class DeviceActivity(msgspec.Struct, frozen=True, kw_only=True):
    """A kernel, memcpy or memset on a device lane."""

    lane: str
    start_ns: int
    dur_ns: int
    #: "kernel", "memcpy" or "memset"
    kind: str
    name: str
    #: whether its launch call started in the chosen step (else it belongs to another step)
    in_step: bool


class LaunchLink(msgspec.Struct, frozen=True, kw_only=True):
    """A queued→executed link: from a launch call to the activity it launched."""

    host_lane: str
    device_lane: str
    #: end of the launch call on the host, start of the activity on the device
    queued_ns: int
    executed_ns: int


class QueueTrack(msgspec.Struct, frozen=True, kw_only=True):
    """A device lane's queue depth over the window."""

    lane: str
    #: a step function: depth[i] holds from time_ns[i] to time_ns[i+1] (the first point is the
    #: depth at the window's start)
    time_ns: list[int]
    depth: list[int]


class WindowCounts(msgspec.Struct, frozen=True, kw_only=True):
    """Events in the window, and how many of them the answer holds."""

    host: int
    host_shown: int
    device: int
    device_shown: int
    links: int
    links_shown: int


class TimelineWindow(msgspec.Struct, frozen=True, kw_only=True):
    """One step's window of a trace: its lanes, what ran on them, and the links between."""

    source: str
    step: int
    name: str
    #: the window: the step's host span, widened to the end of its device work
    start_ns: int
    end_ns: int
    #: the step's host span
    step_start_ns: int
    step_end_ns: int
    lanes: list[Lane]
    host: list[HostCall]
    device: list[DeviceActivity]
    links: list[LaunchLink]
    queue: list[QueueTrack]
    counts: WindowCounts
    capped: bool
    notes: list[str] = msgspec.field(default_factory=list)


def _name(trace: Trace, index: int) -> str:
    s = trace.name_of(index)
    return s if len(s) <= _MAX_NAME else s[: _MAX_NAME - 1] + "…"


class TimelineIndex(msgspec.Struct, frozen=True, kw_only=True, eq=False):
    """The arrays of a trace that every step window slices, made once per analysis
    (:func:`timeline_index`): for each event table, the running maximum of its events' ends
    (so that a window's first overlapping row is a binary search away), and the masks that
    would otherwise be rebuilt over the whole trace for every window."""

    #: per table ("runtime", "ranges", "activities"): max(end) over rows [0, i]
    end_max: dict[str, npt.NDArray[np.int64]]
    #: runtime rows that launch device work, and those that synchronize
    launching: npt.NDArray[np.bool_]
    syncing: npt.NDArray[np.bool_]
    #: range rows that are operators
    ops: npt.NDArray[np.bool_]
    #: activities joined to a launch call
    matched: npt.NDArray[np.bool_]


def _end_max(start: npt.NDArray[np.int64], dur: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    ends = start + np.maximum(dur, 0)
    out: npt.NDArray[np.int64] = np.maximum.accumulate(ends) if len(ends) else ends
    return out


def timeline_index(detail: TraceDetail) -> TimelineIndex:
    """The :class:`TimelineIndex` of a trace's analysis detail (linear in the trace; keep it
    beside the analysis and pass it to every :func:`timeline_window`)."""
    from asynctrace.analysis.launches import LAUNCHING_KINDS
    from asynctrace.analysis.steps import SYNC_KINDS
    from asynctrace.traces.model import RangeKind

    t = detail.trace
    rt, hr, act = t.runtime, t.ranges, t.activities
    return TimelineIndex(
        end_max={
            "runtime": _end_max(rt.start_ns, rt.dur_ns),
            "ranges": _end_max(hr.start_ns, hr.dur_ns),
            "activities": _end_max(act.start_ns, act.dur_ns),
        },
        launching=np.isin(rt.kind, np.array([int(k) for k in LAUNCHING_KINDS], dtype=np.uint8)),
        syncing=np.isin(rt.kind, np.array([int(k) for k in SYNC_KINDS], dtype=np.uint8)),
        ops=hr.kind == int(RangeKind.OP),
        matched=detail.links.matched,
    )


def _overlapping(
    start: npt.NDArray[np.int64],
    dur: npt.NDArray[np.int64],
    end_max: npt.NDArray[np.int64],
    w0: int,
    w1: int,
) -> Any:
    """Indices of rows [start, start+dur) that overlap [w0, w1); ``start`` is sorted and
    ``end_max`` is the running maximum of the rows' ends. Only the rows between the first that
    may reach into the window and the last that starts before its end are looked at."""
    i1 = int(np.searchsorted(start, w1, side="left"))
    # rows before i0 end at or before w0 and start before it (a zero-length event at or after
    # the window's start is inside it)
    i0 = min(
        int(np.searchsorted(end_max, w0, side="right")),
        int(np.searchsorted(start, w0, side="left")),
    )
    if i0 >= i1:
        return np.empty(0, dtype=np.intp)
    s, d = start[i0:i1], dur[i0:i1]
    return i0 + np.flatnonzero((s + np.maximum(d, 0) > w0) | (s >= w0))


def _keep_longest(idx: Any, dur: npt.NDArray[np.int64], cap: int) -> Any:
    if len(idx) <= cap:
        return idx
    order = np.argsort(-dur[idx], kind="stable")[:cap]
    return np.sort(idx[order])


def _queue_track(lane: str, series: QueueSeries, w0: int, w1: int) -> QueueTrack:
    t, v = series.time_ns, series.value
    i0 = int(np.searchsorted(t, w0, side="right")) - 1
    i1 = int(np.searchsorted(t, w1, side="left"))
    first = int(v[i0]) if i0 >= 0 else 0
    tt = t[max(i0 + 1, 0) : i1]
    vv = v[max(i0 + 1, 0) : i1]
    if len(tt) > _MAX_QUEUE_POINTS:
        # the highest depth per bucket: a peak never disappears by sampling
        edges = np.linspace(w0, w1, _MAX_QUEUE_POINTS + 1)
        b = np.clip(np.searchsorted(edges, tt, side="right") - 1, 0, _MAX_QUEUE_POINTS - 1)
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        vv = np.maximum.reduceat(vv, starts)
        tt = tt[starts]
    return QueueTrack(lane=lane, time_ns=[w0, *tt.tolist()], depth=[first, *vv.tolist()])


class _Window(msgspec.Struct, frozen=True, kw_only=True):
    """The step a window shows: its host span [s0, s1) and the window [w0, w1)."""

    s0: int
    s1: int
    w0: int
    w1: int


def _host_calls(
    trace: Trace, at: TimelineIndex, win: _Window, max_events: int
) -> tuple[list[HostCall], int, npt.NDArray[np.intp]]:
    """The host calls in the window (launch calls and syncs; the operators the host ran where
    nothing was launched), the longest ``max_events``; how many there were; the runtime rows
    of the launch and sync calls kept."""
    rt = trace.runtime
    r_idx = _overlapping(rt.start_ns, rt.dur_ns, at.end_max["runtime"], win.w0, win.w1)
    r_idx = r_idx[at.launching[r_idx] | at.syncing[r_idx]]
    host: list[HostCall] = []
    n_host = len(r_idx)
    if not at.launching[r_idx].any():
        # nothing was launched to a device here (a CPU-only trace): the host ran the operators
        # itself, so show those rather than an empty host lane
        hr = trace.ranges
        o_idx = _overlapping(hr.start_ns, hr.dur_ns, at.end_max["ranges"], win.w0, win.w1)
        o_idx = o_idx[at.ops[o_idx]]
        n_host += len(o_idx)
        for i in _keep_longest(o_idx, hr.dur_ns, max_events).tolist():
            host.append(_host_call(trace, hr, i, "op"))
    r_shown = _keep_longest(r_idx, rt.dur_ns, max(max_events - len(host), 0))
    shown_sync = at.syncing[r_shown].tolist()
    for i, is_sync in zip(r_shown.tolist(), shown_sync, strict=True):
        host.append(_host_call(trace, rt, i, "sync" if is_sync else "launch"))
    host.sort(key=lambda h: h.start_ns)
    return host, n_host, r_shown


def _host_call(trace: Trace, table: Any, i: int, kind: str) -> HostCall:
    """Row ``i`` of a runtime or range table, as a host call of ``kind``."""
    return HostCall(
        lane=f"host:{table.pid[i]}:{table.tid[i]}",
        start_ns=int(table.start_ns[i]),
        dur_ns=int(table.dur_ns[i]),
        kind=kind,
        name=_name(trace, int(table.name[i])),
    )


def _device_activities(
    detail: TraceDetail,
    at: TimelineIndex,
    win: _Window,
    a_idx: npt.NDArray[np.intp],
    shown_launch: set[int],
) -> tuple[list[DeviceActivity], list[LaunchLink]]:
    """The window's device activities, and the links from their launch calls shown (each
    read from the per-trace arrays at its own row: the cost is the window's)."""
    trace, links = detail.trace, detail.links
    act, rt = trace.activities, trace.runtime
    device: list[DeviceActivity] = []
    out_links: list[LaunchLink] = []
    for i in a_idx.tolist():
        lane = f"device:{detail.stream_keys[detail.stream_of[i]]}"
        launch_start = int(links.launch_start_ns[i])
        matched = bool(at.matched[i])
        kind = int(act.kind[i])
        device.append(
            DeviceActivity(
                lane=lane,
                start_ns=int(act.start_ns[i]),
                dur_ns=int(act.dur_ns[i]),
                kind=_ACTIVITY_KINDS[kind] if kind < len(_ACTIVITY_KINDS) else "kernel",
                name=_name(trace, int(act.name[i])),
                in_step=matched and win.s0 <= launch_start < win.s1,
            )
        )
        j = int(links.launch_index[i])
        if matched and j in shown_launch:
            out_links.append(
                LaunchLink(
                    host_lane=f"host:{rt.pid[j]}:{rt.tid[j]}",
                    device_lane=lane,
                    queued_ns=int(links.launch_end_ns[i]),
                    executed_ns=int(act.start_ns[i]),
                )
            )
    return device, out_links


def _lanes(host: list[HostCall], device: list[DeviceActivity]) -> list[Lane]:
    """The host lanes, then the device lanes (one per stream), each in id order."""
    lanes: dict[str, Lane] = {}
    for h in host:
        if h.lane not in lanes:
            _, pid, tid = h.lane.split(":")
            lanes[h.lane] = Lane(id=h.lane, label=f"host pid {pid} tid {tid}", kind="host")
    for d in device:
        if d.lane not in lanes:
            key = d.lane.removeprefix("device:")
            lanes[d.lane] = Lane(id=d.lane, label=f"stream {key}", kind="device")
    return sorted(lanes.values(), key=lambda lane: (lane.kind != "host", lane.id))


def _notes(counts: WindowCounts) -> list[str]:
    notes: list[str] = []
    if counts.device_shown < counts.device:
        notes.append(
            f"capped: showing the {counts.device_shown} longest of {counts.device} device "
            "activities in this window"
        )
    if counts.host_shown < counts.host:
        notes.append(f"capped: showing the {counts.host_shown} longest of {counts.host} host calls")
    if counts.links_shown < counts.links:
        notes.append(
            f"showing {counts.links_shown} of {counts.links} queued→executed links (sampled)"
        )
    if not counts.device:
        notes.append("no device activity recorded in this window")
    return notes


def timeline_window(
    analysis: Analysis,
    index: int,
    *,
    max_events: int = DEFAULT_MAX_EVENTS,
    at: TimelineIndex | None = None,
) -> TimelineWindow:
    """The window of a trace's ``index``-th step (``analysis.report.steps[index]``) — see the
    module doc. Draws from the analysis' detail (the trace, its launch links and queue
    series) and ``at``, its :func:`timeline_index` (made here when not given: pass it to draw
    several windows of one trace); ``max_events`` is taken within 1 to :data:`MAX_EVENTS`.
    Raises ValueError for a session's records, which hold no events."""
    detail = analysis.trace
    figures = analysis.report.trace
    if detail is None or figures is None:
        raise ValueError("step windows are drawn from traces, not records")
    max_events = min(max(max_events, 1), MAX_EVENTS)
    if at is None:
        at = timeline_index(detail)
    step, extra = analysis.report.steps[index], figures.steps[index]
    s0, s1 = step.start_ns, extra.end_ns
    w0 = min(s0, extra.device_start_ns or s0)
    win = _Window(s0=s0, s1=s1, w0=w0, w1=max(s1, extra.device_end_ns or s1, w0 + 1))
    act = detail.trace.activities
    a_idx = _overlapping(act.start_ns, act.dur_ns, at.end_max["activities"], win.w0, win.w1)
    n_device = len(a_idx)
    host, n_host, r_shown = _host_calls(detail.trace, at, win, max_events)
    device, links = _device_activities(
        detail, at, win, _keep_longest(a_idx, act.dur_ns, max_events), set(r_shown.tolist())
    )
    n_links = len(links)
    if n_links > _MAX_LINKS:
        links = links[:: -(-n_links // _MAX_LINKS)]
    lanes = _lanes(host, device)
    counts = WindowCounts(
        host=n_host,
        host_shown=len(host),
        device=n_device,
        device_shown=len(device),
        links=n_links,
        links_shown=len(links),
    )
    queues = detail.queue_series
    return TimelineWindow(
        source=analysis.report.source.path,
        step=step.step,
        name=extra.name,
        start_ns=win.w0,
        end_ns=win.w1,
        step_start_ns=s0,
        step_end_ns=s1,
        lanes=lanes,
        host=host,
        device=device,
        links=links,
        queue=[
            _queue_track(lane.id, queues[k][0], win.w0, win.w1)
            for lane in lanes
            for k in (lane.id.removeprefix("device:"),)
            if lane.kind == "device" and k in queues
        ],
        counts=counts,
        capped=len(device) < n_device or len(host) < n_host,
        notes=_notes(counts),
    )


# ------------------------------------------------------------------ per-step bars


class BarPart(msgspec.Struct, frozen=True, kw_only=True):
    """One part of a stacked bar."""

    #: a kind of :mod:`asynctrace.render.legend` ("host", "sync", "data", "busy", "idle",
    #: "idle:<cause>")
    kind: str
    dur_ns: int


class StepBar(msgspec.Struct, frozen=True, kw_only=True):
    """One step's two bars: the host's time and the device's, each in parts."""

    step: int
    host: list[BarPart]
    #: empty where the step's device time was not measured
    device: list[BarPart] = msgspec.field(default_factory=list)


class StepBars(msgspec.Struct, frozen=True, kw_only=True):
    """The per-step bars of a run, and its per-step series."""

    bars: list[StepBar]
    #: steps in the run; ``bars`` holds every ``stride``-th of them (1: all) so that a run of a
    #: million steps stays a picture of at most ``DEFAULT_MAX_STEPS`` bars
    total_steps: int = 0
    stride: int = 1
    #: per step, in the order of ``bars``; None where not measured
    run_ahead_ns: list[int | None]
    #: steps in flight (the step record's ``in_flight``)
    in_flight: list[int]
    #: highest queue depth in the step (traces only)
    queue_max: list[int] | None = None


def _device_parts(report: Report, i: int) -> list[BarPart]:
    """A trace's share of the device timeline (busy, then idle by cause); a session's device
    time (its step bounds are estimated, not measured: not drawn as a device window)."""
    if report.trace is not None and i < len(report.step_bounds):
        b = report.step_bounds[i]
        causes = b.idle_ns_by_cause.as_dict()
        return [BarPart(kind="busy", dur_ns=b.busy_ns)] + [
            BarPart(kind=f"idle:{k}", dur_ns=v) for k, v in causes.items() if v
        ]
    ns = report.steps[i].device_ns
    return [] if ns is None else [BarPart(kind="busy", dur_ns=ns)]


def step_bars(report: Report, *, max_steps: int = DEFAULT_MAX_STEPS) -> StepBars:
    """Per step of a report (a trace's or a session's; every ``stride``-th step of a long run,
    real steps, not averages): host issuing + data wait + sync wait; the device bar
    (:func:`_device_parts`); run-ahead, steps in flight, and a trace's queue maximum."""
    total = len(report.steps)
    stride = max(1, -(-total // max(max_steps, 1)))
    rows = range(0, total, stride)
    bars = []
    for i in rows:
        s = report.steps[i]
        host = [
            BarPart(kind="host", dur_ns=s.issuing_ns),
            BarPart(kind="data", dur_ns=s.data_wait_ns),
            BarPart(kind="sync", dur_ns=s.sync_wait_ns),
        ]
        bars.append(StepBar(step=s.step, host=host, device=_device_parts(report, i)))
    extras = report.trace.steps if report.trace is not None else None
    return StepBars(
        bars=bars,
        run_ahead_ns=[report.steps[i].run_ahead_ns for i in rows],
        in_flight=[report.steps[i].in_flight for i in rows],
        queue_max=[extras[i].queue_max for i in rows] if extras is not None else None,
        total_steps=total,
        stride=stride,
    )
