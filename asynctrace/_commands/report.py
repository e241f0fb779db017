"""``asynctrace report TRACE|DIR|RECORDS``: analyse traces or session records, as text or JSON.

A folder is read as one job: every trace in it is one rank (per-rank table, slowest rank,
per-step skew; annotated copies and summaries are left out, see ``find_traces``) and every
``*.records.jsonl`` file is one session's records. A file in a folder
that cannot be read is named on stderr and skipped (exit status 1); a single bad file, or a
folder with nothing readable, is an error (one line on stderr, exit status 2). A folder's traces
are analysed by worker processes (``--workers``) or on a Dask cluster (``--scheduler``) through
:func:`asynctrace.analyze_many`, with the same output as in one process.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from asynctrace._output import json_text, output_file, write_failed
from asynctrace._text import printable
from asynctrace.analysis._defaults import DEFAULT_QUEUE_CAP
from asynctrace.errors import TraceFormatError
from asynctrace.records import RECORDS_SUFFIX, is_records_name

if TYPE_CHECKING:
    import threading

    from rich.console import Console

    from asynctrace._many import ManyReports
    from asynctrace.analysis.many import CrossRank
    from asynctrace.analysis.report import RecordsSummary, Report
    from asynctrace.records import Records

__all__ = ["add_arguments", "run"]

#: what the analysis needs beyond the reader; numpy first (most of the time)
_ANALYSIS_MODULES = ("numpy", "asynctrace.analysis.report", "asynctrace.analysis.ranks")


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
        type=_at_least(1),
        default=DEFAULT_QUEUE_CAP,
        metavar="N",
        help=f"queue depth counted as 'at cap' (default {DEFAULT_QUEUE_CAP})",
    )
    parser.add_argument(
        "--top", type=_at_least(0), default=10, metavar="N", help="sync sites to show (default 10)"
    )
    parser.add_argument(
        "--html", metavar="OUT.html", help="also write one self-contained HTML page (plots inline)"
    )
    parser.add_argument(
        "--workers",
        type=_at_least(1),
        default=None,
        metavar="N",
        help="a folder's traces are analysed by N local processes (default: the number of "
        "cores, at most one per file; 1: in this process)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="analyse a folder's traces on an existing Dask cluster (tcp://host:8786; the "
        "workers must see the files at the same paths); needs asynctrace[dask]",
    )


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer ``>= low``."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if n < low:
            raise argparse.ArgumentTypeError(f"{n}: give a number >= {low}")
        return n

    return parse


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


class _ImportBehind:
    """Imports numpy and the analyses on a thread while the main thread reads the trace.

    A fresh ``asynctrace report`` on a small trace spends more time importing numpy than
    reading the trace, and the Kineto reader needs no numpy: the C accelerator parses without
    the GIL, so part of the reading runs beside the import on a second core (zlib-ng inflates
    holding the GIL, so not all of it: B200 trace, 14 MB, 154 -> 146 ms end to end; see
    docs/performance.md). ``close()`` waits for the thread. Where numpy is imported already (a
    caller of ``main()``) there is nothing to overlap: no thread.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        if "numpy" in sys.modules:
            return
        # what the main thread imports to read a Kineto trace, imported before the thread
        # starts: from then on it imports nothing the thread does, except numpy (building the
        # model, or the Nsight Systems loader), and there the import lock makes it wait
        import threading

        import asynctrace.traces.kineto
        import asynctrace.traces.load  # noqa: F401
        from asynctrace.traces._io import _inflater

        _inflater()  # zlib-ng, imported on first use otherwise

        self._thread = threading.Thread(target=self._import, name="asynctrace-import", daemon=True)
        self._thread.start()

    @staticmethod
    def _import() -> None:
        try:
            for name in _ANALYSIS_MODULES:
                importlib.import_module(name)
        except BaseException:
            # the main thread imports the same modules next, and reports the error itself
            return

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def run(args: argparse.Namespace) -> int:
    behind = _ImportBehind()
    try:
        return _run(args, behind)
    finally:
        behind.close()


