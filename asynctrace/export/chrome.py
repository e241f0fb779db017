"""Annotated Chrome/Perfetto traces: the original trace plus an overlay process, "asynctrace".

The overlay shows what the analysis found, on the trace's own time axis, in any viewer of the
Trace Event Format (Perfetto UI, chrome://tracing, TensorBoard's trace viewer):

* lane 1 (and more when host spans overlap), **steps: queued on host** — one complete event
  (``X``) per step over its host span;
* lane 10 (and more when device windows overlap), **steps: executed on device** — one ``X`` per
  step from its first activity's start to its last activity's end on the device;
* a flow arrow (``s`` bound to the host span, ``f`` with binding point ``"e"`` bound to the
  device span) joining the two halves of each step;
* lane 20+, **syncs** — each synchronizing host call as an ``X`` over its wait, plus an instant
  marker (``i``, thread scope) at its start, with the Python site in ``args.site`` where known;
* lane 18, **device idle** — one ``X`` per idle gap of the device timeline (the bound
  analysis), named by its cause (``idle: host`` …), coloured by cause (``cname``, a reserved
  colour of the Chrome trace viewer; Perfetto colours by name), ``args``: cause, duration,
  launch gap, step;
* lane 19, **steps: device share** — one ``X`` per step over its share of the device timeline,
  named with the step's bound label, ``args``: busy and idle by cause;
* counter tracks (``C``): **queue depth (stream S)** per stream, and **CPU run-ahead (ms)**, a
  sample at each step's host end.

Every figure comes from the :class:`~asynctrace.analysis.report.Analysis` the caller made once
(``analyze_detail(trace)``: the report, its idle gaps and queue series); this module computes
nothing, it only lays them out. Times are the trace's own: ``ts`` in µs = (``trace.origin_ns``
+ model ns) / 1000, with ns kept as three decimals.

The original file's text is copied through as it is, the overlay's events appended to its
``traceEvents`` array, so annotating a large trace costs little more than copying it: memory is
the (inflated) text once plus a small object per event while the ids in use are collected.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import os
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from asynctrace.errors import TraceFormatError
from asynctrace.render.output import atomic_file
from asynctrace.traces.reading import DEFAULT_MAX_INFLATED_BYTES

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from asynctrace.analysis.bound import IdleGaps, StepBound
    from asynctrace.analysis.report import Analysis, Report, TraceFigures
    from asynctrace.analysis.steps import TraceStep
    from asynctrace.analysis.syncs import SyncCall
    from asynctrace.records import StepRecord
    from asynctrace.traces.model import Trace

__all__ = [
    "LANE_DEVICE",
    "LANE_HOST",
    "LANE_IDLE",
    "LANE_SHARE",
    "LANE_SYNCS",
    "OVERLAY_NAME",
    "OverlaySource",
    "annotate_file",
    "iter_overlay",
    "overlay_events",
    "overlay_source",
    "write_trace",
]

OVERLAY_NAME = "asynctrace"
# A lane's tid is also its sort index, so each kind's lanes stay together in tid order too.
LANE_HOST = 1
LANE_DEVICE = 10
#: after the (at most 8) device lanes: the idle gaps, then each step's share of the timeline
LANE_IDLE = 18
LANE_SHARE = 19
LANE_SYNCS = 20
FLOW_CAT = "asynctrace.step"
_MAX_HOST_LANES = 8
_MAX_DEVICE_LANES = 8
_MAX_SYNC_LANES = 8

Event = dict[str, Any]
if TYPE_CHECKING:
    I64 = npt.NDArray[np.int64]


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


class OverlaySource(NamedTuple):
    """What the overlay is drawn from, without the trace: the report, the clock of the file's
    ``ts``, each stream's queue depth and the idle gaps. Much smaller than the trace's columns,
    so a large trace's model can be dropped before its text is read to be copied."""

    report: Report
    origin_ns: int
    #: stream key -> (times ns, depth) arrays
    queue_depth: dict[str, tuple[I64, I64]]
    #: the device timeline's idle gaps (the "device idle" track)
    gaps: IdleGaps


