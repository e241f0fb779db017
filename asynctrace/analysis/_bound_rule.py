"""The label rule the trace bound and the records bound share (asynctrace.analysis.bound's
docstring defines it): the threshold, the labels, a step's and a run's bound from its figures."""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

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
    "labels_of",
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


I64 = npt.NDArray[np.int64]

#: LABELS index of each cause's label (CAUSES order: host, sync, input, dependency,
#: unattributed)
_LABEL_OF_CAUSE = np.array([1, 2, 3, 4, 5], np.intp)
_DEVICE, _HOST, _UNDETERMINED = 0, 1, 5
_I64 = np.iinfo(np.int64)


def _busy_fills(region_ns: int, busy_ns: int) -> bool:
    """Idle below the device-bound threshold: what is busy sets the pace."""
    return region_ns > 0 and region_ns - busy_ns < DEVICE_BOUND_IDLE_FRACTION * region_ns


def labels_of(
    region_ns: I64, busy_ns: I64, idle: I64, *, asynchronous: bool = True
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Each share's (label, leading cause), as indices in :data:`LABELS` and :data:`CAUSES`,
    over columns (``idle``: (k, n), the first k causes' idle, the rest none): the leading
    cause is the one with most idle (ties to the earlier); device-bound below the idle
    threshold, else the leading cause's label; undetermined without a region. On a
    synchronous device (``asynchronous`` False: the CPU backend, whose "busy" is the host's
    own compute) never device-bound: below the threshold the host's compute sets the pace,
    host-bound."""
    lead = np.argmax(idle, axis=0) if len(idle) else np.zeros(len(region_ns), np.intp)
    fills = (region_ns - busy_ns) < DEVICE_BOUND_IDLE_FRACTION * region_ns.astype(np.float64)
    label = np.where(
        region_ns <= 0,
        _UNDETERMINED,
        np.where(fills, _DEVICE if asynchronous else _HOST, _LABEL_OF_CAUSE[lead]),
    )
    return label.astype(np.intp), lead.astype(np.intp)


def label_of(
    region_ns: int, busy_ns: int, idle: IdleByCause, *, asynchronous: bool = True
) -> tuple[str, str]:
    """(label, leading cause) of one share: :func:`labels_of` (figures beyond int64, from a
    hostile file, saturate: such a share is not device-bound either way)."""

    def col(*v: int) -> I64:
        return np.array([max(min(x, int(_I64.max)), int(_I64.min)) for x in v], np.int64)

    by = col(*idle.as_dict().values())[:, None]
    label, lead = labels_of(col(region_ns), col(busy_ns), by, asynchronous=asynchronous)
    return LABELS[int(label[0])], CAUSES[int(lead[0])]


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
