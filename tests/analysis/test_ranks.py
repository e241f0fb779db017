from __future__ import annotations

import json

import pytest

from asynctrace.analysis.ranks import compare_ranks, cross_rank, rank_table
from asynctrace.analysis.report import analyze
from asynctrace.records import StepRecord
from asynctrace.render.ranks import format_rank_table
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.load import load
from asynctrace.traces.model import RangeKind
from tests.analysis._reference import reference_step_figures
from tests.conftest import shared_trace
from tests.export._records import steps_ms as _steps


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
        # their cudaMemcpyAsync to or from pageable memory are blocking copies (syncs)
        assert row.sync_wait_ns_mean == mean(steps, "sync_wait_ns") > 0
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
    from asynctrace.records import Records, SessionHeader

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


def test_rank_table_known_answer() -> None:
    table = rank_table(
        {0: _steps(10, 12, 11), 1: _steps(14, 9, 11), 2: _steps(10, 10, 20, first=1)},
        records_paths={0: "a", 1: "b"},
    )
    assert table.metric == "frontend_ns"
    assert table.ranks == (0, 1, 2)
    # only steps 1 and 2 are on every rank
    assert [s.step for s in table.steps] == [1, 2]
    s1, s2 = table.steps
    assert s1.time_ns == (12_000_000, 9_000_000, 10_000_000)
    assert (s1.slowest_rank, s1.fastest_rank, s1.skew_ns) == (0, 1, 3_000_000)
    assert s2.time_ns == (11_000_000, 11_000_000, 10_000_000)
    # a tie goes to the lowest rank
    assert (s2.slowest_rank, s2.fastest_rank, s2.skew_ns) == (0, 2, 1_000_000)
    # the median skew is the nearest-rank p50 of the skews (3 ms, 1 ms): the lower middle one
    assert table.median_skew_ns == 1_000_000
    assert (table.max_skew_ns, table.max_skew_step) == (3_000_000, 1)
    r0, r1, r2 = table.per_rank
    assert (r0.steps, r0.median_ns, r0.slowest_count, r0.records_path) == (3, 11_000_000, 2, "a")
    assert (r1.median_ns, r1.slowest_count, r1.records_path) == (11_000_000, 0, "b")
    assert (r2.median_ns, r2.slowest_count, r2.records_path) == (10_000_000, 0, None)
    js = table.to_json()
    assert json.loads(json.dumps(js)) == js
    text = format_rank_table(table)
    assert "slowest" in text
    assert "rank0" in text
    assert "3.000" in text


def test_rank_table_metrics() -> None:
    per_rank = {0: _steps(1, 2, device=True), 1: _steps(3, 1, device=True)}
    dev = rank_table(per_rank, metric="device")
    assert dev.metric == "device_ns"
    assert [s.skew_ns for s in dev.steps] == [4_000_000, 2_000_000]
    assert rank_table(per_rank, metric="auto").metric == "device_ns"
    mixed = {0: _steps(1, 2, device=True), 1: _steps(3, 1)}
    assert rank_table(mixed, metric="auto").metric == "frontend_ns"
    with pytest.raises(ValueError, match="metric"):
        rank_table(per_rank, metric="gpu")  # type: ignore[arg-type]


def test_rank_table_long_runs_show_the_worst_steps() -> None:
    table = rank_table({0: _steps(*[1.0] * 50), 1: _steps(*[1.0 + i / 100 for i in range(50)])})
    text = format_rank_table(table, max_rows=5)
    assert "5 of 50 steps shown" in text
    assert f"max {49 / 100 * 1e3 / 1e3:.3f} ms (step 49)" in text


def test_the_rank_table_and_cross_rank_say_one_median_skew() -> None:
    # two steps whose skews are 10 and 20 ns: the median skew is the nearest-rank p50, 10 ns,
    # in both views (never 15, the mean of the middle two)
    table = rank_table(
        {
            0: [
                StepRecord(step=0, start_ns=0, frontend_ns=100),
                StepRecord(step=1, start_ns=100, frontend_ns=100),
            ],
            1: [
                StepRecord(step=0, start_ns=0, frontend_ns=110),
                StepRecord(step=1, start_ns=110, frontend_ns=120),
            ],
        }
    )
    assert [s.skew_ns for s in table.steps] == [10, 20]
    assert table.median_skew_ns == 10
    cross = cross_rank(
        [analyze(_rank(0, [100, 100]).build()), analyze(_rank(1, [110, 120]).build())]
    )
    assert cross.step_skew_ns.p50 == 10
