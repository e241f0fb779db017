"""Rich text tables for a :class:`~asynctrace.analysis.report.Report` of a trace or of a
session's records (formatting only)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asynctrace.analysis.bound import Bound, BoundEvidence
from asynctrace.analysis.diagnosis import Finding
from asynctrace.analysis.report import Report, TraceFigures
from asynctrace.render.diagnosis import diagnosis_text
from asynctrace.render.printable import printable

__all__ = [
    "bound_lines",
    "diagnosis_markup",
    "evidence_parts",
    "format_ns",
    "render_report",
]


def _shown(text: str) -> str:
    """Text from a file as printed: control characters escaped (a name may hold terminal
    escape sequences), then rich markup (``[bold]``) escaped."""
    return escape(printable(text))


def format_ns(ns: float | None) -> str:
    """A duration in the largest unit that keeps it ≥ 1 as printed (``-`` for None).

    The unit is chosen on the rounded text, so 999.6 ns prints as ``1.000 µs``, not ``1000 ns``.
    """
    if ns is None:
        return "-"
    text, unit = f"{ns:.0f}", "ns"
    for bigger, scale in (("µs", 1e3), ("ms", 1e6), ("s", 1e9)):
        if not abs(float(text)) >= 1000:  # NaN stays in ns, as before
            break
        text, unit = f"{ns / scale:.3f}", bigger
    return f"{text} {unit}"


def _title(report: Report) -> str:
    """The report's first line (markup): the file, its format (a session's device kind), the
    device and the rank; a session's step count, and whether its run was killed."""
    s = report.source
    rank = f", rank {s.rank}" if s.rank is not None else ""
    if s.session is None:
        return f"[bold]{_shown(f'{s.path} ({s.format}, {s.device}{rank})')}[/bold]"
    note = "" if s.complete else " (incomplete: no summary line, the run was killed)"
    return (
        f"[bold]{_shown(s.path)}[/bold] "
        f"({_shown(s.session.device_kind)}, {_shown(s.device)}{rank}): "
        f"{len(report.steps)} step(s){note}"
    )


def _no_device(report: Report) -> bool:
    return report.trace is not None and report.trace.activities.total == 0


def _scope(report: Report) -> str:
    if report.trace is None:
        return "session"
    return "whole trace" if report.whole_trace else "run"


def render_report(
    report: Report, console: Console, *, steps: bool = False, top_sites: int = 10
) -> None:
    """Print a report of a trace or of a session's records: its title, the diagnosis (the
    headline with its next step and evidence, then the other findings ranked), warnings, the
    bound's figures, the per-step figures; a trace's activities, launches, queues and syncs;
    the sync sites; the steps (a trace's summary or all of them, a session's with
    ``steps``)."""
    console.print(_title(report))
    for line in diagnosis_markup(report.diagnosis):
        console.print(line)
    for w in report.warnings:
        console.print(f"[bold yellow]warning[/bold yellow] ({_shown(w.code)}): {_shown(w.message)}")
    # a trace without device activity, or a synchronous device (the CPU backend), has no
    # device timeline to show: its headline says what the host spends its step on
    if report.bound is not None and report.source.asynchronous and not _no_device(report):
        for line in bound_lines(report.bound, scope=_scope(report)):
            console.print(line)
    clocks = any("clock" in w.code for w in report.warnings)
    _print_figures(report, console)
    if report.trace is not None:
        _print_trace(report.trace, report.source.skipped, console, clocks=clocks)
        sites = [
            (s.site or "-", s.op, s.count, s.total_ns, s.steps) for s in report.trace.syncs.sites
        ]
        _print_sites(sites, console, wait="total", top=top_sites)
    else:
        sites = [(s.site, s.op, s.count, s.wait_ns, s.steps) for s in report.sync_sites]
        _print_sites(sites, console, wait="wait", top=top_sites)
    if report.steps and (steps or report.trace is not None):
        _print_steps(report, console, every=steps, clocks=clocks)


def _print_figures(report: Report, console: Console) -> None:
    """Mean, median and p90 of each per-step figure (the figures some step had); not for a
    trace judged as one step, whose steps table shows that step's figures."""
    if not report.figures or report.whole_trace:
        return
    t = Table(title="per-step figures")
    for col in ("figure", "steps", "mean", "median", "p90"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for name, f in report.figures.items():
        fmt = format_ns if name.endswith("_ns") else _plain
        t.add_row(name, str(f.count), fmt(f.mean), fmt(f.median), fmt(f.p90) if f.count else "-")
    console.print(t)


def _plain(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "-"


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


def _print_sites(
    sites: list[tuple[str, str, int, int, int]], console: Console, *, wait: str, top: int
) -> None:
    """The sync sites table: (site, op, count, wait, steps), the first ``top`` of them."""
    if not sites:
        return
    t = Table(title="sync sites")
    for col in ("site", "op", "count", wait, "steps"):
        t.add_column(col, justify="left" if col in ("site", "op") else "right")
    for site, op, count, wait_ns, n_steps in sites[:top]:
        t.add_row(_shown(site), _shown(op), str(count), format_ns(wait_ns), str(n_steps))
    if len(sites) > top:
        t.caption = f"{len(sites) - top} more site(s) in --json"
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


def bound_lines(b: Bound, *, scope: str = "run") -> list[str]:
    """The bound's figures as rich markup lines: label, device busy and idle by cause, the
    evidence, host frames and notes (its next step is the diagnosis's, shown above it)."""
    e = b.evidence
    idle = b.idle_ns_by_cause
    causes = ", ".join(
        f"{c} {format_ns(v)} ({_pct(v, b.region_ns)})"
        for c, v in sorted(idle.as_dict().items(), key=lambda kv: -kv[1])
        if v
    )
    est = " (estimated from step records)" if e.estimated else ""
    lines = [
        f"bound: [bold]{_shown(b.label)}[/bold]{_shown(est)} — {_shown(scope)}: device busy "
        f"{format_ns(b.busy_ns)} of {format_ns(b.region_ns)} ({_pct(b.busy_ns, b.region_ns)}), "
        f"idle {format_ns(b.idle_ns)}" + (f": {_shown(causes)}" if causes else "")
    ]
    detail = evidence_parts(e)
    if detail:
        lines.append("  evidence: " + _shown("; ".join(detail)))
    frames = [f for f in e.host_frames if f.frame != "(no host frame)"][:3]
    if frames:
        shown = ", ".join(
            f"{f.frame}" + (f" ({f.site})" if f.site else "") + f" {format_ns(f.idle_ns)}"
            for f in frames
        )
        lines.append(f"  host during {_shown(e.leading_cause)} idle: {_shown(shown)}")
    for note in e.notes:
        lines.append(f"  note: {_shown(note)}")
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
