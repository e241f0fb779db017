"""Per-activity rows of one trace, with the report's definitions, for columnar exports.

``activity_rows(trace)`` gives one row per device activity (kernel, memcpy, memset): its stream
key (as ``Report.activities.per_stream``), the launch call it was joined to
(:func:`~asynctrace.analysis.launches.link_launches`), ``queue_delay_ns`` and
``launch_to_start_ns`` (:func:`~asynctrace.analysis.launches.activity_delays`) and the step it
belongs to — the step in whose host span ``[start, end)`` its launch call started, the rule of
:func:`~asynctrace.analysis.steps.split_steps`, so that counting rows per step gives each
step's ``activities``. Pure: no file is read or written here.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from asynctrace.analysis.launches import LaunchLinks, activity_delays, link_launches
from asynctrace.analysis.queue import stream_groups
from asynctrace.analysis.steps import StepWindow, step_windows, window_of
from asynctrace.traces.model import ActivityKind, Trace

__all__ = ["ActivityRows", "activity_rows", "activity_steps"]

I64 = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: as ``Report.activities.per_kind`` names them
_KIND_NAMES = {int(k): k.name.lower() for k in ActivityKind}


class ActivityRows(msgspec.Struct, frozen=True, eq=False, kw_only=True):
    """Equal-length columns, one row per activity in the trace's activity order.

    Launch columns hold 0 where ``matched`` is False; ``step`` holds -1 where the activity
    belongs to no step (unmatched, or launched outside every step).
    """

    kind: list[str]
    name: list[str]
    device: npt.NDArray[np.int32]
    stream: list[str]
    start_ns: I64
    dur_ns: I64
    correlation: I64
    matched: BoolArray
    launch_op: list[str | None]
    launch_start_ns: I64
    launch_end_ns: I64
    queue_delay_ns: I64
    launch_to_start_ns: I64
    step: I64


def activity_steps(links: LaunchLinks, windows: list[StepWindow]) -> I64:
    """The step number of each activity (-1 for none): the window whose host span
    ``[start, end)`` holds the start of its launch call (:func:`window_of`: where windows
    overlap, the one that started last)."""
    out = np.full(len(links.launch_index), -1, dtype=np.int64)
    m = np.flatnonzero(links.matched)
    w_start = np.array([w.start_ns for w in windows], np.int64)
    w_end = np.array([w.end_ns for w in windows], np.int64)
    k = window_of(links.launch_start_ns[m], w_start, w_end)
    # index -1 (no window) reads the appended -1
    numbers = np.array([w.step for w in windows] + [-1], np.int64)
    out[m] = numbers[k]
    return out


def activity_rows(
    trace: Trace, *, links: LaunchLinks | None = None, windows: list[StepWindow] | None = None
) -> ActivityRows:
    """One row per device activity of ``trace`` (pure)."""
    if links is None:
        links = link_launches(trace)
    if windows is None:
        windows = step_windows(trace)
    act = trace.activities
    group_of, keys = stream_groups(trace)
    delay, to_start = activity_delays(trace, links)
    names = trace.strings
    rt_names = trace.runtime.name
    return ActivityRows(
        kind=[_KIND_NAMES[k] for k in act.kind.tolist()],
        name=[names[i] for i in act.name.tolist()],
        device=act.device.astype(np.int32),
        stream=[keys[g] for g in group_of.tolist()],
        start_ns=act.start_ns,
        dur_ns=act.dur_ns,
        correlation=act.correlation,
        matched=links.matched,
        launch_op=[
            names[int(rt_names[i])] if i >= 0 else None for i in links.launch_index.tolist()
        ],
        launch_start_ns=links.launch_start_ns,
        launch_end_ns=links.launch_end_ns,
        queue_delay_ns=delay,
        launch_to_start_ns=to_start,
        step=activity_steps(links, windows),
    )
