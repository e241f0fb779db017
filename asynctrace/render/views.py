"""View models: what a picture draws, as msgspec Structs with a JSON form.

Layout only — every number is a figure the analysis computed, or a trace event's own start and
duration. Two views:

* :func:`timeline_window` — one step's window of a trace: the host lane(s) (launch calls, sync
  stalls, or the operators where nothing was launched), the device lane(s) (one per stream),
  queued→executed links (launch call end → activity start) and each stream's queue depth over
  the window. Clipped to the window and capped at ``max_events`` per lane kind (the longest
  events are kept; ``notes`` says so), so that one step of a 400 MB trace stays a small answer.
  The TensorBoard plugin serves it as JSON (``/step_window``) and draws it with SVG.
* :func:`report_step_bars` / :func:`records_step_bars` — per step, the parts of the host bar and
  of the device bar (device idle split by cause where the report has that split), and the
  run-ahead / in-flight series.

All times are integer ns on the trace's clock (``*_ns``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from asynctrace.analysis.launches import LaunchLinks
    from asynctrace.analysis.queue import QueueSeries
    from asynctrace.traces.model import Trace

__all__ = [
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_STEPS",
    "BarPart",
    "DeviceActivity",
    "HostCall",
    "Lane",
    "LaunchLink",
    "QueueTrack",
    "StepBar",
    "StepBars",
    "TimelineWindow",
    "WindowCounts",
    "records_step_bars",
    "report_step_bars",
    "timeline_window",
]

#: events per lane kind (host calls, device activities) one window holds at most
DEFAULT_MAX_EVENTS = 4000
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
    #: "host:<pid>:<tid>" or "device:<stream key>"
    id: str
    label: str
    kind: str  # "host" or "device"


class HostCall(msgspec.Struct, frozen=True, kw_only=True):
    lane: str
    start_ns: int
    dur_ns: int
    #: "launch", "sync" or "op"
    kind: str
    name: str


class DeviceActivity(msgspec.Struct, frozen=True, kw_only=True):
    lane: str
    start_ns: int
    dur_ns: int
    #: "kernel", "memcpy" or "memset"
    kind: str
    name: str
    #: whether its launch call started in the chosen step (else it belongs to another step)
    in_step: bool


class LaunchLink(msgspec.Struct, frozen=True, kw_only=True):
    host_lane: str
    device_lane: str
    #: end of the launch call on the host, start of the activity on the device
    queued_ns: int
    executed_ns: int


class QueueTrack(msgspec.Struct, frozen=True, kw_only=True):
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


def _overlapping(start: npt.NDArray[np.int64], dur: npt.NDArray[np.int64], w0: int, w1: int) -> Any:
    """Indices of rows [start, start+dur) that overlap [w0, w1); ``start`` is sorted."""
    i1 = int(np.searchsorted(start, w1, side="left"))
    # (a zero-length event at or after the window's start is inside it)
    return np.flatnonzero((start[:i1] + np.maximum(dur[:i1], 0) > w0) | (start[:i1] >= w0))


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


def timeline_window(
    trace: Trace,
    step: Mapping[str, Any],
    *,
    links: LaunchLinks,
    stream_of: npt.NDArray[np.intp],
    stream_keys: Sequence[str],
    queues: Mapping[str, tuple[QueueSeries, QueueSeries]],
    max_events: int = DEFAULT_MAX_EVENTS,
) -> TimelineWindow:
    """The window of one step (``step``: a report step as a dict, with ``start_ns``, ``end_ns``,
    ``device_start_ns``, ``device_end_ns``) — see the module doc.

    ``links``, ``stream_of``/``stream_keys`` and ``queues`` are what
    :func:`~asynctrace.analysis.launches.link_launches`,
    :func:`~asynctrace.analysis.queue.stream_groups` and
    :func:`~asynctrace.analysis.queue.queue_series` return for the trace (a caller serving
    many windows computes them once).
    """
    from asynctrace.analysis.launches import LAUNCHING_KINDS
    from asynctrace.analysis.steps import SYNC_KINDS
    from asynctrace.traces.model import RangeKind

    s0, s1 = int(step["start_ns"]), int(step["end_ns"])
    w0 = min(s0, int(step.get("device_start_ns") or s0))
    w1 = max(s1, int(step.get("device_end_ns") or s1), w0 + 1)
    notes: list[str] = []
    act = trace.activities
    rt = trace.runtime

    a_idx = _overlapping(act.start_ns, act.dur_ns, w0, w1)
    n_device = len(a_idx)
    a_idx = _keep_longest(a_idx, act.dur_ns, max_events)

    launching = np.array([int(k) for k in LAUNCHING_KINDS], dtype=np.uint8)
    syncing = np.array([int(k) for k in SYNC_KINDS], dtype=np.uint8)
    r_idx = _overlapping(rt.start_ns, rt.dur_ns, w0, w1)
    r_idx = r_idx[np.isin(rt.kind[r_idx], launching) | np.isin(rt.kind[r_idx], syncing)]
    host_lanes: dict[str, Lane] = {}
    host: list[HostCall] = []
    n_host = len(r_idx)
    if not np.isin(rt.kind[r_idx], launching).any():
        # nothing was launched to a device here (a CPU-only trace): the host ran the operators
        # itself, so show those rather than an empty host lane
        hr = trace.ranges
        o_idx = _overlapping(hr.start_ns, hr.dur_ns, w0, w1)
        o_idx = o_idx[hr.kind[o_idx] == int(RangeKind.OP)]
        n_host += len(o_idx)
        o_idx = _keep_longest(o_idx, hr.dur_ns, max_events)
        for i in o_idx.tolist():
            lane = f"host:{hr.pid[i]}:{hr.tid[i]}"
            host.append(
                HostCall(
                    lane=lane,
                    start_ns=int(hr.start_ns[i]),
                    dur_ns=int(hr.dur_ns[i]),
                    kind="op",
                    name=_name(trace, int(hr.name[i])),
                )
            )
    r_shown = _keep_longest(r_idx, rt.dur_ns, max(max_events - len(host), 0))
    shown_sync = np.isin(rt.kind[r_shown], syncing).tolist()
    for i, is_sync in zip(r_shown.tolist(), shown_sync, strict=True):
        host.append(
            HostCall(
                lane=f"host:{rt.pid[i]}:{rt.tid[i]}",
                start_ns=int(rt.start_ns[i]),
                dur_ns=int(rt.dur_ns[i]),
                kind="sync" if is_sync else "launch",
                name=_name(trace, int(rt.name[i])),
            )
        )
    host.sort(key=lambda h: h.start_ns)
    for h in host:
        if h.lane not in host_lanes:
            _, pid, tid = h.lane.split(":")
            host_lanes[h.lane] = Lane(id=h.lane, label=f"host pid {pid} tid {tid}", kind="host")

    device: list[DeviceActivity] = []
    dev_lanes: dict[str, Lane] = {}
    matched = links.matched
    shown_launch = set(r_shown.tolist())
    link_rows: list[int] = []
    for i in a_idx.tolist():
        key = stream_keys[int(stream_of[i])]
        lane = f"device:{key}"
        if lane not in dev_lanes:
            dev_lanes[lane] = Lane(id=lane, label=f"stream {key}", kind="device")
        launch_start = int(links.launch_start_ns[i])
        device.append(
            DeviceActivity(
                lane=lane,
                start_ns=int(act.start_ns[i]),
                dur_ns=int(act.dur_ns[i]),
                kind=_ACTIVITY_KINDS[int(act.kind[i])] if int(act.kind[i]) < 3 else "kernel",
                name=_name(trace, int(act.name[i])),
                in_step=bool(matched[i]) and s0 <= launch_start < s1,
            )
        )
        if matched[i] and int(links.launch_index[i]) in shown_launch:
            link_rows.append(i)
    n_links = len(link_rows)
    if n_links > _MAX_LINKS:
        link_rows = link_rows[:: -(-n_links // _MAX_LINKS)]
    out_links = [
        LaunchLink(
            host_lane=f"host:{rt.pid[j]}:{rt.tid[j]}",
            device_lane=f"device:{stream_keys[int(stream_of[i])]}",
            queued_ns=int(links.launch_end_ns[i]),
            executed_ns=int(act.start_ns[i]),
        )
        for i in link_rows
        for j in (int(links.launch_index[i]),)
    ]
    queue = [
        _queue_track(f"device:{k}", queues[k][0], w0, w1)
        for k in (lane.id.removeprefix("device:") for lane in dev_lanes.values())
        if k in queues
    ]
    capped = len(device) < n_device or len(host) < n_host
    if len(device) < n_device:
        notes.append(
            f"capped: showing the {len(device)} longest of {n_device} device activities in "
            "this window"
        )
    if len(host) < n_host:
        notes.append(f"capped: showing the {len(host)} longest of {n_host} host calls")
    if len(out_links) < n_links:
        notes.append(f"showing {len(out_links)} of {n_links} queued→executed links (sampled)")
    if not device:
        notes.append("no device activity recorded in this window")
    return TimelineWindow(
        source=trace.source,
        step=int(step["step"]),
        name=str(step.get("name", "")),
        start_ns=w0,
        end_ns=w1,
        step_start_ns=s0,
        step_end_ns=s1,
        lanes=sorted(host_lanes.values(), key=lambda lane: lane.id)
        + sorted(dev_lanes.values(), key=lambda lane: lane.id),
        host=host,
        device=device,
        links=out_links,
        queue=queue,
        counts=WindowCounts(
            host=n_host,
            host_shown=len(host),
            device=n_device,
            device_shown=len(device),
            links=n_links,
            links_shown=len(out_links),
        ),
        capped=capped,
        notes=notes,
    )


# ------------------------------------------------------------------ per-step bars


class BarPart(msgspec.Struct, frozen=True, kw_only=True):
    #: a kind of :mod:`asynctrace.render.legend` ("host", "sync", "data", "busy", "idle",
    #: "idle:<cause>")
    kind: str
    dur_ns: int


class StepBar(msgspec.Struct, frozen=True, kw_only=True):
    step: int
    host: list[BarPart]
    device: list[BarPart]


class StepBars(msgspec.Struct, frozen=True, kw_only=True):
    bars: list[StepBar]
    #: steps in the run; ``bars`` holds every ``stride``-th of them (1: all) so that a run of a
    #: million steps stays a picture of at most ``DEFAULT_MAX_STEPS`` bars
    total_steps: int = 0
    stride: int = 1
    #: per step, in the order of ``bars``; None where not measured
    run_ahead_ns: list[int | None]
    #: steps in flight (records: ``in_flight``; traces: ``in_flight_steps``)
    in_flight: list[int]
    #: highest queue depth in the step (traces only)
    queue_max: list[int] | None = None


def _idle_causes(step: Mapping[str, Any]) -> dict[str, int] | None:
    """The step's device idle time by cause, where the report has that split: a mapping field
    named like ``idle_by_cause_ns`` / ``idle_ns_by_cause`` (cause → ns)."""
    for key, value in step.items():
        if "idle" in key and "cause" in key and isinstance(value, Mapping):
            out = {str(k): int(v) for k, v in value.items() if isinstance(v, (int, float)) and v}
            return out
    return None


def _every(steps: Sequence[Mapping[str, Any]], max_steps: int) -> tuple[list[Any], int]:
    stride = max(1, -(-len(steps) // max(max_steps, 1)))
    return list(steps[::stride]), stride


def report_step_bars(
    steps: Sequence[Mapping[str, Any]], *, max_steps: int = DEFAULT_MAX_STEPS
) -> StepBars:
    """Per step of a trace's report (steps as dicts, as in the report's JSON): host issuing +
    sync wait; device busy + idle (by cause where the report splits it)."""
    total = len(steps)
    steps, stride = _every(steps, max_steps)
    bars = []
    for s in steps:
        host = [
            BarPart(kind="host", dur_ns=max(int(s["cpu_ns"]) - int(s["sync_wait_ns"]), 0)),
            BarPart(kind="sync", dur_ns=int(s["sync_wait_ns"])),
        ]
        device = [BarPart(kind="busy", dur_ns=int(s["gpu_busy_ns"]))]
        causes = _idle_causes(s)
        if causes:
            device += [BarPart(kind=f"idle:{k}", dur_ns=v) for k, v in causes.items()]
        else:
            device.append(BarPart(kind="idle", dur_ns=int(s["gpu_idle_ns"])))
        bars.append(StepBar(step=int(s["step"]), host=host, device=device))
    return StepBars(
        bars=bars,
        run_ahead_ns=[s.get("run_ahead_ns") for s in steps],
        in_flight=[int(s.get("in_flight_steps", 0)) for s in steps],
        queue_max=[int(s.get("queue_max", 0)) for s in steps],
        total_steps=total,
        stride=stride,
    )


def records_step_bars(
    steps: Sequence[Mapping[str, Any]], *, max_steps: int = DEFAULT_MAX_STEPS
) -> StepBars:
    """Per step of a session's records (steps as dicts): host issuing + data wait + sync wait;
    device time where measured (and idle by cause where the records have it)."""
    total = len(steps)
    steps, stride = _every(steps, max_steps)
    bars = []
    for s in steps:
        fe, dw, sw = int(s["frontend_ns"]), int(s.get("data_wait_ns", 0)), int(s["sync_wait_ns"])
        host = [
            BarPart(kind="host", dur_ns=max(fe - dw - sw, 0)),
            BarPart(kind="data", dur_ns=dw),
            BarPart(kind="sync", dur_ns=sw),
        ]
        device = [] if s.get("device_ns") is None else [BarPart(kind="busy", dur_ns=s["device_ns"])]
        causes = _idle_causes(s)
        if causes:
            device += [BarPart(kind=f"idle:{k}", dur_ns=v) for k, v in causes.items()]
        bars.append(StepBar(step=int(s["step"]), host=host, device=device))
    return StepBars(
        bars=bars,
        run_ahead_ns=[s.get("run_ahead_ns") for s in steps],
        in_flight=[int(s.get("in_flight", 0)) for s in steps],
        total_steps=total,
        stride=stride,
    )
