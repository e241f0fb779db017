"""Many rank files at once: the per-rank map on local processes or a Dask cluster, then the reduce.

:func:`analyze_many` is the I/O side of a multi-rank analysis: each rank file is read and
analysed by a worker (``load`` → ``analyze``), which returns only the :class:`Report`, encoded
as msgpack bytes (a few kB to a few MB, however large the trace); the driver decodes the
reports and reduces them run by run (:func:`~asynctrace.analysis.ranks.compare_runs`: only
files whose rank metadata say they are one job's ranks share a rank table), never holding a
trace model. A worker holds one trace at a time.

Where the map runs:

* ``workers=1`` (or one file): in this process, one file after another;
* ``workers=N``: N local processes, each a standard-library ``ProcessPoolExecutor`` of one
  process (``forkserver`` where the platform has it, else ``spawn``: safe beside threads, and
  nothing of the caller's state is copied). One executor per slot, so that a worker process
  that dies (killed by a signal, out of memory, a crash) is known to have held exactly one
  file: that file is named as lost, its slot gets a fresh process, the other files go on;
* ``scheduler=ADDRESS`` (or a ``distributed.Client``): the tasks of an existing Dask
  distributed cluster (``pip install 'asynctrace[dask]'``). The workers must see the files at
  the same paths (a shared file system) and have asynctrace installed. Dask re-runs a task whose
  worker died; one that keeps killing its workers (``distributed.scheduler.allowed-failures``)
  comes back as lost.

The reports, in the order of ``paths``, are the same objects the sequential analysis gives (the
msgpack round trip is exact), so every output built from them is identical.

A local map leaves no process behind, however it ends: Ctrl-C (SIGINT), SIGTERM or SIGHUP to
this process, a worker raising, or an error here stops and reaps every worker before the
exception goes on; the multiprocessing helpers (forkserver, resource tracker) then end with this
process. Workers ignore SIGINT (a terminal's Ctrl-C reaches the whole process group): this
process stops them. SIGTERM and SIGHUP, for the duration of the map, unwind it as Ctrl-C does
and then do what they would have done: the handler that was there, or the process ends by that
signal (its exit status; ``| tail -1`` returns).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from asynctrace._extras import require
from asynctrace.analysis._defaults import DEFAULT_QUEUE_CAP
from asynctrace.errors import OptionError, TraceFormatError
from asynctrace.render.output import fs_name

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from asynctrace.analysis.many import CrossRank
    from asynctrace.analysis.ranks import RankComparison, RunComparison
    from asynctrace.analysis.report import Report
    from asynctrace.traces.model import Trace

__all__ = [
    "ExportedFile",
    "FileRun",
    "ManyReports",
    "analyze_many",
    "default_workers",
    "export_many",
    "file_size",
    "scheduler_timeout",
]

#: what a worker sends back: ok, the msgpack report or the error message, seconds, peak RSS
#: in bytes, and which worker it was ("host:pid")
_Result = tuple[bool, bytes | str, float, int, str]

_LOST = (
    "the worker analysing it was lost (its process ended: killed by a signal, out of memory "
    "or crashed); the other files were analysed; report this file alone to see why"
)


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


def default_workers(n_files: int) -> int:
    """The number of cores this process may use, at most one per file (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, n_files))


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


def _main_importable() -> bool:
    """Whether a ``spawn`` / ``forkserver`` worker can import this process's main module as
    multiprocessing does: not where it has a file name that is no file (``python - <<EOF``:
    ``<stdin>``), where every worker would die on start; the map then runs in this process."""
    main = sys.modules.get("__main__")
    if getattr(main, "__spec__", None) is not None:
        return True
    path = getattr(main, "__file__", None)
    return path is None or os.path.isfile(path)


def _mp_context() -> Any:
    import multiprocessing

    method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
    return multiprocessing.get_context(method)


OnResult = Callable[[int, "_Result | None", str | None], None]

#: how long a worker told to stop (SIGTERM) has before it is killed, and then to be reaped
_STOP_GRACE_S = 5.0


