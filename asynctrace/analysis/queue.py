"""Queue depth and in-flight operations per stream, as step functions over time.

The **queue depth** of a stream at time t counts the activities whose launch call started at or
before t and which have not started on the device by t; at equal timestamps a device start is
applied before a launch. **In flight** counts activities launched and not yet finished (at equal
timestamps a device end is applied before a launch).

How things count:

* A graph launch counts **one entry**, however many kernels it expands into: the entry joins
  the queue of the stream of the graph's first kernel when the ``cudaGraphLaunch`` call starts
  and leaves it when that first kernel starts; it is in flight until the graph's last kernel
  ends. (The device's launch queue holds the graph launch, not its kernels; counting each
  kernel pushed 12 graph launches of the A100 graph-launch trace to a depth of 1,338, past the
  1,024 the hardware holds.) The kernels still count as device activity everywhere else.
* Only matched activities count (an unmatched one has no launch time); the report states how
  many were unmatched.
* **time at cap** counts only time the host was blocked at the cap: time with depth ≥ the cap
  during which the host was inside a launch call (any launching runtime call of the trace).
* An activity recorded as starting before its launch call started (clock skew between host and
  device timelines) is taken to start when the call started, so depth never goes negative.

Everything is vectorised: one sort and one cumulative sum per stream.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis.defaults import DEFAULT_QUEUE_CAP
from asynctrace.analysis.launches import LAUNCHING_KINDS, LaunchLinks
from asynctrace.analysis.timeline import Cover
from asynctrace.traces.model import RuntimeKind, Trace

__all__ = [
    "DEFAULT_QUEUE_CAP",
    "QueueSeries",
    "StreamQueue",
    "depth_max_between",
    "launch_cover",
    "queue_entries",
    "queue_series",
    "queue_stats",
    "stream_groups",
]

I64 = npt.NDArray[np.int64]


class QueueSeries(msgspec.Struct, frozen=True, eq=False):
    """A step function: ``value[i]`` holds from ``time_ns[i]`` to ``time_ns[i+1]`` (0 before)."""

    time_ns: I64
    value: I64


class StreamQueue(msgspec.Struct, frozen=True, kw_only=True):
    """Queue figures of one stream."""

    #: highest queue depth reached
    max: int
    #: time-weighted mean depth from the stream's first launch to its last device start
    mean: float
    #: time with depth ≥ the cap (default 1022) while the host was inside a launch call
    time_at_cap_ns: int
    #: highest number of activities launched and not finished
    in_flight_max: int
    #: matched activities on the stream (the ones counted here)
    activities: int


def stream_groups(trace: Trace) -> tuple[npt.NDArray[np.intp], list[str]]:
    """Group activities by stream: (group index per activity, key of each group).

    The key is the stream id as a string, or ``"device:stream"`` when the trace has activities
    on more than one device (stream ids are per device).
    """
    act = trace.activities
    if len(act) == 0:
        return np.empty(0, dtype=np.intp), []
    devices, dev_inv = np.unique(act.device, return_inverse=True)
    streams, stream_inv = np.unique(act.stream, return_inverse=True)
    # one 1-D key per (device, stream): much faster than np.unique(axis=0) on millions of rows
    pair = dev_inv.astype(np.int64) * len(streams) + stream_inv.astype(np.int64)
    uniq, inv = np.unique(pair, return_inverse=True)
    multi_device = len(devices) > 1
    keys = [
        f"{devices[p // len(streams)]}:{streams[p % len(streams)]}"
        if multi_device
        else str(streams[p % len(streams)])
        for p in uniq.tolist()
    ]
    return inv.reshape(-1).astype(np.intp), keys


def _step_function(on: I64, off: I64) -> QueueSeries:
    """Count of intervals [on, off) open at each time; an 'off' at t applies before an 'on' at t."""
    times = np.concatenate([on, off])
    deltas = np.concatenate([np.ones(len(on), np.int64), -np.ones(len(off), np.int64)])
    order = np.lexsort((deltas, times))
    t = times[order]
    depth = np.cumsum(deltas[order])
    if len(t) == 0:
        return QueueSeries(t, depth)
    last = np.r_[t[1:] != t[:-1], True]
    return QueueSeries(t[last], depth[last])


def queue_entries(trace: Trace, links: LaunchLinks) -> tuple[npt.NDArray[np.intp], I64, I64, I64]:
    """The queue's entries: (activity row standing for the entry, launch start, device start,
    device end), skew-corrected. One per matched activity, except that all the kernels of one
    graph launch make one entry (first kernel's row and start, last kernel's end)."""
    act = trace.activities
    m = np.flatnonzero(links.matched)
    launch = links.launch_start_ns[m]
    a_start = act.start_ns[m]
    a_end = a_start + act.dur_ns[m]
    li = links.launch_index[m]
    graph = trace.runtime.kind[li] == int(RuntimeKind.GRAPH_LAUNCH) if len(m) else np.zeros(0, bool)
    rows = m[~graph]
    l_out, s_out, e_out = launch[~graph], a_start[~graph], a_end[~graph]
    if graph.any():
        g = np.flatnonzero(graph)
        # by launch call, then start: the first row of each call is its first kernel
        order = g[np.lexsort((a_start[g], li[g]))]
        gl = li[order]
        first = np.r_[True, gl[1:] != gl[:-1]]
        heads = np.flatnonzero(first)
        ends = np.maximum.reduceat(a_end[order], heads)
        rows = np.concatenate([rows, m[order[heads]]])
        l_out = np.concatenate([l_out, launch[order[heads]]])
        s_out = np.concatenate([s_out, a_start[order[heads]]])
        e_out = np.concatenate([e_out, ends])
    start = np.maximum(s_out, l_out)
    end = np.maximum(e_out, start)
    return rows.astype(np.intp), l_out, start, end


def launch_cover(trace: Trace) -> Cover:
    """The union of the trace's launching runtime calls (the host inside a launch call)."""
    rt = trace.runtime
    is_launch = np.isin(rt.kind, np.array([int(k) for k in LAUNCHING_KINDS], dtype=np.uint8))
    s = rt.start_ns[is_launch]
    return Cover.of(s, s + rt.dur_ns[is_launch])