def _run(args: argparse.Namespace, behind: _ImportBehind) -> int:
    from asynctrace.records import read_records
    from asynctrace.traces.load import load

    path = Path(args.path)
    if not path.exists():
        raise TraceFormatError(str(path), "no such file or directory")
    if path.is_dir():
        from asynctrace.traces.load import find_traces

        records_paths = sorted(p for p in path.iterdir() if _is_records(p))
        # a folder of session records only is fine; with neither, the error names both
        trace_paths = find_traces(path, with_records=True)
    elif is_records_name(path.name):  # *.records.jsonl.tmp too, named: a killed run's
        records_paths, trace_paths = [path], []
    else:
        records_paths, trace_paths = [], [path]
    html = getattr(args, "html", None)
    if html is not None:
        output_file(html, what="the HTML page", inputs=[*trace_paths, *records_paths])

    scheduler = getattr(args, "scheduler", None)
    if scheduler is not None:
        from asynctrace._extras import require

        # before any work: without Dask, say how to install it (one line, exit 2)
        require("distributed", extra="dask", what="--scheduler", packages="dask distributed")

    reports: list[Report] = []
    summaries: list[RecordsSummary] = []
    failed: list[str] = []
    # the files that were read: the HTML page loads these again, one per report or summary
    read_traces: list[Path] = []
    kept_records: list[Records] = []
    cross: CrossRank | None = None
    one_file = trace_paths if not path.is_dir() else []
    if path.is_dir() and trace_paths:
        # a folder: the per-rank map (local processes or a Dask cluster), then the reduce
        behind.close()
        many = _analyze_folder(args, trace_paths, scheduler)
        reports, failed, cross = list(many.reports), list(many.failures), many.cross_rank
        # the files that gave a report, one per report
        read_traces = [Path(f.source) for f in many.files if f.ok]
    for p in one_file:
        try:
            trace = load(p)
            behind.close()
            from asynctrace.analysis.report import analyze

            reports.append(analyze(trace, queue_cap=args.queue_cap, keep_sync_calls=args.json))
            read_traces.append(p)
            del trace
        except TraceFormatError as e:
            # In a folder, one unreadable file must not hide the other ranks: say so, go on.
            if not path.is_dir():
                raise
            failed.append(str(e))
    for p in records_paths:
        try:
            records = read_records(p)
            behind.close()
            from asynctrace.analysis.report import summarize_records

            summaries.append(summarize_records(records))
            if html is not None:
                # kept for the page's plots rather than read again (a long run's records
                # are ~300 B a step, and reading 10^6 of them takes seconds)
                kept_records.append(records)
            del records
        except TraceFormatError as e:
            if not path.is_dir():
                raise
            failed.append(str(e))
    if not reports and not summaries:
        raise TraceFormatError(str(path), f"nothing readable ({'; '.join(failed)})")
    behind.close()
    from asynctrace.analysis.ranks import compare_ranks

    comparison = compare_ranks(reports) if len(reports) > 1 else None

    if html is not None:
        from asynctrace._commands._html import write_report_html

        try:
            write_report_html(html, read_traces, reports, kept_records, summaries)
        except OSError as e:
            raise write_failed(html, e, "the HTML page") from None
    if args.json:
        if path.is_dir():
            obj: object = {
                "schema_version": 1,
                "reports": reports,
                "ranks": comparison,
                "cross_rank": cross,
                "records": summaries,
            }
        else:
            obj = reports[0] if reports else summaries[0]
        sys.stdout.write(json_text(obj) + "\n")
        return _skipped(failed)

    from asynctrace.render.text import render_ranks, render_records, render_report

    console = _console()
    for r in reports:
        render_report(r, console, steps=args.steps, top_sites=args.top)
        console.print()
    if comparison is not None:
        render_ranks(comparison, console)
    if cross is not None:
        from asynctrace.render.many import render_cross_rank

        render_cross_rank(cross, console)
    for s in summaries:
        render_records(s, console)
        console.print()
    return _skipped(failed)


def _analyze_folder(
    args: argparse.Namespace, trace_paths: list[Path], scheduler: str | None
) -> ManyReports:
    """The folder's traces through :func:`asynctrace.analyze_many`, with a progress bar on
    stderr where it is a terminal (never with ``--json`` into a pipe)."""
    from asynctrace._commands._progress import FileProgress
    from asynctrace._many import analyze_many, file_size

    sizes = sum(file_size(p) for p in trace_paths)
    show = (
        len(trace_paths) > 1 and sys.stderr.isatty() and not (args.json and not sys.stdout.isatty())
    )
    with FileProgress(len(trace_paths), sizes, show=show) as progress:
        return analyze_many(
            [str(p) for p in trace_paths],
            workers=args.workers,
            scheduler=scheduler,
            queue_cap=args.queue_cap,
            keep_sync_calls=args.json,
            on_file=progress.advance,
        )


def _skipped(failed: list[str]) -> int:
    for reason in failed:
        print(f"asynctrace report: skipped {printable(reason)}", file=sys.stderr)
    return 1 if failed else 0