class _Stopped(BaseException):
    """SIGTERM or SIGHUP during a local map: unwinds it as KeyboardInterrupt does (a
    BaseException, so that no ``except Exception`` on the way swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _worker_init() -> None:
    # a terminal's Ctrl-C goes to the whole process group: the parent stops the workers, so a
    # worker neither dies half way with a traceback of its own nor outlives the parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Stop:
    """The signal that stops a local map, raised where the map can unwind cleanly: while it
    waits for its workers (:meth:`waiting`), or at its next :meth:`check`. Raised anywhere
    else, in the middle of starting a worker, it could leave that worker unknown to the
    cleanup. A second signal while stopping is held, so the cleanup runs to the end."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._waiting = False

    def handler(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            return  # stopping already
        self.signum = signum
        if self._waiting:
            self.check()

    def check(self) -> None:
        if self.signum is None:
            return
        self._waiting = False
        if self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Stopped(self.signum)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        self._waiting = True
        try:
            self.check()  # one that came just before
            yield
        finally:
            self._waiting = False


@contextlib.contextmanager
def _signals_stop_the_map() -> Iterator[_Stop]:
    """SIGINT, SIGTERM and SIGHUP stop the map (:class:`_Stop`; its ``finally`` stops the
    workers). Afterwards SIGTERM and SIGHUP do what they would have done: the previous Python
    handler is called, or (the default) the process ends by that signal. A signal ignored
    before stays ignored, a SIGINT handler of the caller's own stays in place; outside the main
    thread nothing is installed (Python runs handlers there only)."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous: dict[int, Any] = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        old = signal.getsignal(sig)
        if old is signal.SIG_IGN or old is None:
            continue  # ignored, or set outside Python: left as it is
        if sig == signal.SIGINT and old is not signal.default_int_handler:
            continue  # the caller's own Ctrl-C handler: theirs to run (the finally still cleans up)
        previous[sig] = old
        signal.signal(sig, stop.handler)
    try:
        yield stop
    except _Stopped:
        pass  # the workers are stopped: now what the signal would have done
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    stopped = stop.signum
    if stopped is None:
        return
    if stopped == signal.SIGINT:
        raise KeyboardInterrupt  # one that came as the map ended: not lost
    old = previous[stopped]
    if callable(old):
        old(stopped, None)
        raise OptionError(f"the map over the files was stopped by {signal.Signals(stopped).name}")
    sys.stderr.flush()
    signal.raise_signal(stopped)  # the default action: the process ends by this signal
    raise SystemExit(128 + stopped)  # where the default action is not to end (never here)


def _stop_workers(executors: Sequence[ProcessPoolExecutor]) -> None:
    """Stop every worker of ``executors`` now and reap it: SIGTERM, then SIGKILL after
    :data:`_STOP_GRACE_S`; the executors' queued files are cancelled."""
    procs = [p for ex in executors for p in list((getattr(ex, "_processes", None) or {}).values())]
    for p in procs:
        with contextlib.suppress(OSError, ValueError):
            p.terminate()
    for ex in executors:
        ex.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + _STOP_GRACE_S
    for p in procs:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.exitcode is None:
                p.kill()
                p.join(_STOP_GRACE_S)
    for ex in executors:
        # its thread sees the workers gone and lets go of the queues (their semaphores would
        # be reported as leaked by the resource tracker otherwise)
        manager = getattr(ex, "_executor_manager_thread", None)
        if isinstance(manager, threading.Thread):
            manager.join(_STOP_GRACE_S)


def _stop_helpers() -> None:
    """Stop and reap multiprocessing's forkserver and resource tracker after a map that did not
    end cleanly (they start again on the next use). They would end with this process, but
    where it ends by a signal or ``os._exit`` they are left to whatever reaps orphans (in a
    container, maybe nothing)."""
    import gc
    import multiprocessing
    from multiprocessing import forkserver, resource_tracker

    if multiprocessing.active_children():
        return  # processes of the caller's own still use them: they end with this process
    gc.collect()  # the executors' queues: their semaphores unregister as they go
    for helper in (
        getattr(forkserver, "_forkserver", None),
        getattr(resource_tracker, "_resource_tracker", None),
    ):
        stop = getattr(helper, "_stop", None)
        if callable(stop):
            with contextlib.suppress(Exception):
                stop()


def _local_map(
    paths: Sequence[str],
    shown: Sequence[str],
    workers: int,
    task: Callable[..., _Result],
    task_args: tuple[Any, ...],
    on_result: OnResult,
    stop: _Stop,
) -> None:
    """Run the task for every path on ``workers`` one-process executors; ``on_result(i,
    result, None)`` per file, or ``on_result(i, None, reason)`` for a file whose worker died."""
    # imported here: multiprocessing brings tempfile and shutil, which one process never needs
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = _mp_context()
    slots: list[ProcessPoolExecutor | None] = [None] * workers
    pending = deque(range(len(paths)))
    running: dict[Future[_Result], tuple[int, int]] = {}

    def feed(slot: int) -> None:
        while pending:
            i = pending[0]
            ex = slots[slot]
            if ex is None:
                ex = slots[slot] = ProcessPoolExecutor(
                    max_workers=1, mp_context=ctx, initializer=_worker_init
                )
            try:
                fut = ex.submit(task, paths[i], shown[i], *task_args)
            except BrokenProcessPool:
                # its process died between two files: the file never started; a fresh one
                ex.shutdown(wait=False, cancel_futures=True)
                slots[slot] = None
                continue
            pending.popleft()
            running[fut] = (i, slot)
            return

    clean = False
    try:
        for slot in range(workers):
            feed(slot)
        while running:
            stop.check()
            with stop.waiting():
                done, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: running[f][0]):
                i, slot = running.pop(fut)
                try:
                    result = fut.result()
                except BrokenProcessPool:
                    lost = slots[slot]
                    if lost is not None:
                        lost.shutdown(wait=False, cancel_futures=True)
                    slots[slot] = None
                    on_result(i, None, _LOST)
                else:
                    on_result(i, result, None)
                feed(slot)
        stop.check()  # one that came after the last wait
        clean = True
    finally:
        alive = [ex for ex in slots if ex is not None]
        if clean:
            for ex in alive:
                ex.shutdown(wait=True)
        else:
            # interrupted, stopped by a signal, or an exception: no worker may outlive this
            # (one would hold this process's stdout, and `| tail -1` would never return)
            _stop_workers(alive)
            _stop_helpers()


