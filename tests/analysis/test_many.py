"""The cross-rank reduce (``asynctrace.analysis.ranks.cross_rank``): known answers."""

from __future__ import annotations

import msgspec
import pytest

from asynctrace.analysis.ranks import bound_label, compare_ranks, cross_rank
from asynctrace.analysis.report import Report, analyze
from asynctrace.traces.builder import TraceBuilder
from asynctrace.traces.model import RangeKind


def _rank(rank: int, durations: list[int], *, first_step: int = 0) -> Report:
    b = TraceBuilder(f"job/rank{rank}.json")
    t = 0
    for i, d in enumerate(durations):
        b.range(f"ProfilerStep#{first_step + i}", t, d, kind=RangeKind.STEP, step=first_step + i)
        t += d
    return analyze(b.build())


def _with_bound(report: Report, label: str | None) -> Report:
    """The report with its run label set to ``label`` (None: no bound figure at all)."""
    assert report.bound is not None
    bound = None if label is None else msgspec.structs.replace(report.bound, label=label)
    return msgspec.structs.replace(report, bound=bound)


def test_skew_slowest_and_stragglers() -> None:
    reports = [
        _rank(2, [150, 100, 50]),
        _rank(0, [100, 100]),
        _rank(1, [100, 300]),
    ]
    c = cross_rank(reports)
    assert (c.ranks, c.steps) == (3, 2)  # step 2 exists on rank 2 only
    assert c.slowest_rank == 1  # mean 200
    assert c.slowest_source == "job/rank1.json"
    assert (c.step_skew_ns.p50, c.step_skew_ns.max) == (50, 200)
    assert (c.worst_step, c.worst_step_rank) == (1, 1)
    assert [(s.rank, s.steps) for s in c.slowest_by_step] == [(1, 1), (2, 1)]
    # every rank has the same label (nothing ran on a device: the host is all there is)
    assert c.bound is not None
    assert len(c.bound.ranks) == 1
    assert c.bound.outliers == []


def test_agrees_with_compare_ranks_on_ties() -> None:
    # equal step times everywhere: the first rank in rank order is the slowest, as in the table
    reports = [_rank(r, [100, 100, 100]) for r in (3, 1, 2, 0)]
    c, table = cross_rank(reports), compare_ranks(reports)
    assert c.slowest_rank == table.slowest_rank == 0
    assert {k.slowest_rank for k in table.step_skew} == {0}
    assert [(s.rank, s.steps) for s in c.slowest_by_step] == [(0, 3)]
    assert c.step_skew_ns.max == 0


def test_per_step_slowest_matches_the_rank_table() -> None:
    reports = [_rank(r, [100 + 37 * ((r * 7 + i * 3) % 5) for i in range(6)]) for r in range(5)]
    c, table = cross_rank(reports), compare_ranks(reports)
    counts: dict[int | None, int] = {}
    for k in table.step_skew:
        counts[k.slowest_rank] = counts.get(k.slowest_rank, 0) + 1
    assert {s.rank: s.steps for s in c.slowest_by_step} == counts
    assert c.step_skew_ns.max == max(k.skew_ns for k in table.step_skew)
    assert c.slowest_rank == table.slowest_rank


def test_bound_outliers_from_the_majority() -> None:
    labels = ["host-bound", "device-bound", "host-bound", None, "sync-bound", "host-bound"]
    reports = [_with_bound(_rank(r, [100]), x) for r, x in enumerate(labels)]
    assert bound_label(reports[0]) == "host-bound"
    b = cross_rank(reports).bound
    assert b is not None
    assert b.majority == "host-bound"
    assert b.ranks == {"host-bound": 3, "device-bound": 1, "sync-bound": 1}
    assert [(o.rank, o.label) for o in b.outliers] == [(1, "device-bound"), (4, "sync-bound")]
    assert b.unlabelled == 1


def test_bound_majority_tie_is_the_label_that_sorts_first() -> None:
    reports = [_with_bound(_rank(r, [10]), x) for r, x in enumerate(["sync-bound", "host-bound"])]
    b = cross_rank(reports).bound
    assert b is not None
    assert b.majority == "host-bound"
    assert [o.rank for o in b.outliers] == [0]


@pytest.mark.parametrize("n", [0, 1])
def test_fewer_than_two_ranks(n: int) -> None:
    c = cross_rank([_rank(r, [10, 20]) for r in range(n)])
    assert c.slowest_rank is None
    assert c.steps == 0
    assert c.worst_step is None
    assert c.slowest_by_step == []
