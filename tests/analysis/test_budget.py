"""``sync_budget``: steps over a per-step sync budget, on runs whose answer is known."""

from __future__ import annotations

import pytest

from asynctrace.analysis.budget import SyncBudget, sync_budget
from asynctrace.records import StepRecord, SyncSite


def _steps(*counts: int, first: int = 0) -> list[StepRecord]:
    return [
        StepRecord(step=first + i, start_ns=i * 100, frontend_ns=100, sync_count=c)
        for i, c in enumerate(counts)
    ]


def test_steps_over_the_budget_and_the_worst() -> None:
    got = sync_budget(_steps(1, 3, 0, 3, 2, first=10), max_syncs_per_step=1)
    assert got == SyncBudget(
        max_syncs_per_step=1,
        steps=5,
        over_budget_steps=3,  # 3, 3 and 2: more than 1; a step at the budget is within it
        max_syncs_in_a_step=3,
        worst_step=11,  # the first of the two steps with 3
        whole_run=False,
    )
    assert got.exceeded


def test_a_step_at_the_budget_keeps_it() -> None:
    got = sync_budget(_steps(2, 2, 1), max_syncs_per_step=2)
    assert (got.over_budget_steps, got.exceeded, got.max_syncs_in_a_step) == (0, False, 2)


def test_budget_zero_counts_every_step_with_a_sync() -> None:
    got = sync_budget(_steps(0, 1, 0, 4), max_syncs_per_step=0)
    assert (got.over_budget_steps, got.worst_step) == (2, 3)


def test_without_a_budget_nothing_is_over_it() -> None:
    got = sync_budget(_steps(5, 9), max_syncs_per_step=None)
    assert (got.over_budget_steps, got.exceeded) == (0, False)
    assert (got.max_syncs_in_a_step, got.worst_step) == (9, 1)


def test_no_sync_at_all_has_no_worst_step() -> None:
    got = sync_budget(_steps(0, 0), max_syncs_per_step=0)
    assert (got.over_budget_steps, got.max_syncs_in_a_step, got.worst_step) == (0, 0, None)


def test_a_run_without_steps_is_judged_as_one_step() -> None:
    sites = [
        SyncSite(site="a.py:1", op="aten::_local_scalar_dense", count=3),
        SyncSite(site="b.py:2", op="cudaStreamSynchronize", count=2),
    ]
    got = sync_budget([], max_syncs_per_step=4, sync_sites=sites)
    assert got == SyncBudget(
        max_syncs_per_step=4,
        steps=1,
        over_budget_steps=1,  # 3 + 2 syncs in the one step
        max_syncs_in_a_step=5,
        worst_step=None,
        whole_run=True,
    )
    # with steps, the sites are not read: the steps carry the counts
    assert sync_budget(_steps(1), max_syncs_per_step=4, sync_sites=sites).max_syncs_in_a_step == 1
    # nothing at all: one step of no syncs
    empty = sync_budget([], max_syncs_per_step=0)
    assert (empty.steps, empty.over_budget_steps, empty.whole_run) == (1, 0, True)


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="max_syncs_per_step must be >= 0, got -1"):
        sync_budget(_steps(1), max_syncs_per_step=-1)
