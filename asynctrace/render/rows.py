"""What the table views show, decided once: whether a report's bound is shown and over what,
its figures as printed, the per-step figures' rows and the steps' rows.

The text report (and the exit summary), the HTML page and the TensorBoard summary lay these
out each in its own way; what a row holds, and whether it is there, is decided here, from the
report's own figures (nothing is computed: a share is the evidence's ``*_pct``, a step's
device share is its ``step_bounds`` entry, a withheld figure is in ``TraceFigures.withheld``).
Every duration is :func:`~asynctrace.records.units.format_ns`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

from asynctrace.analysis.accumulate import STEP_FIGURES, FigureStats
from asynctrace.records.units import format_ns

if TYPE_CHECKING:
    from asynctrace.analysis.bound import Bound, BoundEvidence, HostFrame
    from asynctrace.analysis.report import Report

__all__ = [
    "BoundView",
    "FigureRow",
    "IdleRow",
    "StepRow",
    "bound_scope",
    "bound_view",
    "evidence_parts",
    "figure_rows",
    "format_pct",
    "format_value",
    "shown_bound",
    "shown_figure_rows",
    "step_row",
    "withheld",
]


def withheld(report: Report, figure: str) -> bool:
    """Whether the analysis left ``figure`` out of the report
    (:data:`~asynctrace.analysis.report.CROSS_CLOCK_FIGURES`: the host and device clocks
    disagree); a session's report withholds none."""
    return report.trace is not None and figure in report.trace.withheld


def shown_bound(report: Report) -> Bound | None:
    """The bound every view shows, or None: a trace without device activity, or a synchronous
    device (the CPU backend), has no device timeline to show, and its headline says what the
    host spends its step on."""
    if report.bound is None or not report.source.asynchronous:
        return None
    if report.trace is not None and report.trace.activities.total == 0:
        return None
    return report.bound


def bound_scope(report: Report) -> str:
    """What the bound is over, as its line says: the whole trace, the run, a session or its
    last steps (a long session's summary judges its recent steps)."""
    if report.trace is None:
        n = len(report.steps)
        return f"last {n} steps" if 0 < n < report.source.events else "session"
    return "whole trace" if report.whole_trace else "run"


def format_pct(pct: float) -> str:
    """A share as every view prints it: one decimal."""
    return f"{pct:.1f}%"


def format_value(value: float, unit: str) -> str:
    """A per-step figure as printed: ns (:func:`format_ns`), bytes or a plain number, in a
    readable unit; ``-`` for NaN."""
    if math.isnan(value):
        return "-"
    if unit == "ns":
        return format_ns(value)
    if unit == "bytes":
        return _bytes(value)
    return f"{value:.2f}"


def _bytes(value: float) -> str:
    """``value`` bytes in the largest binary unit it reaches *as printed* (1023.96 KiB prints
    as ``1.0 MiB``)."""
    text, name = f"{value:.0f}", "B"
    for bigger, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if not abs(float(text)) >= 1024:
            break
        text, name = f"{value / scale:.1f}", bigger
    return f"{text} {name}"


class FigureRow(NamedTuple):
    """One per-step figure as printed: its label, mean, median, p90, and the steps that had
    it."""

    label: str
    mean: str
    median: str
    p90: str
    steps: str


#: figures whose row is left out where every step had zero: a row of zeros is noise, the
#: diagnosis says what matters
_QUIET_WHEN_ZERO = frozenset(("data_wait_ns", "sync_count", "sync_wait_ns"))


def figure_rows(figures: Mapping[str, FigureStats | None]) -> list[FigureRow]:
    """The rows of the per-step figures table, in :data:`STEP_FIGURES` order, for every
    figure of ``figures`` (``Report.figures``: by :class:`~asynctrace.records.StepRecord`
    field) that some step had."""
    rows = []
    for fig in STEP_FIGURES:
        s = figures.get(fig.field)
        if s is None or (fig.field in _QUIET_WHEN_ZERO and s.mean == 0):
            continue
        rows.append(
            FigureRow(
                fig.label,
                format_value(s.mean, fig.unit),
                format_value(s.median, fig.unit),
                format_value(s.p90, fig.unit),
                str(s.count),
            )
        )
    return rows


def shown_figure_rows(report: Report) -> list[FigureRow]:
    """The per-step figures table as every view shows it: :func:`figure_rows` of the report,
    none for a trace judged as one step (its steps table shows that step's figures)."""
    return [] if report.whole_trace else figure_rows(report.figures)


