"""Columnar tables of one rank as Parquet files, for DuckDB, Polars or pandas.

Each table is written as one file per rank in a hive-style layout that DuckDB and Polars glob
and prune by rank::

    OUTDIR/steps/rank=0/rank0.json.gz.1f3a5c7e9b2d.parquet       # a row per step
    OUTDIR/activities/rank=0/rank0.json.gz.1f3a5c7e9b2d.parquet  # kernel, memcpy, memset
    OUTDIR/syncs/rank=0/rank0.json.gz.1f3a5c7e9b2d.parquet       # synchronizing host call
    OUTDIR/sync_sites/rank=0/rank0.json.gz.1f3a5c7e9b2d.parquet  # a row per sync site
    OUTDIR/ranks/rank=0/rank0.json.gz.1f3a5c7e9b2d.parquet       # the rank's report in brief

A session's records have no events: they give ``steps`` (the same columns, null where only a
trace has the figure) and ``sync_sites`` only (:data:`RECORDS_TABLES`).

The file name is the input's name and 12 hex digits of a hash of its real path
(:func:`table_file_name`): unique per input, so ``a/t.json.gz`` and ``b/t.json.gz`` of one rank
never overwrite each other, and the same on every export of one file, whose re-export replaces
its files. The partition column ``rank`` comes from the folder name
(``__HIVE_DEFAULT_PARTITION__``, read as null, where the input names no rank); every table also
has ``source``, the input file. Every figure is the report's (steps, syncs, the rank's
percentiles) or an analysis result (:func:`~asynctrace.analysis.tables.activity_rows`: launch
links, queue delay, launch-to-start, step membership): nothing is computed here. Integer
nanoseconds, units in the column names. Needs pyarrow (``pip install 'asynctrace[parquet]'``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from asynctrace._extras import require
from asynctrace.errors import TraceFormatError
from asynctrace.records import SyncSite
from asynctrace.render.output import atomic_file, utf8, write_failed

if TYPE_CHECKING:
    from asynctrace.analysis.report import Report, TraceFigures
    from asynctrace.analysis.tables import ActivityRows

__all__ = [
    "RECORDS_TABLES",
    "TABLES",
    "rank_partition",
    "table_file_name",
    "write_rank_tables",
]

#: the tables of a trace, in the order they are written
TABLES = ("steps", "activities", "syncs", "sync_sites", "ranks")
#: the tables of a session's records (no events: no activities, sync calls or trace summary)
RECORDS_TABLES = ("steps", "sync_sites")

#: hive's name for a null partition value (DuckDB and Polars read it as null)
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _pa() -> Any:
    return require("pyarrow", extra="parquet", what="Parquet export", packages="pyarrow")


def rank_partition(rank: int | None) -> str:
    """The folder of a rank in every table: ``rank=N``."""
    return f"rank={_NULL_PARTITION if rank is None else rank}"


def table_file_name(input_path: str | os.PathLike[str]) -> str:
    """The name of an input's file in every table: its own name (odd bytes of a name that is
    not UTF-8 as "?"), then 12 hex digits of a SHA-256 of its real path, then ``.parquet``.

    Two inputs of one name in different folders get different names; one file exported again
    (by any relative path, or a link to it) gets the same name.
    """
    real = os.fsencode(os.path.realpath(input_path))
    digest = hashlib.sha256(real).hexdigest()[:12]
    # the name's start only: with the digest and suffix it must still fit NAME_MAX
    name = utf8(os.path.basename(os.fsdecode(real)))[:180]
    return f"{name}.{digest}.parquet"


def _int(values: Any, *, null: Any = None) -> Any:
    pa = _pa()
    arr = np.asarray(values, dtype=np.int64)
    return pa.array(arr, type=pa.int64(), mask=None if null is None else np.asarray(null))


def _opt_int(values: list[int | None]) -> Any:
    pa = _pa()
    return pa.array(values, type=pa.int64())


def _text(values: list[str | None]) -> Any:
    """Strings from files anyone may have written: "?" for what UTF-8 cannot hold."""
    pa = _pa()
    try:
        return pa.array(values, type=pa.string())
    except UnicodeEncodeError:  # a lone surrogate: a file name's odd byte, a "\\ud800" escape
        return pa.array([None if v is None else utf8(v) for v in values], type=pa.string())


def _steps_table(report: Report, trace: TraceFigures | None, source: str) -> Any:
    """One row per step, for a trace and for a session's records alike: the columns a trace
    alone has are null for records."""
    s = report.steps
    n = len(s)
    x = trace.steps if trace is not None else None
    b = report.step_bounds if trace is not None else None

    def extra(field: str) -> Any:
        return _opt_int([None] * n if x is None else [getattr(e, field) for e in x])

    def bound(field: str) -> Any:
        return _opt_int([None] * n if b is None else [getattr(k, field) for k in b])

    return _pa().table(
        {
            "source": _text([source] * n),
            "step": _int([r.step for r in s]),
            "name": _text([None] * n if x is None else [e.name for e in x]),
            "start_ns": _int([r.start_ns for r in s]),
            "end_ns": extra("end_ns"),
            "frontend_ns": _int([r.frontend_ns for r in s]),
            "data_wait_ns": _int([r.data_wait_ns for r in s]),
            "activities": extra("activities"),
            "device_start_ns": extra("device_start_ns"),
            "device_end_ns": extra("device_end_ns"),
            "device_ns": _opt_int([r.device_ns for r in s]),
            "gpu_busy_ns": bound("busy_ns"),
            "gpu_idle_ns": bound("idle_ns"),
            "sync_count": _int([r.sync_count for r in s]),
            "sync_wait_ns": _int([r.sync_wait_ns for r in s]),
            "run_ahead_ns": _opt_int([r.run_ahead_ns for r in s]),
            "queue_max": extra("queue_max"),
            "in_flight": _int([r.in_flight for r in s]),
            "mem_allocated_bytes": _opt_int([r.mem_allocated_bytes for r in s]),
            "mem_reserved_bytes": _opt_int([r.mem_reserved_bytes for r in s]),
        }
    )


def _activities_table(rows: ActivityRows, source: str) -> Any:
    pa = _pa()
    unmatched = ~rows.matched
    n = len(rows.start_ns)
    return pa.table(
        {
            "source": _text([source] * n),
            "kind": pa.array(rows.kind, type=pa.string()),
            "name": _text(list(rows.name)),
            "device": pa.array(rows.device, type=pa.int32()),
            "stream": _text(list(rows.stream)),
            "start_ns": _int(rows.start_ns),
            "dur_ns": _int(rows.dur_ns),
            "correlation": _int(rows.correlation),
            "matched": pa.array(rows.matched, type=pa.bool_()),
            "launch_op": _text(list(rows.launch_op)),
            "launch_start_ns": _int(rows.launch_start_ns, null=unmatched),
            "launch_end_ns": _int(rows.launch_end_ns, null=unmatched),
            "queue_delay_ns": _int(rows.queue_delay_ns, null=unmatched),
            "launch_to_start_ns": _int(rows.launch_to_start_ns, null=unmatched),
            "step": _int(rows.step, null=rows.step < 0),
        }
    )


@functools.cache
def _field_types(kind: type[msgspec.Struct]) -> dict[str, Any]:
    # msgspec resolves the annotations (strings under `from __future__ import annotations`)
    return {f.name: f.type for f in msgspec.structs.fields(kind)}


def _column(kind: type[msgspec.Struct], items: Sequence[Any], field: str) -> Any:
    """One field of structs as a column, its Arrow type the field's own: ``str`` a string,
    ``int`` an int64, ``int | None`` a nullable int64."""
    values = [getattr(x, field) for x in items]
    t = _field_types(kind)[field]
    if t is str:
        return _text(values)
    if t is int:
        return _int(values)
    if t == (int | None):
        return _opt_int(values)
    raise TypeError(f"{kind.__name__}.{field}: no column type for {t}")


def _struct_table(
    kind: type[msgspec.Struct], items: Sequence[Any], fields: Sequence[str], source: str
) -> Any:
    """A row per struct: ``source``, then ``fields`` in that order."""
    columns = {"source": _text([source] * len(items))}
    columns.update((f, _column(kind, items, f)) for f in fields)
    return _pa().table(columns)


def _syncs_table(trace: TraceFigures, source: str) -> Any:
    from asynctrace.analysis.syncs import SyncCall

    calls = trace.syncs.calls
    return _struct_table(
        SyncCall, calls, ("op", "start_ns", "dur_ns", "pid", "tid", "step", "site"), source
    )


def _sync_sites_table(report: Report, source: str) -> Any:
    """The report's sync sites (a trace's and a session's: the same rows)."""
    sites = report.sync_sites
    return _struct_table(SyncSite, sites, ("site", "op", "count", "wait_ns", "steps"), source)


