"""Annotated Chrome/Perfetto traces: the original trace plus an overlay process, "asynctrace".

The overlay shows what the analysis found, on the trace's own time axis, in any viewer of the
Trace Event Format (Perfetto UI, chrome://tracing, TensorBoard's trace viewer):

* lane 1, **steps: queued on host** — one complete event (``X``) per step over its host span;
* lane 2 (and more when device windows overlap), **steps: executed on device** — one ``X`` per
  step from its first activity's start to its last activity's end on the device;
* a flow arrow (``s`` bound to the host span, ``f`` with binding point ``"e"`` bound to the
  device span) joining the two halves of each step;
* lane 10+, **syncs** — each synchronizing host call as an ``X`` over its wait, plus an instant
  marker (``i``, thread scope) at its start, with the Python site in ``args.site`` where known;
* counter tracks (``C``): **queue depth (stream S)** per stream, and **CPU run-ahead (ms)**, a
  sample at each step's host end.

Every figure comes from :func:`asynctrace.analysis.report.analyze` and
:func:`asynctrace.analysis.queue.queue_series`; this module only lays them out. Times are the
trace's own: ``ts`` in µs = (``trace.origin_ns`` + model ns) / 1000, with ns kept as three
decimals.

The original file's events and top-level keys are copied through undecoded (``msgspec.Raw``), so
annotating a large trace costs little more than copying it.
"""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from asynctrace._output import write_atomically
from asynctrace.errors import TraceFormatError

if TYPE_CHECKING:
    from asynctrace.analysis.report import Report
    from asynctrace.traces.model import Trace

__all__ = [
    "LANE_DEVICE",
    "LANE_HOST",
    "LANE_SYNCS",
    "OVERLAY_NAME",
    "annotate_file",
    "overlay_events",
    "write_trace",
]

OVERLAY_NAME = "asynctrace"
LANE_HOST = 1
LANE_DEVICE = 2
LANE_SYNCS = 10
FLOW_CAT = "asynctrace.step"
_MAX_DEVICE_LANES = 8
_MAX_SYNC_LANES = 8

Event = dict[str, Any]


def _us(origin_ns: int, t_ns: int) -> float:
    # int / int is correctly rounded in Python: the nearest float to the exact µs value, the
    # same float a JSON reader gets from the source's own decimal text. (Converting the ns to
    # float first would round twice and drift by ~0.2 µs on epoch-µs traces.)
    return (origin_ns + t_ns) / 1000


def _json_origin_ns(trace: Trace) -> int:
    """The model's origin on the clock of the file's ``ts`` values.

    The Kineto loader folds ``baseTimeNanoseconds`` into ``origin_ns``, but the file's ``ts``
    values do not include it, so it is taken out again here.
    """
    base = trace.metadata.get("baseTimeNanoseconds", "0")
    try:
        return trace.origin_ns - int(base)
    except ValueError:
        return trace.origin_ns


def _lanes(spans: Sequence[tuple[int, int]], first: int, limit: int) -> list[int]:
    """Greedy lane per span (in the given order) so that no two spans on a lane overlap.

    Chrome-format viewers draw ``X`` events on one thread as a stack; partly overlapping ones
    would nest wrongly, so overlapping spans go to the next free lane (the last one shared).
    """
    ends: list[int] = []
    out: list[int] = []
    for start, end in spans:
        for k, last in enumerate(ends):
            if last <= start:
                ends[k] = end
                out.append(first + k)
                break
        else:
            if len(ends) < limit:
                ends.append(end)
                out.append(first + len(ends) - 1)
            else:
                out.append(first + limit - 1)
                ends[-1] = max(ends[-1], end)
    return out


