from __future__ import annotations

import numpy as np

from asynctrace.analysis.launches import link_launches
from asynctrace.analysis.queue import queue_series
from asynctrace.analysis.steps import split_steps, step_windows, union_length
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind
from tests.analysis._flat import flat_split
from tests.analysis._traces import steps_trace


def _split(t):  # type: ignore[no-untyped-def]
    links = link_launches(t)
    return flat_split(split_steps(t, links, queues=queue_series(t, links)))


def test_profiler_steps_by_hand() -> None:
    s1, s2 = _split(steps_trace())
    assert (s1.step, s1.cpu_ns, s1.activities) == (1, 1000, 2)
    assert (s1.device_start_ns, s1.device_end_ns, s1.device_ns) == (300, 500, 200)
    assert (s1.sync_count, s1.sync_wait_ns) == (1, 100)
    assert s1.run_ahead_ns == 500 - 1000
    assert s1.queue_max == 2  # launches at 100 and 200, first start at 300
    assert s1.in_flight_steps == 0
    # the last step is kept; its kernel runs after the host finished the step
    assert (s2.step, s2.cpu_ns, s2.device_ns) == (2, 500, 100)
    assert s2.run_ahead_ns == 200
    assert s2.queue_max == 1
    # in flight: earlier steps unfinished at this step's host start (s1's work ended at 500)
    assert s2.in_flight_steps == 0
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
    # a whole trace has no step end the host moved on from: no run-ahead (it was 70, a figure
    # that read as the device running behind a step that does not exist)
    assert (s.cpu_ns, s.device_ns, s.run_ahead_ns) == (30, 60, None)


def test_no_events_no_steps() -> None:
    assert step_windows(TraceBuilder().build()) == []


def test_union_length() -> None:
    s = np.array([0, 5, 20, 21], np.int64)
    e = np.array([10, 8, 30, 25], np.int64)
    assert union_length(s, e) == 10 + 10
    assert union_length(np.zeros(0, np.int64), np.zeros(0, np.int64)) == 0


def test_whole_trace_step_ignores_device_side_annotations() -> None:
    # gpu_user_annotation ranges lie on the device's timeline: the whole-trace step runs from
    # the first to the last *host* event, [0, 100) here, not to the annotation's end at 500.
    b = TraceBuilder()
    b.range("aten::mm", 0, 100)
    b.runtime("cudaLaunchKernel", 10, 5, kind=RuntimeKind.LAUNCH, correlation=1)
    b.activity("k", 50, 450, correlation=1)
    b.range("fwd", 50, 450, kind=RangeKind.GPU_ANNOTATION, pid=0, tid=7)
    t = b.build()
    (w,) = step_windows(t)
    assert (w.start_ns, w.end_ns, w.source) == (0, 100, "trace")
    (s,) = _split(t)
    # no run-ahead for a whole trace, and no step before it to be in flight
    assert (s.cpu_ns, s.device_ns, s.run_ahead_ns, s.in_flight_steps) == (100, 450, None, 0)


def test_edge_cases_by_hand() -> None:
    b = TraceBuilder()
    for n, start in enumerate((0, 100, 200)):
        b.range(f"ProfilerStep#{n}", start, 100, kind=RangeKind.STEP, step=n)
    launch = RuntimeKind.LAUNCH
    # step 0: a zero-length kernel, and two kernels overlapping on streams 7 and 9
    b.runtime("cudaLaunchKernel", 10, 5, kind=launch, correlation=1)
    b.runtime("cudaLaunchKernel", 20, 5, kind=launch, correlation=2)
    b.runtime("cudaLaunchKernel", 30, 5, kind=launch, correlation=3)
    b.activity("empty", 40, 0, stream=7, correlation=1)
    b.activity("a", 50, 100, stream=7, correlation=2)  # runs on past the step's host end
    b.activity("b", 60, 140, stream=9, correlation=3)
    # step 1 launches nothing; step 2 launches at its start a kernel that starts at once
    b.runtime("cudaLaunchKernel", 200, 5, kind=launch, correlation=4)
    b.activity("c", 200, 10, stream=9, correlation=4)
    s0, s1, s2 = _split(b.build())
    # device window [40, 200) (busy time is the step's share of the timeline: test_bound.py)
    assert (s0.activities, s0.device_start_ns, s0.device_end_ns) == (3, 40, 200)
    assert s0.device_ns == 160
    assert s0.run_ahead_ns == 200 - 100
    # stream 7: depth 1 on [10, 20), 2 on [20, 40), 1 on [40, 50); stream 9: 1 on [30, 60)
    assert s0.queue_max == 2
    assert s0.in_flight_steps == 0  # no step before the first
    # nothing launched: no device window, no run-ahead; step 0's work (to 200) was unfinished
    # when step 1 started (100): one in flight
    assert (s1.activities, s1.device_start_ns, s1.device_ns) == (0, None, 0)
    assert (s1.run_ahead_ns, s1.queue_max, s1.in_flight_steps) == (None, 0, 1)
    # step 0's work ends at 200, not after step 2's start (200): none in flight
    assert s2.in_flight_steps == 0
    # launch and device start at 200: the start applies first, so depth stays 0
    assert (s2.device_ns, s2.run_ahead_ns, s2.queue_max) == (10, -90, 0)