#: how long the handshake with a Dask scheduler may take (connect, then its identity), unless
#: ``scheduler_timeout_s`` or this environment variable says otherwise
SCHEDULER_TIMEOUT_ENV = "ASYNCTRACE_SCHEDULER_TIMEOUT"
DEFAULT_SCHEDULER_TIMEOUT_S = 10.0


def scheduler_timeout(value: float | None = None) -> float:
    """The handshake bound in seconds: ``value``, else ``$ASYNCTRACE_SCHEDULER_TIMEOUT``, else
    :data:`DEFAULT_SCHEDULER_TIMEOUT_S`. Raises :class:`OptionError` for one that is no
    positive number."""
    where = "scheduler_timeout_s"
    if value is None:
        text = os.environ.get(SCHEDULER_TIMEOUT_ENV, "").strip()
        if not text:
            return DEFAULT_SCHEDULER_TIMEOUT_S
        where = f"${SCHEDULER_TIMEOUT_ENV}"
        try:
            value = float(text)
        except ValueError:
            raise OptionError(f"{where}={text!r}: give a number of seconds > 0") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise OptionError(f"{where}={value!r}: give a number of seconds > 0")
    if value == float("inf"):
        raise OptionError(f"{where}={value!r}: give a finite number of seconds")
    return float(value)


def _is_tcp(address: str) -> bool:
    return "://" not in address or address.startswith("tcp://")


async def _identity(address: str, timeout_s: float) -> Any:
    from distributed.comm.core import connect

    comm = await connect(address, timeout=timeout_s)  # type: ignore[no-untyped-call]
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _check_scheduler(address: str, timeout_s: float) -> None:
    """Connect to ``address`` and ask its identity, all of it within ``timeout_s``: a Dask
    scheduler answers ``{"type": "Scheduler", ...}``. Anything else is one
    :class:`OptionError`: a silent listener (which ``distributed.Client`` waits on forever), an
    HTTP or SSH server (whose first bytes Dask reads as a frame length, and tries to allocate
    exabytes), nothing listening. Runs on a thread of its own with its own event loop, so that
    a caller inside an event loop (a notebook) can call it too."""
    import asyncio

    outcome: list[Any] = []

    def probe() -> None:
        try:
            outcome.append(asyncio.run(asyncio.wait_for(_identity(address, timeout_s), timeout_s)))
        except BaseException as e:  # reported below, in the caller's thread
            outcome.append(e)

    t = threading.Thread(target=probe, name="asynctrace-scheduler-check", daemon=True)
    t.start()
    t.join(timeout_s + 5.0)  # the wait_for above ends it; this bound is in case it cannot
    hint = (
        f"give the address of a Dask scheduler (tcp://host:8786); a slow one: "
        f"--scheduler-timeout S or ${SCHEDULER_TIMEOUT_ENV}"
    )
    if not outcome or isinstance(outcome[0], (asyncio.TimeoutError, TimeoutError)):
        raise OptionError(f"{address}: no Dask scheduler answered within {timeout_s:g} s; {hint}")
    got = outcome[0]
    if isinstance(got, OSError):
        raise OptionError(f"cannot reach the Dask scheduler at {address}: {got}; {hint}")
    if isinstance(got, BaseException) or not (
        isinstance(got, dict) and got.get("type") == "Scheduler"
    ):
        what = type(got).__name__ if isinstance(got, BaseException) else "another answer"
        raise OptionError(
            f"{address}: what answers there is not a Dask scheduler ({what}; an HTTP or SSH "
            f"port?); {hint}"
        )


