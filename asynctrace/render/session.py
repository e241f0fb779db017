"""The session's exit summary as text: the diagnosis (its headline first), the table, the
sync sites, the bound's figures and the notes."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from asynctrace.analysis.accumulate import STEP_FIGURES, FigureStats, SessionReport
from asynctrace.records import SyncSite

__all__ = [
    "NO_STEPS_HINT",
    "figure_rows",
    "format_value",
    "known_fix_lines",
    "print_report",
    "report_rows",
]

NO_STEPS_HINT: Final = (
    "mark them with `for batch in session.steps(loader)`, `session.step()` at the end of "
    "each iteration, `@session.train_step` or `optimizer_steps=True`"
)
#: sync sites the exit summary lists (the records file has all of them)
_TOP_SITES: Final = 5


def format_value(value: float, unit: str) -> str:
    """A figure as the summary prints it: ns, bytes or a plain number, in a readable unit."""
    if math.isnan(value):
        return "-"
    if unit == "ns":
        return _scaled(value, ((1, "ns", 0), (1e3, "µs", 1), (1e6, "ms", 3), (1e9, "s", 3)), 1000)
    if unit == "bytes":
        units = ((1, "B", 0), (1 << 10, "KiB", 1), (1 << 20, "MiB", 1), (1 << 30, "GiB", 1))
        return _scaled(value, units, 1024)
    return f"{value:.2f}"


def _scaled(value: float, units: Sequence[tuple[float, str, int]], step: int) -> str:
    """``value`` in the largest unit it reaches *as printed*: the unit is chosen on the rounded
    text, so 999.96 µs prints as ``1.000 ms``, not ``1000.0 µs``."""
    scale, name, decimals = units[0]
    text = f"{value / scale:.{decimals}f}"
    for scale, bigger, decimals in units[1:]:
        if not abs(float(text)) >= step:
            break
        text, name = f"{value / scale:.{decimals}f}", bigger
    return f"{text} {name}"


def report_rows(report: SessionReport) -> list[tuple[str, str, str, str]]:
    """(figure, mean, median, p90) as printed, for every figure the session has values for."""
    return figure_rows({fig.field: getattr(report, fig.field) for fig in STEP_FIGURES})


def figure_rows(figures: Mapping[str, FigureStats | None]) -> list[tuple[str, str, str, str]]:
    """:func:`report_rows` of figures by :class:`~asynctrace.records.StepRecord` field, as a
    :class:`~asynctrace.analysis.report.Report` holds them (``report.figures``)."""
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


def known_fix_lines(sites: Sequence[SyncSite]) -> list[str]:
    """For each sync a library makes that ``_known_syncs.py`` knows: what it does and the
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


def print_report(
    report: SessionReport, *, file: Any = None, no_steps_hint: str = NO_STEPS_HINT
) -> None:
    """Print the title, the diagnosis, the summary table, the top sync sites, the bound's
    figures and the notes of ``report``
    (stdout by default); ``no_steps_hint`` follows "no steps" where the session recorded
    none."""
    from rich.table import Table

    from asynctrace.render.output import stdout_console
    from asynctrace.render.printable import printable_fields

    console = stdout_console(file=file if file is not None else sys.stdout, highlight=False)
    # names, sites and ops come from the program and its files: control characters escaped
    report = printable_fields(report)
    from asynctrace.render.text import diagnosis_markup

    table = Table()
    table.add_column("per step")
    for col in ("mean", "median", "p90"):
        table.add_column(col, justify="right")
    for row in report_rows(report):
        table.add_row(*row)
    if report.steps:
        console.print(
            f"asynctrace {report.name}: {report.steps} steps on {report.device_name}, "
            f"{report.wall_ns / 1e9:.3f} s",
            markup=False,
        )
        # markup of our own; every name in it is escaped by diagnosis_markup
        for line in diagnosis_markup(report.diagnosis):
            console.print(line)
        console.print(table)
    else:
        console.print(
            f"asynctrace {report.name}: no steps on {report.device_name} in "
            f"{report.wall_ns / 1e9:.3f} s" + (f": {no_steps_hint}" if no_steps_hint else ""),
            markup=False,
        )
    if report.sync_sites:
        sites = Table(title="sync sites", title_justify="left")
        for col, justify in (
            ("site", "left"),
            ("op", "left"),
            ("count", "right"),
            ("wait", "right"),
        ):
            # a site is a path: folded onto more lines rather than cut short
            sites.add_column(col, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for s in report.sync_sites[:_TOP_SITES]:
            sites.add_row(s.site, s.op, str(s.count), format_value(s.wait_ns, "ns"))
        console.print(sites)
        for line in known_fix_lines(report.sync_sites[:_TOP_SITES]):
            console.print(line, markup=False)
        more = len(report.sync_sites) - _TOP_SITES
        if more > 0:
            console.print(f"… and {more} more site(s) in the records file", markup=False)
    # a synchronous device (the CPU backend) has no device timeline: the headline says what the
    # host spends its step on
    if report.bound is not None and report.asynchronous:
        from asynctrace.render.text import bound_lines

        # markup of our own; every name in it is escaped by bound_lines
        for line in bound_lines(
            report.bound, scope=f"last {report.steps} steps" if report.steps else "session"
        ):
            console.print(line)
    for note in report.notes:
        console.print(f"note: {note.text}", markup=False)
    if report.records_path is not None:
        console.print(f"records: {report.records_path}", markup=False)
