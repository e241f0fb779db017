from __future__ import annotations

import numpy as np

from asynctrace.analysis.launches import Percentiles, launch_stats, link_launches, percentiles
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RuntimeKind
from tests.analysis._traces import launches_trace


def test_links_and_delays_by_hand() -> None:
    t = launches_trace()
    links = link_launches(t)
    names = [t.name_of(int(n)) for n in t.activities.name]
    by_name = dict(zip(names, links.launch_index.tolist(), strict=True))
    assert by_name["lost"] == -1
    assert t.name_of(int(t.runtime.name[by_name["copy"]])) == "cudaMemcpyAsync"
    assert links.n_matched == 3
    assert links.n_unmatched == 1
    stats = launch_stats(t, links)
    # queue delays: k1 200-110=90, k2 250-130=120, copy 142-145 -> clamped 0
    assert stats.queue_delay_ns == Percentiles(p50=90, p90=120, p99=120, max=120)
    # launch to start: k1 100, k2 130, copy 2
    assert stats.launch_to_start_ns == Percentiles(p50=100, p90=130, p99=130, max=130)
    assert (stats.matched, stats.unmatched) == (3, 1)


def test_graph_launch_one_call_many_kernels() -> None:
    b = TraceBuilder()
    b.runtime("cudaGraphLaunch", 0, 10, kind=RuntimeKind.GRAPH_LAUNCH, correlation=5)
    for start in (20, 30, 40):
        b.activity("g", start, 5, stream=3, correlation=5)
    t = b.build()
    links = link_launches(t)
    assert links.launch_index.tolist() == [0, 0, 0]
    assert launch_stats(t, links).queue_delay_ns.max == 30


def test_same_correlation_other_process_does_not_match() -> None:
    b = TraceBuilder()
    b.runtime("cudaLaunchKernel", 0, 10, kind=RuntimeKind.LAUNCH, correlation=1, pid=1)
    b.runtime("cudaLaunchKernel", 5, 10, kind=RuntimeKind.LAUNCH, correlation=1, pid=2)
    b.activity("k", 50, 5, correlation=1, pid=2)
    b.activity("k", 60, 5, correlation=1, pid=3)  # no launch process 3 among two
    t = b.build()
    links = link_launches(t)
    assert links.launch_index.tolist() == [1, -1]


def test_activity_pid_is_device_index_single_process() -> None:
    # Kineto writes a GPU activity's pid as the device index: joined within the one process.
    b = TraceBuilder()
    b.runtime("cudaLaunchKernel", 0, 10, kind=RuntimeKind.LAUNCH, correlation=9, pid=4242)
    b.activity("k", 50, 5, correlation=9, pid=0)
    assert link_launches(b.build()).launch_index.tolist() == [0]


def test_non_launch_calls_never_match() -> None:
    b = TraceBuilder()
    b.runtime("cudaStreamSynchronize", 0, 10, kind=RuntimeKind.SYNC, correlation=1)
    b.activity("k", 50, 5, correlation=1)
    b.activity("k", 60, 5)  # no correlation at all
    links = link_launches(b.build())
    assert links.n_unmatched == 2


def test_percentiles_nearest_rank() -> None:
    v = np.arange(1, 101, dtype=np.int64)[::-1].copy()
    assert percentiles(v) == Percentiles(p50=50, p90=90, p99=99, max=100)
    assert percentiles(np.array([7], np.int64)) == Percentiles(p50=7, p90=7, p99=7, max=7)
    assert percentiles(np.zeros(0, np.int64)) == Percentiles()
