"""``asynctrace compare A B [--json]``: before/after, per figure, judged against noise.

A and B are both session records (``*.records.jsonl``), or both traces / saved reports (the JSON
``asynctrace report --json`` prints). How noise is judged: :mod:`asynctrace.analysis.compare`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from asynctrace._output import json_text, stdout_console
from asynctrace._text import printable
from asynctrace.errors import TraceFormatError

if TYPE_CHECKING:
    from asynctrace.analysis.compare import Comparison
    from asynctrace.analysis.report import Report

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="before: records, a trace or a saved report JSON")
    parser.add_argument("b", metavar="B", help="after: the same kind as A")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument(
        "--alpha",
        type=_alpha,
        default=0.01,
        help="significance level of the test, between 0 and 1 (default 0.01)",
    )
    parser.add_argument(
        "--min-effect",
        type=_min_effect,
        default=0.02,
        help="smallest relative change of a median that counts (default 0.02 = 2%%)",
    )


def _number(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number")
    return x


def _alpha(text: str) -> float:
    x = _number(text)
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"{text}: give a level between 0 and 1, e.g. 0.01")
    return x


def _min_effect(text: str) -> float:
    x = _number(text)
    if x < 0:
        raise argparse.ArgumentTypeError(f"{text}: give a fraction >= 0, e.g. 0.02 for 2%")
    return x


def _check_file(path: Path) -> None:
    if not path.exists():
        raise TraceFormatError(str(path), "no such file")
    if path.is_dir():
        raise TraceFormatError(
            str(path), "is a folder: compare two files (records, traces or saved reports)"
        )
    if not path.is_file():
        # reading a FIFO blocks forever, a device never ends: refuse before opening
        raise TraceFormatError(str(path), "not a regular file (a FIFO, socket or device)")


def _saved_report(path: Path) -> bool:
    """Whether the file is a report ``asynctrace report --json`` wrote (not a trace)."""
    if path.suffix != ".json":
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4096).lstrip()
    except OSError as e:
        raise TraceFormatError(str(path), f"cannot read the file: {e.strerror or e}") from None
    return head.startswith(b"{") and b'"schema_version"' in head and b'"traceEvents"' not in head


def _report(path: Path) -> Report:
    """The report of a file: a saved report read back, else the analysis of what the loader
    read (a trace or a session's records)."""
    from asynctrace.analysis.report import Report, analyze
    from asynctrace.sources import load_source

    _check_file(path)
    if _saved_report(path):
        try:
            return Report.from_json(path.read_bytes())
        except OSError as e:
            raise TraceFormatError(str(path), f"cannot read the file: {e.strerror or e}") from None
        except TraceFormatError as e:
            raise TraceFormatError(str(path), e.reason) from None
    return analyze(load_source(path))


def _what(r: Report) -> str:
    return "records" if r.trace is None else "trace"


def run(args: argparse.Namespace) -> int:
    from asynctrace.analysis.compare import compare

    a, b = _report(Path(args.a)), _report(Path(args.b))
    ka, kb = (_what(r) for r in (a, b))
    if ka != kb:
        # a session's steps are its own boundaries, a trace's the profiler's: their times are
        # not the same measurement
        raise TraceFormatError(
            args.b, f"cannot compare {ka} with {kb}: give two records files or two traces/reports"
        )
    comparison = compare(a, b, alpha=args.alpha, min_effect=args.min_effect)

    if args.json:
        sys.stdout.write(json_text(comparison) + "\n")
        return 0
    # names and paths are printed as they are: no rich markup ("[b]") or emoji codes (":x:")
    console = (
        stdout_console(markup=False, emoji=False)
        if sys.stdout.isatty()
        else stdout_console(
            width=140,
            no_color=True,
            highlight=False,
            color_system=None,
            markup=False,
            emoji=False,
        )
    )
    # names and paths come from files: control characters are shown escaped
    p = printable
    table = Table(title=f"A: {p(comparison.a)}\nB: {p(comparison.b)}", title_justify="left")
    for col in ("figure", "A median", "B median", "delta", "p", "judged"):
        table.add_column(col, justify="left" if col in ("figure", "judged") else "right")
    style = {"improvement": "green", "regression": "red", "changed": "yellow"}
    for f in comparison.figures:
        table.add_row(
            p(f"{f.figure} ({f.unit})"),
            _num(f.a_median),
            _num(f.b_median),
            "—" if f.delta is None else _num(f.delta, sign=True) + _pct(f.delta_pct),
            "—" if f.p_value is None else f"{f.p_value:.3g}",
            Text(f.change, style=style.get(f.change, "")),
        )
    console.print(table)
    va, vb = comparison.verdict_a, comparison.verdict_b
    if comparison.verdict_changed:
        console.print(f"verdict changed: {p(va.code)} -> {p(vb.code)}", markup=False)
    else:
        console.print(f"verdict unchanged: {p(va.code)}", markup=False)
    for x in comparison.findings_added:
        console.print(f"  + {p(x)}", markup=False)
    for x in comparison.findings_removed:
        console.print(f"  - {p(x)}", markup=False)
    console.print(p(_outcome_line(comparison)), markup=False)
    for note in comparison.notes:
        console.print(f"note: {p(note)}", markup=False)
    console.print(f"noise: {p(comparison.noise)}", markup=False)
    return 0


def _outcome_line(comparison: Comparison) -> str:
    if comparison.outcome in ("improvement", "regression", "same"):
        return f"B is: {comparison.outcome} (step time)"
    step = next(f for f in comparison.figures if f.figure == "step time")
    if comparison.outcome == "not comparable":
        why = "step times not comparable: the runs were captured with different settings (note)"
    elif comparison.outcome == "too few steps":
        why = (
            f"too few steps ({step.a_n} and {step.b_n}; the noise test needs "
            f"{comparison.min_steps} on each side)"
        )
    else:
        why = "no step time on one side"
    return f"B is: not judged: {why}"


def _num(v: float | None, *, sign: bool = False) -> str:
    if v is None:
        return "—"
    return f"{v:+.4g}" if sign else f"{v:.4g}"


def _pct(p: float | None) -> str:
    return "" if p is None else f" ({p:+.1f}%)"