def overlay_events(trace: Trace, report: Report | None = None, *, pid: int) -> list[Event]:
    """The overlay process's events for ``trace`` (analysed now unless ``report`` is given)."""
    from asynctrace.analysis.launches import link_launches
    from asynctrace.analysis.queue import queue_series
    from asynctrace.analysis.report import analyze

    if report is None:
        report = analyze(trace)
    o = _json_origin_ns(trace)
    ev: list[Event] = [
        _meta("process_name", pid, None, name=OVERLAY_NAME),
        _meta("process_sort_index", pid, None, sort_index=-1),
        _meta("thread_name", pid, LANE_HOST, name="steps: queued on host"),
        _meta("thread_sort_index", pid, LANE_HOST, sort_index=LANE_HOST),
    ]

    steps = report.steps
    on_device = [s for s in steps if s.device_start_ns is not None and s.device_end_ns is not None]
    dev_lanes = _lanes(
        [(int(s.device_start_ns or 0), int(s.device_end_ns or 0)) for s in on_device],
        LANE_DEVICE,
        _MAX_DEVICE_LANES,
    )
    for lane in sorted(set(dev_lanes)):
        suffix = "" if lane == LANE_DEVICE else f" ({lane - LANE_DEVICE + 1})"
        ev.append(_meta("thread_name", pid, lane, name=f"steps: executed on device{suffix}"))
        ev.append(_meta("thread_sort_index", pid, lane, sort_index=lane))
    host_lanes = _lanes([(s.start_ns, s.end_ns) for s in steps], LANE_HOST, 1)

    lane_of = {id(s): lane for s, lane in zip(on_device, dev_lanes, strict=True)}
    for k, (s, hl) in enumerate(zip(steps, host_lanes, strict=True)):
        label = f"step {s.step}"
        ev.append(
            {
                "ph": "X",
                "cat": "asynctrace",
                "name": label,
                "pid": pid,
                "tid": hl,
                "ts": _us(o, s.start_ns),
                "dur": s.cpu_ns / 1000,
                "args": {
                    "cpu_ms": s.cpu_ns / 1e6,
                    "sync_count": s.sync_count,
                    "sync_wait_ms": s.sync_wait_ns / 1e6,
                    "activities": s.activities,
                    "queue_max": s.queue_max,
                    "in_flight_steps": s.in_flight_steps,
                },
            }
        )
        if id(s) not in lane_of:
            continue
        d0, d1 = int(s.device_start_ns or 0), int(s.device_end_ns or 0)
        ev.append(
            {
                "ph": "X",
                "cat": "asynctrace",
                "name": label,
                "pid": pid,
                "tid": lane_of[id(s)],
                "ts": _us(o, d0),
                "dur": (d1 - d0) / 1000,
                "args": {
                    "device_ms": s.device_ns / 1e6,
                    "gpu_busy_ms": s.gpu_busy_ns / 1e6,
                    "gpu_idle_ms": s.gpu_idle_ns / 1e6,
                    "run_ahead_ms": None if s.run_ahead_ns is None else s.run_ahead_ns / 1e6,
                },
            }
        )
        # The arrow leaves the host span where the step started queueing and lands where the
        # device began executing it; "e" binds the end to the enclosing device span.
        ev.append(_flow("s", pid, hl, _us(o, s.start_ns), k, label))
        ev.append({**_flow("f", pid, lane_of[id(s)], _us(o, d0), k, label), "bp": "e"})

    calls = report.syncs.calls
    if calls:
        sync_lanes = _lanes(
            [(c.start_ns, c.start_ns + c.dur_ns) for c in calls], LANE_SYNCS, _MAX_SYNC_LANES
        )
        for lane in sorted(set(sync_lanes)):
            ev.append(_meta("thread_name", pid, lane, name="syncs"))
            ev.append(_meta("thread_sort_index", pid, lane, sort_index=lane))
        for c, lane in zip(calls, sync_lanes, strict=True):
            args = {
                "op": c.op,
                "site": c.site,
                "wait_ms": c.dur_ns / 1e6,
                "step": c.step,
                "thread": c.tid,
            }
            name = f"sync: {c.op}" + (f" @ {c.site}" if c.site else "")
            ts = _us(o, c.start_ns)
            ev.append(
                {
                    "ph": "X",
                    "cat": "asynctrace.sync",
                    "name": name,
                    "pid": pid,
                    "tid": lane,
                    "ts": ts,
                    "dur": c.dur_ns / 1000,
                    "args": args,
                }
            )
            ev.append(
                {
                    "ph": "i",
                    "s": "t",
                    "cat": "asynctrace.sync",
                    "name": c.site or c.op,
                    "pid": pid,
                    "tid": lane,
                    "ts": ts,
                    "args": args,
                }
            )

    links = link_launches(trace)
    for key, (depth, _flight) in queue_series(trace, links).items():
        name = f"queue depth (stream {key})"
        ev.extend(
            {"ph": "C", "name": name, "pid": pid, "ts": _us(o, t), "args": {"depth": v}}
            for t, v in zip(depth.time_ns.tolist(), depth.value.tolist(), strict=True)
        )
    for s in steps:
        if s.run_ahead_ns is not None:
            ev.append(
                {
                    "ph": "C",
                    "name": "CPU run-ahead (ms)",
                    "pid": pid,
                    "ts": _us(o, s.end_ns),
                    "args": {"run_ahead_ms": s.run_ahead_ns / 1e6},
                }
            )
    return ev


