"""Columnar tables of one rank as Parquet files, for DuckDB, Polars or pandas.

Four tables, each written as one file per rank in a hive-style layout that DuckDB and Polars
glob and prune by rank::

    OUTDIR/steps/rank=0/rank0.json.gz.parquet        # one row per step (Report.steps)
    OUTDIR/activities/rank=0/rank0.json.gz.parquet   # one row per kernel / memcpy / memset
    OUTDIR/syncs/rank=0/rank0.json.gz.parquet        # one row per synchronizing host call
    OUTDIR/ranks/rank=0/rank0.json.gz.parquet        # one row: the rank's report in brief

The partition column ``rank`` comes from the folder name (``__HIVE_DEFAULT_PARTITION__``, read
as null, where the trace names no rank); every table also has ``source``, the trace file. Every
figure is the report's (steps, syncs, the rank's percentiles) or an analysis result
(:func:`~asynctrace.analysis.tables.activity_rows`: launch links, queue delay,
launch-to-start, step membership): nothing is computed here. Integer nanoseconds, units in the
column names. Needs pyarrow (``pip install 'asynctrace[parquet]'``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from asynctrace._extras import require
from asynctrace.errors import TraceFormatError

if TYPE_CHECKING:
    from asynctrace.analysis.report import Report, TraceFigures
    from asynctrace.analysis.tables import ActivityRows

__all__ = ["TABLES", "rank_partition", "write_rank_tables"]

#: the tables, in the order they are written
TABLES = ("steps", "activities", "syncs", "ranks")

#: hive's name for a null partition value (DuckDB and Polars read it as null)
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _pa() -> Any:
    return require("pyarrow", extra="parquet", what="Parquet export", packages="pyarrow")


def rank_partition(rank: int | None) -> str:
    """The folder of a rank in every table: ``rank=N``."""
    return f"rank={_NULL_PARTITION if rank is None else rank}"


def _int(values: Any, *, null: Any = None) -> Any:
    pa = _pa()
    arr = np.asarray(values, dtype=np.int64)
    return pa.array(arr, type=pa.int64(), mask=None if null is None else np.asarray(null))


def _opt_int(values: list[int | None]) -> Any:
    pa = _pa()
    return pa.array(values, type=pa.int64())


def _steps_table(report: Report, trace: TraceFigures, source: str) -> Any:
    pa = _pa()
    s, x, b = report.steps, trace.steps, report.step_bounds
    return pa.table(
        {
            "source": pa.array([source] * len(s), type=pa.string()),
            "step": _int([r.step for r in s]),
            "name": pa.array([e.name for e in x], type=pa.string()),
            "start_ns": _int([r.start_ns for r in s]),
            "end_ns": _int([e.end_ns for e in x]),
            "frontend_ns": _int([r.frontend_ns for r in s]),
            "activities": _int([e.activities for e in x]),
            "device_start_ns": _opt_int([e.device_start_ns for e in x]),
            "device_end_ns": _opt_int([e.device_end_ns for e in x]),
            "device_ns": _opt_int([r.device_ns for r in s]),
            "gpu_busy_ns": _int([k.busy_ns for k in b]),
            "gpu_idle_ns": _int([k.idle_ns for k in b]),
            "sync_count": _int([r.sync_count for r in s]),
            "sync_wait_ns": _int([r.sync_wait_ns for r in s]),
            "run_ahead_ns": _opt_int([r.run_ahead_ns for r in s]),
            "queue_max": _int([e.queue_max for e in x]),
            "in_flight": _int([r.in_flight for r in s]),
        }
    )


def _activities_table(rows: ActivityRows, source: str) -> Any:
    pa = _pa()
    unmatched = ~rows.matched
    n = len(rows.start_ns)
    return pa.table(
        {
            "source": pa.array([source] * n, type=pa.string()),
            "kind": pa.array(rows.kind, type=pa.string()),
            "name": pa.array(rows.name, type=pa.string()),
            "device": pa.array(rows.device, type=pa.int32()),
            "stream": pa.array(rows.stream, type=pa.string()),
            "start_ns": _int(rows.start_ns),
            "dur_ns": _int(rows.dur_ns),
            "correlation": _int(rows.correlation),
            "matched": pa.array(rows.matched, type=pa.bool_()),
            "launch_op": pa.array(rows.launch_op, type=pa.string()),
            "launch_start_ns": _int(rows.launch_start_ns, null=unmatched),
            "launch_end_ns": _int(rows.launch_end_ns, null=unmatched),
            "queue_delay_ns": _int(rows.queue_delay_ns, null=unmatched),
            "launch_to_start_ns": _int(rows.launch_to_start_ns, null=unmatched),
            "step": _int(rows.step, null=rows.step < 0),
        }
    )


def _syncs_table(trace: TraceFigures, source: str) -> Any:
    pa = _pa()
    c = trace.syncs.calls
    return pa.table(
        {
            "source": pa.array([source] * len(c), type=pa.string()),
            "op": pa.array([x.op for x in c], type=pa.string()),
            "start_ns": _int([x.start_ns for x in c]),
            "dur_ns": _int([x.dur_ns for x in c]),
            "pid": _int([x.pid for x in c]),
            "tid": _int([x.tid for x in c]),
            "step": _opt_int([x.step for x in c]),
            "site": pa.array([x.site for x in c], type=pa.string()),
        }
    )


def _ranks_table(report: Report, trace: TraceFigures, source: str) -> Any:
    pa = _pa()
    t, launch = report.source, trace.launch
    steps = report.steps
    row: dict[str, Any] = {
        "source": pa.array([source], type=pa.string()),
        "format": pa.array([t.format], type=pa.string()),
        "device": pa.array([t.device], type=pa.string()),
        "world_size": _opt_int([t.world_size]),
        "events": _int([t.events]),
        "step_source": pa.array([trace.step_source], type=pa.string()),
        "steps": _int([len(steps)]),
        "frontend_ns_total": _int([sum(x.frontend_ns for x in steps)]),
        "activities": _int([trace.activities.total]),
        "launch_matched": _int([launch.matched]),
        "launch_unmatched": _int([launch.unmatched]),
    }
    for figure, p in (
        ("queue_delay", launch.queue_delay_ns),
        ("launch_to_start", launch.launch_to_start_ns),
    ):
        for name in ("p50", "p90", "p99", "max"):
            row[f"{figure}_{name}_ns"] = _int([getattr(p, name)])
    row["sync_count"] = _int([trace.syncs.count])
    row["sync_total_ns"] = _int([trace.syncs.total_ns])
    row["verdict"] = pa.array([report.verdict.code], type=pa.string())
    return pa.table(row)


def write_rank_tables(
    outdir: str | os.PathLike[str], *, report: Report, activities: ActivityRows
) -> dict[str, tuple[Path, int]]:
    """Write the four tables of one rank under ``outdir``; table → (file, rows).

    ``report`` must keep its sync calls (``analyze(..., keep_sync_calls=True)``). Each file is
    written whole or not at all (a ``.tmp`` renamed over it); a file of the same rank and source
    from an earlier export is replaced.
    """
    trace = report.trace
    if trace is None:
        raise TraceFormatError(
            report.source.path, "a session's records have no trace tables: export traces"
        )
    _pa()  # or the install hint
    import pyarrow.parquet as pq

    source = report.source.path
    tables = {
        "steps": _steps_table(report, trace, source),
        "activities": _activities_table(activities, source),
        "syncs": _syncs_table(trace, source),
        "ranks": _ranks_table(report, trace, source),
    }
    assert tuple(tables) == TABLES
    part = rank_partition(report.source.rank)
    name = Path(source).name + ".parquet"
    out: dict[str, tuple[Path, int]] = {}
    for table, data in tables.items():
        folder = Path(outdir) / table / part
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        tmp = path.with_name(path.name + ".tmp")
        try:
            pq.write_table(data, tmp, compression="zstd")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        out[table] = (path, int(data.num_rows))
    return out
