"""Rich text tables for a :class:`~asynctrace.analysis.report.Report` of a trace or of a
session (its records, or its live summary: the exit summary prints this), formatting only.

The sections are plain text made by one function each (:func:`title_text`,
:func:`~asynctrace.render.diagnosis.diagnosis_text`, :func:`bound_text`, :func:`figure_rows`,
:func:`site_rows`, :func:`known_fix_lines`, :func:`more_sites_text`); this module prints them
as rich text, and the TensorBoard summary (:mod:`asynctrace.export.tensorboard`) wraps the
same ones in Markdown.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asynctrace.analysis.accumulate import STEP_FIGURES, FigureStats
from asynctrace.analysis.bound import Bound, BoundEvidence
from asynctrace.analysis.diagnosis import Finding
from asynctrace.analysis.report import Report, TraceFigures
from asynctrace.records import SyncSite
from asynctrace.records.units import format_ns
from asynctrace.render.diagnosis import diagnosis_text
from asynctrace.render.printable import printable

__all__ = [
    "EXIT_TOP_SITES",
    "bound_lines",
    "bound_scope",
    "bound_text",
    "diagnosis_markup",
    "evidence_parts",
    "figure_rows",
    "format_value",
    "known_fix_lines",
    "more_sites_text",
    "print_summary",
    "render_report",
    "site_rows",
    "title_text",
]

#: sync sites the exit summary lists (the records file has all of them)
EXIT_TOP_SITES: Final = 5


def _shown(text: str) -> str:
    """Text from a file as printed: control characters escaped (a name may hold terminal
    escape sequences), then rich markup (``[bold]``) escaped."""
    return escape(printable(text))


def title_text(report: Report) -> str:
    """The report's first line: the file, its format (a session's device kind), the device and
    the rank; a session's step count and wall time, and whether its run was killed or is still
    running."""
    s = report.source
    rank = f", rank {s.rank}" if s.rank is not None else ""
    if s.session is None:
        return f"{s.path} ({s.format}, {s.device}{rank})"
    wall = f", {format_ns(s.wall_ns)}" if s.wall_ns is not None else ""
    note = ""
    if not s.complete:
        note = (
            " (incomplete: no summary line, the run was killed)"
            if s.wall_ns is None
            else " (running)"
        )
    return f"{s.path} ({s.session.device_kind}, {s.device}{rank}): {s.events} step(s){wall}{note}"


def _title(report: Report) -> str:
    """:func:`title_text` as markup: its file name in bold."""
    text = _shown(title_text(report))
    s = report.source
    if s.session is None:
        return f"[bold]{text}[/bold]"
    path = _shown(s.path)
    return f"[bold]{path}[/bold]{text[len(path) :]}"


def _no_device(report: Report) -> bool:
    return report.trace is not None and report.trace.activities.total == 0


def bound_scope(report: Report) -> str:
    """What the bound is over, as its line says: the whole trace, the run, a session or its
    last steps (a long session's summary judges its recent steps)."""
    if report.trace is None:
        n = len(report.steps)
        return f"last {n} steps" if 0 < n < report.source.events else "session"
    return "whole trace" if report.whole_trace else "run"


def print_summary(report: Report, *, file: Any = None, no_steps_hint: str | None = None) -> None:
    """Print a session's report as its exit summary: :func:`render_report`, with its top
    :data:`EXIT_TOP_SITES` sync sites (stdout by default); ``no_steps_hint`` follows the
    diagnosis where the session recorded no steps."""
    from asynctrace.render.output import stdout_console

    console = stdout_console(file=file if file is not None else sys.stdout, highlight=False)
    render_report(report, console, top_sites=EXIT_TOP_SITES, no_steps_hint=no_steps_hint)


def render_report(
    report: Report,
    console: Console,
    *,
    steps: bool = False,
    top_sites: int = 10,
    no_steps_hint: str | None = None,
) -> None:
    """Print a report of a trace or of a session: its title, the diagnosis (the headline with
    its next step and evidence, then the other findings ranked; ``no_steps_hint`` after it
    where a session has no steps), warnings, the bound's figures, the per-step figures; a
    trace's activities, launches, queues and syncs; the sync sites (a session's with the fix of
    each library sync known); the steps (a trace's summary or all of them, a session's with
    ``steps``); a session's notes."""
    # one line however long its path: the terminal wraps it, so that it copies whole
    console.print(_title(report), soft_wrap=True)
    for line in diagnosis_markup(report.diagnosis):
        console.print(line)
    if no_steps_hint and report.trace is None and not report.source.events:
        console.print(f"no steps: {_shown(no_steps_hint)}")
    for w in report.warnings:
        console.print(f"[bold yellow]warning[/bold yellow] ({_shown(w.code)}): {_shown(w.message)}")
    # a trace without device activity, or a synchronous device (the CPU backend), has no
    # device timeline to show: its headline says what the host spends its step on
    if report.bound is not None and report.source.asynchronous and not _no_device(report):
        for line in bound_lines(report.bound, scope=bound_scope(report)):
            console.print(line)
    clocks = any("clock" in w.code for w in report.warnings)
    _print_figures(report, console)
    if report.trace is not None:
        _print_trace(report.trace, report.source.skipped, console, clocks=clocks)
    _print_sites(report, console, top=top_sites)
    if report.trace is None:
        for line in known_fix_lines(report.sync_sites[:top_sites]):
            console.print(_shown(line))
    if report.steps and (steps or report.trace is not None):
        _print_steps(report, console, every=steps, clocks=clocks)
    for note in report.notes:
        console.print(f"note: {_shown(note.text)}")


def more_sites_text(report: Report) -> str:
    """Where the sync sites a summary leaves out are: a session's in its records file, a
    trace's in the JSON report."""
    return "in the records file" if report.trace is None else "in --json"


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


def figure_rows(figures: Mapping[str, FigureStats | None]) -> list[tuple[str, str, str, str]]:
    """(figure, mean, median, p90) as printed, for every figure of ``figures``
    (``Report.figures``: by :class:`~asynctrace.records.StepRecord` field) that some step
    had."""
    rows = []
    for fig in STEP_FIGURES:
        s = figures.get(fig.field)
        if s is None:
            continue
        if fig.field in ("data_wait_ns", "sync_count", "sync_wait_ns") and s.mean == 0:
            # always zero here: a row of zeros is noise, the verdict says what matters
            continue
        rows.append(
            (
                fig.label,
                format_value(s.mean, fig.unit),
                format_value(s.median, fig.unit),
                format_value(s.p90, fig.unit),
            )
        )
    return rows


def site_rows(report: Report) -> list[tuple[str, str, str, str, str]]:
    """(site, op, count, wait, steps) as printed, for each sync site of ``report`` (a trace's:
    its sync calls' sites, the wait their total)."""
    if report.trace is not None:
        sites = [
            (s.site or "-", s.op, s.count, s.total_ns, s.steps) for s in report.trace.syncs.sites
        ]
    else:
        sites = [(s.site, s.op, s.count, s.wait_ns, s.steps) for s in report.sync_sites]
    return [
        (site, op, str(count), format_ns(wait_ns), str(n)) for site, op, count, wait_ns, n in sites
    ]


def known_fix_lines(sites: Sequence[SyncSite]) -> list[str]:
    """For each sync a library makes that ``records/known_syncs.py`` knows: what it does and the
    setting that removes it, as ``asynctrace check`` prints them."""
    from asynctrace.records.known_syncs import is_library_frame, known_sync

    lines: list[str] = []
    for s in sites:
        found = known_sync(s.stack[0]) if s.stack else None
        if found is None:
            continue
        entry, detail = found
        user = next((f for f in s.stack[1:] if not is_library_frame(f)), None)
        key = f" ({detail})" if detail else ""
        lines.append(f"{s.site}: {entry.what}{key}" + (f", from {user}" if user else ""))
        lines.append(f"  fix: {entry.fix}")
    return lines


def _print_figures(report: Report, console: Console) -> None:
    """Mean, median and p90 of each per-step figure (:func:`figure_rows`); not for a trace
    judged as one step, whose steps table shows that step's figures."""
    rows = figure_rows(report.figures)
    if not rows or report.whole_trace:
        return
    t = Table(title="per-step figures")
    for col in ("per step", "mean", "median", "p90"):
        t.add_column(col, justify="left" if col == "per step" else "right")
    for row in rows:
        t.add_row(*(_shown(c) for c in row))
    console.print(t)


def _print_trace(
    tf: TraceFigures, skipped: dict[str, int], console: Console, *, clocks: bool
) -> None:
    """What only a trace has: activities, what the loader skipped, launch delays (withheld
    where the clocks disagree), queues per stream and the sync calls."""
    a = tf.activities
    kinds = ", ".join(f"{v} {k}" for k, v in a.per_kind.items())
    console.print(f"activities: {a.total} ({kinds}) on {len(a.per_stream)} stream(s)")
    for reason, n in skipped.items():
        console.print(f"skipped by the loader: {n} ({_shown(reason)})")

    la = tf.launch
    withheld = " — withheld: the clocks disagree" if clocks else ""
    t = Table(title=f"launch delays ({la.matched} matched, {la.unmatched} unmatched){withheld}")
    t.add_column("figure")
    for col in ("p50", "p90", "p99", "max"):
        t.add_column(col, justify="right")
    for label, p in (
        ("queue delay", la.queue_delay_ns),
        ("launch to start", la.launch_to_start_ns),
    ):
        t.add_row(label, *(("-" if clocks else format_ns(v)) for v in (p.p50, p.p90, p.p99, p.max)))
    console.print(t)

    if "queue depth" in tf.withheld:
        console.print("queue per stream: withheld (the host and device clocks disagree)")
    elif tf.queue:
        t = Table(title=f"queue per stream (cap {tf.queue_cap})")
        for col in (
            "stream",
            "activities",
            "max depth",
            "mean depth",
            "time at cap",
            "max in flight",
        ):
            t.add_column(col, justify="right")
        for key, q in tf.queue.items():
            t.add_row(
                _shown(key),
                str(a.per_stream.get(key, q.activities)),
                str(q.max),
                f"{q.mean:.2f}",
                format_ns(q.time_at_cap_ns),
                str(q.in_flight_max),
            )
        console.print(t)

    s = tf.syncs
    console.print(f"syncs: {s.count} call(s), {format_ns(s.total_ns)} waiting")


def _print_sites(report: Report, console: Console, *, top: int) -> None:
    """The sync sites table (:func:`site_rows`), the first ``top`` of them."""
    rows = site_rows(report)
    if not rows:
        return
    t = Table(title="sync sites")
    wait = "wait" if report.trace is None else "total"
    for col in ("site", "op", "count", wait, "steps"):
        # a site is a path: folded onto more lines rather than cut short
        t.add_column(
            col,
            justify="left" if col in ("site", "op") else "right",
            overflow="fold" if col == "site" else "ellipsis",
        )
    for row in rows[:top]:
        t.add_row(*(_shown(c) for c in row))
    if len(rows) > top:
        t.caption = f"{len(rows) - top} more site(s) {more_sites_text(report)}"
    console.print(t)


_STEP_COLUMNS = (
    "step",
    "frontend",
    "device",
    "gpu busy",
    "gpu idle",
    "syncs",
    "sync wait",
    "run-ahead",
    "queue max",
    "bound",
)


def _print_steps(report: Report, console: Console, *, every: bool, clocks: bool) -> None:
    """The steps table: every step, or the first and last three. A session's steps have no
    measured device share nor queue: those columns show "-" (the bound is estimated)."""
    n = len(report.steps)
    shown = range(n) if every or n <= 6 else [*range(3), *range(n - 3, n)]
    origin = report.trace.step_source if report.trace is not None else "session records"
    t = Table(title=f"steps ({n}, from {origin})")
    for col in _STEP_COLUMNS:
        t.add_column(col, justify="right")
    for i in shown:
        t.add_row(*_step_row(report, i, clocks=clocks))
    if len(shown) < n:
        t.caption = "first and last steps shown; --steps shows all"
    console.print(t)


def _step_row(report: Report, i: int, *, clocks: bool) -> list[str]:
    st = report.steps[i]
    bound = report.step_bounds[i] if i < len(report.step_bounds) else None
    extra = report.trace.steps[i] if report.trace is not None else None
    # a trace step's share of the device timeline; a session measured none
    share = bound if extra is not None and extra.device_start_ns is not None else None
    return [
        str(st.step),
        format_ns(st.frontend_ns),
        format_ns(st.device_ns),
        format_ns(share.busy_ns if share is not None else None),
        format_ns(share.idle_ns if share is not None else None),
        str(st.sync_count),
        format_ns(st.sync_wait_ns),
        "-" if clocks else format_ns(st.run_ahead_ns),
        str(extra.queue_max) if extra is not None else "-",
        bound.label if bound is not None else "-",
    ]


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


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
            f"sync wait {format_ns(e.sync_wait_ns)} ({e.sync_wait_pct:.1f}%), "
            f"syncs cost {e.sync_cost_pct:.1f}%"
        )
    if e.data_wait_ns:
        detail.append(f"data wait {format_ns(e.data_wait_ns)}")
    return detail


