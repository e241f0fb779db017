"""The annotated Chrome trace: hand-built traces with known answers, strictly validated."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from asynctrace.analysis.report import analyze_detail
from asynctrace.export.chrome import (
    LANE_DEVICE,
    LANE_HOST,
    LANE_SYNCS,
    OVERLAY_NAME,
    annotate_file,
    overlay_events,
)
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind, Trace
from tests.export._trace_event_validator import (
    load_events,
    tb_profiler_problems,
    validate,
    validate_file,
)

PID = 999


def _overlay(trace: Trace) -> list[dict[str, Any]]:
    return overlay_events(analyze_detail(trace), pid=PID)


def two_step_trace() -> Trace:
    """Two profiler steps; one kernel each; a stream sync in step 1.

    step 0: host [0, 1000) ns, launch [100, 150) -> kernel [500, 800)
    step 1: host [1000, 2000) ns, launch [1100, 1150) -> kernel [1900, 2300); sync [1500, 2200)
    """
    b = TraceBuilder("two_steps.json")
    b.range("ProfilerStep#0", 0, 1000, kind=RangeKind.STEP, step=0, pid=1, tid=1)
    b.range("ProfilerStep#1", 1000, 1000, kind=RangeKind.STEP, step=1, pid=1, tid=1)
    b.runtime("cudaLaunchKernel", 100, 50, kind=RuntimeKind.LAUNCH, correlation=1, pid=1, tid=1)
    b.runtime("cudaLaunchKernel", 1100, 50, kind=RuntimeKind.LAUNCH, correlation=2, pid=1, tid=1)
    b.runtime("cudaStreamSynchronize", 1500, 700, kind=RuntimeKind.SYNC, pid=1, tid=1)
    b.activity("k0", 500, 300, kind=ActivityKind.KERNEL, stream=7, correlation=1, pid=0)
    b.activity("k1", 1900, 400, kind=ActivityKind.KERNEL, stream=7, correlation=2, pid=0)
    return b.build(device_name="test")


def _by(events: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [e for e in events if all(e.get(k) == v for k, v in match.items())]


def test_overlay_is_valid_trace_event_format() -> None:
    ev = _overlay(two_step_trace())
    assert validate(ev) == []
    assert tb_profiler_problems(ev) == []


def test_overlay_step_spans_lanes_and_flows() -> None:
    ev = _overlay(two_step_trace())
    host = _by(ev, ph="X", tid=LANE_HOST)
    assert [(e["name"], e["ts"], e["dur"]) for e in host] == [
        ("step 0", 0.0, 1.0),
        ("step 1", 1.0, 1.0),
    ]
    dev = _by(ev, ph="X", tid=LANE_DEVICE)
    assert [(e["name"], e["ts"], e["dur"]) for e in dev] == [
        ("step 0", 0.5, 0.3),
        ("step 1", 1.9, 0.4),
    ]
    starts = _by(ev, ph="s")
    ends = _by(ev, ph="f")
    assert [(e["id"], e["tid"], e["ts"]) for e in starts] == [
        (0, LANE_HOST, 0.0),
        (1, LANE_HOST, 1.0),
    ]
    assert [(e["id"], e["tid"], e["ts"], e["bp"]) for e in ends] == [
        (0, LANE_DEVICE, 0.5, "e"),
        (1, LANE_DEVICE, 1.9, "e"),
    ]
    names = {e["args"]["name"] for e in _by(ev, ph="M", name="process_name")}
    assert names == {OVERLAY_NAME}


def test_overlay_counters_and_syncs() -> None:
    ev = _overlay(two_step_trace())
    depth = _by(ev, ph="C", name="queue depth (stream 7)")
    # launch start enters the queue, device start leaves it
    assert [(e["ts"], e["args"]["depth"]) for e in depth] == [
        (0.1, 1),
        (0.5, 0),
        (1.1, 1),
        (1.9, 0),
    ]
    ahead = _by(ev, ph="C", name="CPU run-ahead (ms)")
    # device end of the step's last kernel − host end of the step
    assert [(e["ts"], e["args"]["run_ahead_ms"]) for e in ahead] == [
        (1.0, (800 - 1000) / 1e6),
        (2.0, (2300 - 2000) / 1e6),
    ]
    syncs = _by(ev, ph="X", tid=LANE_SYNCS)
    assert [(e["ts"], e["dur"], e["args"]["op"], e["args"]["step"]) for e in syncs] == [
        (1.5, 0.7, "cudaStreamSynchronize", 1)
    ]
    marks = _by(ev, ph="i", tid=LANE_SYNCS)
    assert [(e["ts"], e["s"]) for e in marks] == [(1.5, "t")]


def test_overlapping_device_windows_get_separate_lanes() -> None:
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 100, kind=RangeKind.STEP, step=0)
    b.range("ProfilerStep#1", 100, 100, kind=RangeKind.STEP, step=1)
    b.runtime("cudaLaunchKernel", 10, 5, kind=RuntimeKind.LAUNCH, correlation=1)
    b.runtime("cudaLaunchKernel", 110, 5, kind=RuntimeKind.LAUNCH, correlation=2)
    b.activity("long", 20, 500, stream=7, correlation=1)  # step 0 runs to 520 on stream 7
    b.activity("other", 150, 10, stream=8, correlation=2)  # step 1 on stream 8 inside it
    ev = _overlay(b.build())
    assert validate(ev) == []
    dev = [e for e in ev if e["ph"] == "X" and e["cat"] == "asynctrace" and e["tid"] != LANE_HOST]
    assert [(e["name"], e["tid"]) for e in dev] == [
        ("step 0", LANE_DEVICE),
        ("step 1", LANE_DEVICE + 1),
    ]


def test_strings_from_the_trace_are_kept_verbatim_in_json(tmp_path: Path) -> None:
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 100, kind=RangeKind.STEP, step=0)
    b.runtime('cudaStreamSynchronize"</script>', 10, 5, kind=RuntimeKind.SYNC)
    ev = _overlay(b.build())
    assert validate(ev) == []
    assert _by(ev, ph="X", tid=LANE_SYNCS)[0]["args"]["op"] == 'cudaStreamSynchronize"</script>'


def _chrome_file(path: Path, *, gz: bool, bare: bool = False) -> list[dict[str, Any]]:
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#0",
            "pid": 1,
            "tid": 1,
            "ts": 0,
            "dur": 1,
        },
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#1",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 0.1,
            "dur": 0.05,
            "args": {"correlation": 1},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k0",
            "pid": 0,
            "tid": 7,
            "ts": 0.5,
            "dur": 0.3,
            "args": {"correlation": 1, "stream": 7},
        },
    ]
    doc: Any = (
        events if bare else {"schemaVersion": 1, "traceEvents": events, "displayTimeUnit": "ms"}
    )
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return events


@pytest.mark.parametrize(("gz", "bare"), [(False, False), (True, False), (False, True)])
def test_annotate_file_keeps_original_and_adds_overlay(
    tmp_path: Path, gz: bool, bare: bool
) -> None:
    src = tmp_path / ("in.json.gz" if gz else "in.json")
    original = _chrome_file(src, gz=gz, bare=bare)
    out = annotate_file(src, tmp_path / "out.json.gz", analyze_detail(two_step_trace()))
    events, doc = load_events(out)
    assert events[: len(original)] == original
    if not bare:
        assert doc is not None
        assert doc["schemaVersion"] == 1
        assert doc["displayTimeUnit"] == "ms"
    overlay = events[len(original) :]
    pids = {e["pid"] for e in overlay}
    assert len(pids) == 1
    assert pids.isdisjoint({0, 1})
    assert validate_file(out) == []
    assert tb_profiler_problems(events) == []


def test_annotate_file_refuses_non_trace(tmp_path: Path) -> None:
    from asynctrace.errors import TraceFormatError

    src = tmp_path / "x.json"
    src.write_text('{"nodes": []}')
    with pytest.raises(TraceFormatError, match="traceEvents"):
        annotate_file(src, tmp_path / "o.json", analyze_detail(two_step_trace()))


def test_overlay_flow_ids_are_not_the_original_flow_ids(tmp_path: Path) -> None:
    # chrome://tracing and TensorBoard's trace viewer (catapult) pair flow events by id alone,
    # whatever their cat: an overlay arrow sharing an id with a Kineto ac2g/fwdbwd flow open at
    # the same time is dropped ("already seen") or joined to that flow's end.
    src = tmp_path / "in.json"
    events = _chrome_file(src, gz=False)
    launch = {"pid": 1, "tid": 1, "name": "ac2g", "cat": "ac2g"}
    kernel = {"pid": 0, "tid": 7, "name": "ac2g", "cat": "ac2g"}
    events += [
        {**launch, "ph": "s", "id": 0, "ts": 0.1},
        {**kernel, "ph": "f", "id": 0, "ts": 0.5, "bp": "e"},
        {**launch, "ph": "s", "id": "1", "ts": 0.1, "cat": "fwdbwd"},
        {**kernel, "ph": "f", "id": "1", "ts": 0.5, "bp": "e", "cat": "fwdbwd"},
        {**launch, "ph": "s", "id": 3, "ts": 0.1},
        {**kernel, "ph": "f", "id": 3, "ts": 0.5, "bp": "e"},
    ]
    src.write_text(json.dumps({"traceEvents": events}))
    out = annotate_file(src, tmp_path / "out.json", analyze_detail(two_step_trace()))
    got, _ = load_events(out)
    ours = [e["id"] for e in got[len(events) :] if e["ph"] in ("s", "f")]
    assert ours == [2, 2, 4, 4]
    assert validate_file(out) == []


def _partial_overlaps(events: list[dict[str, Any]]) -> list[tuple[Any, str, str]]:
    """Complete events on one thread that overlap without nesting: viewers draw a thread's
    slices as a stack, so such a pair is drawn wrongly (or one of them dropped)."""
    by_thread: dict[Any, list[tuple[float, float, str]]] = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    out = []
    for tid, spans in by_thread.items():
        stack: list[tuple[float, float, str]] = []
        for a, b, name in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1][1] <= a:
                stack.pop()
            if stack and b > stack[-1][1]:
                out.append((tid, stack[-1][2], name))
            stack.append((a, b, name))
    return out


def test_overlapping_host_steps_get_separate_lanes() -> None:
    # profiler steps of two threads overlap in time
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 1000, kind=RangeKind.STEP, step=0, pid=1, tid=1)
    b.range("ProfilerStep#1", 500, 1000, kind=RangeKind.STEP, step=1, pid=1, tid=2)
    b.runtime("cudaLaunchKernel", 100, 50, kind=RuntimeKind.LAUNCH, correlation=1, pid=1, tid=1)
    b.runtime("cudaLaunchKernel", 600, 50, kind=RuntimeKind.LAUNCH, correlation=2, pid=1, tid=2)
    b.activity("k0", 200, 100, stream=7, correlation=1)
    b.activity("k1", 700, 100, stream=7, correlation=2)
    ev = _overlay(b.build())
    assert validate(ev) == []
    assert _partial_overlaps(ev) == []
    host = [e for e in ev if e["ph"] == "X" and e["tid"] < LANE_DEVICE]
    assert [(e["name"], e["tid"]) for e in host] == [
        ("step 0", LANE_HOST),
        ("step 1", LANE_HOST + 1),
    ]
    starts = _by(ev, ph="s")
    assert [(e["name"], e["tid"]) for e in starts] == [
        ("step 0", LANE_HOST),
        ("step 1", LANE_HOST + 1),
    ]
    names = {e["tid"]: e["args"]["name"] for e in _by(ev, ph="M", name="thread_name")}
    assert names[LANE_HOST + 1] == "steps: queued on host (2)"