class StepRow(NamedTuple):
    """One step as printed. ``gpu_busy`` and ``gpu_idle`` are its share of the device timeline
    where the analysis gave it one (a trace's ``step_bounds``; a session's are estimated, not
    measured: "-"); ``queue_max`` is a trace's where its queue depth is not withheld;
    ``bound`` the step's label."""

    step: str
    frontend: str
    data_wait: str
    device: str
    gpu_busy: str
    gpu_idle: str
    sync_wait: str
    syncs: str
    run_ahead: str
    queue_max: str
    in_flight: str
    bound: str


def step_row(report: Report, i: int) -> StepRow:
    """The ``i``-th step of ``report`` (:class:`StepRow`)."""
    st = report.steps[i]
    share = report.step_bounds[i] if i < len(report.step_bounds) else None
    extra = report.trace.steps[i] if report.trace is not None else None
    return StepRow(
        step=str(st.step),
        frontend=format_ns(st.frontend_ns),
        data_wait=format_ns(st.data_wait_ns),
        device=format_ns(st.device_ns),
        gpu_busy=format_ns(share.busy_ns if share is not None else None),
        gpu_idle=format_ns(share.idle_ns if share is not None else None),
        sync_wait=format_ns(st.sync_wait_ns),
        syncs=str(st.sync_count),
        # None where the analysis withheld it (the clocks disagree)
        run_ahead=format_ns(st.run_ahead_ns),
        queue_max=str(extra.queue_max)
        if extra is not None and not withheld(report, "queue depth")
        else "-",
        in_flight=str(st.in_flight),
        bound=share.label if share is not None else "-",
    )


def evidence_parts(e: BoundEvidence) -> list[str]:
    """The evidence line's parts as plain text (the text report joins them with "; ", the
    HTML report too): launch gaps and host work, blocked at the cap, sync wait and cost, data
    wait."""
    detail = []
    if e.launch_gaps or e.host_work_gaps:
        detail.append(
            f"host idle: {e.launch_gaps} launch gaps ({format_ns(e.launch_gaps_ns)}), "
            f"{e.host_work_gaps} host-work gaps ({format_ns(e.host_work_ns)})"
        )
    if e.blocked_at_cap_ns:
        detail.append(f"host blocked at the queue cap {format_ns(e.blocked_at_cap_ns)}")
    if e.sync_wait_ns or e.sync_cost_pct:
        detail.append(
            f"sync wait {format_ns(e.sync_wait_ns)} ({format_pct(e.sync_wait_pct)}), "
            f"syncs cost {format_pct(e.sync_cost_pct)}"
        )
    if e.data_wait_ns:
        detail.append(f"data wait {format_ns(e.data_wait_ns)}")
    return detail


class IdleRow(NamedTuple):
    """One idle cause of the bound: its name, time (ns, to order by; and as printed) and
    share of the region, as printed."""

    cause: str
    ns: int
    time: str
    share: str


class BoundView(NamedTuple):
    """The bound's figures as every view prints them."""

    label: str
    #: " (estimated from step records)" or ""
    estimated: str
    scope: str
    busy: str
    region: str
    busy_share: str
    idle: str
    #: every cause, in :data:`~asynctrace.analysis.bound.CAUSES` order
    idle_by_cause: list[IdleRow]
    evidence: list[str]
    leading_cause: str
    #: the host frames that ran while the device was idle (its leading cause), most first
    host_frames: list[HostFrame]
    notes: list[str]


def bound_view(b: Bound, *, scope: str) -> BoundView:
    """:class:`BoundView` of ``b`` over ``scope`` (:func:`bound_scope`)."""
    from asynctrace.analysis.bound import CAUSES

    e = b.evidence
    by = b.idle_ns_by_cause.as_dict()
    return BoundView(
        label=b.label,
        estimated=" (estimated from step records)" if e.estimated else "",
        scope=scope,
        busy=format_ns(b.busy_ns),
        region=format_ns(b.region_ns),
        busy_share=format_pct(e.busy_pct),
        idle=format_ns(b.idle_ns),
        idle_by_cause=[
            IdleRow(c, by[c], format_ns(by[c]), format_pct(e.idle_pct_by_cause.get(c, 0.0)))
            for c in CAUSES
        ],
        evidence=evidence_parts(e),
        leading_cause=e.leading_cause,
        host_frames=[f for f in e.host_frames if f.frame != "(no host frame)"],
        notes=list(e.notes),
    )
