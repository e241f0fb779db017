"""Many rank files at once: the per-rank map on local processes or a Dask cluster, then the reduce.

:func:`analyze_many` is the I/O side of a multi-rank analysis: each rank file is read and
analysed by a worker (``load`` → ``analyze``), which returns only the :class:`Report`, encoded
as msgpack bytes (a few kB to a few MB, however large the trace); the driver decodes the
reports and reduces them run by run (:func:`~asynctrace.analysis.ranks.compare_runs`: only
files whose rank metadata say they are one job's ranks share a rank table), never holding a
trace model. A worker holds one trace at a time.

Where the map runs:

* ``workers=1`` (or one file): in this process, one file after another;
* ``workers=N``: N local processes (:mod:`asynctrace.files._pool`: one one-process executor
  per slot, so that a worker that dies is known to have held exactly one file; no process is
  left behind, however the map ends);
* ``scheduler=ADDRESS`` (or a ``distributed.Client``): the tasks of an existing Dask
  distributed cluster (:mod:`asynctrace.files._dask`).

The reports, in the order of ``paths``, are the same objects the sequential analysis gives (the
msgpack round trip is exact), so every output built from them is identical.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from asynctrace._extras import require
from asynctrace.analysis.defaults import DEFAULT_QUEUE_CAP
from asynctrace.errors import OptionError, TraceFormatError
from asynctrace.files._dask import _dask_map
from asynctrace.files._pool import (
    MapJob,
    _local_map,
    _main_importable,
    _Result,
    _signals_stop_the_map,
    default_workers,
)
from asynctrace.render.output import fs_name

if TYPE_CHECKING:
    from asynctrace.analysis.ranks import CrossRank, RankComparison, RunComparison
    from asynctrace.analysis.report import Report
    from asynctrace.traces.model import Trace

__all__ = [
    "ExportedFile",
    "FileRun",
    "ManyReports",
    "analyze_many",
    "export_many",
    "file_size",
]


class FileRun(msgspec.Struct, frozen=True, kw_only=True):
    """What happened to one file of the map."""

    source: str
    #: False: unreadable (a bad file) or lost (its worker died); ``error`` says which
    ok: bool
    size_bytes: int
    #: the worker's time on it: load and analysis (0.0 when lost)
    seconds: float
    #: the worker process's peak resident memory so far (0 when unknown or lost)
    peak_rss_bytes: int
    #: "host:pid" of the worker ("" when lost)
    worker: str
    #: the one-line message ("PATH: reason") when not ok
    error: str | None = None
    lost: bool = False


class ManyReports(msgspec.Struct, frozen=True, kw_only=True):
    """The result of :func:`analyze_many`."""

    #: one per readable file, in the order the paths were given
    reports: list[Report]
    #: one per path, in order (failures included)
    files: list[FileRun]
    #: the rank table, slowest rank and per-step skew of the files' one job (the only run of
    #: several files, :func:`~asynctrace.analysis.ranks.job_of`); None where there is none or
    #: more than one: then see ``runs``
    ranks: RankComparison | None
    #: the cross-rank figures of that job; None as ``ranks``
    cross_rank: CrossRank | None
    #: the files grouped into runs, each run of several files compared
    runs: list[RunComparison] = msgspec.field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        """The message of each file that gave no report ("PATH: reason"), in order."""
        return [f.error or f.source for f in self.files if not f.ok]


def _peak_rss() -> int:
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _worker_name() -> str:
    import socket

    return f"{socket.gethostname()}:{os.getpid()}"


def _load(path: str, shown: str) -> Trace:
    """Load ``path``, named ``shown`` (the path as the caller gave it) in the trace and in any
    error: a Dask worker opens the absolute path, but the report reads as the sequential one."""
    from asynctrace.traces.load import load

    try:
        trace = load(path)
    except TraceFormatError as e:
        if shown != path and e.path == path:
            raise TraceFormatError(shown, e.reason) from None
        raise
    if shown != path and trace.source == path:
        trace = msgspec.structs.replace(trace, source=shown)
    return trace


def _analyze(path: str, shown: str, queue_cap: int, keep_sync_calls: bool) -> Report:
    from asynctrace.analysis.report import analyze

    trace = _load(path, shown)
    report = analyze(trace, queue_cap=queue_cap, keep_sync_calls=keep_sync_calls)
    del trace  # one model at a time
    return report


def _analyze_one(path: str, shown: str, queue_cap: int, keep_sync_calls: bool) -> _Result:
    """The map's task, run in a worker: one file → its report as msgpack bytes."""
    t0 = time.perf_counter()
    try:
        data: bytes | str = msgspec.msgpack.encode(
            _analyze(path, shown, queue_cap, keep_sync_calls)
        )
        ok = True
    except TraceFormatError as e:
        data, ok = str(e), False
    return ok, data, time.perf_counter() - t0, _peak_rss(), _worker_name()


