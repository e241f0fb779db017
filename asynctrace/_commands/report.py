"""``asynctrace report TRACE|DIR|RECORDS``: analyse traces or session records, as text or JSON.

A folder is read as one job: every trace in it is one rank (per-rank table, slowest rank,
per-step skew) and every ``*.records.jsonl`` file is one session's records.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec
from rich.console import Console

from asynctrace.analysis.queue import DEFAULT_QUEUE_CAP
from asynctrace.errors import TraceFormatError
from asynctrace.records import RECORDS_SUFFIX

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="TRACE|DIR|RECORDS",
        help="a Kineto trace (.json, .json.gz), an Nsight Systems .sqlite export, a session's "
        f"{RECORDS_SUFFIX} file, or a folder of them (one per rank)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the versioned JSON object (docs/report-json.md)"
    )
    parser.add_argument("--steps", action="store_true", help="show every step, not a summary")
    parser.add_argument(
        "--queue-cap",
        type=int,
        default=DEFAULT_QUEUE_CAP,
        metavar="N",
        help=f"queue depth counted as 'at cap' (default {DEFAULT_QUEUE_CAP})",
    )
    parser.add_argument(
        "--top", type=int, default=10, metavar="N", help="sync sites to show (default 10)"
    )


def _console() -> Console:
    # Not a terminal (a pipe, a file, CI): no colour, and wide enough that tables do not fold.
    if sys.stdout.isatty():
        return Console()
    return Console(width=160, no_color=True, highlight=False, color_system=None)


def _is_records(path: Path) -> bool:
    return path.name.endswith(RECORDS_SUFFIX)


def run(args: argparse.Namespace) -> int:
    from asynctrace.analysis.ranks import compare_ranks
    from asynctrace.analysis.report import analyze, summarize_records
    from asynctrace.records import read_records
    from asynctrace.render.text import render_ranks, render_records, render_report

    path = Path(args.path)
    if not path.exists():
        raise TraceFormatError(str(path), "no such file or directory")
    if path.is_dir():
        from asynctrace.trace.load import find_traces

        records_paths = sorted(p for p in path.iterdir() if _is_records(p))
        trace_paths = [Path(p) for p in find_traces(path) if not _is_records(Path(p))]
        if not records_paths and not trace_paths:
            raise TraceFormatError(
                str(path), f"no traces and no {RECORDS_SUFFIX} files in this folder"
            )
    elif _is_records(path):
        records_paths, trace_paths = [path], []
    else:
        records_paths, trace_paths = [], [path]

    reports = []
    if trace_paths:
        from asynctrace.trace.load import load

        reports = [
            analyze(load(p), queue_cap=args.queue_cap, keep_sync_calls=args.json)
            for p in trace_paths
        ]
    summaries = [summarize_records(read_records(p)) for p in records_paths]
    comparison = compare_ranks(reports) if len(reports) > 1 else None

    if args.json:
        if path.is_dir():
            obj: object = {
                "schema_version": 1,
                "reports": reports,
                "ranks": comparison,
                "records": summaries,
            }
        else:
            obj = reports[0] if reports else summaries[0]
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(obj), indent=2).decode() + "\n")
        return 0

    console = _console()
    for r in reports:
        render_report(r, console, steps=args.steps, top_sites=args.top)
        console.print()
    if comparison is not None:
        render_ranks(comparison, console)
    for s in summaries:
        render_records(s, console)
        console.print()
    return 0
