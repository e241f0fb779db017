"""The per-minibatch synchronization verdict (interface; the judgement is being written)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from asynctrace.records import StepRecord, SyncSite

__all__ = ["Verdict", "judge_steps"]


@dataclass(frozen=True)
class Verdict:
    #: "synchronized", "never-synchronized", "over-synchronized", "input-bound",
    #: "memory-creep", "cpu-synchronous", "too-few-steps"
    code: str
    message: str
    #: every finding, the headline first (a run can be input-bound and creeping at once)
    findings: tuple[str, ...] = ()


def judge_steps(
    steps: Sequence[StepRecord],
    *,
    asynchronous: bool,
    sync_sites: Sequence[SyncSite] = (),
) -> Verdict:
    """Judge a run from its step records (pure)."""
    if not asynchronous:
        return Verdict(
            "cpu-synchronous",
            "the CPU backend executes synchronously: device time equals frontend time, "
            "nothing runs ahead",
        )
    return Verdict("too-few-steps", "no verdict yet")
