"""Per-step series, downsampled for drawing: a long run's steps in at most ``max_bins`` bins.

A run of 10⁶ steps cannot be drawn step by step (a bar or a marker each: minutes and gigabytes
in matplotlib, and a picture no one can read). Consecutive steps are grouped into bins of equal
size; each bin keeps its **envelope** — the smallest, median and largest value of each figure
in it — so a spike of one step in a million still shows as the bin's maximum, and the median
line shows the typical step. A run with no more steps than ``max_bins`` gets bins of one step:
its envelope is its values. Pure functions of the records; the renderers draw what is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from asynctrace.analysis._bound_model import CAUSES, StepBound
from asynctrace.records import StepRecord

__all__ = [
    "MAX_BINS",
    "RECORD_SERIES",
    "Bins",
    "BoundSeries",
    "Envelope",
    "StepSeries",
    "bin_size",
    "bound_series",
    "envelope",
    "issuing_ns",
    "steps_series",
]

#: Bins a series is drawn in at most: about one per pixel column of a wide picture.
MAX_BINS = 2000

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Envelope:
    """One figure over the bins: smallest, median and largest value of each bin (NaN where a
    bin has no value, e.g. steps without device figures), and how many values each holds."""

    lo: F64
    median: F64
    hi: F64
    count: I64


@dataclass(frozen=True)
class Bins:
    """A run's steps in bins of ``bin_steps`` consecutive steps (the last bin may hold fewer):
    what :class:`StepSeries` and :class:`BoundSeries` say of their bins."""

    #: steps in the run
    steps: int
    #: steps per bin; 1 where the run is drawn step by step
    bin_steps: int
    #: the step number of each bin's first and last step
    first_step: I64
    last_step: I64

    @property
    def bins(self) -> int:
        return len(self.first_step)

    @property
    def downsampled(self) -> bool:
        return self.bin_steps > 1


@dataclass(frozen=True)
class StepSeries(Bins):
    """A run's per-step figures in bins: per bin, each figure's envelope."""

    #: figure name -> its envelope; times in ns, counts as they are
    figures: dict[str, Envelope]


def bin_size(n: int, *, max_bins: int = MAX_BINS) -> int:
    """Steps per bin so that ``n`` steps fit in at most ``max_bins`` bins."""
    if max_bins < 1:
        raise ValueError(f"max_bins must be at least 1, not {max_bins}")
    return max(1, -(-n // max_bins))


def envelope(values: Sequence[float] | F64, bin_steps: int) -> Envelope:
    """Min, median and max of ``values`` over consecutive bins of ``bin_steps`` values (NaN is
    a missing value: left out, and a bin of only NaN has NaN figures and count 0)."""
    v = np.asarray(values, dtype=np.float64)
    n = len(v)
    k = max(1, bin_steps)
    bins = -(-n // k)
    padded = np.full(bins * k, np.nan)
    padded[:n] = v
    rows = np.sort(padded.reshape(bins, k), axis=1)  # NaN sorts last
    count = np.count_nonzero(~np.isnan(rows), axis=1).astype(np.int64)
    has = count > 0
    safe = np.maximum(count, 1)
    lo = np.where(has, rows[:, 0], np.nan)
    hi = np.where(has, np.take_along_axis(rows, (safe - 1)[:, None], axis=1)[:, 0], np.nan)
    below = np.take_along_axis(rows, ((safe - 1) // 2)[:, None], axis=1)[:, 0]
    above = np.take_along_axis(rows, (safe // 2)[:, None], axis=1)[:, 0]
    median = np.where(has, (below + above) / 2, np.nan)
    return Envelope(lo=lo, median=median, hi=hi, count=count)


def issuing_ns(frontend_ns: F64, data_wait_ns: F64, sync_wait_ns: F64) -> F64:
    """:attr:`StepRecord.issuing_ns <asynctrace.records.StepRecord.issuing_ns>` over columns
    of steps (a property read per record costs a long run's series half as much again)."""
    out: F64 = np.maximum(frontend_ns - data_wait_ns - sync_wait_ns, 0.0)
    return out


#: the figures :func:`steps_series` bins, from each step record
RECORD_SERIES = (
    "frontend_ns",
    "issuing_ns",
    "data_wait_ns",
    "sync_wait_ns",
    "device_ns",
    "run_ahead_ns",
    "in_flight",
)


def steps_series(steps: Sequence[StepRecord], *, max_bins: int = MAX_BINS) -> StepSeries:
    """The run's per-step figures (:data:`RECORD_SERIES`; ``issuing_ns`` is
    :func:`issuing_ns`) in at most ``max_bins`` bins."""
    n = len(steps)
    k = bin_size(n, max_bins=max_bins)

    names = [name for name in RECORD_SERIES if name != "issuing_ns"]
    # one C-level pass over the records; numpy reads None as NaN in a float array
    rows = np.array(list(map(attrgetter("step", *names), steps)), dtype=np.float64)
    rows = rows.reshape(n, len(names) + 1)
    cols = {name: rows[:, i + 1].copy() for i, name in enumerate(names)}
    cols["issuing_ns"] = issuing_ns(cols["frontend_ns"], cols["data_wait_ns"], cols["sync_wait_ns"])
    # step numbers exactly (a float holds integers exactly only to 2**53)
    number = np.fromiter(map(attrgetter("step"), steps), dtype=np.int64, count=n)
    del rows
    return StepSeries(
        steps=n,
        bin_steps=k,
        first_step=number[::k].copy(),
        last_step=number[np.minimum(np.arange(1, -(-n // k) + 1) * k, n) - 1],
        figures={name: envelope(cols[name], k) for name in RECORD_SERIES},
    )


@dataclass(frozen=True)
class BoundSeries(Bins):
    """Each step's share of the device timeline — busy, and idle by cause — in bins of
    ``bin_steps`` consecutive steps: per bin, the **mean** step's figures (ns), so that a bin's
    parts add up to its mean share as each step's add up to its share. A run with no more steps
    than the bins gets bins of one step: its figures are the steps' own."""

    #: the bin's mean share (busy + idle) and busy time
    share_ns: F64
    busy_ns: F64
    #: cause (:data:`~asynctrace.analysis.bound.CAUSES`) -> the bin's mean idle of that cause
    idle_ns: dict[str, F64]
    #: the run's label ("host-bound", ...), and whether the figures are estimated (records)
    label: str
    estimated: bool


def bound_series(
    bounds: Sequence[StepBound] | npt.NDArray[np.int64],
    numbers: Sequence[int],
    *,
    label: str,
    estimated: bool = False,
    max_bins: int = MAX_BINS,
) -> BoundSeries:
    """The steps' bounds (``report.step_bounds``, ``bound_of_records(...).steps``, or their
    columns: ``bound_columns_of_records``) with their step numbers, in at most ``max_bins``
    bins (bin means, see :class:`BoundSeries`)."""
    n = len(bounds)
    if len(numbers) != n:
        raise ValueError(f"{n} step bounds but {len(numbers)} step numbers")
    k = bin_size(n, max_bins=max_bins)
    if isinstance(bounds, np.ndarray):
        cols = bounds.astype(np.float64).reshape(n, 2 + len(CAUSES))
    else:
        cols = np.array(
            [
                (b.region_ns, b.busy_ns, *(getattr(b.idle_ns_by_cause, c) for c in CAUSES))
                for b in bounds
            ],
            dtype=np.float64,
        ).reshape(n, 2 + len(CAUSES))
    heads = np.arange(0, n, k)
    if n:
        sums = np.add.reduceat(cols, heads, axis=0)
        counts = np.diff(np.r_[heads, n]).astype(np.float64)
        means = sums / counts[:, None]
    else:
        means = np.zeros((0, 2 + len(CAUSES)))
    number = np.asarray(numbers, dtype=np.int64).reshape(n)
    return BoundSeries(
        steps=n,
        bin_steps=k,
        first_step=number[heads].copy(),
        last_step=number[np.minimum(heads + k, n) - 1] if n else number[:0].copy(),
        share_ns=means[:, 0].copy(),
        busy_ns=means[:, 1].copy(),
        idle_ns={c: means[:, 2 + i].copy() for i, c in enumerate(CAUSES)},
        label=label,
        estimated=estimated,
    )