def overlay_source(analysis: Analysis) -> OverlaySource:
    """The figures the overlay of a trace shows, from its ``analyze_detail``: the trace's
    analysis reduced to what the overlay draws (``analysis`` may be dropped afterwards, and the
    trace with it). Raises ValueError for the analysis of a session's records: they have no
    trace to annotate."""
    detail = analysis.trace
    if detail is None:
        raise _no_trace(analysis.report)
    depth = {key: (d.time_ns, d.value) for key, (d, _flight) in detail.queue_series.items()}
    return OverlaySource(analysis.report, _json_origin_ns(detail.trace), depth, detail.gaps)


def _source(source: Analysis | OverlaySource) -> OverlaySource:
    return source if isinstance(source, OverlaySource) else overlay_source(source)


def overlay_events(
    source: Analysis | OverlaySource, *, pid: int, taken_flow_ids: Collection[int] = ()
) -> list[Event]:
    """The overlay process's events for a trace's analysis (``analyze_detail(trace)``, or
    :func:`overlay_source` of it).

    The flow arrows get the smallest ids not in ``taken_flow_ids`` (the ids the trace's own
    flows use).
    """
    return list(iter_overlay(source, pid=pid, taken_flow_ids=taken_flow_ids))


def iter_overlay(
    source: Analysis | OverlaySource, *, pid: int, taken_flow_ids: Collection[int] = ()
) -> Iterator[Event]:
    """The overlay's events one by one (as :func:`overlay_events`): a long run's idle gaps and
    counter samples are made as they are written, never held as dicts all at once."""
    src = _source(source)
    report, o = src.report, src.origin_ns
    yield _meta("process_name", pid, None, name=OVERLAY_NAME)
    yield _meta("process_sort_index", pid, None, sort_index=-1)
    yield from _step_events(report, pid, o, taken_flow_ids)
    yield from _sync_events(_trace_part(report).syncs.calls, pid, o)
    yield from _share_events(report, pid, o)
    if len(src.gaps.start_ns):
        yield from _lane_names(pid, {LANE_IDLE}, LANE_IDLE, "device idle")
    yield from _idle_events(src.gaps, report, pid, o)
    yield from _queue_events(src.queue_depth, pid, o)
    yield from _run_ahead_events(report, pid, o)


def _trace_part(report: Report) -> TraceFigures:
    if report.trace is None:
        raise _no_trace(report)
    return report.trace


def _no_trace(report: Report) -> ValueError:
    return ValueError(f"{report.source.path}: session records have no trace to annotate")


def _step_events(report: Report, pid: int, o: int, taken_flow_ids: Collection[int]) -> list[Event]:
    """Each step's host span, its device window and the flow arrow joining them, with the names
    of their lanes."""
    steps, extras = report.steps, _trace_part(report).steps
    bounds: list[StepBound | None] = [*report.step_bounds]
    bounds += [None] * (len(steps) - len(bounds))
    on_device = [
        k
        for k, x in enumerate(extras)
        if x.device_start_ns is not None and x.device_end_ns is not None
    ]
    dev_lanes = _lanes(
        [
            (int(extras[k].device_start_ns or 0), int(extras[k].device_end_ns or 0))
            for k in on_device
        ],
        LANE_DEVICE,
        _MAX_DEVICE_LANES,
    )
    # Steps overlap on the host where the trace has step ranges of several threads: one lane
    # would nest them wrongly, as overlapping device windows would.
    host_lanes = _lanes(
        [(s.start_ns, x.end_ns) for s, x in zip(steps, extras, strict=True)],
        LANE_HOST,
        _MAX_HOST_LANES,
    )
    ev = _lane_names(pid, {LANE_HOST, *host_lanes}, LANE_HOST, "steps: queued on host")
    ev += _lane_names(pid, set(dev_lanes), LANE_DEVICE, "steps: executed on device")
    lane_of = dict(zip(on_device, dev_lanes, strict=True))
    flow_ids = iter(_free_ids(len(on_device), taken_flow_ids))
    for k, (s, x, hl) in enumerate(zip(steps, extras, host_lanes, strict=True)):
        label = f"step {s.step}"
        ev.append(_host_span(s, x, label, pid, hl, o))
        if k not in lane_of:
            continue
        dl = lane_of[k]
        d0 = int(x.device_start_ns or 0)
        ev.append(_device_span(s, x, bounds[k], label, pid, dl, o))
        # The arrow leaves the host span where the step started queueing and lands where the
        # device began executing it; "e" binds the end to the enclosing device span.
        fid = next(flow_ids)
        ev.append(_flow("s", pid, hl, _us(o, s.start_ns), fid, label))
        ev.append({**_flow("f", pid, dl, _us(o, d0), fid, label), "bp": "e"})
    return ev


