"""Hand-built traces whose figures are worked out by hand in the tests."""

from __future__ import annotations

from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import ActivityKind, RangeKind, RuntimeKind, Trace

__all__ = ["launches_trace", "steps_trace"]


def launches_trace() -> Trace:
    """Two kernels on stream 7, a copy on stream 8, one unmatched kernel, one sync."""
    b = TraceBuilder("launches.json")
    b.runtime("cudaLaunchKernel", 100, 10, kind=RuntimeKind.LAUNCH, correlation=1, pid=42)
    b.runtime("cudaLaunchKernel", 120, 10, kind=RuntimeKind.LAUNCH, correlation=2, pid=42)
    b.runtime("cudaMemcpyAsync", 140, 5, kind=RuntimeKind.MEMCPY, correlation=3, pid=42)
    b.runtime("cudaStreamSynchronize", 150, 100, kind=RuntimeKind.SYNC, correlation=4, pid=42)
    b.activity("k1", 200, 50, stream=7, correlation=1, pid=42)
    b.activity("k2", 250, 20, stream=7, correlation=2, pid=42)
    b.activity("copy", 142, 10, stream=8, kind=ActivityKind.MEMCPY, correlation=3, pid=42)
    b.activity("lost", 300, 10, stream=7, correlation=99, pid=42)
    b.device_sync(150, 100, stream=7, correlation=4, pid=42)
    return b.build(device_name="Fake GPU")


def steps_trace() -> Trace:
    """ProfilerStep#1 [0, 1000) and ProfilerStep#2 [1000, 1500) (see test_steps for the sums)."""
    b = TraceBuilder("rank-3.steps.pt.trace.json")
    b.range("ProfilerStep#1", 0, 1000, kind=RangeKind.STEP, step=1)
    b.range("ProfilerStep#2", 1000, 500, kind=RangeKind.STEP, step=2)
    b.runtime("cudaLaunchKernel", 100, 10, kind=RuntimeKind.LAUNCH, correlation=1)
    b.runtime("cudaLaunchKernel", 200, 10, kind=RuntimeKind.LAUNCH, correlation=2)
    b.runtime("cudaDeviceSynchronize", 600, 100, kind=RuntimeKind.SYNC)
    b.runtime("cudaLaunchKernel", 1100, 10, kind=RuntimeKind.LAUNCH, correlation=3)
    b.activity("a", 300, 100, correlation=1)
    b.activity("b", 450, 50, correlation=2)
    b.activity("c", 1600, 100, correlation=3)
    return b.build()
