"""Rich text tables for a :class:`~asynctrace.analysis.report.Report` (formatting only)."""

from __future__ import annotations

from pathlib import PurePath

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asynctrace._text import printable
from asynctrace.analysis.bound import Bound, BoundEvidence
from asynctrace.analysis.ranks import RankComparison
from asynctrace.analysis.report import RecordsSummary, Report, VerdictInfo
from asynctrace.analysis.steps import StepFigures
from asynctrace.analysis.verdict import verdict_line

__all__ = [
    "bound_lines",
    "evidence_parts",
    "format_ns",
    "render_ranks",
    "render_records",
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
    t = report.trace
    rank = f", rank {t.rank}" if t.rank is not None else ""
    return f"{t.source} ({t.format}, {t.device}{rank})"


def render_report(
    report: Report, console: Console, *, steps: bool = False, top_sites: int = 10
) -> None:
    """Print a report: warnings, what bounds it (label, evidence, next step), activities,
    launches, queues, syncs, steps (summary or all), verdict."""
    for w in report.warnings:
        console.print(f"[bold yellow]warning[/bold yellow] ({_shown(w.code)}): {_shown(w.message)}")
    console.print(f"[bold]{_shown(_title(report))}[/bold]")
    if report.bound is not None:
        whole = report.step_source in ("trace", "none")
        for line in bound_lines(report.bound, scope="whole trace" if whole else "run"):
            console.print(line)
    clocks = any("clock" in w.code for w in report.warnings)
    a = report.activities
    kinds = ", ".join(f"{v} {k}" for k, v in a.per_kind.items())
    console.print(f"activities: {a.total} ({kinds}) on {len(a.per_stream)} stream(s)")
    for reason, n in report.trace.skipped.items():
        console.print(f"skipped by the loader: {n} ({_shown(reason)})")

    la = report.launch
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

    if report.queue:
        t = Table(title=f"queue per stream (cap {report.queue_cap})")
        for col in (
            "stream",
            "activities",
            "max depth",
            "mean depth",
            "time at cap",
            "max in flight",
        ):
            t.add_column(col, justify="right")
        for key, q in report.queue.items():
            t.add_row(
                _shown(key),
                str(a.per_stream.get(key, q.activities)),
                str(q.max),
                f"{q.mean:.2f}",
                format_ns(q.time_at_cap_ns),
                str(q.in_flight_max),
            )
        console.print(t)

    s = report.syncs
    console.print(f"syncs: {s.count} call(s), {format_ns(s.total_ns)} waiting")
    if s.sites:
        t = Table(title="sync sites")
        for col in ("site", "op", "count", "total", "steps"):
            t.add_column(col, justify="left" if col in ("site", "op") else "right")
        for site in s.sites[:top_sites]:
            t.add_row(
                _shown(site.site or "-"),
                _shown(site.op),
                str(site.count),
                format_ns(site.total_ns),
                str(site.steps),
            )
        if len(s.sites) > top_sites:
            t.caption = f"{len(s.sites) - top_sites} more site(s) in --json"
        console.print(t)

    if report.steps:
        shown = report.steps if steps else _summary_steps(report)
        t = Table(title=f"steps ({len(report.steps)}, from {report.step_source})")
        for col in (
            "step",
            "cpu",
            "device",
            "gpu busy",
            "gpu idle",
            "syncs",
            "sync wait",
            "run-ahead",
            "queue max",
            "bound",
        ):
            t.add_column(col, justify="right")
        for st in shown:
            t.add_row(
                str(st.step),
                format_ns(st.cpu_ns),
                *(
                    format_ns(v if st.device_start_ns is not None else None)
                    for v in (st.device_ns, st.gpu_busy_ns, st.gpu_idle_ns)
                ),
                str(st.sync_count),
                format_ns(st.sync_wait_ns),
                "-" if clocks else format_ns(st.run_ahead_ns),
                str(st.queue_max),
                st.bound.label if st.bound is not None else "-",
            )
        if len(shown) < len(report.steps):
            t.caption = "first and last steps shown; --steps shows all"
        console.print(t)
    console.print(_verdict_line(report.verdict))
    for finding in report.verdict.findings[1:]:
        console.print(f"  also: {_shown(finding)}")


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
    """The bound headline as rich markup lines: label, evidence, the one next step."""
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
    for a in b.advice[:1]:
        lines.append(f"  next step: {_shown(a)}")
    for a in b.advice[1:]:
        lines.append(f"  also: {_shown(a)}")
    return lines


def _summary_steps(report: Report) -> list[StepFigures]:
    st = report.steps
    return st if len(st) <= 6 else [*st[:3], *st[-3:]]


def render_ranks(comparison: RankComparison, console: Console) -> None:
    """Print the per-rank table (slowest rank flagged) and the largest per-step skews."""
    t = Table(title=f"ranks ({len(comparison.ranks)})")
    for col in (
        "rank",
        "file",
        "steps",
        "mean cpu",
        "mean device",
        "mean gpu busy",
        "mean sync wait",
        "syncs",
        "bound",
        "",
    ):
        t.add_column(col, justify="right")
    for r in comparison.ranks:
        t.add_row(
            "?" if r.rank is None else str(r.rank),
            _shown(PurePath(r.source).name),
            str(r.steps),
            format_ns(r.cpu_ns_mean),
            format_ns(r.device_ns_mean),
            format_ns(r.gpu_busy_ns_mean),
            format_ns(r.sync_wait_ns_mean),
            str(r.sync_count),
            r.bound or "-",
            "slowest" if r.slowest else "",
        )
    console.print(t)
    if comparison.step_skew:
        t = Table(title="per-step skew across ranks")
        for col in ("step", "ranks", "min cpu", "max cpu", "skew", "slowest rank"):
            t.add_column(col, justify="right")
        for k in comparison.step_skew:
            t.add_row(
                str(k.step),
                str(k.ranks),
                format_ns(k.min_cpu_ns),
                format_ns(k.max_cpu_ns),
                format_ns(k.skew_ns),
                "?" if k.slowest_rank is None else str(k.slowest_rank),
            )
        console.print(t)


def render_records(summary: RecordsSummary, console: Console) -> None:
    """Print a session's per-step summary (mean/median/p90 of each figure)."""
    rank = f", rank {summary.rank}" if summary.rank is not None else ""
    note = "" if summary.complete else " (incomplete: no summary line, the run was killed)"
    console.print(
        f"[bold]{_shown(summary.source)}[/bold] "
        f"({_shown(summary.device_kind)}, {_shown(summary.device)}{rank}): "
        f"{summary.steps} step(s){note}"
    )
    t = Table(title="per-step figures")
    for col in ("figure", "steps", "mean", "median", "p90"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for name, f in summary.figures.items():
        fmt = (
            format_ns if name.endswith("_ns") else (lambda v: f"{v:.2f}" if v is not None else "-")
        )
        t.add_row(name, str(f.n), fmt(f.mean), fmt(f.median), fmt(f.p90) if f.n else "-")
    console.print(t)
    if summary.sync_sites:
        t = Table(title="sync sites")
        for col in ("site", "op", "count", "wait", "steps"):
            t.add_column(col, justify="left" if col in ("site", "op") else "right")
        for s in summary.sync_sites:
            t.add_row(
                _shown(s.site), _shown(s.op), str(s.count), format_ns(s.wait_ns), str(s.steps)
            )
        console.print(t)
    if summary.bound is not None:
        for line in bound_lines(summary.bound, scope="session"):
            console.print(line)
    console.print(_verdict_line(summary.verdict))


def _verdict_line(v: VerdictInfo) -> str:
    rest = verdict_line(v.code, v.message)[len(v.code) :]
    return f"verdict: [bold]{_shown(v.code)}[/bold]{_shown(rest)}"