def queue_series(
    trace: Trace,
    links: LaunchLinks,
    *,
    groups: tuple[npt.NDArray[np.intp], list[str]] | None = None,
) -> dict[str, tuple[QueueSeries, QueueSeries]]:
    """Per stream key: (queue depth, in flight) step functions."""
    group_of, keys = groups if groups is not None else stream_groups(trace)
    rows, launch, start, end = queue_entries(trace, links)
    entry_group = group_of[rows] if len(rows) else np.zeros(0, np.intp)
    out: dict[str, tuple[QueueSeries, QueueSeries]] = {}
    for g, key in enumerate(keys):
        sel = entry_group == g
        out[key] = (
            _step_function(launch[sel], start[sel]),
            _step_function(launch[sel], end[sel]),
        )
    return out


def _stats(
    depth: QueueSeries, flight: QueueSeries, n: int, cap: int, launching: Cover
) -> StreamQueue:
    t, v = depth.time_ns, depth.value
    if len(t) == 0:
        return StreamQueue(max=0, mean=0.0, time_at_cap_ns=0, in_flight_max=0, activities=0)
    seg = np.diff(t)
    held = v[:-1]
    window = int(t[-1] - t[0])
    mean = float(np.dot(held, seg)) / window if window > 0 else 0.0
    full = np.flatnonzero(held >= cap)
    at_cap = int(launching.between(t[full], t[full + 1]).sum()) if len(full) else 0
    return StreamQueue(
        max=int(max(v.max(), 0)),
        mean=mean,
        time_at_cap_ns=at_cap,
        in_flight_max=int(max(flight.value.max(), 0)) if len(flight.value) else 0,
        activities=n,
    )


def queue_stats(
    trace: Trace,
    links: LaunchLinks,
    *,
    cap: int = DEFAULT_QUEUE_CAP,
    series: dict[str, tuple[QueueSeries, QueueSeries]] | None = None,
    groups: tuple[npt.NDArray[np.intp], list[str]] | None = None,
) -> dict[str, StreamQueue]:
    """Queue figures per stream key (see :func:`stream_groups`)."""
    if groups is None:
        groups = stream_groups(trace)
    if series is None:
        series = queue_series(trace, links, groups=groups)
    group_of, keys = groups
    counts = np.bincount(group_of[links.matched], minlength=len(keys))
    launching = launch_cover(trace)
    out: dict[str, StreamQueue] = {}
    for g, key in enumerate(keys):
        n = int(counts[g])
        depth, flight = series[key]
        out[key] = _stats(depth, flight, n, cap, launching)
    return out


def depth_max_between(series: QueueSeries, start_ns: int, end_ns: int) -> int:
    """Highest value of a step function over [start_ns, end_ns)."""
    t, v = series.time_ns, series.value
    i0 = int(np.searchsorted(t, start_ns, side="right")) - 1
    i1 = int(np.searchsorted(t, end_ns, side="left"))
    best = int(v[i0]) if i0 >= 0 else 0
    if i1 > i0 + 1:
        best = max(best, int(v[i0 + 1 : i1].max()))
    return best
