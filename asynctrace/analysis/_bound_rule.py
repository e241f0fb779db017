"""The label rule the trace bound and the records bound share (asynctrace.analysis.bound's
docstring defines it): the threshold, the labels, a step's and a run's bound from its figures."""

from __future__ import annotations

import msgspec

from asynctrace.analysis._bound_model import (
    CAUSES,
    Bound,
    BoundEvidence,
    IdleByCause,
    StepBound,
)
from asynctrace.analysis.advice import advice_for

__all__ = [
    "DEVICE_BOUND_IDLE_FRACTION",
    "LABELS",
    "label_of",
    "pct",
    "pcts",
    "run_bound",
    "step_bound",
]

#: idle below this share of the region: the device is the bottleneck (device-bound)
DEVICE_BOUND_IDLE_FRACTION = 0.15


LABELS = (
    "device-bound",
    "host-bound",
    "sync-bound",
    "input-bound",
    "dependency-bound",
    "undetermined",
)


_LABEL_OF_CAUSE = {
    "host": "host-bound",
    "sync": "sync-bound",
    "input": "input-bound",
    "dependency": "dependency-bound",
    "unattributed": "undetermined",
}


def _busy_fills(region_ns: int, busy_ns: int) -> bool:
    """Idle below the device-bound threshold: what is busy sets the pace."""
    return region_ns > 0 and region_ns - busy_ns < DEVICE_BOUND_IDLE_FRACTION * region_ns


def label_of(
    region_ns: int, busy_ns: int, idle: IdleByCause, *, asynchronous: bool = True
) -> tuple[str, str]:
    """(label, leading cause): device-bound below the idle threshold, else the leading cause.
    On a synchronous device (``asynchronous`` False: the CPU backend, whose "busy" is the
    host's own compute) never device-bound: below the threshold the host's compute sets the
    pace, host-bound."""
    by = idle.as_dict()
    leading = max(CAUSES, key=lambda c: (by[c], -CAUSES.index(c)))
    if region_ns <= 0:
        return "undetermined", leading
    if _busy_fills(region_ns, busy_ns):
        return ("device-bound" if asynchronous else "host-bound"), leading
    return _LABEL_OF_CAUSE[leading], leading


def pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else 0.0


def pcts(idle: IdleByCause, whole: int) -> dict[str, float]:
    """Each cause's idle time as a percentage of ``whole``."""
    return {c: pct(v, whole) for c, v in idle.as_dict().items()}


def step_bound(
    label: str,
    start: int,
    end: int,
    region: int,
    busy: int,
    idle: IdleByCause,
    evidence: BoundEvidence,
) -> StepBound:
    """A step's bound (of a trace or of a session's records): its share ``[start, end)``,
    ``region`` ns long, ``busy`` of them busy."""
    return StepBound(
        label=label,
        share_start_ns=start,
        share_end_ns=end,
        region_ns=region,
        busy_ns=busy,
        idle_ns=idle.total(),
        idle_ns_by_cause=idle,
        evidence=evidence,
    )


def run_bound(whole: StepBound, *, asynchronous: bool, clocks_disagree: bool = False) -> Bound:
    """A run's bound (of a trace or of a session's records): its whole region's, taken as one
    share, with advice (on a synchronous device whose host compute fills the region, the
    advice about that compute)."""
    run = Bound(
        label=whole.label,
        region_ns=whole.region_ns,
        busy_ns=whole.busy_ns,
        idle_ns=whole.idle_ns,
        idle_ns_by_cause=whole.idle_ns_by_cause,
        evidence=whole.evidence,
    )
    computes = not asynchronous and _busy_fills(run.region_ns, run.busy_ns)
    return msgspec.structs.replace(
        run,
        advice=advice_for(
            "device-bound" if computes else run.label,
            run,
            asynchronous=asynchronous,
            clocks_disagree=clocks_disagree,
        ),
    )