def _host_span(s: StepRecord, x: TraceStep, label: str, pid: int, tid: int, o: int) -> Event:
    args = {
        "cpu_ms": s.frontend_ns / 1e6,
        "sync_count": s.sync_count,
        "sync_wait_ms": s.sync_wait_ns / 1e6,
        "activities": x.activities,
        "queue_max": x.queue_max,
        "in_flight_steps": s.in_flight,
    }
    return _step_span(label, pid, tid, o, s.start_ns, s.frontend_ns, args)


def _device_span(
    s: StepRecord, x: TraceStep, b: StepBound | None, label: str, pid: int, tid: int, o: int
) -> Event:
    d0, d1 = int(x.device_start_ns or 0), int(x.device_end_ns or 0)
    args = {
        "device_ms": _ms(s.device_ns),
        "gpu_busy_ms": _ms(b.busy_ns if b is not None else None),
        "gpu_idle_ms": _ms(b.idle_ns if b is not None else None),
        "run_ahead_ms": _ms(s.run_ahead_ns),
    }
    return _step_span(label, pid, tid, o, d0, d1 - d0, args)


def _step_span(
    label: str, pid: int, tid: int, o: int, start_ns: int, dur_ns: int, args: dict[str, Any]
) -> Event:
    return {
        "ph": "X",
        "cat": "asynctrace",
        "name": label,
        "pid": pid,
        "tid": tid,
        "ts": _us(o, start_ns),
        "dur": dur_ns / 1000,
        "args": args,
    }


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _sync_events(calls: Sequence[SyncCall], pid: int, o: int) -> list[Event]:
    """Each synchronizing call as a slice over its wait, and an instant marker at its start."""
    if not calls:
        return []
    sync_lanes = _lanes(
        [(c.start_ns, c.start_ns + c.dur_ns) for c in calls], LANE_SYNCS, _MAX_SYNC_LANES
    )
    ev: list[Event] = []
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
    return ev


def _queue_events(queue_depth: dict[str, tuple[I64, I64]], pid: int, o: int) -> Iterator[Event]:
    """A counter track per stream: its queue depth at each change (made as written: a long
    run has a sample per launch)."""
    for key, (times, values) in queue_depth.items():
        name = f"queue depth (stream {key})"
        for t, v in zip(times.tolist(), values.tolist(), strict=True):
            yield {"ph": "C", "name": name, "pid": pid, "ts": _us(o, t), "args": {"depth": v}}


def _run_ahead_events(report: Report, pid: int, o: int) -> list[Event]:
    """The CPU run-ahead counter: a sample at each step's host end, where it was measured."""
    return [
        {
            "ph": "C",
            "name": "CPU run-ahead (ms)",
            "pid": pid,
            "ts": _us(o, x.end_ns),
            "args": {"run_ahead_ms": s.run_ahead_ns / 1e6},
        }
        for s, x in zip(report.steps, _trace_part(report).steps, strict=True)
        if s.run_ahead_ns is not None
    ]


