"""``asynctrace report TRACE|DIR|RECORDS``: analyse traces or session records, as text or JSON.

Every file becomes one :class:`~asynctrace.analysis.report.Report` (``load_source`` →
``analyze``), printed by the one text view. A folder is read as one job
(:func:`asynctrace.find_sources`): every trace and every ``*.records.jsonl`` file in it
is one rank (per-rank table, slowest rank, per-step skew; annotated copies and summaries are
left out, see ``find_traces``). A file in a folder that cannot be read is named on stderr and
skipped (exit status 1); a single bad file, or a folder with nothing readable, is an error (one
line on stderr, exit status 2). A folder's traces are analysed by worker processes
(``--workers``) or on a Dask cluster (``--scheduler``) through :func:`asynctrace.analyze_many`,
with the same output as in one process; with ``--html`` every file is analysed in this process,
where the page's plots need the traces.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from asynctrace.analysis.defaults import DEFAULT_QUEUE_CAP
from asynctrace.errors import TraceFormatError
from asynctrace.records import RECORDS_SUFFIX
from asynctrace.render.output import fs_name, json_text, output_file, stdout_console, write_failed
from asynctrace.render.printable import printable

if TYPE_CHECKING:
    import threading

    from rich.console import Console

    from asynctrace.analysis.ranks import RunComparison
    from asynctrace.analysis.report import Analysis, Report
    from asynctrace.files.many import ManyReports
    from asynctrace.files.sources import FolderSources
    from asynctrace.records import Records
    from asynctrace.traces.model import Trace

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
    add_queue_cap(parser)
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
        "cores, at most one per file; 1: in this process; with --html every file is analysed "
        "in this process, where the page's plots need it)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="analyse a folder's traces on an existing Dask cluster (tcp://host:8786; the "
        "workers must see the files at the same paths; with --html, analysed here); needs "
        "asynctrace[dask]",
    )
    add_scheduler_timeout(parser)


def add_scheduler_timeout(parser: argparse.ArgumentParser) -> None:
    """``--scheduler-timeout S``, as every command that takes ``--scheduler`` takes it."""
    parser.add_argument(
        "--scheduler-timeout",
        type=_positive_seconds,
        default=None,
        metavar="S",
        help="seconds the handshake with --scheduler may take (connect, then the scheduler's "
        "identity) before it is given up (default: $ASYNCTRACE_SCHEDULER_TIMEOUT, else 10)",
    )


def _positive_seconds(text: str) -> float:
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < s < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: give a number of seconds > 0")
    return s


def add_queue_cap(parser: argparse.ArgumentParser) -> None:
    """``--queue-cap N``, as every command that analyses a trace takes it."""
    parser.add_argument(
        "--queue-cap",
        type=_at_least(1),
        default=DEFAULT_QUEUE_CAP,
        metavar="N",
        help=f"queue depth counted as 'at cap' (default {DEFAULT_QUEUE_CAP})",
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
    # Not a terminal (a pipe, a file, CI): no colour, and wide enough that tables do not fold.
    # emoji=False: names from a trace print as written (":fire:" is not an emoji code here).
    if sys.stdout.isatty():
        return stdout_console(emoji=False)
    return stdout_console(width=160, no_color=True, highlight=False, color_system=None, emoji=False)


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
        from asynctrace.traces.reading import inflater

        inflater()  # zlib-ng, imported on first use otherwise

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
    from asynctrace.files.sources import find_sources

    path = Path(args.path)
    if not path.exists():
        raise TraceFormatError(str(path), "no such file or directory")
    found = find_sources(path) if path.is_dir() else None
    html = getattr(args, "html", None)
    if html is not None:
        output_file(html, what="the HTML page", inputs=found.all if found else [path])
    scheduler = getattr(args, "scheduler", None)
    if scheduler is not None:
        from asynctrace._extras import require

        # before any work: without Dask, say how to install it (one line, exit 2)
        require("distributed", extra="dask", what="--scheduler", packages="dask distributed")

    failed: list[str] = []
    analyses: list[Analysis] = []
    many: ManyReports | None = None
    if html is not None:
        # the page draws what the report does not carry: each file analysed here, in detail,
        # and kept (never loaded a second time)
        analyses = _each(
            found.all if found else [path],
            lambda p: _detail_of(p, args, behind, in_folder=found is not None),
            in_folder=found is not None,
            failed=failed,
        )
        reports = [a.report for a in analyses]
    elif found is not None:
        reports, many = _analyze_folder(args, found, behind, scheduler, failed)
    else:
        reports = [_report_of(path, args, behind)]
    if not reports:
        raise TraceFormatError(str(path), f"nothing readable ({'; '.join(failed)})")
    behind.close()
    from asynctrace.analysis.ranks import job_of
    from asynctrace.analysis.report import REPORT_SCHEMA_VERSION

    if many is not None and len(many.reports) == len(reports):
        # the traces were all there is: their reduce is the folder's
        runs = many.runs
    else:
        runs = _runs(reports) if found is not None else []
    job = job_of(runs)
    ranks = job.ranks if job is not None else None
    cross = job.cross_rank if job is not None else None

    if html is not None:
        from asynctrace._commands._html import write_report_html

        try:
            write_report_html(html, analyses, ranks=ranks, cross=cross)
        except OSError as e:
            raise write_failed(html, e, "the HTML page") from None
    if args.json:
        obj: object = reports[0]
        if found is not None:
            obj = {
                "schema_version": REPORT_SCHEMA_VERSION,
                "reports": reports,
                "runs": runs,
                "ranks": ranks,
                "cross_rank": cross,
            }
        sys.stdout.write(json_text(obj) + "\n")
    else:
        _print_text(args, reports, runs)
    if html is not None:
        # said after the report, on stderr: stdout stays the report alone (`--json > x.json`)
        print(f"asynctrace report: wrote {printable(str(html))}", file=sys.stderr)
    return _skipped(failed)


_T = TypeVar("_T")


def _each(
    paths: Sequence[Path], one: Callable[[Path], _T], *, in_folder: bool, failed: list[str]
) -> list[_T]:
    """``one`` of each path. In a folder, one unreadable file must not hide the other ranks:
    its error goes to ``failed`` and the others go on; a single file's is raised."""
    out: list[_T] = []
    for p in paths:
        try:
            out.append(one(p))
        except TraceFormatError as e:
            if not in_folder:
                raise
            failed.append(str(e))
    return out


