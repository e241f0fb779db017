"""``asynctrace annotate TRACE -o OUT``: the trace plus an "asynctrace" overlay process.

Open OUT in Perfetto UI, chrome://tracing or TensorBoard's trace viewer (docs/viewing.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from asynctrace._output import output_file, write_failed
from asynctrace.errors import TraceFormatError
from asynctrace.records import is_records_name

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
    from asynctrace.export.chrome import overlay_source, write_annotated
    from asynctrace.traces._io import sniff
    from asynctrace.traces.load import load

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
    # by content, not suffix: an Nsight Systems export may be named .sqlite3, .db or anything,
    # and would otherwise be read as a JSON trace and called malformed
    if sniff(src) == "sqlite":
        raise TraceFormatError(
            str(src),
            "an SQLite file, the format of Nsight Systems exports: annotate takes Kineto/Chrome "
            "traces (.json or .json.gz), not Nsight Systems exports (`asynctrace report` reads "
            "those)",
        )
    if is_records_name(src.name):
        raise TraceFormatError(
            str(src),
            "session records, not a trace: annotate takes Kineto/Chrome traces (.json or "
            ".json.gz, as torch.profiler writes them: asynctrace.trace(profile=True) does); "
            "`asynctrace report` and `asynctrace plot` read records",
        )
    output_file(out, what="the annotated trace", inputs=[src])
    trace = load(src)
    # once: the report and the idle gaps beside it (the "device idle" track)
    analysis = analyze_detail(trace)
    report = analysis.report
    source = overlay_source(trace, analysis=analysis)
    del analysis
    del trace  # its columns need not sit beside the trace's text, read again to be copied
    try:
        write_annotated(src, out, source)
    except OSError as e:  # reading the trace raised TraceFormatError: this is the write
        raise write_failed(out, e, "the annotated trace") from None
    print(
        f"wrote {out} ({len(report.steps)} steps, {report.syncs.count} syncs, "
        f"{len(report.queue)} streams, {len(source.gaps.start_ns) if source.gaps else 0} "
        "idle gaps)",
        file=sys.stdout,
    )
    return 0
