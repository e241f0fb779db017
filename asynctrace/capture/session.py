"""The capture session: ``asynctrace.trace()``, per-step frontend/device split, records.

A :class:`Session` splits a training loop into steps and measures, per step and without adding
a single synchronization inside the loop, how long the host spent issuing work
(``frontend_ns``), how long it waited for data, how long the device spent executing it, how far
the host ran ahead of the device and how many earlier steps were still in flight. Definitions:
``docs/how-it-works.md``.

How it stays cheap and non-blocking:

* one device marker per step boundary, shared as the end of one step and the start of the next;
* device figures are collected lazily: at each boundary the oldest pending markers are polled
  with a non-blocking ``query()`` and finished steps are written in order; only at exit does the
  session wait for what is still pending (``collected_at_exit``);
* every piece of per-run state is bounded: pending markers (``max_pending``), the window of
  recent steps the summary's medians and the verdict use (``window``), the sync sites; steps are
  streamed to the records file as they complete.

On a synchronous device (the CPU backend) a step's work is done when the host returns, so its
device time is its frontend time and run-ahead and in-flight are zero; the session records them
as such without markers, and the summary says so.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import inspect
import math
import os
import socket
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar, cast, overload

import msgspec

from asynctrace.capture._distributed import RankTable, format_rank_table, rank_and_world
from asynctrace.capture._live import LiveStatus
from asynctrace.capture._nsys import NsysCapture
from asynctrace.capture._writer import RecordsWriter, records_file_name, sanitize_name
from asynctrace.capture.devices import ClockAlignment, CudaDevice, Device, get_device
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import SessionHeader, SessionSummary, StepRecord, SyncSite

if TYPE_CHECKING:
    from asynctrace.capture.profiler import DeepProfiler, Profile
    from asynctrace.capture.syncs import SyncDetector, SyncEvent
    from asynctrace.export.tensorboard import TensorBoardWriter

__all__ = [
    "DEFAULT_MAX_PENDING",
    "DEFAULT_WINDOW",
    "FigureStats",
    "Session",
    "SessionReport",
    "current_session",
    "print_report",
    "trace",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

#: steps whose device figures may wait for their markers at once; beyond, the oldest step is
#: written without device figures (a CUDA launch queue holds ~1k entries, so a real device
#: rarely lets the host run this far ahead)
DEFAULT_MAX_PENDING: Final = 4096
#: recent steps kept for the summary's medians/p90 and the verdict
DEFAULT_WINDOW: Final = 10_000
#: distinct synchronizing source lines tracked per session
_MAX_SYNC_SITES: Final = 256
#: stack frames kept per sync site
_MAX_SITE_STACK: Final = 16
#: records file names tried (time_ns, time_ns + 1, ...) before giving up on writing
_MAX_NAME_TRIES: Final = 1000

_DETECT_MODES: Final = ("auto", "cuda", "lint", "off")

_CPU_NOTE: Final = (
    "the CPU backend executes synchronously: each op is done when Python gets control back, "
    "so device time equals frontend time and run-ahead and in-flight are zero"
)

# The sessions currently active in this process, in the order they started: at most one per
# thread (sessions do not nest); read through current_session().
_active: list[Session] = []
# whether _forget_sessions_in_child is registered to run in forked children (once per process)
_fork_hook_registered = False


def current_session() -> Session | None:
    """The session active in the calling thread, or None."""
    if not _active:
        return None
    tid = threading.get_ident()
    for s in reversed(_active):
        if s._thread == tid:
            return s
    return None


def _forget_sessions_in_child() -> None:
    """After fork: the child (a DataLoader worker, say) inherits copies of the parent's active
    sessions; none of them is the child's to continue, and none may write to the parent's
    records file through the inherited descriptor."""
    for s in _active:
        s._forget_in_child()
    _active.clear()


def _describe_exit(exc: BaseException) -> str | None:
    """The ``error`` a session records for the exception that ended it; None for a clean
    ``sys.exit()`` / ``sys.exit(0)``, an ordinary end of a program, and for ``GeneratorExit``:
    a generator that traces its loop and is closed early (the consumer ``break``s) ended
    normally."""
    if isinstance(exc, SystemExit) and exc.code in (None, 0):
        return None
    if isinstance(exc, GeneratorExit):
        return None
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class FigureStats(msgspec.Struct, frozen=True, kw_only=True):
    """One per-step figure summarized over a session."""

    #: steps that had a value (device figures are missing where they could not be collected)
    count: int
    #: mean over every step of the session
    mean: float
    #: median and nearest-rank 90th percentile (an observed value, as ``asynctrace report``
    #: computes it) over the last ``window_steps`` steps
    median: float
    p90: float
    window_steps: int


class SessionReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a session measured: the figures its printed summary shows, as an object."""

    name: str
    device_kind: str
    device_name: str
    asynchronous: bool
    steps: int
    wall_ns: int
    collected_at_exit: int
    frontend_ns: FigureStats | None
    data_wait_ns: FigureStats | None
    device_ns: FigureStats | None
    run_ahead_ns: FigureStats | None
    in_flight: FigureStats | None
    sync_count: FigureStats | None
    sync_wait_ns: FigureStats | None
    mem_allocated_bytes: FigureStats | None
    mem_reserved_bytes: FigureStats | None
    verdict: str
    verdict_message: str
    findings: list[str] = msgspec.field(default_factory=list)
    sync_sites: list[SyncSite] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    error: str | None = None
    records_path: str | None = None

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    @classmethod
    def from_json(cls, data: str | bytes) -> SessionReport:
        return msgspec.json.decode(data, type=cls)


#: (figure name, StepRecord attribute, unit) in the order the table shows them
_FIGURES: Final = (
    ("frontend", "frontend_ns", "ns"),
    ("data wait", "data_wait_ns", "ns"),
    ("device", "device_ns", "ns"),
    ("run-ahead", "run_ahead_ns", "ns"),
    ("in flight", "in_flight", "steps"),
    ("syncs", "sync_count", "count"),
    ("sync wait", "sync_wait_ns", "ns"),
    ("mem allocated", "mem_allocated_bytes", "bytes"),
    ("mem reserved", "mem_reserved_bytes", "bytes"),
)


