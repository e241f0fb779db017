"""The sync budget: how many steps synchronized more often than allowed (pure; no torch).

``asynctrace check --max-syncs-per-step N`` exits 1 when any step of the script had more than
``N`` syncs; :func:`sync_budget` says which did, from the session's step records. A run in which
no step completed (a script that never calls ``optimizer.step()``) is judged as one step: the
syncs of all its sites together.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from asynctrace.records import StepRecord, SyncSite

__all__ = ["SyncBudget", "sync_budget"]


class SyncBudget(msgspec.Struct, frozen=True, kw_only=True):
    """Steps against a per-step sync budget."""

    #: syncs a step may have; None: no budget (no step is over it)
    max_syncs_per_step: int | None
    #: steps judged: the records' steps, or 1 for a run without steps (``whole_run``)
    steps: int
    #: steps with more syncs than the budget
    over_budget_steps: int
    #: the most syncs in one step (0 without any sync)
    max_syncs_in_a_step: int
    #: the step (its ``StepRecord.step``) that had them, the first of equals; None for a whole
    #: run or a run without syncs
    worst_step: int | None
    #: no step completed: the run's syncs (all sites together) were judged as one step
    whole_run: bool

    @property
    def exceeded(self) -> bool:
        """Whether any step had more syncs than the budget."""
        return self.over_budget_steps > 0


def sync_budget(
    steps: Sequence[StepRecord],
    *,
    max_syncs_per_step: int | None,
    sync_sites: Sequence[SyncSite] = (),
) -> SyncBudget:
    """Count the steps with more than ``max_syncs_per_step`` syncs (pure).

    ``sync_sites`` are the run's sync sites: without steps, their counts together are the one
    step judged (``whole_run``); with steps they are not read.
    """
    if max_syncs_per_step is not None and max_syncs_per_step < 0:
        raise ValueError(f"max_syncs_per_step must be >= 0, got {max_syncs_per_step}")
    counts: list[tuple[int, int | None]]
    if steps:
        counts = [(s.sync_count, s.step) for s in steps]
    else:
        counts = [(sum(s.count for s in sync_sites), None)]
    # the most syncs, the earliest step among equals (max keeps the first it meets)
    worst, worst_step = max(counts, key=lambda c: c[0])
    over = 0 if max_syncs_per_step is None else sum(1 for c, _ in counts if c > max_syncs_per_step)
    return SyncBudget(
        max_syncs_per_step=max_syncs_per_step,
        steps=len(counts),
        over_budget_steps=over,
        max_syncs_in_a_step=worst,
        worst_step=worst_step if worst else None,
        whole_run=not steps,
    )