def _share_cname(b: StepBound) -> str:
    """A step's share slice in its label's colour: busy's where device-bound, else that of
    its leading idle cause (the evidence's), unattributed's where the label is withheld
    (undetermined)."""
    from asynctrace.render.legend import BUSY_CNAME, IDLE_CAUSE_CNAMES

    if b.label == "device-bound":
        return BUSY_CNAME
    cause = "unattributed" if b.label == "undetermined" else b.evidence.leading_cause
    return IDLE_CAUSE_CNAMES[cause]


def _share_events(report: Report, pid: int, o: int) -> list[Event]:
    """One slice per step over its share of the device timeline, named with its label."""
    ev: list[Event] = []
    for s, b in zip(report.steps, report.step_bounds, strict=False):
        if b.share_end_ns <= b.share_start_ns:
            continue  # a step that launched nothing owns no share
        ev.append(
            {
                "ph": "X",
                "cat": "asynctrace.bound",
                "name": f"step {s.step}: {b.label}",
                "pid": pid,
                "tid": LANE_SHARE,
                "ts": _us(o, b.share_start_ns),
                "dur": (b.share_end_ns - b.share_start_ns) / 1000,
                "cname": _share_cname(b),
                "args": {
                    "label": b.label,
                    "step": s.step,
                    "share_ns": b.region_ns,
                    "busy_ns": b.busy_ns,
                    "idle_ns": b.idle_ns,
                    **{f"idle_{c}_ns": v for c, v in b.idle_ns_by_cause.as_dict().items()},
                    "busy_pct": b.evidence.busy_pct,
                },
            }
        )
    if ev:
        ev = _lane_names(pid, {LANE_SHARE}, LANE_SHARE, "steps: device share") + ev
    return ev


def _idle_events(gaps: IdleGaps, report: Report, pid: int, o: int) -> Iterator[Event]:
    """One slice per idle gap, named and coloured by its cause (made as they are written: a
    long run has a gap between most kernels)."""
    from asynctrace.analysis.bound import CAUSES
    from asynctrace.render.legend import IDLE_CAUSE_CNAMES

    numbers = [s.step for s in report.steps]
    names = [f"idle: {c}" for c in CAUSES]
    cnames = [IDLE_CAUSE_CNAMES[c] for c in CAUSES]
    for g0, g1, c, short, k in zip(
        gaps.start_ns.tolist(),
        gaps.end_ns.tolist(),
        gaps.cause.tolist(),
        gaps.launch_gap.tolist(),
        gaps.step.tolist(),
        strict=True,
    ):
        yield {
            "ph": "X",
            "cat": "asynctrace.idle",
            "name": names[c],
            "pid": pid,
            "tid": LANE_IDLE,
            "ts": _us(o, g0),
            "dur": (g1 - g0) / 1000,
            "cname": cnames[c],
            "args": {
                "cause": CAUSES[c],
                "duration_ns": g1 - g0,
                "launch_gap": short,
                "step": numbers[k] if 0 <= k < len(numbers) else None,
            },
        }


def _lane_names(pid: int, lanes: set[int], first: int, name: str) -> list[Event]:
    out: list[Event] = []
    for lane in sorted(lanes):
        suffix = "" if lane == first else f" ({lane - first + 1})"
        out.append(_meta("thread_name", pid, lane, name=name + suffix))
        out.append(_meta("thread_sort_index", pid, lane, sort_index=lane))
    return out


def _free_ids(n: int, taken: Collection[int]) -> list[int]:
    out: list[int] = []
    k = 0
    while len(out) < n:
        if k not in taken:
            out.append(k)
        k += 1
    return out


def _meta(kind: str, pid: int, tid: int | None, **args: Any) -> Event:
    e: Event = {"ph": "M", "name": kind, "pid": pid, "args": args}
    if tid is not None:
        e["tid"] = tid
    return e


def _flow(ph: str, pid: int, tid: int, ts: float, id_: int, name: str) -> Event:
    return {"ph": ph, "cat": FLOW_CAT, "id": id_, "name": name, "pid": pid, "tid": tid, "ts": ts}


