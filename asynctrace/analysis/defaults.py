"""Defaults the command line shows in its help, kept apart from the analyses that use them:
this module imports nothing, so ``asynctrace report`` builds its parser without numpy."""

from __future__ import annotations

__all__ = ["DEFAULT_ALPHA", "DEFAULT_MIN_EFFECT", "DEFAULT_MIN_STEPS", "DEFAULT_QUEUE_CAP"]

#: outstanding launches at which real CUDA traces plateau (the launch queue is full)
DEFAULT_QUEUE_CAP = 1022

#: a comparison's significance level: a figure changed where the test's p is below it
DEFAULT_ALPHA = 0.01
#: the smallest change of a median, relative to the baseline's, that a comparison counts
DEFAULT_MIN_EFFECT = 0.02
#: the fewest steps on each side for a comparison's noise test
DEFAULT_MIN_STEPS = 5
