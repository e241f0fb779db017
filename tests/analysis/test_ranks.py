from __future__ import annotations

from asynctrace.analysis.ranks import compare_ranks
from asynctrace.analysis.report import analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind


def _rank(rank: int, durations: list[int]) -> TraceBuilder:
    b = TraceBuilder(f"job/rank{rank}.json")
    t = 0
    for i, d in enumerate(durations):
        b.range(f"ProfilerStep#{i}", t, d, kind=RangeKind.STEP, step=i)
        t += d
    return b


def test_slowest_rank_and_skew() -> None:
    reports = [
        analyze(_rank(1, [100, 300]).build()),
        analyze(_rank(0, [100, 100]).build(rank=0)),
        analyze(_rank(2, [150, 100, 50]).build()),
    ]
    c = compare_ranks(reports)
    assert [r.rank for r in c.ranks] == [0, 1, 2]
    assert [r.cpu_ns_mean for r in c.ranks] == [100.0, 200.0, 100.0]
    assert [r.slowest for r in c.ranks] == [False, True, False]
    assert c.slowest_rank == 1
    assert [(k.step, k.ranks, k.skew_ns, k.slowest_rank) for k in c.step_skew] == [
        (0, 3, 50, 2),
        (1, 3, 200, 1),
    ]  # step 2 exists on one rank only: no skew


def test_single_rank_not_flagged() -> None:
    c = compare_ranks([analyze(_rank(0, [10]).build())])
    assert c.slowest_rank is None
    assert not c.ranks[0].slowest
