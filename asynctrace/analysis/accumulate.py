"""The per-step figures of a run, accumulated one step at a time (pure; no torch).

A live session and a records file read back give the same summary because both go through
:class:`StepAccumulator`: means over every step, medians and nearest-rank p90s over the most
recent ``window`` steps (bounded memory however long the run), and the verdict over those
steps. :func:`asynctrace.analysis.report.session_report` turns it into the
:class:`~asynctrace.analysis.report.Report` that the exit summary prints and
``asynctrace run --json`` writes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

import msgspec

from asynctrace.analysis._bound_model import Bound, WarmUp
from asynctrace.analysis._quantiles import median, nearest_rank
from asynctrace.analysis.diagnosis import sync_cost_fraction
from asynctrace.analysis.warmup import WARMUP_MAX_STEPS, warmup_of_steps
from asynctrace.records import Note, StepRecord, SyncSite

if TYPE_CHECKING:
    from asynctrace.analysis.verdict import Verdict

__all__ = [
    "CPU_NOTE",
    "PHASE_FIGURES",
    "STEP_FIGURES",
    "FigureStats",
    "StepAccumulator",
    "StepFigure",
    "figure_value",
    "warmup_in_window",
]

CPU_NOTE: Final = Note(
    code="cpu-synchronous",
    text="the CPU backend executes synchronously: each op is done when Python gets control "
    "back, so device time equals frontend time and run-ahead and in-flight are zero",
)


#: leading steps an accumulator keeps to look for warm-up in (the warm-up and the step after)
_WARMUP_KEEP: Final = WARMUP_MAX_STEPS + 1


class StepFigure(msgspec.Struct, frozen=True):
    """One per-step figure of :class:`~asynctrace.records.StepRecord`."""

    #: the StepRecord field
    field: str
    #: as tables show it
    label: str
    #: "ns", "bytes", "steps" or "count"
    unit: str
    #: a phase of ``StepRecord.phases_ns`` (the figure is that phase's ns; ``field`` names it
    #: in summaries and reports), or None for a plain record field
    phase: str | None = None


def figure_value(rec: StepRecord, fig: StepFigure) -> int | None:
    """``fig``'s value in one step record (None where the step has none)."""
    if fig.phase is None:
        value: int | None = getattr(rec, fig.field)
        return value
    phases = rec.phases_ns
    return None if phases is None else int(getattr(phases, fig.phase))


#: every per-step figure, in the order tables show them
STEP_FIGURES: Final = (
    StepFigure("frontend_ns", "frontend", "ns"),
    StepFigure("data_wait_ns", "data wait", "ns"),
    StepFigure("device_ns", "device", "ns"),
    StepFigure("run_ahead_ns", "run-ahead", "ns"),
    StepFigure("in_flight", "in flight", "steps"),
    StepFigure("sync_count", "syncs", "count"),
    StepFigure("sync_wait_ns", "sync wait", "ns"),
    StepFigure("mem_allocated_bytes", "mem allocated", "bytes"),
    StepFigure("mem_reserved_bytes", "mem reserved", "bytes"),
    # the host time by phase (the data phase is data_wait_ns, above)
    StepFigure("phase_forward_ns", "forward", "ns", "forward"),
    StepFigure("phase_backward_ns", "backward", "ns", "backward"),
    StepFigure("phase_optimizer_ns", "optimizer", "ns", "optimizer"),
    StepFigure("phase_other_ns", "other", "ns", "other"),
)
#: the phase figures of STEP_FIGURES, by phase
PHASE_FIGURES: Final = tuple(f for f in STEP_FIGURES if f.phase is not None)


class FigureStats(msgspec.Struct, frozen=True, kw_only=True):
    """One per-step figure summarized over a run."""

    #: steps that had a value (device figures are missing where they could not be collected)
    count: int
    #: mean over every step of the run
    mean: float
    #: the sum over those steps, exact (``mean × count`` as an integer; 0 in reports of
    #: before it)
    total: int = 0
    #: median and nearest-rank 90th percentile (an observed value, as ``asynctrace report``
    #: computes it) over the last ``window_steps`` steps
    median: float
    p90: float
    window_steps: int