def _load_file(path: Path, behind: _ImportBehind, *, in_folder: bool) -> Trace | Records:
    """One trace or session's records, loaded while the analyses import behind. In a folder,
    a name that is not UTF-8 is the report's in escaped form (``\\xNN``), as the worker
    processes give it."""
    import msgspec

    from asynctrace.files.sources import load_source
    from asynctrace.records import Records

    source = load_source(path)
    shown = fs_name(str(path)) if in_folder else str(path)
    if shown != str(path):
        # one name for each file of a folder, whichever process analysed it
        if isinstance(source, Records):
            source = msgspec.structs.replace(source, path=shown)
        else:
            source = msgspec.structs.replace(source, source=shown)
    behind.close()
    return source


def _report_of(
    path: Path, args: argparse.Namespace, behind: _ImportBehind, *, in_folder: bool = False
) -> Report:
    """One file's report."""
    source = _load_file(path, behind, in_folder=in_folder)
    from asynctrace.analysis.report import analyze

    return analyze(source, queue_cap=args.queue_cap, keep_sync_calls=args.json)


def _detail_of(
    path: Path, args: argparse.Namespace, behind: _ImportBehind, *, in_folder: bool
) -> Analysis:
    """One file's report with the detail the HTML page draws."""
    source = _load_file(path, behind, in_folder=in_folder)
    from asynctrace.analysis.report import analyze_detail

    return analyze_detail(source, queue_cap=args.queue_cap, keep_sync_calls=args.json)


def _analyze_folder(
    args: argparse.Namespace,
    found: FolderSources,
    behind: _ImportBehind,
    scheduler: str | None,
    failed: list[str],
) -> tuple[list[Report], ManyReports | None]:
    """A folder's reports, and the map-reduce of its traces: those through
    :func:`asynctrace.analyze_many` (local processes or a Dask cluster), its session records
    here (reading them is the work)."""
    many = None
    if found.traces:
        behind.close()
        many = _analyze_traces(args, found.traces, scheduler)
        failed.extend(many.failures)
    records = _each(
        found.records,
        lambda p: _report_of(p, args, behind, in_folder=True),
        in_folder=True,
        failed=failed,
    )
    return [*(many.reports if many is not None else []), *records], many


def _runs(reports: list[Report]) -> list[RunComparison]:
    """A folder's reports (traces and session records alike) grouped into runs, each run of
    several files compared."""
    from asynctrace.analysis.ranks import compare_runs

    return compare_runs(reports)


def _print_text(args: argparse.Namespace, reports: list[Report], runs: list[RunComparison]) -> None:
    from asynctrace.render.text import render_report

    console = _console()
    for r in reports:
        render_report(r, console, steps=args.steps, top_sites=args.top)
        console.print()
    if runs:
        from asynctrace.render.ranks import render_runs

        render_runs(runs, console)


def _analyze_traces(
    args: argparse.Namespace, trace_paths: list[Path], scheduler: str | None
) -> ManyReports:
    """The folder's traces through :func:`asynctrace.analyze_many`, with a progress bar on
    stderr where it is a terminal (never with ``--json`` into a pipe)."""
    from asynctrace._commands._progress import FileProgress
    from asynctrace.files.many import analyze_many, file_size

    sizes = sum(file_size(p) for p in trace_paths)
    show = (
        len(trace_paths) > 1 and sys.stderr.isatty() and not (args.json and not sys.stdout.isatty())
    )
    with FileProgress(len(trace_paths), sizes, show=show) as progress:
        return analyze_many(
            [str(p) for p in trace_paths],
            workers=args.workers,
            scheduler=scheduler,
            scheduler_timeout_s=getattr(args, "scheduler_timeout", None),
            queue_cap=args.queue_cap,
            keep_sync_calls=args.json,
            on_file=progress.advance,
        )


def _skipped(failed: list[str]) -> int:
    for reason in failed:
        print(f"asynctrace report: skipped {printable(reason)}", file=sys.stderr)
    return 1 if failed else 0
