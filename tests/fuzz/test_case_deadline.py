"""The fuzz tests' per-case deadline counts CPU time, so a loaded machine cannot fail a case."""

from __future__ import annotations

import signal
import time

import pytest

from tests.fuzz._mutators import CaseTimeout, deadline


def _work_forever() -> None:
    while True:
        pass


def test_a_case_that_works_past_its_deadline_is_stopped() -> None:
    with pytest.raises(CaseTimeout, match="CPU time"), deadline(0.05):
        _work_forever()


def test_waiting_is_not_working() -> None:
    # a process descheduled on a busy machine waits like this: its case goes on
    with deadline(0.01):
        time.sleep(0.1)
    assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)


def test_the_wall_clock_alarm_of_pytest_timeout_is_left_alone() -> None:
    ours = 1000.0
    theirs, _ = signal.setitimer(signal.ITIMER_REAL, ours)
    try:
        with deadline(1.0):
            pass
        assert signal.getitimer(signal.ITIMER_REAL)[0] > ours - 100
    finally:
        # pytest-timeout's own alarm for this test, as it was
        signal.setitimer(signal.ITIMER_REAL, theirs)