def _client(scheduler: Any, timeout_s: float | None = None) -> tuple[Any, bool]:
    """A ``distributed.Client`` for ``scheduler`` (an address, or a client), and whether we
    opened it (and so close it). An address is checked first (:func:`_check_scheduler`), so
    that no wrong one hangs or crashes."""
    import asyncio

    distributed = require(
        "distributed",
        extra="dask",
        what="--scheduler (a Dask cluster)",
        packages="dask distributed",
    )
    if isinstance(scheduler, distributed.Client):
        return scheduler, False
    if not isinstance(scheduler, str) or not scheduler:
        raise OptionError(
            f"scheduler={scheduler!r}: give a Dask scheduler address (tcp://host:8786) or a "
            "distributed.Client"
        )
    bound = scheduler_timeout(timeout_s)
    if _is_tcp(scheduler):
        # other transports (tls://, ucx://...) need their security settings: the Client's
        # own connect timeout bounds them
        _check_scheduler(scheduler, bound)
    try:
        client = distributed.Client(scheduler, set_as_default=False, timeout=bound)
    except (OSError, asyncio.TimeoutError) as e:
        raise OptionError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
    return client, True


def _dask_map(
    paths: Sequence[str],
    shown: Sequence[str],
    scheduler: Any,
    task: Callable[..., _Result],
    task_args: tuple[Any, ...],
    on_result: OnResult,
    timeout_s: float | None,
) -> None:
    import distributed

    client, owned = _client(scheduler, timeout_s)
    try:
        stamp = f"{os.getpid()}-{time.monotonic_ns()}"
        futures = client.map(
            task,
            [os.path.abspath(p) for p in paths],  # the workers' working folder may differ
            list(shown),
            *[[a] * len(paths) for a in task_args],
            pure=False,
            key=[f"asynctrace-{task.__name__}-{i}-{stamp}" for i in range(len(paths))],
        )
        index = {f.key: i for i, f in enumerate(futures)}
        lost_types: tuple[type[BaseException], ...] = (
            distributed.KilledWorker,
            distributed.client.FutureCancelledError,
        )
        for fut, value in distributed.as_completed(  # type: ignore[no-untyped-call]
            futures, loop=client.loop, with_results=True, raise_errors=False
        ):
            i = index[fut.key]
            # an errored future gives (type, exception, traceback) here, not the exception
            error = fut.exception() if fut.status == "error" else None
            if fut.status == "cancelled" or isinstance(error, lost_types):
                on_result(i, None, _LOST + f" ({type(error or value).__name__})")
            elif error is not None:
                raise error
            else:
                on_result(i, value, None)
            fut.release()
    finally:
        if owned:
            client.close()


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
        sources,
        shown,
        task,
        task_args,
        workers=workers,
        scheduler=scheduler,
        scheduler_timeout_s=scheduler_timeout_s,
        done=done,
    )
    return [d for d in decoded if d is not None], [r for r in runs if r is not None]


def _map(
    sources: Sequence[str],
    shown: Sequence[str],
    task: Callable[..., _Result],
    task_args: tuple[Any, ...],
    *,
    workers: int | None,
    scheduler: Any,
    scheduler_timeout_s: float | None = None,
    done: OnResult,
) -> None:
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise OptionError(f"workers={workers!r}: give a whole number >= 1")
    if scheduler is not None:
        _dask_map(sources, shown, scheduler, task, task_args, done, scheduler_timeout_s)
        return
    n = default_workers(len(sources)) if workers is None else min(workers, len(sources))
    if n <= 1 or not _main_importable():
        for i, p in enumerate(sources):
            done(i, task(p, shown[i], *task_args), None)
    else:
        with _signals_stop_the_map() as stop:
            _local_map(sources, shown, n, task, task_args, done, stop)


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