def warmup_in_window(warmup_steps: int, *, seen: int, kept: int) -> int:
    """How many of a run's ``kept`` most recent steps of ``seen`` are warm-up, where the warm-up
    is its ``warmup_steps`` leading steps: those still in the window (a live summary longer than
    its window never kept the steps before it, warm-up included). The one rule of which kept
    steps are warm-up: the accumulator's bound and a comparison's steady steps."""
    return min(kept, max(0, warmup_steps - (seen - kept)))


class StepAccumulator:
    """Running sums of every figure and the last ``window`` steps; :meth:`add` once a step."""

    # one slot per sum: add() runs once per step of the user's loop, and an attribute is the
    # cheapest place to add to (a dict item costs twice as much)
    __slots__ = (
        "data_wait_sum",
        "device_sum",
        "first",
        "frontend_sum",
        "in_flight_sum",
        "mem_allocated_sum",
        "mem_reserved_sum",
        "n_device",
        "n_mem_allocated",
        "n_mem_reserved",
        "n_phases",
        "n_run_ahead",
        "phase_sums",
        "recent",
        "run_ahead_sum",
        "steps",
        "sync_count_sum",
        "sync_wait_sum",
        "window",
    )

    def __init__(self, *, window: int) -> None:
        self.window = window
        #: steps added
        self.steps = 0
        #: the most recent steps (at most ``window``), oldest first
        self.recent: deque[StepRecord] = deque(maxlen=window)
        #: the first steps (at most WARMUP_MAX_STEPS), where warm-up is looked for
        self.first: list[StepRecord] = []
        self.frontend_sum = self.data_wait_sum = self.in_flight_sum = 0
        self.sync_count_sum = self.sync_wait_sum = 0
        self.device_sum = self.run_ahead_sum = self.mem_allocated_sum = self.mem_reserved_sum = 0
        # steps that had each optional figure (a device that could not measure leaves it out)
        self.n_device = self.n_run_ahead = self.n_mem_allocated = self.n_mem_reserved = 0
        # forward, backward, optimizer, other: over the steps that have phases
        self.phase_sums = [0, 0, 0, 0]
        self.n_phases = 0

    def add(self, rec: StepRecord) -> None:
        self.recent.append(rec)
        if self.steps < _WARMUP_KEEP:
            self.first.append(rec)
        self.steps += 1
        self.frontend_sum += rec.frontend_ns
        self.data_wait_sum += rec.data_wait_ns
        self.in_flight_sum += rec.in_flight
        self.sync_count_sum += rec.sync_count
        self.sync_wait_sum += rec.sync_wait_ns
        v = rec.device_ns
        if v is not None:
            self.device_sum += v
            self.n_device += 1
        v = rec.run_ahead_ns
        if v is not None:
            self.run_ahead_sum += v
            self.n_run_ahead += 1
        v = rec.mem_allocated_bytes
        if v is not None:
            self.mem_allocated_sum += v
            self.n_mem_allocated += 1
        v = rec.mem_reserved_bytes
        if v is not None:
            self.mem_reserved_sum += v
            self.n_mem_reserved += 1
        ph = rec.phases_ns
        if ph is not None:
            sums = self.phase_sums
            sums[0] += ph.forward
            sums[1] += ph.backward
            sums[2] += ph.optimizer
            sums[3] += ph.other
            self.n_phases += 1

    def _sum_and_count(self, field: str) -> tuple[int, int]:
        return {
            "frontend_ns": (self.frontend_sum, self.steps),
            "data_wait_ns": (self.data_wait_sum, self.steps),
            "in_flight": (self.in_flight_sum, self.steps),
            "sync_count": (self.sync_count_sum, self.steps),
            "sync_wait_ns": (self.sync_wait_sum, self.steps),
            "device_ns": (self.device_sum, self.n_device),
            "run_ahead_ns": (self.run_ahead_sum, self.n_run_ahead),
            "mem_allocated_bytes": (self.mem_allocated_sum, self.n_mem_allocated),
            "mem_reserved_bytes": (self.mem_reserved_sum, self.n_mem_reserved),
            "phase_forward_ns": (self.phase_sums[0], self.n_phases),
            "phase_backward_ns": (self.phase_sums[1], self.n_phases),
            "phase_optimizer_ns": (self.phase_sums[2], self.n_phases),
            "phase_other_ns": (self.phase_sums[3], self.n_phases),
        }[field]

    def extend(self, records: Iterable[StepRecord]) -> StepAccumulator:
        for rec in records:
            self.add(rec)
        return self

    def figures(self) -> dict[str, FigureStats | None]:
        """Each figure's statistics (None for a figure no step had)."""
        out: dict[str, FigureStats | None] = {}
        for fig in STEP_FIGURES:
            total, count = self._sum_and_count(fig.field)
            if count == 0:
                out[fig.field] = None
                continue
            values = sorted(v for r in self.recent if (v := figure_value(r, fig)) is not None)
            out[fig.field] = FigureStats(
                count=count,
                mean=total / count,
                total=total,
                median=float(median(values)) if values else math.nan,
                p90=nearest_rank(values, 90) if values else math.nan,
                window_steps=len(values),
            )
        return out

    def verdict(
        self,
        *,
        asynchronous: bool,
        sync_sites: list[SyncSite],
        sync_detection: str | None = None,
        bound: Bound | None = None,
    ) -> tuple[str, str, list[str]]:
        """(code, message, findings) of the verdict over the recent steps (:meth:`judge`)."""
        v = self.judge(
            asynchronous=asynchronous,
            sync_sites=sync_sites,
            sync_detection=sync_detection,
            bound=bound,
        )
        return v.code, v.message, list(v.findings)

    def judge(
        self,
        *,
        asynchronous: bool,
        sync_sites: list[SyncSite],
        sync_detection: str | None = None,
        bound: Bound | None = None,
    ) -> Verdict:
        """The verdict over the recent steps. Syncs are judged by what they cost where the
        session measured their wait (the CUDA detector on an asynchronous device): the sync
        idle of the bound (``bound``, else :meth:`bound`'s), as the diagnosis ranks them; the
        lint's cost is unknown, so there they are judged by count."""
        from asynctrace.analysis.verdict import judge_steps

        steps = list(self.recent)
        cost: float | None = None
        if asynchronous and sync_detection == "cuda":
            b = bound if bound is not None else self.bound(asynchronous=asynchronous)
            cost = sync_cost_fraction(b)
        return judge_steps(
            steps, asynchronous=asynchronous, sync_sites=sync_sites, sync_cost_fraction=cost
        )

    def warmup(self) -> WarmUp | None:
        """The session's warm-up: its leading steps far slower than the median step
        (:func:`~asynctrace.analysis.warmup.warmup_of_steps`); None where there is none."""
        if len(self.recent) < 2:
            return None
        values = sorted(r.frontend_ns for r in self.recent)
        return warmup_of_steps(self.first, median_ns=float(median(values)))

    def bound(self, *, asynchronous: bool, warmup: WarmUp | None = None) -> Bound | None:
        """What bounds the recent steps (less the warm-up steps ``warmup`` leaves out),
        estimated from their records; None without steps. On a synchronous device the host's
        own compute sets the pace: never ``device-bound``, which is about a device."""
        if not self.recent:
            return None
        from asynctrace.analysis.records_bound import bound_of_records

        recent = list(self.recent)
        if warmup is not None:
            drop = warmup_in_window(warmup.steps, seen=self.steps, kept=len(recent))
            recent = recent[drop:] or recent
        # the run's figures only: a summary of 10^6 steps needs no 10^6 per-step objects
        return bound_of_records(recent, asynchronous=asynchronous, per_step=False).run

    def notes(self, *, asynchronous: bool, verdict: str) -> list[Note]:
        """What the summary says about how its figures were made."""
        notes = []
        if not asynchronous and verdict != "cpu-synchronous":
            # said once: a "cpu-synchronous" verdict already is this note
            notes.append(CPU_NOTE)
        if self.steps > self.window:
            notes.append(
                Note(
                    code="recent-window",
                    text=f"median and p90 are over the last {self.window} of {self.steps} "
                    "steps; means over all of them",
                )
            )
        return notes