def file_size(path: str | os.PathLike[str]) -> int:
    """The size of ``path`` in bytes (0 where it cannot be read)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


_T = TypeVar("_T")


def _map_files(
    paths: Iterable[str | os.PathLike[str]],
    task: Callable[..., _Result],
    task_args: tuple[Any, ...],
    result_type: type[_T],
    *,
    workers: int | None,
    scheduler: Any,
    scheduler_timeout_s: float | None = None,
    on_file: Callable[[FileRun], None] | None,
) -> tuple[list[_T], list[FileRun]]:
    """The map of one task over the files: each worker's result decoded (msgpack) as
    ``result_type``, in the order of ``paths``, and every file's run (failures included);
    ``on_file`` as each file is done."""
    sources = [os.fspath(p) for p in paths]
    sizes = [file_size(p) for p in sources]
    # what the reports and errors call each file: a name that is not UTF-8 cannot go into
    # msgpack or JSON, and one such file must not lose every other rank's output
    shown = [fs_name(p) for p in sources]
    runs: list[FileRun | None] = [None] * len(sources)
    decoded: list[_T | None] = [None] * len(sources)

    def done(i: int, result: _Result | None, lost: str | None) -> None:
        run = runs[i] = _file_run(shown[i], sizes[i], result, lost)
        if result is not None and run.ok:
            assert isinstance(result[1], bytes)
            decoded[i] = msgspec.msgpack.decode(result[1], type=result_type)
        if on_file is not None:
            on_file(run)

    _map(
        MapJob(paths=sources, shown=shown, task=task, task_args=task_args, on_result=done),
        workers=workers,
        scheduler=scheduler,
        scheduler_timeout_s=scheduler_timeout_s,
    )
    return [d for d in decoded if d is not None], [r for r in runs if r is not None]


def _map(
    job: MapJob, *, workers: int | None, scheduler: Any, scheduler_timeout_s: float | None = None
) -> None:
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise OptionError(f"workers={workers!r}: give a whole number >= 1")
    if scheduler is not None:
        _dask_map(job, scheduler, scheduler_timeout_s)
        return
    files = len(job.paths)
    n = default_workers(files) if workers is None else min(workers, files)
    if n <= 1 or not _main_importable():
        for i in range(files):
            job.on_result(i, job.run(i), None)
    else:
        with _signals_stop_the_map() as stop:
            _local_map(job, n, stop)


def _file_run(source: str, size: int, result: _Result | None, lost: str | None) -> FileRun:
    if result is None:
        return FileRun(
            source=source,
            ok=False,
            size_bytes=size,
            seconds=0.0,
            peak_rss_bytes=0,
            worker="",
            error=f"{source}: {lost}",
            lost=True,
        )
    ok, data, seconds, rss, worker = result
    return FileRun(
        source=source,
        ok=ok,
        size_bytes=size,
        seconds=seconds,
        peak_rss_bytes=rss,
        worker=worker,
        error=None if ok else str(data),
    )


def analyze_many(
    paths: Iterable[str | os.PathLike[str]],
    *,
    workers: int | None = None,
    scheduler: Any = None,
    scheduler_timeout_s: float | None = None,
    queue_cap: int = DEFAULT_QUEUE_CAP,
    keep_sync_calls: bool = True,
    on_file: Callable[[FileRun], None] | None = None,
) -> ManyReports:
    """Analyse many rank files (one trace each) and compare the ranks of each run.

    ``workers``: local processes for the per-file map (default: the cores this process may use,
    at most one per file; 1 runs in this process). ``scheduler``: a Dask scheduler address
    (``"tcp://10.0.0.1:8786"``) or a ``distributed.Client``; the map then runs on that cluster
    and ``workers`` is not used. ``scheduler_timeout_s`` bounds the handshake with an address
    (connect, then the scheduler's identity; default ``$ASYNCTRACE_SCHEDULER_TIMEOUT``, else
    10 s): what is no Dask scheduler is one :class:`OptionError`, never a hang. ``on_file`` is
    called in this process as each file is done (for a progress display), in completion order.

    A file that cannot be read (:class:`TraceFormatError`) or whose worker died is recorded in
    :attr:`ManyReports.files` (``ok=False``) and the others go on; any other exception in a
    worker is raised here, as it would be in one process.
    """
    from asynctrace.analysis.ranks import compare_runs, job_of
    from asynctrace.analysis.report import Report

    reports, files = _map_files(
        paths,
        _analyze_one,
        (queue_cap, keep_sync_calls),
        Report,
        workers=workers,
        scheduler=scheduler,
        scheduler_timeout_s=scheduler_timeout_s,
        on_file=on_file,
    )
    runs = compare_runs(reports)
    job = job_of(runs)
    return ManyReports(
        reports=reports,
        files=files,
        ranks=job.ranks if job is not None else None,
        cross_rank=job.cross_rank if job is not None else None,
        runs=runs,
    )


class ExportedFile(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`export_many` wrote for one rank file."""

    source: str
    rank: int | None
    #: table → (file written, rows)
    tables: dict[str, tuple[str, int]]


