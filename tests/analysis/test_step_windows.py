"""One rule for the step a time belongs to (steps.window_of), shared by the activity table, the
sync calls and the bound's shares: where step windows overlap, the one that started last."""

from __future__ import annotations

import numpy as np

from asynctrace.analysis.launches import link_launches
from asynctrace.analysis.report import analyze
from asynctrace.analysis.steps import step_windows, window_of
from asynctrace.analysis.syncs import find_syncs
from asynctrace.analysis.tables import activity_rows
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind, RuntimeKind, Trace


def _of(times: list[int], windows: list[tuple[int, int]]) -> list[int]:
    start = np.array([s for s, _ in windows], np.int64)
    end = np.array([e for _, e in windows], np.int64)
    return window_of(np.array(times, np.int64), start, end).tolist()


def test_disjoint_windows_half_open() -> None:
    assert _of([-1, 0, 99, 100, 150, 200, 250], [(0, 100), (100, 200)]) == [-1, 0, 0, 1, 1, -1, -1]
    assert _of([5], []) == [-1]
    assert _of([], [(0, 10)]) == []


def test_overlap_goes_to_the_window_that_started_last() -> None:
    # a seam: step 0 ends after step 1 began
    assert _of([50, 90, 105, 130], [(0, 110), (80, 200)]) == [0, 1, 1, 1]
    # a nest: the inner window while it lasts, the outer one before and after it
    assert _of([10, 30, 45, 60, 99], [(0, 100), (20, 50)]) == [0, 1, 1, 0, 0]
    # started together: the later in the list
    assert _of([5, 15], [(0, 20), (0, 10)]) == [1, 0]
    # the windows' list order does not matter, only their starts
    assert _of([50, 90, 105], [(80, 200), (0, 110)]) == [1, 0, 0]
    # an empty window holds nothing
    assert _of([10, 10], [(0, 20), (10, 10)]) == [0, 0]


def _overlapping_steps() -> Trace:
    """ProfilerStep#1 [0, 1000) and ProfilerStep#2 [800, 1500): in the overlap, a launch (its
    kernel at [950, 1050)) and a sync."""
    b = TraceBuilder("overlap.pt.trace.json")
    b.range("ProfilerStep#1", 0, 1000, kind=RangeKind.STEP, step=1)
    b.range("ProfilerStep#2", 800, 700, kind=RangeKind.STEP, step=2)
    b.runtime("cudaLaunchKernel", 100, 10, kind=RuntimeKind.LAUNCH, correlation=1)
    b.runtime("cudaLaunchKernel", 900, 10, kind=RuntimeKind.LAUNCH, correlation=2)
    b.runtime("cudaDeviceSynchronize", 920, 30, kind=RuntimeKind.SYNC)
    b.runtime("cudaLaunchKernel", 1200, 10, kind=RuntimeKind.LAUNCH, correlation=3)
    b.activity("a", 200, 100, correlation=1)
    b.activity("b", 950, 100, correlation=2)
    b.activity("c", 1300, 100, correlation=3)
    return b.build()


def test_every_table_gives_the_overlap_to_the_same_step() -> None:
    t = _overlapping_steps()
    windows = step_windows(t)
    assert [(w.step, w.start_ns, w.end_ns) for w in windows] == [(1, 0, 1000), (2, 800, 1500)]
    rows = activity_rows(t, links=link_launches(t), windows=windows)
    assert rows.step.tolist() == [1, 2, 2]
    assert [c.step for c in find_syncs(t, windows=windows).calls] == [2]
    # the bound: kernel b is step 2's first activity, so step 2's share starts at or before it
    # (at its host start, the device idle since a ended) and step 1's ends there
    s1, s2 = analyze(t).step_bounds
    assert (s1.share_start_ns, s1.share_end_ns) == (0, 800)
    assert (s2.share_start_ns, s2.share_end_ns) == (800, 1500)
