from __future__ import annotations

import pytest

from asynctrace.analysis.launches import link_launches
from asynctrace.analysis.queue import depth_max_between, queue_series, queue_stats
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RuntimeKind
from tests.analysis._traces import launches_trace


def test_queue_by_hand() -> None:
    t = launches_trace()
    q = queue_stats(t, link_launches(t), cap=2)
    s7 = q["7"]
    # stream 7: +1@100, +1@120, -1@200, -1@250 -> depth 1,2,1,0
    assert s7.max == 2
    assert s7.mean == pytest.approx((1 * 20 + 2 * 80 + 1 * 50) / 150)
    # at the cap (depth 2) on [120, 200), but the host is inside a launch call only for the
    # second launch [120, 130) and the copy's [140, 145): time at cap counts host blocking
    assert s7.time_at_cap_ns == 15
    assert s7.in_flight_max == 2
    assert s7.activities == 2  # the unmatched kernel is not counted
    s8 = q["8"]
    assert (s8.max, s8.mean, s8.time_at_cap_ns, s8.in_flight_max) == (1, 1.0, 0, 1)


def test_device_start_applies_before_launch_at_equal_time() -> None:
    b = TraceBuilder()
    b.runtime("l", 0, 1, kind=RuntimeKind.LAUNCH, correlation=1)
    b.runtime("l", 50, 1, kind=RuntimeKind.LAUNCH, correlation=2)
    b.activity("a", 50, 5, correlation=1)
    b.activity("b", 60, 5, correlation=2)
    t = b.build()
    assert queue_stats(t, link_launches(t))["7"].max == 1


def test_graph_launch_is_one_queue_entry() -> None:
    # (changed: a graph launch used to count once per kernel, pushing the A100 graph-launch
    # trace past the 1,024 entries a device queue holds)
    b = TraceBuilder()
    b.runtime("cudaGraphLaunch", 0, 10, kind=RuntimeKind.GRAPH_LAUNCH, correlation=5)
    for start in (20, 30, 40):
        b.activity("g", start, 5, stream=3, correlation=5)
    t = b.build()
    q = queue_stats(t, link_launches(t))["3"]
    assert q.max == 1
    # one entry on [0, 20), when the first kernel starts: mean 1 over [0, 20]
    assert q.mean == pytest.approx(1.0)
    # in flight until the last kernel ends (45), still one entry
    assert q.in_flight_max == 1
    assert q.activities == 3  # the kernels are still the stream's activities


def test_time_at_cap_only_while_the_host_is_in_a_launch_call() -> None:
    b = TraceBuilder()
    b.runtime("l", 0, 1, kind=RuntimeKind.LAUNCH, correlation=1)
    b.runtime("l", 10, 30, kind=RuntimeKind.LAUNCH, correlation=2)  # blocked 10..40
    b.activity("a", 50, 5, correlation=1)
    b.activity("b", 60, 5, correlation=2)
    t = b.build()
    q = queue_stats(t, link_launches(t), cap=2)["7"]
    # depth 2 on [10, 50); the host is inside the second launch call on [10, 40)
    assert (q.max, q.time_at_cap_ns) == (2, 30)


def test_skewed_activity_before_its_launch_never_negative() -> None:
    b = TraceBuilder()
    b.runtime("l", 100, 10, kind=RuntimeKind.LAUNCH, correlation=1)
    b.activity("early", 90, 5, correlation=1)
    t = b.build()
    depth, flight = queue_series(t, link_launches(t))["7"]
    assert depth.value.min() >= 0
    assert flight.value.min() >= 0


def test_depth_max_between() -> None:
    t = launches_trace()
    depth, _ = queue_series(t, link_launches(t))["7"]
    assert depth_max_between(depth, 0, 100) == 0
    assert depth_max_between(depth, 100, 120) == 1
    assert depth_max_between(depth, 130, 140) == 2  # carried in from before the window
    assert depth_max_between(depth, 250, 400) == 0


def test_multi_device_keys() -> None:
    b = TraceBuilder()
    b.runtime("l", 0, 1, kind=RuntimeKind.LAUNCH, correlation=1)
    b.runtime("l", 0, 1, kind=RuntimeKind.LAUNCH, correlation=2)
    b.activity("a", 5, 5, stream=7, device=0, correlation=1)
    b.activity("b", 5, 5, stream=7, device=1, correlation=2)
    t = b.build()
    assert sorted(queue_stats(t, link_launches(t))) == ["0:7", "1:7"]


def test_in_flight_and_mean_at_equal_timestamps_by_hand() -> None:
    b = TraceBuilder()
    b.runtime("l", 0, 1, kind=RuntimeKind.LAUNCH, correlation=1)
    b.runtime("l", 10, 1, kind=RuntimeKind.LAUNCH, correlation=2)
    b.runtime("l", 20, 1, kind=RuntimeKind.LAUNCH, correlation=3)
    b.activity("a", 10, 10, correlation=1)  # starts as the 2nd is launched, ends at the 3rd
    b.activity("b", 20, 0, correlation=2)  # zero length, at the 3rd launch
    b.activity("c", 30, 5, correlation=3)
    t = b.build()
    q = queue_stats(t, link_launches(t), cap=1)["7"]
    # depth: 1 on [0, 10) (a's start applies before b's launch at 10), 1 on [10, 20),
    # 1 on [20, 30), 0 from 30: max 1, mean 1 over [0, 30], at the cap (1) for 30, of which
    # the host was inside a launch call for 3 (each call lasts 1)
    assert (q.max, q.mean, q.time_at_cap_ns) == (1, 1.0, 3)
    # in flight (launched, not finished): 1 on [0, 10), 2 on [10, 20) (a and b); at 20 a and b
    # end before c is launched -> 1 on [20, 35)
    assert q.in_flight_max == 2
