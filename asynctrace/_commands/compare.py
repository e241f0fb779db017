"""``asynctrace compare A B [--json | --format markdown] [--fail-on regression]``: before/after,
per figure, judged against noise, with what explains the change.

A and B are both session records (``*.records.jsonl``), or both traces / saved reports (the JSON
``asynctrace report --json`` prints). How noise is judged and the change explained:
:mod:`asynctrace.analysis.compare`. Exit status: 0, or 1 when ``--fail-on regression`` finds B a
regression; 2 for bad input (a file that cannot be read, two kinds that do not compare, a gate
that has no comparable step time to judge).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from rich.console import Console

from asynctrace.analysis.defaults import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT
from asynctrace.errors import TraceFormatError
from asynctrace.render.output import json_text, stdout_console
from asynctrace.render.printable import printable

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="before: records, a trace or a saved report JSON")
    parser.add_argument("b", metavar="B", help="after: the same kind as A")
    parser.add_argument(
        "--json", action="store_true", help="print the comparison as JSON (= --format json)"
    )
    parser.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default=None,
        help="text (default), json, or markdown: a compact summary for a pull-request comment",
    )
    parser.add_argument(
        "--fail-on",
        choices=("regression",),
        default=None,
        help="exit 1 when B is judged a regression of step time (significant and at least "
        "--min-effect; with too few steps for the test, on the effect size alone)",
    )
    parser.add_argument(
        "--alpha",
        type=_alpha,
        default=DEFAULT_ALPHA,
        help=f"significance level of the test, between 0 and 1 (default {DEFAULT_ALPHA:g})",
    )
    parser.add_argument(
        "--min-effect",
        type=_min_effect,
        default=DEFAULT_MIN_EFFECT,
        help="smallest relative change of a median that counts "
        f"(default {DEFAULT_MIN_EFFECT:g} = {100 * DEFAULT_MIN_EFFECT:g}%%)",
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


def _console() -> Console:
    # names and paths are printed as they are: no rich markup ("[b]") or emoji codes (":x:")
    if sys.stdout.isatty():
        return stdout_console(markup=False, emoji=False)
    return stdout_console(
        width=140,
        no_color=True,
        highlight=False,
        color_system=None,
        markup=False,
        emoji=False,
    )


def run(args: argparse.Namespace) -> int:
    from asynctrace.analysis.compare import compare
    from asynctrace.files.regression import check_comparable, load_report
    from asynctrace.render.compare import markdown, render_comparison

    fmt = args.format or ("json" if args.json else "text")
    if args.json and fmt != "json":
        raise TraceFormatError("--json", f"conflicts with --format {fmt}: give one of them")
    a, b = load_report(Path(args.a)), load_report(Path(args.b))
    check_comparable(a, b, b_name=args.b)
    comparison = compare(a, b, alpha=args.alpha, min_effect=args.min_effect)
    gate = args.fail_on == "regression"

    if fmt == "json":
        sys.stdout.write(json_text(comparison) + "\n")
    elif fmt == "markdown":
        sys.stdout.write(markdown(comparison, gate=gate))
    else:
        render_comparison(comparison, _console(), gate=gate)
    if not gate:
        return 0
    if comparison.gate.judged_by == "not judged":
        # a gate that cannot judge must not pass silently
        raise TraceFormatError(args.b, f"--fail-on regression: {comparison.gate.message}")
    if comparison.gate.judged_by == "effect size":
        sys.stderr.write(f"asynctrace compare: {printable(comparison.gate.message)}\n")
    return 1 if comparison.gate.regression else 0
