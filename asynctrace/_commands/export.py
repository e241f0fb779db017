"""``asynctrace export PATH... --parquet OUTDIR``: columnar tables of every rank, for DuckDB.

Each trace (a folder: each trace in it, as ``report`` picks them) is analysed by a worker that
writes its steps, activities, syncs, sync sites and rank tables as Parquet under OUTDIR
(:mod:`asynctrace.export.parquet`), one file per input and table. A session's records (given,
or in a folder) are read here and give their steps and sync-site tables. A file that cannot be
read, or whose name is not UTF-8, is named on stderr (escaped) and skipped (exit status 1), as
in ``report DIR``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from asynctrace._commands.report import _at_least, add_queue_cap
from asynctrace.errors import AsyncTraceError, TraceFormatError
from asynctrace.render.output import fs_name, is_utf8
from asynctrace.render.printable import printable

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="Kineto traces, Nsight Systems .sqlite exports, session records, or folders of "
        "them (one per rank)",
    )
    parser.add_argument(
        "--parquet",
        required=True,
        metavar="OUTDIR",
        help="write OUTDIR/TABLE/rank=N/FILE.parquet (TABLE: steps, activities, syncs, "
        "sync_sites, ranks); needs asynctrace[parquet]",
    )
    parser.add_argument(
        "--workers",
        type=_at_least(1),
        default=None,
        metavar="N",
        help="local processes (default: the number of cores, at most one per file)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        default=None,
        help="run on an existing Dask cluster (the workers must see the files and OUTDIR); "
        "needs asynctrace[dask]",
    )
    add_queue_cap(parser)


def _shown(text: str) -> str:
    """``text`` safe to print: a file name's odd bytes (not UTF-8) as ``\\xNN``, control
    characters escaped as ``report`` shows them (:func:`asynctrace.render.printable.printable`)."""
    return printable(fs_name(text))


def _inputs(paths: list[str], skipped: list[str]) -> tuple[list[Path], list[Path]]:
    """The traces and the session records to export; a file whose name is not UTF-8 goes to
    ``skipped`` (Parquet strings are UTF-8: its ``source`` column could not name it)."""
    from asynctrace.files.sources import find_sources, source_kind

    traces: list[Path] = []
    records: list[Path] = []
    for text in paths:
        p = Path(text)
        if not p.exists():
            raise TraceFormatError(str(p), "no such file or directory")
        if p.is_dir():
            found = find_sources(p)
            candidates = [(q, False) for q in found.traces] + [(q, True) for q in found.records]
        else:
            candidates = [(p, source_kind(p.name) == "records")]
        for q, is_records in candidates:
            if not is_utf8(str(q)):
                skipped.append(
                    f"{q}: the name is not UTF-8, which the tables' source column cannot hold; "
                    "rename the file to export it"
                )
            else:
                (records if is_records else traces).append(q)
    return traces, records


def _export_records(
    paths: list[Path], outdir: Path, failed: list[str]
) -> list[dict[str, tuple[Path, int]]]:
    """Each session's records, read and written here (reading them is the work)."""
    from asynctrace.analysis.report import analyze
    from asynctrace.export.parquet import write_rank_tables
    from asynctrace.files.sources import load_source

    out = []
    for p in paths:
        try:
            report = analyze(load_source(p))
        except TraceFormatError as e:
            failed.append(str(e))
            continue
        out.append(write_rank_tables(outdir, report=report, input_path=p))
    return out


def run(args: argparse.Namespace) -> int:
    from asynctrace._commands._progress import FileProgress
    from asynctrace._extras import require
    from asynctrace.files.many import export_many, file_size
    from asynctrace.render.output import output_folder

    # before any work: the install hints (one line, exit 2)
    require("pyarrow", extra="parquet", what="--parquet", packages="pyarrow")
    if args.scheduler is not None:
        require("distributed", extra="dask", what="--scheduler", packages="dask distributed")
    if not is_utf8(os.path.abspath(args.parquet)):
        # the workers report the files they wrote as msgpack, whose strings are UTF-8
        raise AsyncTraceError(
            f"--parquet {_shown(args.parquet)}: the name is not UTF-8; choose another folder"
        )
    failed: list[str] = []
    traces, records = _inputs(args.paths, failed)
    outdir = output_folder(args.parquet, option="--parquet")
    written: list[dict[str, tuple[str, int]]] = []
    if traces:
        show = len(traces) > 1 and sys.stderr.isatty()
        with FileProgress(len(traces), sum(file_size(p) for p in traces), show=show) as progress:
            exported, runs = export_many(
                [str(p) for p in traces],
                outdir.resolve(),  # the workers may run elsewhere
                workers=args.workers,
                scheduler=args.scheduler,
                queue_cap=args.queue_cap,
                on_file=progress.advance,
            )
        failed.extend(r.error or r.source for r in runs if not r.ok)
        written.extend(e.tables for e in exported)
    for local in _export_records(records, outdir, failed):
        written.append({k: (os.fspath(f), n) for k, (f, n) in local.items()})
    if not written:
        raise TraceFormatError(
            _shown(", ".join(args.paths)), f"nothing readable ({_shown('; '.join(failed))})"
        )
    rows: dict[str, int] = {}
    for tables in written:
        for table, (_, n) in tables.items():
            rows[table] = rows.get(table, 0) + n
    summary = ", ".join(f"{table} {n}" for table, n in rows.items())
    print(_shown(f"wrote {len(written)} rank(s) under {outdir} (rows: {summary})"))
    print(
        _shown(
            f"  duckdb -c \"SELECT * FROM '{outdir}/steps/*/*.parquet' "
            'ORDER BY frontend_ns DESC LIMIT 10"'
        )
    )
    for reason in failed:
        print(f"asynctrace export: skipped {_shown(reason)}", file=sys.stderr)
    return 1 if failed else 0
