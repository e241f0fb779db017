"""Defaults the command line shows in its help, kept apart from the analyses that use them:
this module imports nothing, so ``asynctrace report`` builds its parser without numpy."""

from __future__ import annotations

__all__ = ["DEFAULT_QUEUE_CAP"]

#: outstanding launches at which real CUDA traces plateau (the launch queue is full)
DEFAULT_QUEUE_CAP = 1022