def _worse(first: BaseException | None, new: BaseException) -> BaseException:
    """The failure to report of two met while ending a session: the first, unless only the new
    one is an interruption (KeyboardInterrupt, SystemExit), which must reach the caller."""
    if first is None or (isinstance(first, Exception) and not isinstance(new, Exception)):
        return new
    return first


def _median(sorted_values: Sequence[int]) -> float:
    n = len(sorted_values)
    mid = n // 2
    if n % 2:
        return float(sorted_values[mid])
    return (sorted_values[mid - 1] + sorted_values[mid]) / 2


def _p90(sorted_values: Sequence[int]) -> int:
    """Nearest rank, like ``asynctrace report``: the value at 1-based rank ``ceil(0.9 n)``."""
    n = len(sorted_values)
    return sorted_values[max(-(-9 * n // 10), 1) - 1]


class Session:
    """A capture session: context manager and decorator.

    Prefer :func:`trace` to build one. Step boundaries come from :meth:`step` (call it at the
    end of each iteration), :meth:`steps` (each item of a loader is one step),
    :meth:`train_step` (each call of the decorated function is one step) or, with
    ``optimizer_steps=True``, each ``optimizer.step()``. A step runs from one boundary to the
    next; the first starts when the session starts, and the one still open when the session
    ends is not a step (it is not complete) and is dropped.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        dir: str | os.PathLike[str] = "traces",
        device: str | Device | None = None,
        nvtx: bool = True,
        detect_syncs: str = "auto",
        optimizer_steps: bool = False,
        print_summary: bool = True,
        write: bool = True,
        strict: bool = False,
        max_pending: int = DEFAULT_MAX_PENDING,
        window: int = DEFAULT_WINDOW,
        profile: bool | Profile | None = None,
        nsys_capture: Iterable[int] | None = None,
        tensorboard: bool = False,
        live: bool = False,
        gather_ranks: bool = False,
    ) -> None:
        if detect_syncs not in _DETECT_MODES:
            raise CaptureError(
                f"detect_syncs={detect_syncs!r}: use one of {', '.join(map(repr, _DETECT_MODES))}"
            )
        if max_pending < 1 or window < 1:
            raise CaptureError(
                f"max_pending and window must be >= 1, got {max_pending} and {window}"
            )
        self.name: str | None = name
        self.dir = Path(dir)
        self.device: Device = get_device(device)
        self.nvtx = nvtx
        self.detect_syncs = detect_syncs
        self.optimizer_steps = optimizer_steps
        self.print_summary = print_summary
        self.write = write
        self.strict = strict
        self.max_pending = max_pending
        self.window = window
        self.profile = profile
        self.nsys_capture: Collection[int] | None = None
        if nsys_capture is not None:
            try:
                # validated now, so a wrong argument fails before training starts
                capture = NsysCapture(nsys_capture, device_kind=self.device.kind)
            except (TypeError, ValueError) as e:
                raise CaptureError(str(e)) from None
            # what the capture kept: a range as it is (a tuple of range(10, 10**12) would never
            # be built), other steps as a frozenset, so a one-shot iterator serves every run
            self.nsys_capture = capture.steps
        self.tensorboard = tensorboard
        self.live = live
        self.gather_ranks = gather_ranks
        #: the per-rank table gathered at exit (rank 0, ``gather_ranks=True``); else None
        self.rank_table: RankTable | None = None
        #: where the last run's records were written (set at exit); None before or if not written
        self.records_path: Path | None = None
        self._report: SessionReport | None = None
        self._active = False
        # the thread that entered the session: its optimizer steps and syncs are this session's
        self._thread = 0
        self._run = 0
        self._reset_run_state()

    # ------------------------------------------------------------------ per-run state
    def _reset_run_state(self) -> None:
        dev = self.device
        self._now: Callable[[], int] = dev.host_now_ns
        self._record: Callable[[], Any] = dev.record
        self._query: Callable[[Any], bool] = dev.query
        self._memory: Callable[[], tuple[int, int] | None] = dev.memory
        self._async = bool(dev.asynchronous)
        self._t0 = 0
        self._started_unix_ns = 0
        self._alignment: ClockAlignment | None = None
        self._rank: int | None = None
        self._world_size: int | None = None
        # the open step
        self._open = False
        self._index = 0
        self._start_ns = 0
        self._start_ev: Any = None
        self._data_wait_ns = 0
        self._in_flight = 0
        self._sync_count = 0
        self._sync_wait_ns = 0
        # closed steps whose markers have not been seen executed, oldest first
        self._pending: deque[tuple[Any, ...]] = deque()
        # the end marker of the last step written and its device time: the next step's start
        self._last_ev: Any = None
        self._last_ev_ns = 0
        # execution times of recent steps' end markers (increasing: one stream runs them in
        # order), for the exact in-flight count; None once a dropped step broke the chain
        self._ends: deque[int] | None = deque()
        self._latency_ns = 0
        self._dropped = 0
        self._collected_at_exit = 0
        self._exit_wait_ns = 0
        self._wall_ns = 0
        # running aggregates over every step written
        self._n = 0
        self._n_device = 0
        self._n_mem = 0
        # sums of each figure in _FIGURES order
        self._sums = [0] * len(_FIGURES)
        self._recent: deque[StepRecord] = deque(maxlen=self.window)
        self._sites: dict[str, list[Any]] = {}
        self._sites_dropped = 0
        self._notes: list[str] = []
        self._final_verdict: tuple[str, str, list[str]] | None = None
        self._error: str | None = None
        self._writer: RecordsWriter | None = None
        self._write_error: str | None = None
        self._detector: SyncDetector | None = None
        self._hook: Any = None
        self._nvtx_push: Callable[[Any], None] | None = None
        self._nvtx_pop: Callable[[], None] | None = None
        self._nvtx_handle: Any = None
        self._nvtx_handle_for: Callable[[int], Any] | None = None
        self._profiler: DeepProfiler | None = None
        self._nsys: NsysCapture | None = None
        self._tb: TensorBoardWriter | None = None
        self._live: LiveStatus | None = None

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> Session:
        if self._active:
            if self._thread == threading.get_ident():
                raise CaptureError(
                    f"session {self.name or 'session'!r} is already active in this thread; "
                    "sessions do not nest (a decorated function called from inside itself, or "
                    "a session entered twice)"
                )
            raise CaptureError(
                f"session {self.name or 'session'!r} is already active; a session object runs "
                "once at a time (create one session per thread)"
            )
        other = current_session()
        if other is not None:
            raise CaptureError(
                f"session {other.name or 'session'!r} is already active; sessions do not nest. "
                "Use asynctrace.range(...) to mark a region inside a session, or end the outer "
                "session first"
            )
        self._check_other_threads()
        self._reset_run_state()
        self._thread = threading.get_ident()
        global _fork_hook_registered
        if not _fork_hook_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_sessions_in_child)
            _fork_hook_registered = True
        self._run += 1
        self._report = None
        self.records_path = None
        self._started_unix_ns = time.time_ns()
        self._rank, self._world_size = rank_and_world()
        # the one blocking call a session makes, before any step
        self._alignment = self.device.align()
        # an empty marker needs this long to execute and be seen; a step whose end marker
        # executed within it of the next step's start was not really still running
        self._latency_ns = max(0, self._alignment.uncertainty_ns)
        if self.write:
            self._open_writer()
        try:
            if self.detect_syncs != "off":
                from asynctrace.capture.syncs import SyncDetector

                self._detector = SyncDetector(self._on_sync, mode=self.detect_syncs)
                self._detector.start()
            if self.optimizer_steps:
                from torch.optim.optimizer import register_optimizer_step_post_hook

                self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
            if self.nvtx:
                self._setup_nvtx()
            self._start_extras()
            _active.append(self)
            self._active = True
            self._t0 = self._now()
            self._open_step(self._t0, self._record() if self._async else None)
        except BaseException:
            self._discard_open()
            self._active = False
            self._restore_globals()
            if self._writer is not None:
                # the session never started: its file holds a header only, no run to keep
                self._writer.abort(remove=True)
                self._writer = None
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._active:
            self._check_exit_thread()
        end_ns = self._now()
        self._wall_ns = end_ns - self._t0
        if exc is not None:
            self._error = _describe_exit(exc)
        # Each part runs whatever happened in the ones before: the records are finished even
        # when restoring a global, collecting the device's figures or closing TensorBoard fails
        # or is interrupted (a second Ctrl-C while a deep-mode window is being written).
        failure: BaseException | None = None
        for part in (self._discard_open, self._deactivate, self._drain, self._close_tensorboard):
            try:
                part()
            except BaseException as e:
                failure = _worse(failure, e)
        if failure is not None and self._error is None:
            self._error = _describe_exit(failure)
        clean = exc is None and failure is None
        try:
            self._finish_writer(raising=clean)
            self._report = self._build_report()
            if self.gather_ranks and clean:
                self._gather()
        except BaseException as e:
            if self._writer is not None:
                self._writer.abort()
                self._writer = None
            failure = _worse(failure, e)
        if failure is not None:
            if exc is None or not isinstance(failure, Exception):
                # ours to raise: the session ended cleanly, or the cleanup was interrupted
                # (KeyboardInterrupt, SystemExit), which must not be swallowed
                raise failure
            # never mask the user's exception with one of ours
            warnings.warn(
                f"asynctrace could not finish the session after {type(exc).__name__}: {failure}",
                AsyncTraceWarning,
                stacklevel=2,
            )
            return
        report = self._report
        if self.print_summary and self._error is None and report is not None:
            print_report(report)
            if self.rank_table is not None:
                print(format_rank_table(self.rank_table))

    def _deactivate(self) -> None:
        self._active = False
        self._restore_globals()

    def _check_exit_thread(self) -> None:
        """Only the entering thread can undo what is bound to it: torch's dispatch-mode stack
        (lint sync detection) and torch.profiler (deep mode; stopping it from another thread
        kills the process). Refused before anything changes, so that thread can still end it."""
        if threading.get_ident() == self._thread:
            return
        bound = []
        detector = self._detector
        if detector is not None and detector.active == "lint":
            bound.append("lint sync detection")
        if self._profiler is not None:
            bound.append("deep mode (profile=)")
        if bound:
            raise CaptureError(
                f"session {self.name or 'session'!r} uses {' and '.join(bound)}, which only the "
                "thread that entered it can undo: end it in that thread"
            )

    def _gather(self) -> None:
        """Rank 0 collects every rank's step summary over the existing process group."""
        from asynctrace.capture import _distributed

        if not _distributed.is_distributed():
            return
        on_device: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if isinstance(self.device, CudaDevice):
            import torch

            # NCCL's object gather moves its tensors to torch's *current* device: on ranks that
            # never called set_device that is cuda:0 on every rank, and NCCL fails or hangs
            on_device = torch.cuda.device(self.device.index)
        with on_device:
            self.rank_table = _distributed.gather_records(self.records_path)

    def __call__(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        """``@session`` / ``@asynctrace.trace()``: each call of ``fn`` runs in this session.

        For an ``async def`` the session spans the awaited body, for a generator function its
        iteration (the body runs only then; calling either returns at once).
        """
        if self.name is None:
            self.name = getattr(fn, "__name__", None)
        from asynctrace.capture._decorate import around_each_call

        return around_each_call(
            fn, self, what="@asynctrace.trace", instead="with asynctrace.trace() as session:"
        )

    def __repr__(self) -> str:
        state = "active" if self._active else "inactive"
        return f"<asynctrace.Session {self.name or 'session'!r} on {self.device.name} ({state})>"

    # ------------------------------------------------------------------ step boundaries
    def step(self) -> None:
        """End the current step and start the next (call it at the end of each iteration)."""
        if not self._active:
            raise CaptureError(
                "step() called outside the session: call it inside `with asynctrace.trace() as "
                "session:` (or the decorated function)"
            )
        now = self._now()
        if self._async:
            ev = self._record()
            if self._open:
                self._close_step(now, ev)
            self._open_step(now, ev)
        else:
            if self._open:
                self._close_step(now, None)
            self._open_step(now, None)

    def steps(self, iterable: Iterable[_T]) -> Iterator[_T]:
        """Each item of ``iterable`` is one step; the time spent in its ``next()`` is the
        step's ``data_wait_ns``. A step runs from asking for its batch to asking for the next;
        the time before the loop starts is not a step."""
        if not self._active:
            raise CaptureError(
                "steps() called outside the session: loop over session.steps(loader) inside "
                "`with asynctrace.trace() as session:`"
            )
        return self._steps(iter(iterable), self._run)

    def _steps(self, it: Iterator[_T], run: int) -> Iterator[_T]:
        self._discard_open()
        now = self._now
        try:
            while True:
                self.step()
                t = now()
                try:
                    item = next(it)
                except StopIteration:
                    return
                self._data_wait_ns = now() - t
                yield item
        finally:
            # exhausted, broken out of or closed by an exception: the open step is incomplete
            if self._active and self._run == run:
                self._discard_open()

    def train_step(self, fn: Callable[_P, _R]) -> Callable[_P, _R]:
        """Decorator: each call of ``fn`` is one step (from entry to return).

        Outside an active session the function runs untraced; a call that raises is not a
        complete step and is dropped. For an ``async def`` the step spans the awaited body.
        """
        if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            # its call returns before the body runs: the step would measure nothing
            raise CaptureError(
                f"train_step cannot wrap the generator {getattr(fn, '__name__', fn)!r}: a step "
                "is one call; call session.step() inside its loop instead"
            )
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def step_awaited(*args: Any, **kwargs: Any) -> Any:
                if not self._active:
                    return await fn(*args, **kwargs)
                self._open_call_step()
                try:
                    result = await fn(*args, **kwargs)
                except BaseException:
                    if self._active:
                        self._discard_open()
                    raise
                self._close_call_step()
                return result

            return cast(Callable[_P, _R], step_awaited)

        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if not self._active:
                return fn(*args, **kwargs)
            self._open_call_step()
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                if self._active:
                    self._discard_open()
                raise
            self._close_call_step()
            return result

        return wrapper

    def _open_call_step(self) -> None:
        self._discard_open()
        self._open_step(self._now(), self._record() if self._async else None)

    def _close_call_step(self) -> None:
        if self._active and self._open:
            now = self._now()
            self._close_step(now, self._record() if self._async else None)

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # torch's hook is process-wide: another thread's optimizer step belongs to that
        # thread's session, if any
        if self._active and threading.get_ident() == self._thread:
            self.step()

    def _check_other_threads(self) -> None:
        """Sessions in other threads run beside this one; the parts that are process-wide by
        nature (torch.profiler, the CUDA profiler API) can serve only one of them."""
        for other in _active:
            name = other.name or "session"
            if self.profile not in (None, False) and other.profile not in (None, False):
                raise CaptureError(
                    f"session {name!r} in another thread already uses profile=: torch.profiler "
                    "is process-wide, so only one session at a time can profile"
                )
            if self.nsys_capture is not None and other.nsys_capture is not None:
                raise CaptureError(
                    f"session {name!r} in another thread already uses nsys_capture=: the CUDA "
                    "profiler API is process-wide, so only one session at a time can use it"
                )

    def _forget_in_child(self) -> None:
        self._active = False
        self._open = False
        # the child's copy of the global hook would call into this ended copy at every
        # optimizer step (the sync detectors' hooks are undone by syncs' own at-fork hook)
        hook, self._hook = self._hook, None
        if hook is not None:
            with contextlib.suppress(Exception):
                hook.remove()
        self._detector = None
        w, self._writer = self._writer, None
        if w is not None:
            # closes the child's copy of the descriptor only; nothing is written or renamed
            w.abort()
        # the parent's writers and profiler: not the child's to flush or stop
        self._tb = None
        self._live = None
        self._profiler = None
        self._nsys = None

    # ------------------------------------------------------------------ the hot path
    def _open_step(self, now: int, ev: Any) -> None:
        if self._async:
            pending = self._pending
            query = self._query
            while pending and query(pending[0][9]):
                self._write_async(pending.popleft())
            # one stream runs markers in order: every step behind the oldest unexecuted one is
            # still in flight
            self._in_flight = len(pending)
        self._start_ns = now
        self._start_ev = ev
        self._data_wait_ns = 0
        self._sync_count = 0
        self._sync_wait_ns = 0
        nsys = self._nsys
        if nsys is not None:
            nsys.on_step_start(self._index)
        detector, prof = self._detector, self._profiler
        if detector is not None and prof is not None:
            detector.suspend_while(prof.active)  # the lint would fill the profiled window
        push = self._nvtx_push
        if push is not None:
            h = self._nvtx_handle
            push(h if h is not None else self._nvtx_handle_for(self._index))  # type: ignore[misc]
        # open only once its range is pushed: whatever raised before leaves nothing to pop
        self._open = True

    def _close_step(self, now: int, ev: Any) -> None:
        # read before the step counts as closed: if the device raises here, the session's exit
        # still finds the step open and pops its range
        mem = self._memory()
        prof = self._profiler
        if prof is not None:
            # from another thread it raises here, leaving the session as if step() had not
            # been called (rather than in prof.step(), after the step was closed)
            prof.check_thread()
        self._open = False
        pop = self._nvtx_pop
        if pop is not None:
            pop()
        if prof is not None:
            prof.step()
        index = self._index
        self._index = index + 1
        frontend_ns = now - self._start_ns
        if self._async:
            self._pending.append(
                (
                    index,
                    self._start_ns,
                    frontend_ns,
                    self._data_wait_ns,
                    self._in_flight,
                    self._sync_count,
                    self._sync_wait_ns,
                    mem,
                    self._start_ev,
                    ev,
                    now,
                )
            )
            if len(self._pending) > self.max_pending:
                self._drop_oldest()
            return
        self._emit(
            StepRecord(
                step=index,
                start_ns=self._start_ns - self._t0,
                frontend_ns=frontend_ns,
                data_wait_ns=self._data_wait_ns,
                device_ns=frontend_ns,
                run_ahead_ns=0,
                in_flight=0,
                sync_count=self._sync_count,
                sync_wait_ns=self._sync_wait_ns,
                mem_allocated_bytes=None if mem is None else mem[0],
                mem_reserved_bytes=None if mem is None else mem[1],
            )
        )

    def _write_async(self, item: tuple[Any, ...]) -> None:
        index, start_ns, frontend_ns, data_wait_ns, in_flight, sc, sw, mem, sev, eev, end_ns = item
        executed_at = self.device.executed_at_ns
        end_dev = executed_at(eev)
        start_dev = self._last_ev_ns if sev is self._last_ev else executed_at(sev)
        self._last_ev = eev
        self._last_ev_ns = end_dev
        ends = self._ends
        if ends is not None:
            # exact, now that the earlier markers' execution times are known: the earlier steps
            # whose end marker executed after this step started (beyond the marker latency)
            limit = start_ns + self._latency_ns
            while ends and ends[0] <= limit:
                ends.popleft()
            in_flight = len(ends)
            ends.append(end_dev)
        self._emit(
            StepRecord(
                step=index,
                start_ns=start_ns - self._t0,
                frontend_ns=frontend_ns,
                data_wait_ns=data_wait_ns,
                device_ns=end_dev - start_dev,
                run_ahead_ns=end_dev - end_ns,
                in_flight=in_flight,
                sync_count=sc,
                sync_wait_ns=sw,
                mem_allocated_bytes=None if mem is None else mem[0],
                mem_reserved_bytes=None if mem is None else mem[1],
            )
        )

    def _drop_oldest(self, *, overflow: bool = True) -> None:
        """Write the oldest pending step without device figures."""
        index, start_ns, frontend_ns, data_wait_ns, in_flight, sc, sw, mem, _, _, _ = (
            self._pending.popleft()
        )
        if overflow:
            self._dropped += 1
        self._last_ev = None
        # an end time is unknown from here on: fall back to the count polled at step start
        self._ends = None
        self._emit(
            StepRecord(
                step=index,
                start_ns=start_ns - self._t0,
                frontend_ns=frontend_ns,
                data_wait_ns=data_wait_ns,
                in_flight=in_flight,
                sync_count=sc,
                sync_wait_ns=sw,
                mem_allocated_bytes=None if mem is None else mem[0],
                mem_reserved_bytes=None if mem is None else mem[1],
            )
        )

    def _emit(self, rec: StepRecord) -> None:
        w = self._writer
        if w is not None:
            try:
                w.write(rec)
            except OSError as e:
                self._writer_failed(e, raising=True)
        self._recent.append(rec)
        self._n += 1
        # unrolled over _FIGURES: this runs once per step
        s = self._sums
        s[0] += rec.frontend_ns
        s[1] += rec.data_wait_ns
        device_ns = rec.device_ns
        if device_ns is not None:
            self._n_device += 1
            s[2] += device_ns
            s[3] += rec.run_ahead_ns or 0
        s[4] += rec.in_flight
        s[5] += rec.sync_count
        s[6] += rec.sync_wait_ns
        allocated = rec.mem_allocated_bytes
        if allocated is not None:
            self._n_mem += 1
            s[7] += allocated
            s[8] += rec.mem_reserved_bytes or 0
        tb = self._tb
        if tb is not None:
            try:
                tb.add_step(rec)
            except Exception as e:
                # its writer thread died (disk full, folder gone): the events stop, training
                # and the records go on
                self._tensorboard_failed(tb, e)
        live = self._live
        if live is not None:
            live.update(rec)

    def _discard_open(self) -> None:
        if self._open:
            self._open = False
            pop = self._nvtx_pop
            if pop is not None:
                pop()

    # ------------------------------------------------------------------ syncs
    def _on_sync(self, event: SyncEvent) -> None:
        """The SyncDetector's callback: count the sync in the open step and in its site."""
        if len(_active) > 1 and threading.get_ident() != self._thread:
            # the detectors are process-wide: with sessions in several threads, a sync belongs
            # to its own thread's session (syncs in autograd's threads are then not counted)
            return
        self._sync_count += 1
        self._sync_wait_ns += event.wait_ns
        site = self._sites.get(event.site)
        if site is None:
            if len(self._sites) >= _MAX_SYNC_SITES:
                self._sites_dropped += 1
                return
            # op, count, wait_ns, steps, last step seen, stack
            site = [event.op, 0, 0, 0, -1, list(event.stack[:_MAX_SITE_STACK])]
            self._sites[event.site] = site
        site[1] += 1
        site[2] += event.wait_ns
        if site[4] != self._index:
            site[3] += 1
            site[4] = self._index

    def _sync_sites(self) -> list[SyncSite]:
        rows = [
            SyncSite(site=s, op=v[0], count=v[1], wait_ns=v[2], steps=v[3], stack=list(v[5]))
            for s, v in self._sites.items()
        ]
        rows.sort(key=lambda r: (-r.count, r.site))
        return rows

    # ------------------------------------------------------------------ globals
    def _setup_nvtx(self) -> None:
        from asynctrace.capture import ranges

        self._nvtx_push = ranges._push
        self._nvtx_pop = ranges._pop
        if ranges.nvtx_attached():
            # a tool is listening: name each range after its step, like torch's ProfilerStep#N
            handle = ranges._handle

            def handle_for(i: int) -> Any:
                return handle(f"step {i}", cache=False)

            self._nvtx_handle = None
            self._nvtx_handle_for = handle_for
        else:
            # nobody sees the name: one handle serves every step (keeps the depth count right)
            self._nvtx_handle = ranges._handle("step")

    def _start_extras(self) -> None:
        """The optional parts: deep-mode profiler, nsys capture range, live status line."""
        run = self.name or "session"
        if self.nsys_capture is not None:
            self._nsys = NsysCapture(self.nsys_capture, device_kind=self.device.kind)
        if self.live:
            self._live = LiveStatus(run)
            self._live.start()
        if self.tensorboard:
            from asynctrace.export.tensorboard import TensorBoardWriter

            try:
                self._tb = TensorBoardWriter(self.dir, run=sanitize_name(run), background=True)
            except OSError as e:
                if self.strict:
                    raise CaptureError(
                        f"cannot write TensorBoard events under {self.dir}: {e}"
                    ) from e
                warnings.warn(
                    f"asynctrace could not write TensorBoard events under {self.dir}: {e}",
                    AsyncTraceWarning,
                    stacklevel=3,
                )
        if self.profile is not None and self.profile is not False:
            from asynctrace.capture.profiler import make_profiler

            self._profiler = make_profiler(self.profile, dir=self.dir, run=sanitize_name(run))
            if self._profiler is not None:
                try:
                    self._profiler.start()
                except OSError as e:
                    self._profiler = None
                    if self.strict:
                        raise CaptureError(
                            f"cannot write profiler traces under {self.dir}: {e}"
                        ) from e
                    warnings.warn(
                        f"asynctrace could not write profiler traces under {self.dir}: {e}; "
                        "training continues without deep mode",
                        AsyncTraceWarning,
                        stacklevel=3,
                    )

    def _stop_extras(self) -> None:
        try:
            prof, self._profiler = self._profiler, None
            if prof is not None:
                prof.stop()
        finally:
            try:
                nsys, self._nsys = self._nsys, None
                if nsys is not None:
                    nsys.close()
            finally:
                live, self._live = self._live, None
                if live is not None:
                    live.stop()

    def _tensorboard_failed(self, tb: TensorBoardWriter, error: BaseException) -> None:
        self._tb = None
        with contextlib.suppress(Exception):
            tb.close()
        msg = (
            f"asynctrace could not write TensorBoard events under {tb.path}: {error}; "
            "training continues without them"
        )
        self._notes.append(f"TensorBoard events stopped: {error}")
        if self.strict:
            raise CaptureError(msg) from error
        warnings.warn(msg, AsyncTraceWarning, stacklevel=4)

    def _close_tensorboard(self) -> None:
        tb, self._tb = self._tb, None
        if tb is None:
            return
        try:
            try:
                # the text dashboard's summary, as written from a records file
                from asynctrace.export.tensorboard import session_markdown

                tb.add_text(
                    session_markdown(
                        self._header(),
                        steps=self._n,
                        complete=True,
                        summary=self._summary_line(),
                        syncs=self._sync_sites(),
                    )
                )
            finally:
                tb.close()
        except Exception as e:
            # the background writer met the error after the last step (disk full, folder gone)
            self._tensorboard_failed(tb, e)
        if tb.dropped:
            self._notes.append(
                f"{tb.dropped} step(s) not written to TensorBoard: its writer fell behind"
            )

    def _restore_globals(self) -> None:
        """Undo everything __enter__ changed, each step independent of the others' failure."""
        try:
            self._stop_extras()
        finally:
            self._restore_hooks()

    def _restore_hooks(self) -> None:
        try:
            hook, self._hook = self._hook, None
            if hook is not None:
                hook.remove()
        finally:
            try:
                detector, self._detector = self._detector, None
                if detector is not None:
                    detector.stop()
            finally:
                while self in _active:
                    _active.remove(self)

    # ------------------------------------------------------------------ writing
    def _open_writer(self) -> None:
        # Names carry host, pid and rank, so only a session of this process can want the same
        # one (same name, same time_ns); the later moves its time_ns on by a ns until free.
        t = self._started_unix_ns
        for _ in range(_MAX_NAME_TRIES):
            fname = records_file_name(
                self.name or "session", pid=os.getpid(), rank=self._rank, time_ns=t
            )
            writer = RecordsWriter(self.dir / fname)
            try:
                writer.open()
            except FileExistsError:
                t += 1
                continue
            except OSError as e:
                writer.abort(remove=True)
                self._writer = None
                self._writer_failed(e, raising=True)
                return
            break
        else:
            self._writer_failed(
                FileExistsError(errno.EEXIST, f"{_MAX_NAME_TRIES} names in a row are taken"),
                raising=True,
            )
            return
        try:
            writer.write(self._header())
            writer.flush()
        except OSError as e:
            writer.abort(remove=True)
            self._writer = None
            self._writer_failed(e, raising=True)
            return
        self._writer = writer

    def _header(self) -> SessionHeader:
        dev = self.device
        align = self._alignment
        torch = sys.modules.get("torch")
        return SessionHeader(
            name=self.name or "session",
            host=socket.gethostname(),
            pid=os.getpid(),
            rank=self._rank,
            world_size=self._world_size,
            device_kind=dev.kind,
            device_name=dev.name,
            asynchronous=self._async,
            torch_version=str(torch.__version__) if torch is not None else None,
            started_unix_ns=self._started_unix_ns,
            clock_method=align.method if align is not None else "none",
            # device times are mapped onto the host clock by the device layer (see devices.py)
            clock_offset_ns=0,
            clock_uncertainty_ns=align.uncertainty_ns if align is not None else 0,
            sync_detection=self._sync_detection(),
        )

    def _sync_detection(self) -> str:
        """The detector this session runs ("auto" resolved), said before it starts."""
        if self.detect_syncs == "off":
            return "off"
        from asynctrace.capture.syncs import _resolve

        return _resolve(self.detect_syncs)

    def _writer_failed(self, error: OSError, *, raising: bool) -> None:
        where = self._writer.tmp_path if self._writer is not None else self.dir
        msg = (
            f"asynctrace could not write the session records under {where}: "
            f"{error.strerror or error}; training continues without them "
            "(pass write=False to silence this, or strict=True to make it an error)"
        )
        if self._writer is not None:
            self._writer.abort(remove=True)
            self._writer = None
        self._write_error = f"records not written: {error.strerror or error}"
        if self.strict and raising:
            raise CaptureError(msg) from error
        warnings.warn(msg, AsyncTraceWarning, stacklevel=3)

    def _finish_writer(self, *, raising: bool) -> None:
        w = self._writer
        if w is None:
            return
        try:
            for row in self._sync_sites():
                w.write(row)
            w.write(self._summary_line())
            self.records_path = w.finish()
        except OSError as e:
            self._writer_failed(e, raising=raising)
        finally:
            self._writer = None

    # ------------------------------------------------------------------ exit
    def _drain(self) -> None:
        """Collect every pending step, waiting for its marker if needed (only ever at exit)."""
        pending = self._pending
        self._collected_at_exit = len(pending)
        if not pending:
            return
        t = self._now()
        failed = 0
        try:
            while pending:
                item = pending[0]
                try:
                    if not self._query(item[9]):
                        self.device.wait(item[9])
                except Exception:
                    # a device error (for example the one that ended the session): the figures
                    # cannot be collected, but the host-side ones are still true
                    failed += 1
                    self._drop_oldest(overflow=False)
                    continue
                self._write_async(pending.popleft())
        finally:
            self._exit_wait_ns = self._now() - t
            if failed:
                self._notes.append(
                    f"{failed} step(s) have no device figures: their markers failed at exit"
                )
            if pending:
                # the wait was interrupted (Ctrl-C): the steps' host figures are still written
                interrupted = len(pending)
                while pending:
                    self._drop_oldest(overflow=False)
                self._notes.append(
                    f"{interrupted} step(s) have no device figures: the wait for them at exit "
                    "was interrupted"
                )

    def _summary_notes(self) -> list[str]:
        notes = list(self._notes)
        if not self._async and self._verdict()[0] != "cpu-synchronous":
            # said once: a "cpu-synchronous" verdict already is this note
            notes.append(_CPU_NOTE)
        if self._dropped:
            notes.append(
                f"{self._dropped} step(s) have no device figures: more than {self.max_pending} "
                "steps were waiting for the device at once, so the oldest were written without "
                f"them (in_flight is capped at {self.max_pending})"
            )
        if self._collected_at_exit:
            notes.append(
                f"{self._collected_at_exit} step(s) were still pending at exit; waited "
                f"{self._exit_wait_ns / 1e6:.3f} ms for them"
            )
        if self._n > self.window:
            notes.append(
                f"median and p90 are over the last {self.window} of {self._n} steps; means over "
                "all of them"
            )
        if self._sites_dropped:
            notes.append(
                f"{self._sites_dropped} sync(s) at more than {_MAX_SYNC_SITES} distinct sites "
                "are counted in the steps but not listed by site"
            )
        if self._write_error is not None:
            notes.append(self._write_error)
        return notes

    def _verdict(self) -> tuple[str, str, list[str]]:
        from asynctrace.analysis.verdict import judge_steps

        v = judge_steps(list(self._recent), asynchronous=self._async, sync_sites=self._sync_sites())
        return v.code, v.message, list(v.findings)

    def _summary_line(self) -> SessionSummary:
        code, _, _ = self._verdict()
        return SessionSummary(
            steps=self._n,
            wall_ns=self._wall_ns,
            collected_at_exit=self._collected_at_exit,
            verdict=code,
            notes=self._summary_notes(),
            error=self._error,
        )

    def _build_report(self) -> SessionReport:
        recent = self._recent
        stats: dict[str, FigureStats | None] = {}
        for i, (_, attr, _) in enumerate(_FIGURES):
            count = self._n_device if i in (2, 3) else self._n_mem if i in (7, 8) else self._n
            if count == 0:
                stats[attr] = None
                continue
            values = sorted(v for r in recent if (v := getattr(r, attr)) is not None)
            stats[attr] = FigureStats(
                count=count,
                mean=self._sums[i] / count,
                median=_median(values) if values else math.nan,
                p90=_p90(values) if values else math.nan,
                window_steps=len(values),
            )
        code, message, findings = self._verdict()
        dev = self.device
        return SessionReport(
            name=self.name or "session",
            device_kind=dev.kind,
            device_name=dev.name,
            asynchronous=self._async,
            steps=self._n,
            wall_ns=self._wall_ns if not self._active else self._now() - self._t0,
            collected_at_exit=self._collected_at_exit,
            verdict=code,
            verdict_message=message,
            findings=findings,
            sync_sites=self._sync_sites(),
            notes=self._summary_notes(),
            error=self._error,
            records_path=str(self.records_path) if self.records_path is not None else None,
            **stats,
        )

    def summary(self) -> SessionReport:
        """The figures of the session: live while it runs (steps collected so far), final after
        it ends. The printed table shows exactly these."""
        if self._report is not None and not self._active:
            return self._report
        if not self._active:
            raise CaptureError("summary() before the session ran: enter it first")
        return self._build_report()


# ---------------------------------------------------------------------- printing
def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit == "ns":
        return _scaled(value, ((1, "ns", 0), (1e3, "µs", 1), (1e6, "ms", 3), (1e9, "s", 3)), 1000)
    if unit == "bytes":
        units = ((1, "B", 0), (1 << 10, "KiB", 1), (1 << 20, "MiB", 1), (1 << 30, "GiB", 1))
        return _scaled(value, units, 1024)
    return f"{value:.2f}"


def _scaled(value: float, units: Sequence[tuple[float, str, int]], step: int) -> str:
    """``value`` in the largest unit it reaches *as printed*: the unit is chosen on the rounded
    text, so 999.96 µs prints as ``1.000 ms``, not ``1000.0 µs``."""
    scale, name, decimals = units[0]
    text = f"{value / scale:.{decimals}f}"
    for scale, bigger, decimals in units[1:]:
        if not abs(float(text)) >= step:
            break
        text, name = f"{value / scale:.{decimals}f}", bigger
    return f"{text} {name}"


def _report_rows(report: SessionReport) -> list[tuple[str, str, str, str]]:
    """(figure, mean, median, p90) as printed, for every figure the session has values for."""
    rows = []
    for label, attr, unit in _FIGURES:
        s: FigureStats | None = getattr(report, attr)
        if s is None:
            continue
        if attr in ("data_wait_ns", "sync_count", "sync_wait_ns") and s.mean == 0:
            # always zero here: a row of zeros is noise, the verdict says what matters
            continue
        rows.append((label, _fmt(s.mean, unit), _fmt(s.median, unit), _fmt(s.p90, unit)))
    return rows


def print_report(
    report: SessionReport,
    *,
    file: Any = None,
    no_steps_hint: str = (
        "mark them with `for batch in session.steps(loader)`, `session.step()` at the end of "
        "each iteration, `@session.train_step` or `optimizer_steps=True`"
    ),
) -> None:
    """Print the summary table, verdict and notes of ``report`` (stdout by default);
    ``no_steps_hint`` follows "no steps" where the session recorded none."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file if file is not None else sys.stdout, highlight=False)
    table = Table(
        title=(
            f"asynctrace {report.name}: {report.steps} steps on {report.device_name}, "
            f"{report.wall_ns / 1e9:.3f} s"
        ),
        title_justify="left",
    )
    table.add_column("per step")
    for col in ("mean", "median", "p90"):
        table.add_column(col, justify="right")
    for row in _report_rows(report):
        table.add_row(*row)
    if report.steps:
        console.print(table)
    else:
        console.print(
            f"asynctrace {report.name}: no steps on {report.device_name} in "
            f"{report.wall_ns / 1e9:.3f} s" + (f": {no_steps_hint}" if no_steps_hint else ""),
            markup=False,
        )
    from asynctrace.analysis.verdict import verdict_line

    console.print(f"verdict: {verdict_line(report.verdict, report.verdict_message)}")
    for note in report.notes:
        console.print(f"note: {note}")
    if report.records_path is not None:
        console.print(f"records: {report.records_path}")


# ---------------------------------------------------------------------- trace()
@overload
def trace(name: Callable[_P, _R], /) -> Callable[_P, _R]: ...


@overload
def trace(
    name: str | None = None,
    *,
    dir: str | os.PathLike[str] = "traces",
    device: str | Device | None = None,
    nvtx: bool = True,
    detect_syncs: str = "auto",
    optimizer_steps: bool = False,
    print_summary: bool = True,
    write: bool = True,
    strict: bool = False,
    max_pending: int = DEFAULT_MAX_PENDING,
    window: int = DEFAULT_WINDOW,
    profile: bool | Profile | None = None,
    nsys_capture: Iterable[int] | None = None,
    tensorboard: bool = False,
    live: bool = False,
    gather_ranks: bool = False,
) -> Session: ...


def trace(
    name: str | Callable[..., Any] | None = None,
    *,
    dir: str | os.PathLike[str] = "traces",
    device: str | Device | None = None,
    nvtx: bool = True,
    detect_syncs: str = "auto",
    optimizer_steps: bool = False,
    print_summary: bool = True,
    write: bool = True,
    strict: bool = False,
    max_pending: int = DEFAULT_MAX_PENDING,
    window: int = DEFAULT_WINDOW,
    profile: bool | Profile | None = None,
    nsys_capture: Iterable[int] | None = None,
    tensorboard: bool = False,
    live: bool = False,
    gather_ranks: bool = False,
) -> Session | Callable[..., Any]:
    """A capture session over a training loop: ``with asynctrace.trace() as session:``.

    Also a decorator, with or without arguments: ``@asynctrace.trace`` /
    ``@asynctrace.trace("train")`` runs each call of the function in a session named after it.

    - ``name``: the records file's first field; defaults to the decorated function's name or
      ``"session"``.
    - ``dir``: where the records file goes (created if missing).
    - ``device``: a torch device spec or a :class:`~asynctrace.capture.devices.Device`;
      default CUDA/ROCm if available, else the CPU.
    - ``nvtx``: an NVTX range per step in domain ``asynctrace``.
    - ``detect_syncs``: ``"auto"``, ``"cuda"``, ``"lint"`` or ``"off"`` (see ``SyncDetector``).
    - ``optimizer_steps``: each ``optimizer.step()`` of any optimizer is a step boundary.
    - ``print_summary``: print the summary table at exit (stdout).
    - ``write``: write the records file.
    - ``strict``: a records file that cannot be written raises :class:`CaptureError`
      instead of warning.
    - ``max_pending``: the most steps whose device markers may wait at once; beyond it the
      oldest is written without device figures (docs/how-it-works.md).
    - ``window``: how many recent steps the summary's medians, p90s and the verdict cover.
    - ``profile``: deep mode: ``True`` or an :class:`asynctrace.Profile` schedule runs
      ``torch.profiler`` over the chosen steps and writes
      ``<dir>/<name>/{worker}.{time_ns}.pt.trace.json.gz`` (plus an annotated copy).
    - ``nsys_capture``: step numbers (e.g. ``range(10, 20)``) around which the CUDA profiler
      API is started and stopped, for ``nsys profile --capture-range=cudaProfilerApi``.
    - ``tensorboard``: write per-step scalars under ``asynctrace/`` to ``<dir>/<name>/``.
    - ``live``: one status line in the terminal, refreshed at most once a second.
    - ``gather_ranks``: under torch.distributed, gather every rank's step summary to rank 0 at
      exit and print the per-rank table (a collective: every rank must enable it).
    """
    options: dict[str, Any] = {
        "dir": dir,
        "device": device,
        "nvtx": nvtx,
        "detect_syncs": detect_syncs,
        "optimizer_steps": optimizer_steps,
        "print_summary": print_summary,
        "write": write,
        "strict": strict,
        "max_pending": max_pending,
        "window": window,
        "profile": profile,
        "nsys_capture": nsys_capture,
        "tensorboard": tensorboard,
        "live": live,
        "gather_ranks": gather_ranks,
    }
    if callable(name):
        return Session(**options)(name)
    return Session(name, **options)