def _export_one(path: str, shown: str, outdir: str, queue_cap: int) -> _Result:
    """The export map's task, run in a worker: one file → its Parquet tables."""
    from asynctrace.analysis.report import analyze
    from asynctrace.analysis.tables import activity_rows
    from asynctrace.export.parquet import write_rank_tables

    t0 = time.perf_counter()
    try:
        trace = _load(path, shown)
    except TraceFormatError as e:
        return False, str(e), time.perf_counter() - t0, _peak_rss(), _worker_name()
    report = analyze(trace, queue_cap=queue_cap, keep_sync_calls=True)
    rows = activity_rows(trace)
    del trace
    written = write_rank_tables(outdir, report=report, activities=rows, input_path=path)
    done = ExportedFile(
        source=report.source.path,
        rank=report.source.rank,
        tables={k: (str(p), n) for k, (p, n) in written.items()},
    )
    data = msgspec.msgpack.encode(done)
    return True, data, time.perf_counter() - t0, _peak_rss(), _worker_name()


def export_many(
    paths: Iterable[str | os.PathLike[str]],
    outdir: str | os.PathLike[str],
    *,
    workers: int | None = None,
    scheduler: Any = None,
    scheduler_timeout_s: float | None = None,
    queue_cap: int = DEFAULT_QUEUE_CAP,
    on_file: Callable[[FileRun], None] | None = None,
) -> tuple[list[ExportedFile], list[FileRun]]:
    """Write the Parquet tables of every rank file under ``outdir``
    (:mod:`asynctrace.export.parquet`), each file by a worker as in :func:`analyze_many`
    (with a cluster, ``outdir`` must be on a file system the workers share). Returns what was
    written, in the order of ``paths``, and every file's run (failures included)."""
    require("pyarrow", extra="parquet", what="Parquet export", packages="pyarrow")
    return _map_files(
        paths,
        _export_one,
        (os.fspath(outdir), queue_cap),
        ExportedFile,
        workers=workers,
        scheduler=scheduler,
        scheduler_timeout_s=scheduler_timeout_s,
        on_file=on_file,
    )