class _Ids(msgspec.Struct):
    """What the overlay must not reuse: an event's pid and, on flow events, its id."""

    pid: Any = None
    ph: Any = None
    id: Any = None


_ids_decoder = msgspec.json.Decoder(list[_Ids])
_id_decoder = msgspec.json.Decoder(_Ids)
_FLOW_PHASES = frozenset(("s", "t", "f"))


def _catapult_key(fid: Any) -> int | None:
    """The integer an overlay id would collide with: catapult keys flows by the id's JS
    property name, so 7, 7.0 and "7" are one flow (and "0x7" or "07" another)."""
    if isinstance(fid, bool):
        return None
    if isinstance(fid, int):
        return fid
    if isinstance(fid, float) and fid.is_integer():
        return int(fid)
    if isinstance(fid, str) and fid.isdecimal() and fid.isascii() and str(int(fid)) == fid:
        return int(fid)
    return None


class _Taken(NamedTuple):
    pids: set[int]
    flow_ids: set[int]


def _taken_ids(raw_events: Sequence[msgspec.Raw]) -> _Taken:
    """The pids and flow ids the original events use."""
    pids: set[int] = set()
    fids: set[Any] = set()
    for k in range(0, len(raw_events), _ID_BATCH):
        batch = raw_events[k : k + _ID_BATCH]
        try:
            # one decode per batch (a C loop) instead of one call per event; batches keep the
            # decoded rows bounded (all at once added ~50 MB to a 100 MB trace's peak)
            rows: list[_Ids] = _ids_decoder.decode(b"[" + b",".join(batch) + b"]")
        except msgspec.DecodeError:
            # some element is not an object: viewers skip it, and so does this
            rows = []
            for r in batch:
                try:
                    rows.append(_id_decoder.decode(r))
                except msgspec.DecodeError:
                    continue
        pids.update(r.pid for r in rows if isinstance(r.pid, int))
        # dedup first (a flow's s and f share the id): the key is then worked out once per flow
        fids.update(
            r.id for r in rows if r.ph in _FLOW_PHASES and isinstance(r.id, (int, float, str))
        )
    keys = (_catapult_key(f) for f in fids)
    return _Taken(pids, {k for k in keys if k is not None})


_ID_BATCH = 1 << 13


def _free_pid(used: set[int]) -> int:
    # A pid far from real ones and from Kineto's device pids (0..n), positive for old viewers.
    pid = 0x7A5C
    while pid in used:
        pid += 1
    return pid


#: The annotated file is written from the original text in slices of this much (a gzip
#: writer handed all of it at once would hold its whole compressed output).
_WRITE_SLICE = 4 << 20


def _read_text(path: Path, max_inflated_bytes: int) -> bytearray:
    """The file's text (inflated if gzip) in one buffer, read in bounded blocks with the
    loader's cap on inflation: memory is the text itself, never a reservation for the cap."""
    from asynctrace.traces.reading import iter_blocks

    buf = bytearray()
    for block in iter_blocks(path, max_inflated_bytes=max_inflated_bytes):
        buf += block
    return buf


def _span(buf: bytearray) -> tuple[int, int]:
    """Where the document's value starts and ends (past it) in ``buf``: without the
    whitespace around it."""
    i, j = 0, len(buf)
    while i < j and buf[i] in _WS:
        i += 1
    while j > i and buf[j - 1] in _WS:
        j -= 1
    return i, j


#: what the text is written with: a file's or a gzip writer's ``write``
_Write = Callable[[bytes | memoryview], object]

_WS = frozenset(b" \t\r\n")


def write_trace(path: str | os.PathLike[str], doc: Any) -> Path:
    """Write a Chrome trace (gzip when the name ends in .gz) atomically: temp file + rename."""
    p = Path(path)
    with _trace_writer(p) as write:
        write(msgspec.json.encode(doc))
    return p


@contextlib.contextmanager
def _trace_writer(path: Path) -> Iterator[_Write]:
    """A function writing text to ``path``'s content (gzip when the name ends in .gz), put in
    place atomically at the end."""
    with atomic_file(path) as (f, _):
        if path.suffix != ".gz":
            yield f.write
            return
        with gzip.GzipFile(fileobj=f, mode="wb", compresslevel=6) as gz:
            yield gz.write


