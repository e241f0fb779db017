"""The tables ``asynctrace demo`` prints: each experiment's figures, and the closing list of
what was written and how to view it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asynctrace._commands._demo_loops import (
    LoopResult,
    MatmulResult,
    StatementsResult,
)
from asynctrace.analysis.accumulate import STEP_FIGURES
from asynctrace.records.units import format_column, format_ns
from asynctrace.render.rows import format_value

if TYPE_CHECKING:
    from asynctrace._commands._demo_run import DemoResult

__all__ = [
    "figure_text",
    "render_artifacts",
    "render_demo",
    "render_loop",
    "render_matmuls",
    "render_statements",
]

#: how each kind of artifact is titled in the closing list, in the order shown
_KIND_TITLES: dict[str, str] = {
    "annotated trace": "Annotated trace (Perfetto, chrome://tracing)",
    "tensorboard": "TensorBoard",
    "profiler trace": "torch.profiler trace",
    "plot": "Plots (PNG)",
    "html": "HTML report",
    "records": "Session records",
    "summary": "Summary",
}


def render_artifacts(result: DemoResult, console: Console) -> None:
    """The closing list: what was written and the command to view each."""
    for note in result.notes:
        console.print()
        # plain text: a note may hold brackets ("asynctrace[plot]") that markup would eat
        console.print(note, highlight=False, markup=False)
    out = Path(result.out_dir)
    console.print()
    console.print(
        f"[bold]Written under {escape(str(out))}/[/], and how to view it:",
        highlight=False,
        soft_wrap=True,
    )
    for kind, title in _KIND_TITLES.items():
        items = [a for a in result.artifacts if a.kind == kind]
        if not items:
            continue
        console.print(f"  [bold]{title}[/]", highlight=False)
        for a in items:
            console.print(
                f"    {_rel(a.path, out)}: {a.what}", highlight=False, soft_wrap=True, markup=False
            )
        views = dict.fromkeys(a.view for a in items)
        for view in views if len(views) == 1 else ():
            console.print(f"    → {view}", highlight=False, soft_wrap=True, markup=False)
    if any(a.kind == "records" for a in result.artifacts):
        console.print(
            f"  every session's per-step summary: asynctrace report {out}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )


def _rel(path: str, out: Path) -> str:
    p = Path(path)
    try:
        rel = str(p.relative_to(out))
    except ValueError:
        rel = path
    return rel + "/" if p.is_dir() else rel


def render_matmuls(m: MatmulResult, console: Console) -> None:
    t = Table(title=f"(a) ten {m.size}×{m.size} matmuls: returned vs done")
    for col in ("", "returned", "done", "forcing read after"):
        t.add_column(col, justify="right" if col else "left")
    t.add_row("numpy", format_ns(m.numpy.returned_ns), format_ns(m.numpy.done_ns), "—")
    t.add_row("torch", format_ns(m.torch.returned_ns), format_ns(m.torch.done_ns), "")
    t.add_row(
        "torch again, then b[0, 0].item()",
        format_ns(m.check_returned_ns),
        format_ns(m.check_returned_ns + m.forced_read_wait_ns),
        f"waited {format_ns(m.forced_read_wait_ns)} (again: {format_ns(m.forced_read_again_ns)})",
    )
    console.print(t)
    console.print(m.numpy.line())
    console.print(m.torch.line())


def render_statements(s: StatementsResult, console: Console) -> None:
    t = Table(title=f"(b) z = x * y + 2, {s.title} (µs since the first statement started)")
    for col in ("statement", "took (host)", "returned at", "device done at"):
        t.add_column(col, justify="left" if col == "statement" else "right")
    for r in s.statements:
        t.add_row(
            r.statement,
            _us_cell(r.returned_ns),
            _us_cell(r.host_end_ns),
            _us_cell(r.device_done_ns),
        )
    t.add_row(
        "print(z)", _us_cell(s.print_ns), "", f"(printing again: {_us_cell(s.print_again_ns)})"
    )
    console.print(t)


def render_loop(lp: LoopResult, console: Console, *, max_rows: int = 12) -> None:
    how = (
        "synchronized once per minibatch (loss.item())" if lp.synchronized else "never synchronized"
    )
    t = Table(title=f"(c) training loop, {how} — {lp.name}")
    for col in ("step", "frontend µs", "device µs", "run-ahead µs", "in flight", "mem alloc MiB"):
        t.add_column(col, justify="right")
    rows: list[dict[str, Any] | None] = list(lp.steps)
    if len(rows) > max_rows:
        rows = [*rows[: max_rows // 2], None, *rows[-max_rows // 2 :]]
    shown = rows
    for r in shown:
        if r is None:
            t.add_row("…", "", "", "", "", "")
            continue
        mem = r.get("mem_allocated_bytes")
        t.add_row(
            str(r["step"]),
            _us_cell(r["frontend_ns"]),
            _us_cell(r.get("device_ns")),
            _us_cell(r.get("run_ahead_ns")),
            str(r.get("in_flight", 0)),
            "n/a" if mem is None else f"{mem / 2**20:,.1f}",
        )
    console.print(t)
    # the figures asynctrace report prints for these records, over every step
    console.print(
        f"median frontend {figure_text(lp, 'frontend_ns', 'median')}, median device "
        f"{figure_text(lp, 'device_ns', 'median')}, p90 run-ahead "
        f"{figure_text(lp, 'run_ahead_ns', 'p90')}, p90 in flight "
        f"{figure_text(lp, 'in_flight', 'p90')}; records: {lp.records_path}",
        markup=False,
    )
    if lp.warmup_ns is not None:
        console.print(
            f"warm-up: {format_ns(lp.warmup_ns)} of start-up ({lp.warmup_steps} leading "
            "step(s)), set apart from the steady state's bound; the medians above count them",
            markup=False,
        )
    for site in lp.sync_sites[:3]:
        console.print(
            f"sync at {site['site']}: {site['op']} ×{site['count']} "
            f"({site['per_step']:.2f} per step)",
            markup=False,
        )
    if lp.sync_detection == "lint":
        console.print(
            "(syncs found by the sync lint: on this synchronous backend nothing waits, so the "
            "lint flags what would block on an accelerator; it costs ~20 µs per op, so this "
            "loop's host times carry that cost)",
            markup=False,
        )


def render_demo(result: DemoResult, console: Console) -> None:
    """Print every table of a finished demo."""
    render_matmuls(result.matmuls, console)
    for s in result.statements:
        render_statements(s, console)
    for lp in result.loops:
        render_loop(lp, console)
    console.print(result.answer, markup=False)
    render_artifacts(result, console)


def figure_text(lp: LoopResult, field: str, stat: str) -> str:
    """``stat`` ("mean", "median", "p90") of the loop's per-step figure ``field`` (a StepRecord
    field) as ``asynctrace report`` prints it; "n/a" where no step had the figure."""
    stats = lp.figures.get(field)
    if stats is None:
        return "n/a"
    (unit,) = [f.unit for f in STEP_FIGURES if f.field == field]
    value: float = getattr(stats, stat)
    return format_value(value, unit)


def _us_cell(ns: float | None) -> str:
    """A table cell in µs ("n/a" where there is no figure)."""
    return format_column(ns, "µs", missing="n/a")
