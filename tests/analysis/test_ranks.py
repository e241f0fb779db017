from __future__ import annotations

import pytest

from asynctrace.analysis.ranks import compare_ranks
from asynctrace.analysis.report import analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.load import load
from asynctrace.traces.model import RangeKind
from tests.analysis._reference import reference_step_figures
from tests.conftest import shared_trace


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
    assert [r.frontend_ns_mean for r in c.ranks] == [100.0, 200.0, 100.0]
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


@pytest.mark.real_traces
def test_two_real_ranks_match_independent_reading() -> None:
    names = ["hta_sampled_rank1.json.gz", "hta_sampled_rank0.json.gz"]
    paths = [shared_trace("kineto", n) for n in names]
    c = compare_ranks([analyze(load(p)) for p in paths])
    refs = [reference_step_figures(p)["steps"] for p in reversed(paths)]  # rank 0, rank 1

    def mean(steps: list[dict[str, int]], key: str) -> float:
        return sum(s[key] for s in steps) / len(steps)

    assert [r.rank for r in c.ranks] == [0, 1]  # from distributedInfo
    for row, steps in zip(c.ranks, refs, strict=True):
        assert row.steps == len(steps) == 2
        assert row.frontend_ns_mean == pytest.approx(mean(steps, "cpu_ns"))
        assert row.device_ns_mean == pytest.approx(mean(steps, "device_ns"))
        assert row.gpu_busy_ns_mean == pytest.approx(mean(steps, "gpu_busy_ns"))
        assert row.sync_wait_ns_mean == mean(steps, "sync_wait_ns") == 0
    assert c.slowest_rank == 1  # 619.27 ms mean host step vs 615.12 ms
    by_step = {s["step"]: [s["cpu_ns"]] for s in refs[0]}
    for s in refs[1]:
        by_step[s["step"]].append(s["cpu_ns"])
    assert [
        (k.step, k.ranks, k.min_frontend_ns, k.max_frontend_ns, k.skew_ns) for k in c.step_skew
    ] == [(n, 2, min(v), max(v), max(v) - min(v)) for n, v in sorted(by_step.items())]
    assert [k.slowest_rank for k in c.step_skew] == [1, 1]


def test_ranks_of_sessions_compare_like_traces() -> None:
    # one step record type: a session's records go through the same rank comparison
    from asynctrace.records import Records, SessionHeader, StepRecord

    def records(rank: int, durations: list[int]) -> Records:
        header = SessionHeader(
            name="train",
            host="h",
            pid=1,
            rank=rank,
            device_kind="cpu",
            device_name="cpu",
            asynchronous=False,
            started_unix_ns=0,
        )
        steps = [
            StepRecord(step=i, start_ns=sum(durations[:i]), frontend_ns=d)
            for i, d in enumerate(durations)
        ]
        return Records(
            path=f"train.rank{rank}.records.jsonl",
            header=header,
            steps=steps,
            syncs=[],
            summary=None,
            complete=False,
        )

    c = compare_ranks([analyze(records(1, [100, 300])), analyze(records(0, [100, 100]))])
    assert [(r.rank, r.frontend_ns_mean, r.slowest) for r in c.ranks] == [
        (0, 100.0, False),
        (1, 200.0, True),
    ]
    assert c.ranks[0].gpu_busy_ns_mean is None  # a session measures no device timeline
    assert [(k.step, k.skew_ns, k.slowest_rank) for k in c.step_skew] == [(0, 0, 0), (1, 200, 1)]