def annotate_file(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    analysis: Analysis | OverlaySource,
    *,
    max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES,
) -> Path:
    """Write ``dst``: the Chrome trace ``src`` unchanged plus the asynctrace overlay process
    drawn from ``analysis`` (``analyze_detail`` of ``src`` loaded, made once by the caller), on
    a pid and with flow ids that ``src``'s events do not use. ``max_inflated_bytes`` caps how
    far a gzip ``src`` may inflate, as for :func:`~asynctrace.traces.load.load`.

    The original text is held once and copied to ``dst`` as it is, with the overlay's events
    appended to its ``traceEvents``: memory is about the (inflated) text, plus a small object
    per event while the ids in use are collected. The trace model is not needed here: a caller
    that passes :func:`overlay_source` of the analysis instead, and drops the analysis, keeps
    the model from adding to that.
    """
    source = _source(analysis)
    src_p = Path(src)
    buf = _read_text(src_p, max_inflated_bytes)
    try:
        top: Any = msgspec.json.decode(buf, type=dict[str, msgspec.Raw] | list[msgspec.Raw])
    except msgspec.DecodeError as e:
        raise TraceFormatError(str(src_p), f"not a Chrome trace ({e})") from None
    except RecursionError:
        raise TraceFormatError(str(src_p), "not a Chrome trace (nested too deeply)") from None
    parts: list[tuple[str, memoryview]] | None = None
    if isinstance(top, list):
        events: list[msgspec.Raw] = top
        start, end = _span(buf)
        array = memoryview(buf)[start:end]
    else:
        if "traceEvents" not in top:
            raise TraceFormatError(str(src_p), "no traceEvents array: not a Chrome trace")
        try:
            events = msgspec.json.decode(top["traceEvents"], type=list[msgspec.Raw])
        except msgspec.DecodeError as e:
            raise TraceFormatError(str(src_p), f"traceEvents is not an array ({e})") from None
        except RecursionError:
            raise TraceFormatError(str(src_p), "traceEvents nested too deeply") from None
        # the values are views of the text (msgspec.Raw copies nothing)
        parts = [(k, memoryview(v)) for k, v in top.items()]
        array = memoryview(top["traceEvents"])
    taken = _taken_ids(events)
    empty = not events
    del events, top  # one small object per event
    overlay = iter_overlay(source, pid=_free_pid(taken.pids), taken_flow_ids=taken.flow_ids)
    dst_p = Path(dst)
    with _trace_writer(dst_p) as write:
        if parts is None:
            _write_array(write, array, overlay, empty=empty)
        else:
            # the object as it was, key by key, each value's text unchanged
            write(b"{")
            for n, (key, value) in enumerate(parts):
                write(msgspec.json.encode(key) + b":")
                if key == "traceEvents":
                    _write_array(write, value, overlay, empty=empty)
                else:
                    _write_slices(write, value)
                if n < len(parts) - 1:
                    write(b",")
            write(b"}")
    return dst_p


_OVERLAY_BATCH = 1 << 12


def _write_array(
    write: _Write, array: memoryview, overlay: Iterator[Event], *, empty: bool
) -> None:
    """``array`` (an array's text, ``[`` … ``]``) with ``overlay`` as its last elements."""
    _write_slices(write, array[:-1])
    first = True
    while batch := list(itertools.islice(overlay, _OVERLAY_BATCH)):
        # made and encoded a batch at a time: a long run's overlay (a queue-depth sample per
        # launch) is never held whole, as dicts or as text
        text = msgspec.json.encode(batch)
        write(b"" if first and empty else b",")
        write(memoryview(text)[1:-1])
        first = False
    write(b"]")


def _write_slices(write: _Write, text: memoryview) -> None:
    for k in range(0, len(text), _WRITE_SLICE):
        write(text[k : k + _WRITE_SLICE])
