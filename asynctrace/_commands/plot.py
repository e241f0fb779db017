"""``asynctrace plot TRACE|RECORDS -o FILE``: draw a trace or a session's records (PNG or SVG)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from asynctrace.errors import TraceFormatError
from asynctrace.records import RECORDS_SUFFIX
from asynctrace.render.output import output_file, write_failed

__all__ = ["add_arguments", "parse_steps", "run"]

VIEWS = ("overview", "timeline", "steps", "run-ahead", "bound")


def parse_steps(text: str) -> tuple[int, int]:
    """``"3"`` -> (3, 3); ``"3:7"`` -> (3, 7) (inclusive)."""
    try:
        lo, _, hi = text.partition(":")
        a = int(lo)
        b = int(hi) if hi else a
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write a step N or a range A:B") from None
    if b < a:
        raise argparse.ArgumentTypeError(f"{text!r}: the range ends before it starts")
    return a, b


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="TRACE|RECORDS",
        help=f"a Kineto trace, an Nsight Systems .sqlite export or a session's {RECORDS_SUFFIX}",
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the picture to write: .png or .svg"
    )
    parser.add_argument(
        "--view",
        choices=VIEWS,
        default="overview",
        help="overview (timeline, steps and run-ahead; default), timeline (host/device lanes), "
        "steps (per-step bars), run-ahead, or bound (per step: device busy and idle by cause, "
        "titled with the run's bound label)",
    )
    parser.add_argument(
        "--steps",
        type=parse_steps,
        default=None,
        metavar="A:B",
        help="steps drawn on a trace's timeline (default: the first 3)",
    )


def run(args: argparse.Namespace) -> int:
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.files.sources import load_source
    from asynctrace.render import plot

    path = Path(args.path)
    out = Path(args.output)
    if out.suffix.lower() not in (".png", ".svg"):
        raise plot.PlotError(f"{out}: the output must end in .png or .svg")
    if not path.exists():
        raise TraceFormatError(str(path), "no such file")
    if path.is_dir():
        raise TraceFormatError(str(path), "is a folder: plot draws one trace or records file")
    output_file(out, what="the picture", inputs=[path])
    analysis = analyze_detail(load_source(path))
    fig: Any
    if args.view == "overview":
        fig = plot.overview_figure(analysis, steps=args.steps)
    elif args.view == "timeline":
        # a trace's events only: records are refused by plot_timeline in one line
        fig = plot.plot_timeline(analysis, steps=args.steps)
    else:
        draw = {
            "steps": plot.plot_step_bars,
            "bound": plot.plot_idle_by_cause,
            "run-ahead": plot.plot_run_ahead,
        }[args.view]
        fig = draw(analysis)
    try:
        plot.save_figure(fig, out)
    except OSError as e:
        raise write_failed(out, e, "the picture") from None
    print(f"wrote {out}")
    return 0