def _ranks_table(report: Report, trace: TraceFigures, source: str) -> Any:
    pa = _pa()
    t, launch = report.source, trace.launch
    steps = report.steps
    front = report.figures.get("frontend_ns")
    row: dict[str, Any] = {
        "source": _text([source]),
        "format": pa.array([t.format], type=pa.string()),
        "device": _text([t.device]),
        "world_size": _opt_int([t.world_size]),
        "events": _int([t.events]),
        "step_source": pa.array([trace.step_source], type=pa.string()),
        "steps": _int([len(steps)]),
        "frontend_ns_total": _int([front.total if front is not None else 0]),
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
    outdir: str | os.PathLike[str],
    *,
    report: Report,
    activities: ActivityRows | None = None,
    input_path: str | os.PathLike[str] | None = None,
) -> dict[str, tuple[Path, int]]:
    """Write the tables of one rank under ``outdir``; table → (file, rows).

    A trace's report (which must keep its sync calls: ``analyze(..., keep_sync_calls=True)``)
    gives :data:`TABLES` and needs ``activities``; a session's records give
    :data:`RECORDS_TABLES`. ``input_path`` is the file the report was made from, as this
    process opens it (default: the report's source path); it names the files
    (:func:`table_file_name`).

    The rank's tables are written all or none: each goes to an unpredictable temporary file
    (:func:`asynctrace.render.output.atomic_file`: a link planted at a predictable name is never
    written through), and they are renamed into place only once every one is written. A
    failed write raises :class:`~asynctrace.errors.AsyncTraceError` naming the file, and leaves
    no table of this rank changed (and no temporary behind).
    """
    trace = report.trace
    source = report.source.path
    if trace is not None and activities is None:
        raise TraceFormatError(source, "a trace's tables need its activity rows (activities=)")
    _pa()  # or the install hint
    import pyarrow.parquet as pq

    if trace is None:
        tables = {
            "steps": _steps_table(report, None, source),
            "sync_sites": _sync_sites_table(report, source),
        }
        assert tuple(tables) == RECORDS_TABLES
    else:
        assert activities is not None
        tables = {
            "steps": _steps_table(report, trace, source),
            "activities": _activities_table(activities, source),
            "syncs": _syncs_table(trace, source),
            "sync_sites": _sync_sites_table(report, source),
            "ranks": _ranks_table(report, trace, source),
        }
        assert tuple(tables) == TABLES
    part = rank_partition(report.source.rank)
    name = table_file_name(source if input_path is None else input_path)
    out: dict[str, tuple[Path, int]] = {}
    path = Path(outdir)
    table = "tables"
    try:
        # every table's temporary is written and synced before any is renamed: a failure
        # removes them all, and the renames (same folder, nothing left to write) are last
        with contextlib.ExitStack() as renames:
            for table, data in tables.items():
                folder = Path(outdir) / table / part
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / name
                f, _ = renames.enter_context(atomic_file(path))
                pq.write_table(data, f, compression="zstd")
                f.flush()
                os.fsync(f.fileno())
                out[table] = (path, int(data.num_rows))
    except OSError as e:
        # a rename names its target second; a write failed on the table being written
        where = path if e.filename2 is None else Path(os.fsdecode(e.filename2))
        raise write_failed(where, e, f"the {table} table of {source}") from None
    return out