def test_optimizer_annotations_end_steps_without_profiler_steps() -> None:
    # torch.optim's own annotation is no user step: without ProfilerStep#N (no schedule) each
    # outermost Optimizer.step#… ends a step that began where the previous one ended
    b = TraceBuilder()
    b.range("aten::mm", 0, 40)
    b.range("Optimizer.step#EMA.step", 40, 20, kind=RangeKind.ANNOTATION)
    b.range("Optimizer.step#Shampoo.step", 45, 10, kind=RangeKind.ANNOTATION)  # nested
    b.range("Optimizer.zero_grad#EMA.zero_grad", 60, 5, kind=RangeKind.ANNOTATION)
    b.range("aten::mm", 70, 40)
    b.range("Optimizer.step#EMA.step", 110, 20, kind=RangeKind.ANNOTATION)
    b.range("aten::mm", 140, 10)  # after the last optimizer step: an unfinished iteration
    w = step_windows(b.build())
    assert [(x.step, x.start_ns, x.end_ns, x.name, x.source) for x in w] == [
        (0, 0, 60, "Optimizer.step#EMA.step", "optimizer"),
        (1, 60, 130, "Optimizer.step#EMA.step", "optimizer"),
    ]
    # a user's own step annotation still comes first
    b.range("train step 1", 0, 65, kind=RangeKind.ANNOTATION)
    b.range("train step 2", 65, 70, kind=RangeKind.ANNOTATION)
    w = step_windows(b.build())
    assert [(x.step, x.start_ns, x.end_ns, x.source) for x in w] == [
        (1, 0, 65, "annotation"),
        (2, 65, 135, "annotation"),
    ]


def test_optimizers_stepped_in_turn_make_one_step() -> None:
    # a GAN-like loop: D twice, then G, per iteration; the capture ends mid-iteration
    b = TraceBuilder()
    b.range("aten::mm", 0, 5)
    t = 10
    ends = []
    for name in ["D", "D", "G", "D", "D", "G", "D"]:
        b.range(f"Optimizer.step#{name}.step", t, 5, kind=RangeKind.ANNOTATION)
        ends.append(t + 5)
        t += 20
    w = step_windows(b.build())
    assert [(x.start_ns, x.end_ns, x.name) for x in w] == [
        (0, ends[2], "Optimizer.step#G.step"),
        (ends[2], ends[5], "Optimizer.step#G.step"),
    ]


def test_a_last_optimizer_step_cut_by_the_profile_end_is_not_a_step() -> None:
    # the profile ended inside the third optimizer.step(): Kineto writes it with duration 0
    b = TraceBuilder()
    b.range("aten::mm", 0, 10)
    for start, dur in [(100, 50), (300, 50), (500, 0)]:
        b.range("Optimizer.step#SGD.step", start, dur, kind=RangeKind.ANNOTATION)
    windows = step_windows(b.build())
    assert [(w.start_ns, w.end_ns, w.source) for w in windows] == [
        (0, 150, "optimizer"),
        (150, 350, "optimizer"),
    ]
