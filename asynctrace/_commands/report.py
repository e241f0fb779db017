"""``asynctrace report TRACE|DIR|RECORDS``: analyse traces or session records, as text or JSON.

A folder is read as one job: every trace in it is one rank (per-rank table, slowest rank,
per-step skew) and every ``*.records.jsonl`` file is one session's records. A file in a folder
that cannot be read is named on stderr and skipped (exit status 1); a single bad file, or a
folder with nothing readable, is an error (one line on stderr, exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from asynctrace.analysis.queue import DEFAULT_QUEUE_CAP
from asynctrace.errors import TraceFormatError
from asynctrace.records import RECORDS_SUFFIX

if TYPE_CHECKING:
    from rich.console import Console

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
    parser.add_argument(
        "--html", metavar="OUT.html", help="also write one self-contained HTML page (plots inline)"
    )


def _console() -> Console:
    # imported here: ``--json`` never pays for rich
    from rich.console import Console

    # Not a terminal (a pipe, a file, CI): no colour, and wide enough that tables do not fold.
    # emoji=False: names from a trace print as written (":fire:" is not an emoji code here).
    if sys.stdout.isatty():
        return Console(emoji=False)
    return Console(width=160, no_color=True, highlight=False, color_system=None, emoji=False)


def _is_records(path: Path) -> bool:
    return path.name.endswith(RECORDS_SUFFIX)


def run(args: argparse.Namespace) -> int:
    from asynctrace.analysis.ranks import compare_ranks
    from asynctrace.analysis.report import RecordsSummary, Report, analyze, summarize_records
    from asynctrace.records import read_records

    path = Path(args.path)
    if not path.exists():
        raise TraceFormatError(str(path), "no such file or directory")
    if path.is_dir():
        from asynctrace.traces.load import find_traces

        records_paths = sorted(p for p in path.iterdir() if _is_records(p))
        try:
            trace_paths = [Path(p) for p in find_traces(path) if not _is_records(Path(p))]
        except TraceFormatError:
            # a folder of session records only is fine; with neither, say what was looked for
            if not records_paths:
                raise
            trace_paths = []
    elif _is_records(path):
        records_paths, trace_paths = [path], []
    else:
        records_paths, trace_paths = [], [path]

    reports: list[Report] = []
    summaries: list[RecordsSummary] = []
    failed: list[str] = []
    if trace_paths:
        from asynctrace.traces.load import load

    for p in trace_paths:
        try:
            reports.append(analyze(load(p), queue_cap=args.queue_cap, keep_sync_calls=args.json))
        except TraceFormatError as e:
            # In a folder, one unreadable file must not hide the other ranks: say so, go on.
            if not path.is_dir():
                raise
            failed.append(str(e))
    for p in records_paths:
        try:
            summaries.append(summarize_records(read_records(p)))
        except TraceFormatError as e:
            if not path.is_dir():
                raise
            failed.append(str(e))
    if not reports and not summaries:
        raise TraceFormatError(str(path), f"nothing readable ({'; '.join(failed)})")
    comparison = compare_ranks(reports) if len(reports) > 1 else None

    if getattr(args, "html", None):
        from asynctrace._commands._html import write_report_html

        write_report_html(args.html, trace_paths, reports, records_paths, summaries)
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
        return _skipped(failed)

    from asynctrace.render.text import render_ranks, render_records, render_report

    console = _console()
    for r in reports:
        render_report(r, console, steps=args.steps, top_sites=args.top)
        console.print()
    if comparison is not None:
        render_ranks(comparison, console)
    for s in summaries:
        render_records(s, console)
        console.print()
    return _skipped(failed)


def _skipped(failed: list[str]) -> int:
    for reason in failed:
        print(f"asynctrace report: skipped {reason}", file=sys.stderr)
    return 1 if failed else 0
