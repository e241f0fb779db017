"""The diagnosis: one list of findings, ordered by what each costs in the steady state.

``diagnosis[0]`` is the headline every view shows first. A finding's ``code`` is a bound label
(``device-bound``, ``host-bound``, ``sync-bound``, ``input-bound``, ``dependency-bound``,
``undetermined``) or one of the other codes of :data:`FINDING_CODES`.
"""

from __future__ import annotations

import msgspec

__all__ = ["BOUND_CODES", "FINDING_CODES", "Finding"]

#: the codes that are bound labels
BOUND_CODES = (
    "device-bound",
    "host-bound",
    "sync-bound",
    "input-bound",
    "dependency-bound",
    "undetermined",
)

#: every code a finding may carry
FINDING_CODES = (
    *BOUND_CODES,
    "launch-overhead",
    "warm-up",
    "blocking-copy",
    "over-synchronized",
    "clock-mismatch",
    "no-device-activity",
    "cpu-synchronous",
)


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One thing that costs the run time, with its evidence and one next step."""

    code: str
    #: device idle or step time it costs in the steady state, ns
    cost_ns: int
    #: ``cost_ns`` over the region (0..1)
    share: float
    message: str
    #: one next step
    advice: str
    #: its figures, with units in the names (``idle_ns``, ``busy_pct``)
    evidence: dict[str, int | float | str] = msgspec.field(default_factory=dict)