def _meta(kind: str, pid: int, tid: int | None, **args: Any) -> Event:
    e: Event = {"ph": "M", "name": kind, "pid": pid, "args": args}
    if tid is not None:
        e["tid"] = tid
    return e


def _flow(ph: str, pid: int, tid: int, ts: float, id_: int, name: str) -> Event:
    return {"ph": ph, "cat": FLOW_CAT, "id": id_, "name": name, "pid": pid, "tid": tid, "ts": ts}


class _Pids(msgspec.Struct):
    pid: Any = None


_pid_decoder = msgspec.json.Decoder(_Pids)


def _free_pid(raw_events: Iterable[msgspec.Raw]) -> int:
    used: set[int] = set()
    for r in raw_events:
        try:
            p = _pid_decoder.decode(r).pid
        except msgspec.DecodeError:
            continue
        if isinstance(p, int):
            used.add(p)
    # A pid far from real ones and from Kineto's device pids (0..n), positive for old viewers.
    pid = 0x7A5C
    while pid in used:
        pid += 1
    return pid


_MAX_INFLATED = 8 << 30


def _read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(str(path), f"cannot read: {e.strerror or e}") from None
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
                data = f.read(_MAX_INFLATED + 1)
        except (OSError, EOFError) as e:
            raise TraceFormatError(str(path), f"corrupt gzip ({e})") from None
        if len(data) > _MAX_INFLATED:
            raise TraceFormatError(str(path), "inflates beyond 8 GiB; refusing to annotate it")
    return data


def write_trace(path: str | os.PathLike[str], doc: Any) -> Path:
    """Write a Chrome trace (gzip when the name ends in .gz) atomically: temp file + rename."""
    p = Path(path)
    data = msgspec.json.encode(doc)
    if p.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6)
    return write_atomically(p, data)


def annotate_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    trace: Trace | None = None,
    report: Report | None = None,
) -> Path:
    """Write ``dst``: the Chrome trace ``src`` unchanged plus the asynctrace overlay process.

    ``trace`` is ``src`` loaded (loaded now when not given); ``report`` its analysis.
    """
    src_p = Path(src)
    if trace is None:
        from asynctrace.traces.load import load

        trace = load(src_p)
    data = _read_bytes(src_p)
    try:
        top: Any = msgspec.json.decode(data, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
    except msgspec.DecodeError as e:
        raise TraceFormatError(str(src_p), f"not a Chrome trace ({e})") from None
    if isinstance(top, list):
        events: list[msgspec.Raw] = top
        doc: Any = events
    else:
        if "traceEvents" not in top:
            raise TraceFormatError(str(src_p), "no traceEvents array: not a Chrome trace")
        try:
            events = msgspec.json.decode(top["traceEvents"], type=list[msgspec.Raw])
        except msgspec.DecodeError as e:
            raise TraceFormatError(str(src_p), f"traceEvents is not an array ({e})") from None
        doc = {**top, "traceEvents": events}
    pid = _free_pid(events)
    events.extend(
        msgspec.Raw(msgspec.json.encode(e)) for e in overlay_events(trace, report, pid=pid)
    )
    return write_trace(dst, doc)
