"""The sampled lint's spacing, on a scripted clock: what a sample adds stays within the budget
of the steps it spans, at least LINT_EVERY steps apart, at most LINT_MAX_EVERY."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace.capture._lint_sample import (
    LINT_BUDGET,
    LINT_EVERY,
    LINT_FIRST_STEPS,
    LINT_MAX_EVERY,
    LintSampler,
)
from tests.conftest import examples


class _Detector:
    def __init__(self) -> None:
        self.paused = False
        self.fail = 0

    def pause(self) -> None:
        if self.fail:
            self.fail -= 1
            raise RuntimeError("another thread")
        self.paused = True

    def unpause(self) -> None:
        self.paused = False


def _run(plain_ns: int, linted_ns: int, steps: int, detector: Any = None) -> list[int]:
    """Steps of ``plain_ns`` each, ``linted_ns`` each while the lint is on (turns included);
    returns the linted steps, as the clock would drive the sampler."""
    det = detector or _Detector()
    t = [0]
    sampler = LintSampler(det, lambda: t[0])
    at = sampler.start(0)
    linted = []
    for i in range(steps):
        if i >= at:
            at = sampler.toggle(i)
        if not det.paused:
            linted.append(i)
        t[0] += plain_ns if det.paused else linted_ns
    assert sampler.linted(steps) == len(linted)
    return linted


def test_the_first_steps_then_step_100_then_the_budget() -> None:
    # an empty step: 2 µs plain, 12 µs linted (its turns): 10 µs extra a sample
    linted = _run(2_000, 12_000, 3_000)
    assert linted[: LINT_FIRST_STEPS + 1] == [0, 1, 2, 3, 4, 100]
    gaps = {b - a for a, b in itertools.pairwise(linted[5:])}
    # 10 µs / (1 % of 2 µs) = 500 plain steps after the one linted
    assert gaps == {501}


def test_a_real_model_step_is_sampled_about_one_in_185() -> None:
    # a linted step of a 149-op MLP costs ~2.85x a plain one
    linted = _run(1_000_000, 2_850_000, 2_000)
    gaps = {b - a for a, b in itertools.pairwise(linted[5:])}
    assert gaps == {186}


def test_a_lint_that_costs_nothing_runs_every_LINT_EVERY_steps() -> None:
    linted = _run(1_000, 1_000, 1_000)
    assert linted[5:] == [100, 201, 302, 403, 504, 605, 706, 807, 908]


def test_a_very_costly_lint_is_still_sampled_now_and_then() -> None:
    linted = _run(1_000, 10**9, 30_000)
    assert linted[5:] == [100, 101 + LINT_MAX_EVERY, 102 + 2 * LINT_MAX_EVERY]


def test_a_turn_that_fails_is_tried_at_the_next_step() -> None:
    det = _Detector()
    det.fail = 2
    linted = _run(1_000, 1_000, 200, det)
    # the pause at step 5 failed twice: steps 5 and 6 were linted too, and the first sample
    # after them is as far from their end as step 100 is from step 5
    assert linted[:8] == [0, 1, 2, 3, 4, 5, 6, 102]


@settings(max_examples=examples(200, quick=40), deadline=None)
@given(plain=st.integers(1_000, 10**7), ratio=st.floats(1.0, 50.0))
def test_what_the_samples_add_stays_within_the_budget(plain: int, ratio: float) -> None:
    linted_ns = int(plain * ratio)
    steps = 20_000
    linted = _run(plain, linted_ns, steps)
    # after step 100's sample: each adds its extra time over a gap of plain steps whose time
    # is at least extra / budget (the last sample's gap may run past the end)
    after = linted[linted.index(100) + 1 :]
    extra = (linted_ns - plain) * len(after)
    assert extra <= LINT_BUDGET * (steps - 101) * plain + (linted_ns - plain) + 1
    assert all(b - a > LINT_EVERY for a, b in itertools.pairwise(linted[5:]))


@pytest.mark.parametrize("steps", [0, 3, 5])
def test_a_short_session_counts_what_it_linted(steps: int) -> None:
    assert len(_run(1_000, 2_000, steps)) == steps
