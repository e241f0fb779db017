"""When a default session on a CPU runs the sync lint: a sample of its steps, on a budget.

``detect_syncs="auto"`` where no CUDA hooks can run lints the first :data:`LINT_FIRST_STEPS`
steps, then one step at a time, spaced so that what the lint adds (a linted step's time over a
plain step's, its turns on and off included) stays within :data:`LINT_BUDGET` of the session's
host time, and at least :data:`LINT_EVERY` steps apart. A linted step of a real model costs
~2.9x a plain one (20 µs an aten op), an empty step's turns ~10 µs against its ~2 µs: one
rule serves both, measured as the session runs (docs/performance.md, the sampled lint).

The clock calls :meth:`LintSampler.toggle` at the start of the steps where the sample turns
(one integer comparison a step, ``StepClock.lint_at``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from asynctrace.records import Note

if TYPE_CHECKING:
    from asynctrace.capture.syncs import SyncDetector

__all__ = ["LINT_BUDGET", "LINT_EVERY", "LINT_FIRST_STEPS", "LINT_MAX_EVERY", "LintSampler"]

#: the first steps the lint sees (warm-up, and a script's first iterations)
LINT_FIRST_STEPS: Final = 5
#: the fewest steps from one linted step to the next
LINT_EVERY: Final = 100
#: the most (a step far cheaper than its lint is still sampled now and then)
LINT_MAX_EVERY: Final = 10_000
#: what the lint may add to the session's host time
LINT_BUDGET: Final = 0.01


class LintSampler:
    """Turns ``detector`` on and off at step boundaries and counts the steps it linted.

    ``now`` is the session's host clock (ns). The detector starts unpaused: the steps before
    the first turn are linted.
    """

    __slots__ = ("_detector", "_from_index", "_from_ns", "_linted", "_now", "_on", "_plain_ns")

    def __init__(self, detector: SyncDetector, now: Callable[[], int]) -> None:
        self._detector = detector
        self._now = now
        self._linted = 0
        self._on = True
        # where the current run (linted or plain) started: its first step, and when
        self._from_index = 0
        self._from_ns = 0
        # a plain step's time, from the last plain run (None until one was timed)
        self._plain_ns: float | None = None

    def start(self, index: int) -> int:
        """The lint runs from step ``index`` (the session's first); returns the step where it
        turns off."""
        self._from_index, self._from_ns = index, self._now()
        return index + LINT_FIRST_STEPS

    def toggle(self, index: int) -> int:
        """At the start of step ``index``: turn the lint off (after a sample) or on (for one
        step); returns the step where it turns next. Never raises: a turn that fails (a
        boundary from another thread than the lint's) is tried again at the next step."""
        if not self._on:
            t = self._now()
            try:
                self._detector.unpause()
            except Exception:
                return index + 1
            if index > self._from_index:
                self._plain_ns = (t - self._from_ns) / (index - self._from_index)
            self._on, self._from_index, self._from_ns = True, index, t
            return index + 1
        try:
            self._detector.pause()
        except Exception:
            return index + 1
        t = self._now()
        steps = index - self._from_index
        self._linted += steps
        gap = self._gap(steps, t - self._from_ns)
        self._on, self._from_index, self._from_ns = False, index, t
        return index + gap

    def _gap(self, linted: int, cost_ns: int) -> int:
        """Plain steps until the next sample: the last sample's extra cost (its time, turns
        included, over that many plain steps') is at most the budget of the steps it spans;
        :data:`LINT_EVERY` after the first steps, before a plain step was timed."""
        plain_ns = self._plain_ns
        if plain_ns is None:
            return max(LINT_EVERY - LINT_FIRST_STEPS, 1)
        extra_ns = cost_ns - linted * plain_ns
        if extra_ns <= 0:
            return LINT_EVERY
        if plain_ns <= 0:
            return LINT_MAX_EVERY
        want = math.ceil(extra_ns / (LINT_BUDGET * plain_ns))
        return min(max(want, LINT_EVERY), LINT_MAX_EVERY)

    def linted(self, steps: int) -> int:
        """The steps linted of a session that ran ``steps`` complete steps."""
        return self._linted + (max(steps - self._from_index, 0) if self._on else 0)

    def note(self, steps: int) -> Note:
        """What the records' sync counts are of, for the session's end (``steps`` run)."""
        return Note(
            code="sync-lint-sampled",
            text=f"the sync lint ran on {self.linted(steps)} of {steps} step(s) (the first "
            f"{LINT_FIRST_STEPS}, then one at a time, at least {LINT_EVERY} steps apart and "
            f"spaced so it adds at most {LINT_BUDGET:.0%} to the steps' time): sync sites and "
            "their counts are of those steps, and the other steps count no syncs "
            "(detect_syncs='lint' lints every step)",
        )