def bound_text(b: Bound, *, scope: str = "run") -> list[str]:
    """The bound's figures as plain lines: label, device busy and idle by cause, the evidence,
    host frames and notes (its next step is the diagnosis's, shown above it). The first line
    opens with ``bound: <label>``."""
    e = b.evidence
    idle = b.idle_ns_by_cause
    causes = ", ".join(
        f"{c} {format_ns(v)} ({_pct(v, b.region_ns)})"
        for c, v in sorted(idle.as_dict().items(), key=lambda kv: -kv[1])
        if v
    )
    est = " (estimated from step records)" if e.estimated else ""
    lines = [
        f"bound: {b.label}{est} — {scope}: device busy "
        f"{format_ns(b.busy_ns)} of {format_ns(b.region_ns)} ({_pct(b.busy_ns, b.region_ns)}), "
        f"idle {format_ns(b.idle_ns)}" + (f": {causes}" if causes else "")
    ]
    detail = evidence_parts(e)
    if detail:
        lines.append("  evidence: " + "; ".join(detail))
    frames = [f for f in e.host_frames if f.frame != "(no host frame)"][:3]
    if frames:
        shown = ", ".join(
            f"{f.frame}" + (f" ({f.site})" if f.site else "") + f" {format_ns(f.idle_ns)}"
            for f in frames
        )
        lines.append(f"  host during {e.leading_cause} idle: {shown}")
    for note in e.notes:
        lines.append(f"  note: {note}")
    return lines


def bound_lines(b: Bound, *, scope: str = "run") -> list[str]:
    """:func:`bound_text` as rich markup lines, the label in bold."""
    lines = [_shown(x) for x in bound_text(b, scope=scope)]
    label = _shown(f"bound: {b.label}")
    if lines and lines[0].startswith(label):
        lines[0] = f"bound: [bold]{_shown(b.label)}[/bold]{lines[0][len(label) :]}"
    return lines


def diagnosis_markup(diagnosis: Sequence[Finding]) -> list[str]:
    """The diagnosis as rich markup lines (:func:`~asynctrace.render.diagnosis.diagnosis_text`,
    the headline's code in bold); every text view prints these first."""
    lines = [_shown(x) for x in diagnosis_text(diagnosis)]
    if lines and diagnosis:
        code = _shown(diagnosis[0].code)
        if lines[0].startswith(code):
            lines[0] = f"[bold]{code}[/bold]{lines[0][len(code) :]}"
    return lines
