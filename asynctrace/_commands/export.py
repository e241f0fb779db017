"""``asynctrace export PATH... --parquet OUTDIR``: columnar tables of every rank, for DuckDB.

Each trace (a folder: each trace in it, as ``report`` picks them) is analysed by a worker that
writes its steps, activities, syncs and rank tables as Parquet under OUTDIR
(:mod:`asynctrace.export.parquet`), one file per rank and table. A file that cannot be read is
named on stderr and skipped (exit status 1), as in ``report DIR``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asynctrace._commands.report import _at_least, add_queue_cap
from asynctrace.errors import TraceFormatError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="Kineto traces, Nsight Systems .sqlite exports, or folders of them (one per rank)",
    )
    parser.add_argument(
        "--parquet",
        required=True,
        metavar="OUTDIR",
        help="write OUTDIR/{steps,activities,syncs,ranks}/rank=N/FILE.parquet; needs "
        "asynctrace[parquet]",
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


def _traces(paths: list[str]) -> list[Path]:
    from asynctrace.traces.load import find_traces

    out: list[Path] = []
    for text in paths:
        p = Path(text)
        if not p.exists():
            raise TraceFormatError(str(p), "no such file or directory")
        if p.is_dir():
            out.extend(find_traces(p))  # traces only: session records are not exported
        else:
            out.append(p)
    return out


def run(args: argparse.Namespace) -> int:
    from asynctrace._commands._progress import FileProgress
    from asynctrace._extras import require
    from asynctrace._many import export_many, file_size
    from asynctrace._output import output_folder

    # before any work: the install hints (one line, exit 2)
    require("pyarrow", extra="parquet", what="--parquet", packages="pyarrow")
    if args.scheduler is not None:
        require("distributed", extra="dask", what="--scheduler", packages="dask distributed")
    traces = _traces(args.paths)
    outdir = output_folder(args.parquet, option="--parquet")
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
    failed = [r.error or r.source for r in runs if not r.ok]
    if not exported:
        raise TraceFormatError(", ".join(args.paths), f"nothing readable ({'; '.join(failed)})")
    rows: dict[str, int] = {}
    for e in exported:
        for table, (_, n) in e.tables.items():
            rows[table] = rows.get(table, 0) + n
    summary = ", ".join(f"{table} {n}" for table, n in rows.items())
    print(f"wrote {len(exported)} rank(s) under {outdir} (rows: {summary})")
    print(
        f"  duckdb -c \"SELECT * FROM '{outdir}/steps/*/*.parquet' "
        'ORDER BY frontend_ns DESC LIMIT 10"'
    )
    for reason in failed:
        print(f"asynctrace export: skipped {reason}", file=sys.stderr)
    return 1 if failed else 0
