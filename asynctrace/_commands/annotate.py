"""``asynctrace annotate TRACE -o OUT``: the trace plus an "asynctrace" overlay process.

Open OUT in Perfetto UI, chrome://tracing or TensorBoard's trace viewer (docs/viewing.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from asynctrace.errors import TraceFormatError
from asynctrace.render.output import output_file, write_failed

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", metavar="TRACE", help="a Kineto/Chrome trace (.json or .json.gz)")
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="where to write the annotated trace (gzip when it ends in .gz)",
    )


def run(args: argparse.Namespace) -> int:
    from asynctrace.analysis.report import analyze_detail
    from asynctrace.export.chrome import annotate_file, overlay_source
    from asynctrace.files.sources import load_source
    from asynctrace.traces.model import Trace
    from asynctrace.traces.reading import sniff

    src = Path(args.trace)
    out = Path(args.output)
    # realpath, not Path.resolve(): a symlink loop raises RuntimeError there, and is said by
    # the reader below as any unreadable file is
    if os.path.realpath(src) == os.path.realpath(out):
        raise TraceFormatError(
            str(out), "OUT is TRACE: choose another file for the annotated trace"
        )
    if src.is_dir():
        raise TraceFormatError(str(src), "is a folder: annotate one trace file at a time")
    # by content, before it is read: an Nsight Systems export may be named .sqlite3, .db or
    # anything, and has no Chrome trace text to copy
    if sniff(src) == "sqlite":
        raise TraceFormatError(
            str(src),
            "an SQLite file, the format of Nsight Systems exports: annotate takes Kineto/Chrome "
            "traces (.json or .json.gz), not Nsight Systems exports (`asynctrace report` reads "
            "those)",
        )
    output_file(out, what="the annotated trace", inputs=[src])
    loaded = load_source(src)
    if not isinstance(loaded, Trace):
        raise TraceFormatError(
            str(src),
            "session records, not a trace: annotate takes Kineto/Chrome traces (.json or "
            ".json.gz, as torch.profiler writes them: asynctrace.trace(profile=True) does); "
            "`asynctrace report` and `asynctrace plot` read records",
        )
    # analysed once, and reduced to what the overlay draws (the report, idle gaps, queue
    # depths): the trace model need not sit beside the trace's text, read again to be copied
    source = overlay_source(analyze_detail(loaded))
    del loaded
    try:
        annotate_file(src, out, source)
    except OSError as e:  # reading the trace raised TraceFormatError: this is the write
        raise write_failed(out, e, "the annotated trace") from None
    figures = source.report.trace
    assert figures is not None  # a trace's report
    print(
        f"wrote {out} ({len(source.report.steps)} steps, {figures.syncs.count} syncs, "
        f"{len(figures.queue)} streams, {len(source.gaps.start_ns)} idle gaps)",
        file=sys.stdout,
    )
    return 0
