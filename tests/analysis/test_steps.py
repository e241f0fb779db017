from __future__ import annotations

import numpy as np

from asynctrace.analysis.launches import link_launches
from asynctrace.analysis.queue import queue_series
from asynctrace.analysis.steps import split_steps, step_windows, union_length
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind
from tests.analysis._traces import steps_trace


def _split(t):  # type: ignore[no-untyped-def]
    links = link_launches(t)
    return split_steps(t, links, queues=queue_series(t, links))


def test_profiler_steps_by_hand() -> None:
    s1, s2 = _split(steps_trace())
    assert (s1.step, s1.cpu_ns, s1.activities) == (1, 1000, 2)
    assert (s1.device_start_ns, s1.device_end_ns, s1.device_ns) == (300, 500, 200)
    assert (s1.gpu_busy_ns, s1.gpu_idle_ns) == (150, 50)
    assert (s1.sync_count, s1.sync_wait_ns) == (1, 100)
    assert s1.run_ahead_ns == 500 - 1000
    assert s1.queue_max == 2  # launches at 100 and 200, first start at 300
    assert s1.in_flight_steps == 0
    # the last step is kept; its kernel runs after the host finished the step
    assert (s2.step, s2.cpu_ns, s2.device_ns, s2.gpu_busy_ns, s2.gpu_idle_ns) == (
        2,
        500,
        100,
        100,
        0,
    )
    assert s2.run_ahead_ns == 200
    assert s2.queue_max == 1
    assert s2.in_flight_steps == 1
    assert (s2.sync_count, s2.sync_wait_ns) == (0, 0)


def test_sync_wait_clipped_to_step_and_overlaps_counted_once() -> None:
    b = TraceBuilder()
    b.range("ProfilerStep#0", 0, 100, kind=RangeKind.STEP, step=0)
    b.range("ProfilerStep#1", 100, 100, kind=RangeKind.STEP, step=1)
    b.runtime("cudaStreamSynchronize", 80, 40, kind=RuntimeKind.SYNC, tid=1)
    b.runtime("cudaStreamSynchronize", 90, 20, kind=RuntimeKind.SYNC, tid=2)
    b.runtime("cudaMemcpy", 150, 10, kind=RuntimeKind.BLOCKING_MEMCPY, tid=1)
    s0, s1 = _split(b.build())
    assert (s0.sync_count, s0.sync_wait_ns) == (2, 20)  # [80, 100)
    assert (s1.sync_count, s1.sync_wait_ns) == (1, 20 + 10)  # [100, 120) and [150, 160)


def test_nvtx_then_annotation_then_whole_trace() -> None:
    b = TraceBuilder()
    b.range("train_step 4", 0, 100, kind=RangeKind.NVTX)
    b.range("forward", 10, 20, kind=RangeKind.NVTX)
    b.range("train_step 5", 100, 50, kind=RangeKind.NVTX)
    b.range("step", 0, 150, kind=RangeKind.ANNOTATION)
    w = step_windows(b.build())
    assert [(x.step, x.start_ns, x.end_ns, x.source) for x in w] == [
        (4, 0, 100, "nvtx"),
        (5, 100, 150, "nvtx"),
    ]

    b = TraceBuilder()
    b.range("my step", 0, 100, kind=RangeKind.ANNOTATION)
    b.range("my step", 10, 20, kind=RangeKind.ANNOTATION)  # nested: only the outermost counts
    b.range("my step", 100, 10, kind=RangeKind.ANNOTATION)
    b.range("stepper", 200, 10, kind=RangeKind.ANNOTATION)
    w = step_windows(b.build())
    assert [(x.step, x.start_ns, x.end_ns, x.source) for x in w] == [
        (0, 0, 100, "annotation"),
        (1, 100, 110, "annotation"),
    ]

    b = TraceBuilder()
    b.runtime("cudaLaunchKernel", 5, 10, kind=RuntimeKind.LAUNCH, correlation=1)
    b.range("aten::mm", 0, 30)
    b.activity("k", 40, 60, correlation=1)
    t = b.build()
    (w0,) = step_windows(t)
    assert (w0.start_ns, w0.end_ns, w0.source) == (0, 30, "trace")
    (s,) = _split(t)
    assert (s.cpu_ns, s.device_ns, s.run_ahead_ns) == (30, 60, 70)


def test_no_events_no_steps() -> None:
    assert step_windows(TraceBuilder().build()) == []


def test_union_length() -> None:
    s = np.array([0, 5, 20, 21], np.int64)
    e = np.array([10, 8, 30, 25], np.int64)
    assert union_length(s, e) == 10 + 10
    assert union_length(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0
