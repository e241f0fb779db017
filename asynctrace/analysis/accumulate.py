"""The per-step figures of a run, accumulated one step at a time (pure; no torch).

A live session and a records file read back give the same summary because both go through
:class:`StepAccumulator`: means over every step, medians and nearest-rank p90s over the most
recent ``window`` steps (bounded memory however long the run), and the verdict over those
steps. :func:`session_report` turns it into the :class:`SessionReport` that the exit summary
prints and ``asynctrace run --json`` writes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

from asynctrace.analysis._bound_model import Bound
from asynctrace.records import SessionHeader, StepRecord, SyncSite

__all__ = [
    "CPU_NOTE",
    "STEP_FIGURES",
    "FigureStats",
    "SessionReport",
    "StepAccumulator",
    "StepFigure",
    "nearest_rank",
    "session_report",
]

CPU_NOTE: Final = (
    "the CPU backend executes synchronously: each op is done when Python gets control back, "
    "so device time equals frontend time and run-ahead and in-flight are zero"
)


class StepFigure(msgspec.Struct, frozen=True):
    """One per-step figure of :class:`~asynctrace.records.StepRecord`."""

    #: the StepRecord field
    field: str
    #: as tables show it
    label: str
    #: "ns", "bytes", "steps" or "count"
    unit: str


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
)


#: the figures a step may lack (None where the device could not measure them)
_OPTIONAL: Final = ("device_ns", "run_ahead_ns", "mem_allocated_bytes", "mem_reserved_bytes")


class FigureStats(msgspec.Struct, frozen=True, kw_only=True):
    """One per-step figure summarized over a run."""

    #: steps that had a value (device figures are missing where they could not be collected)
    count: int
    #: mean over every step of the run
    mean: float
    #: median and nearest-rank 90th percentile (an observed value, as ``asynctrace report``
    #: computes it) over the last ``window_steps`` steps
    median: float
    p90: float
    window_steps: int


def nearest_rank(sorted_values: Sequence[int], p: int) -> int:
    """The value at 1-based rank ``ceil(p/100 · n)`` of sorted values (integer arithmetic)."""
    n = len(sorted_values)
    return sorted_values[max(-(-p * n // 100), 1) - 1]


def _median(sorted_values: Sequence[int]) -> float:
    n = len(sorted_values)
    mid = n // 2
    if n % 2:
        return float(sorted_values[mid])
    return (sorted_values[mid - 1] + sorted_values[mid]) / 2


class StepAccumulator:
    """Running sums of every figure and the last ``window`` steps; :meth:`add` once a step."""

    def __init__(self, *, window: int) -> None:
        self.window = window
        #: steps added
        self.steps = 0
        #: the most recent steps (at most ``window``), oldest first
        self.recent: deque[StepRecord] = deque(maxlen=window)
        self._sums = dict.fromkeys((f.field for f in STEP_FIGURES), 0)
        # steps that had each optional figure (a device that could not measure leaves it out)
        self._counts = dict.fromkeys(_OPTIONAL, 0)

    def add(self, rec: StepRecord) -> None:
        # unrolled over STEP_FIGURES: this runs once per step of the user's loop
        self.recent.append(rec)
        self.steps += 1
        s = self._sums
        s["frontend_ns"] += rec.frontend_ns
        s["data_wait_ns"] += rec.data_wait_ns
        s["in_flight"] += rec.in_flight
        s["sync_count"] += rec.sync_count
        s["sync_wait_ns"] += rec.sync_wait_ns
        n = self._counts
        v = rec.device_ns
        if v is not None:
            s["device_ns"] += v
            n["device_ns"] += 1
        v = rec.run_ahead_ns
        if v is not None:
            s["run_ahead_ns"] += v
            n["run_ahead_ns"] += 1
        v = rec.mem_allocated_bytes
        if v is not None:
            s["mem_allocated_bytes"] += v
            n["mem_allocated_bytes"] += 1
        v = rec.mem_reserved_bytes
        if v is not None:
            s["mem_reserved_bytes"] += v
            n["mem_reserved_bytes"] += 1

    def extend(self, records: Iterable[StepRecord]) -> StepAccumulator:
        for rec in records:
            self.add(rec)
        return self

    def _count(self, field: str) -> int:
        return self._counts.get(field, self.steps)

    def figures(self) -> dict[str, FigureStats | None]:
        """Each figure's statistics (None for a figure no step had)."""
        out: dict[str, FigureStats | None] = {}
        for fig in STEP_FIGURES:
            count = self._count(fig.field)
            if count == 0:
                out[fig.field] = None
                continue
            values = sorted(v for r in self.recent if (v := getattr(r, fig.field)) is not None)
            out[fig.field] = FigureStats(
                count=count,
                mean=self._sums[fig.field] / count,
                median=_median(values) if values else math.nan,
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
    ) -> tuple[str, str, list[str]]:
        """(code, message, findings) of the verdict over the recent steps. Syncs are judged by
        cost where the session measured their wait (the CUDA detector on an asynchronous
        device); the lint's cost is unknown, so there they are judged by count."""
        from asynctrace.analysis.verdict import WINDOW_STEPS, judge_steps

        steps = list(self.recent)
        cost: float | None = None
        if asynchronous and sync_detection == "cuda":
            tail = steps[-WINDOW_STEPS:]
            frontend = sum(s.frontend_ns for s in tail)
            cost = sum(s.sync_wait_ns for s in tail) / frontend if frontend else 0.0
        v = judge_steps(
            steps, asynchronous=asynchronous, sync_sites=sync_sites, sync_cost_fraction=cost
        )
        return v.code, v.message, list(v.findings)

    def bound(self, *, asynchronous: bool) -> Bound | None:
        """What bounds the recent steps, estimated from their records; None without steps."""
        if not self.recent:
            return None
        from asynctrace.analysis.bound import bound_of_records

        # the run's figures only: a summary of 10^6 steps needs no 10^6 per-step objects
        return bound_of_records(list(self.recent), asynchronous=asynchronous, per_step=False).run

    def notes(self, *, asynchronous: bool, verdict: str) -> list[str]:
        """What the summary says about how its figures were made."""
        notes = []
        if not asynchronous and verdict != "cpu-synchronous":
            # said once: a "cpu-synchronous" verdict already is this note
            notes.append(CPU_NOTE)
        if self.steps > self.window:
            notes.append(
                f"median and p90 are over the last {self.window} of {self.steps} steps; means "
                "over all of them"
            )
        return notes


class SessionReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a session measured: the figures its printed summary shows, as an object."""

    name: str
    device_kind: str
    device_name: str
    asynchronous: bool
    steps: int
    wall_ns: int
    collected_at_exit: int
    frontend_ns: FigureStats | None
    data_wait_ns: FigureStats | None
    device_ns: FigureStats | None
    run_ahead_ns: FigureStats | None
    in_flight: FigureStats | None
    sync_count: FigureStats | None
    sync_wait_ns: FigureStats | None
    mem_allocated_bytes: FigureStats | None
    mem_reserved_bytes: FigureStats | None
    verdict: str
    verdict_message: str
    findings: list[str] = msgspec.field(default_factory=list)
    #: what bounds the recent steps (estimated from their records: ``evidence.estimated``),
    #: with its evidence and one next step; None without steps
    bound: Bound | None = None
    sync_sites: list[SyncSite] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    error: str | None = None
    records_path: str | None = None

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, data: str | bytes) -> SessionReport:
        return msgspec.json.decode(data, type=cls)


def session_report(
    acc: StepAccumulator,
    *,
    header: SessionHeader,
    wall_ns: int,
    collected_at_exit: int,
    sync_sites: list[SyncSite],
    notes: Sequence[str] = (),
    error: str | None = None,
    records_path: str | None = None,
    judge: bool = True,
) -> SessionReport:
    """The summary of a run from its accumulated steps (pure). ``notes`` come first, then what
    the accumulator says about its own figures. ``judge=False``: no verdict and no bound (the
    figures alone, where judging failed)."""
    code, message, findings = (
        acc.verdict(
            asynchronous=header.asynchronous,
            sync_sites=sync_sites,
            sync_detection=header.sync_detection,
        )
        if judge
        else ("", "", [])
    )
    figures = acc.figures()
    bound = acc.bound(asynchronous=header.asynchronous) if judge else None
    return SessionReport(
        name=header.name,
        device_kind=header.device_kind,
        device_name=header.device_name,
        asynchronous=header.asynchronous,
        steps=acc.steps,
        wall_ns=wall_ns,
        collected_at_exit=collected_at_exit,
        frontend_ns=figures["frontend_ns"],
        data_wait_ns=figures["data_wait_ns"],
        device_ns=figures["device_ns"],
        run_ahead_ns=figures["run_ahead_ns"],
        in_flight=figures["in_flight"],
        sync_count=figures["sync_count"],
        sync_wait_ns=figures["sync_wait_ns"],
        mem_allocated_bytes=figures["mem_allocated_bytes"],
        mem_reserved_bytes=figures["mem_reserved_bytes"],
        verdict=code,
        verdict_message=message,
        findings=findings,
        bound=bound,
        sync_sites=list(sync_sites),
        notes=[*notes, *acc.notes(asynchronous=header.asynchronous, verdict=code)],
        error=error,
        records_path=records_path,
    )
