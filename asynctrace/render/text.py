"""Rich text tables for a :class:`~asynctrace.analysis.report.Report` of a trace or of a
session (its records, or its live summary: the exit summary prints this), formatting only.

The sections are plain text made by one function each (:func:`title_text`,
:func:`~asynctrace.render.diagnosis.diagnosis_text`, :func:`bound_text`,
:func:`~asynctrace.render.rows.figure_rows`, :func:`site_rows`, :func:`known_fix_lines`,
:func:`more_sites_text`); this module prints them as rich text, and the TensorBoard summary
(:mod:`asynctrace.export.tensorboard`) wraps the same ones in Markdown. What the bound, the
per-step figures and the steps show is :mod:`asynctrace.render.rows`'s, as in the HTML page.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Final

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asynctrace.analysis.bound import Bound
from asynctrace.analysis.diagnosis import Finding
from asynctrace.analysis.report import Report
from asynctrace.records import SyncSite
from asynctrace.records.units import format_ns
from asynctrace.render.diagnosis import diagnosis_text
from asynctrace.render.printable import printable
from asynctrace.render.rows import (
    bound_scope,
    bound_view,
    shown_bound,
    shown_figure_rows,
    step_row,
    withheld,
)

__all__ = [
    "EXIT_TOP_SITES",
    "bound_lines",
    "bound_text",
    "diagnosis_markup",
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
    bound = shown_bound(report)
    if bound is not None:
        for line in bound_lines(bound, scope=bound_scope(report)):
            console.print(line)
    _print_figures(report, console)
    if report.trace is not None:
        _print_trace(report, console)
    _print_sites(report, console, top=top_sites)
    if report.trace is None:
        for line in known_fix_lines(report.sync_sites[:top_sites]):
            console.print(_shown(line))
    if report.steps and (steps or report.trace is not None):
        _print_steps(report, console, every=steps)
    for note in report.notes:
        console.print(f"note: {_shown(note.text)}")


def more_sites_text(report: Report) -> str:
    """Where the sync sites a summary leaves out are: a session's in its records file, a
    trace's in the JSON report."""
    return "in the records file" if report.trace is None else "in --json"


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
    """Mean, median and p90 of each per-step figure
    (:func:`~asynctrace.render.rows.figure_rows`); not for a trace
    judged as one step, whose steps table shows that step's figures."""
    rows = shown_figure_rows(report)
    if not rows:
        return
    t = Table(title="per-step figures")
    for col in ("per step", "mean", "median", "p90"):
        t.add_column(col, justify="left" if col == "per step" else "right")
    for row in rows:
        t.add_row(*(_shown(c) for c in (row.label, row.mean, row.median, row.p90)))
    console.print(t)


def _print_trace(report: Report, console: Console) -> None:
    """What only a trace has: activities, what the loader skipped, launch delays and queues
    per stream (each where the analysis did not withhold it) and the sync calls."""
    tf = report.trace
    if tf is None:
        return
    skipped = report.source.skipped
    a = tf.activities
    kinds = ", ".join(f"{v} {k}" for k, v in a.per_kind.items())
    console.print(f"activities: {a.total} ({kinds}) on {len(a.per_stream)} stream(s)")
    for reason, n in skipped.items():
        console.print(f"skipped by the loader: {n} ({_shown(reason)})")

    la = tf.launch
    delays = not withheld(report, "launch delays")
    note = "" if delays else " — withheld: the clocks disagree"
    t = Table(title=f"launch delays ({la.matched} matched, {la.unmatched} unmatched){note}")
    t.add_column("figure")
    for col in ("p50", "p90", "p99", "max"):
        t.add_column(col, justify="right")
    for label, p in (
        ("queue delay", la.queue_delay_ns),
        ("launch to start", la.launch_to_start_ns),
    ):
        t.add_row(label, *((format_ns(v) if delays else "-") for v in (p.p50, p.p90, p.p99, p.max)))
    console.print(t)

    if withheld(report, "queue depth"):
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


#: the steps table: its columns, and the field of :class:`~asynctrace.render.rows.StepRow`
#: each shows
_STEP_COLUMNS = (
    ("step", "step"),
    ("frontend", "frontend"),
    ("device", "device"),
    ("gpu busy", "gpu_busy"),
    ("gpu idle", "gpu_idle"),
    ("syncs", "syncs"),
    ("sync wait", "sync_wait"),
    ("run-ahead", "run_ahead"),
    ("queue max", "queue_max"),
    ("bound", "bound"),
)


def _print_steps(report: Report, console: Console, *, every: bool) -> None:
    """The steps table (:func:`~asynctrace.render.rows.step_row`): every step, or the first
    and last three. A session's steps have no measured device share nor queue: those columns
    show "-" (the bound is estimated)."""
    n = len(report.steps)
    shown = range(n) if every or n <= 6 else [*range(3), *range(n - 3, n)]
    origin = report.trace.step_source if report.trace is not None else "session records"
    t = Table(title=f"steps ({n}, from {origin})")
    for col, _ in _STEP_COLUMNS:
        t.add_column(col, justify="right")
    for i in shown:
        row = step_row(report, i)
        t.add_row(*(getattr(row, field) for _, field in _STEP_COLUMNS))
    if len(shown) < n:
        t.caption = "first and last steps shown; --steps shows all"
    console.print(t)


def bound_text(b: Bound, *, scope: str = "run") -> list[str]:
    """The bound's figures (:func:`~asynctrace.render.rows.bound_view`) as plain lines: label,
    device busy and idle by cause (most first), the evidence, host frames and notes (its next
    step is the diagnosis's, shown above it). The first line opens with ``bound: <label>``."""
    v = bound_view(b, scope=scope)
    causes = ", ".join(
        f"{r.cause} {r.time} ({r.share})"
        for r in sorted(v.idle_by_cause, key=lambda r: -r.ns)
        if r.ns
    )
    lines = [
        f"bound: {v.label}{v.estimated} — {v.scope}: device busy "
        f"{v.busy} of {v.region} ({v.busy_share}), "
        f"idle {v.idle}" + (f": {causes}" if causes else "")
    ]
    if v.evidence:
        lines.append("  evidence: " + "; ".join(v.evidence))
    frames = v.host_frames[:3]
    if frames:
        shown = ", ".join(
            f"{f.frame}" + (f" ({f.site})" if f.site else "") + f" {format_ns(f.idle_ns)}"
            for f in frames
        )
        lines.append(f"  host during {v.leading_cause} idle: {shown}")
    for note in v.notes:
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
