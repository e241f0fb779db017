"""The capture session: step boundaries, device markers and syncs, emitted to sinks.

A :class:`CaptureSession` splits a training loop into steps and measures, per step and without
adding a single synchronization inside the loop, how long the host spent issuing work
(``frontend_ns``), how long it waited for data, how long the device spent executing it, how far
the host ran ahead of the device and how many earlier steps were still in flight. Definitions:
``docs/how-it-works.md``.

It is made of named parts: the :class:`~asynctrace.capture._clock.StepClock` (boundaries,
markers, pending steps), the sync detector, the optimizer hook, NVTX ranges, the nsys capture
range and the deep-mode profiler. What it measures goes to its sinks
(:mod:`asynctrace.capture.sinks`): it writes no file and prints nothing itself. The public
:class:`asynctrace.Session` (what ``asynctrace.trace()`` returns) plugs in the records file,
TensorBoard, the live line and the exit summary from its options.

How it stays cheap and non-blocking:

* one device marker per step boundary, shared as the end of one step and the start of the next;
* device figures are collected lazily: at each boundary the oldest pending markers are polled
  with a non-blocking ``query()`` and finished steps are emitted in order; only at exit does the
  session wait for what is still pending (``collected_at_exit``);
* the records file and the summary take the records a batch (256) at a time, so a step costs
  them a list append; only a sink that wants each record as it is known is called per step;
* every piece of per-run state is bounded: pending markers (``max_pending``), the sync sites,
  the batch.

On a synchronous device (the CPU backend) a step's work is done when the host returns, so its
device time is its frontend time and run-ahead and in-flight are zero; the session records them
as such without markers.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from threading import get_ident as _get_ident  # one lookup less per step()
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar, cast

from asynctrace.capture._clock import StepClock
from asynctrace.capture._distributed import rank_and_world
from asynctrace.capture._lint_sample import LintSampler
from asynctrace.capture._nsys import NsysCapture
from asynctrace.capture._signals import SignalGuard, TerminatedBySignal, deferred_signals, resend
from asynctrace.capture._writer import sanitize_name
from asynctrace.capture.devices import ClockAlignment, Device, get_device
from asynctrace.capture.options import TraceOptions
from asynctrace.capture.sinks import SessionEnd, Sink, as_sink
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import Note, SessionHeader, StepRecord, SyncSite

if TYPE_CHECKING:
    from asynctrace.capture._trigger import Trigger
    from asynctrace.capture.profiler import DeepProfiler
    from asynctrace.capture.syncs import SyncDetector, SyncEvent

__all__ = ["CaptureSession", "current_session"]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")

#: distinct synchronizing source lines tracked per session
_MAX_SYNC_SITES: Final = 256
#: stack frames kept per sync site
_MAX_SITE_STACK: Final = 16

# The sessions currently active in this process, in the order they started: at most one per
# thread (sessions do not nest); read through current_session().
_active: list[CaptureSession] = []
# whether _forget_sessions_in_child is registered to run in forked children (once per process)
_fork_hook_registered = False


def current_session() -> CaptureSession | None:
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
    files through inherited descriptors."""
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


def _worse(first: BaseException | None, new: BaseException) -> BaseException:
    """The failure to report of two met while ending a session: the first, unless only the new
    one is an interruption (KeyboardInterrupt, SystemExit), which must reach the caller."""
    if first is None or (isinstance(first, Exception) and not isinstance(new, Exception)):
        return new
    return first


class _SyncSites:
    """Synchronizing source lines of a run: op, count, wait and steps per site (bounded)."""

    __slots__ = ("dropped", "rows")

    def __init__(self) -> None:
        # site -> [op, count, wait_ns, steps, last step seen, stack]
        self.rows: dict[str, list[Any]] = {}
        self.dropped = 0

    def add(self, event: SyncEvent, step: int) -> None:
        site = self.rows.get(event.site)
        if site is None:
            if len(self.rows) >= _MAX_SYNC_SITES:
                self.dropped += 1
                return
            site = [event.op, 0, 0, 0, -1, list(event.stack[:_MAX_SITE_STACK])]
            self.rows[event.site] = site
        site[1] += 1
        site[2] += event.wait_ns
        if site[4] != step:
            site[3] += 1
            site[4] = step

    def table(self) -> list[SyncSite]:
        rows = [
            SyncSite(site=s, op=v[0], count=v[1], wait_ns=v[2], steps=v[3], stack=list(v[5]))
            for s, v in self.rows.items()
        ]
        rows.sort(key=lambda r: (-r.count, r.site))
        return rows

    def notes(self) -> list[Note]:
        if not self.dropped:
            return []
        return [
            Note(
                code="sync-sites-capped",
                text=f"{self.dropped} sync(s) at more than {_MAX_SYNC_SITES} distinct sites are "
                "counted in the steps but not listed by site",
            )
        ]


class CaptureSession:
    """A capture session that emits to ``sinks``: context manager and decorator.

    Use :func:`asynctrace.trace` (or :class:`asynctrace.Session`), which plugs in the outputs
    its options ask for. Step boundaries come from :meth:`step` (call it at the end of each
    iteration), :meth:`steps` (each item of a loader is one step), :meth:`train_step` (each call
    of the decorated function is one step) or, with ``optimizer_steps=True``, each
    ``optimizer.step()``. A step runs from one boundary to the next; the first starts when the
    session starts, and the one still open when the session ends is not a step (it is not
    complete) and is dropped.
    """

    def __init__(
        self,
        name: str | None = None,
        *,
        options: TraceOptions | None = None,
        sinks: Iterable[Any] = (),
    ) -> None:
        self.name: str | None = name
        self.options = options if options is not None else TraceOptions()
        self.device: Device = get_device(self.options.device)
        self.dir = Path(self.options.dir)
        self.sinks: list[Sink] = [as_sink(s) for s in sinks]
        self._active = False
        # the thread that entered the session: its optimizer steps and syncs are this session's
        self._thread = 0
        # the process that entered the session: a forked child that leaves the block it
        # inherited ends nothing
        self._pid = 0
        self._run = 0
        # step boundaries and the end are serialized: two threads stepping at once would
        # interleave one boundary's reads and writes (steps were lost); re-entrant, for a sink
        # that asks for the live summary from inside a boundary
        self._lock = threading.RLock()
        self._reset_run_state()

    @property
    def strict(self) -> bool:
        return self.options.strict

    @property
    def profile(self) -> Any:
        return self.options.profile

    @property
    def nsys_capture(self) -> Any:
        return self.options.nsys_capture

    @property
    def active(self) -> bool:
        """Whether the session is running (entered and not yet ended)."""
        return self._active

    # ------------------------------------------------------------------ per-run state
    def _reset_run_state(self) -> None:
        self._clock = StepClock(
            self.device, max_pending=self.options.max_pending, deliver=self._deliver
        )
        # the clock's boundaries, bound once: step() and train_step's calls use them every step
        self._boundary: Callable[[], None] = self._clock.boundary
        self._open_call: Callable[[], None] = self._clock.open_call
        self._close_call: Callable[[], None] = self._clock.close_call
        # see step(): whether another thread steps too, and whether ours is inside a boundary
        self._busy = False
        self._shared = False
        self._end_failure: BaseException | None = None
        self._now: Callable[[], int] = self.device.host_now_ns
        self._started_unix_ns = 0
        self._t0 = 0
        self._alignment: ClockAlignment | None = None
        self._rank: int | None = None
        self._world_size: int | None = None
        self._header: SessionHeader | None = None
        self._wall_ns = 0
        self._steps_emitted = 0
        self._foreign_steps = 0
        self._sites = _SyncSites()
        self._traces: list[str] = []
        self._error: str | None = None
        self._live_sinks: list[Sink] = []
        # each live sink with its step (or step_batch) method, looked up once, after start():
        # a sink may bind it there
        self._step_fns: list[tuple[Sink, Callable[[StepRecord], Any]]] = []
        self._batch_fns: list[tuple[Sink, Callable[[list[StepRecord]], Any]]] = []
        self._sink_failures: list[Note] = []
        self._detector: SyncDetector | None = None
        self._held_steps = 0
        self._hook: Any = None
        self._profiler: DeepProfiler | None = None
        self._nsys: NsysCapture | None = None
        self._trigger: Trigger | None = None
        # a stopped trigger whose control file goes once the sinks are finished
        self._trigger_files: Trigger | None = None
        self._window_notes: list[Note] = []
        self._signals = SignalGuard(self._end_at_exit)
        self._phases = False
        self._lint_sampler: LintSampler | None = None

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> CaptureSession:
        self._check_can_enter()
        self._reset_run_state()
        self._thread = threading.get_ident()
        self._pid = os.getpid()
        global _fork_hook_registered
        if not _fork_hook_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_forget_sessions_in_child)
            _fork_hook_registered = True
        self._run += 1
        self._started_unix_ns = time.time_ns()
        self._rank, self._world_size = rank_and_world()
        # the one blocking call a session makes, before any step
        self._alignment = self.device.align()
        self._header = self.header()
        self._live_sinks = list(self.sinks)
        started = False
        try:
            self._dispatch("start", self._header)
            self._bind_step_fns()
            self._start_parts()
            self._signals.install()
            _active.append(self)
            self._active = True
            self._clock.start(self._alignment.uncertainty_ns)
            self._t0 = self._clock.t0
            started = True
        finally:
            if not started:
                self._clock.discard_open()
                self._active = False
                self._signals.restore()
                self._restore_globals()
                # the session never started: no run to keep
                self._finish_sinks(self._end(started=False))
                self._remove_trigger_files()
        return self

    def _check_can_enter(self) -> None:
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
        for other in _active:
            name = other.name or "session"
            if self.options.profiling and other.options.profiling:
                raise CaptureError(
                    f"session {name!r} in another thread already uses profile=: torch.profiler "
                    "is process-wide, so only one session at a time can profile"
                )
            if self.nsys_capture is not None and other.nsys_capture is not None:
                raise CaptureError(
                    f"session {name!r} in another thread already uses nsys_capture=: the CUDA "
                    "profiler API is process-wide, so only one session at a time can use it"
                )

    #: whether the session's end lets a SIGTERM/SIGHUP it ended on kill the process (False: the
    #: caller does, after its own output: ``asynctrace run`` prints the summary first)
    resend_signals = True

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._pid != os.getpid():
            # a forked child leaving the block it inherited: the session is the parent's
            return
        try:
            self._exit(exc)
        finally:
            self._after_exit()

    def _after_exit(self) -> None:
        """Once the end is out: the previous SIGTERM/SIGHUP handlers back, and a signal the
        session ended on sent again (:func:`~asynctrace.capture._signals.resend`)."""
        with contextlib.suppress(Exception):
            self._remove_trigger_files()
        self._signals.restore()
        if self.resend_signals:
            signum = self._signals.take()
            if signum is not None:
                resend(signum)

    def stop_signal(self) -> int | None:
        """The SIGTERM/SIGHUP the session ended on and has not resent (``resend_signals``
        False), once; None if none."""
        return self._signals.take()

    def _end_at_exit(self, exc: TerminatedBySignal) -> None:
        """The interpreter exits with the session still open after a stop signal (a trainer
        without an exception hook let it pass): end it now, records and summary complete."""
        if self._active and self._pid == os.getpid():
            self.__exit__(type(exc), exc, None)

    def _exit(self, exc: BaseException | None) -> None:
        if self._active:
            self._check_exit_thread()
        # what a signal handler raised: once the sinks had finished (deferred), or before the
        # deferral took hold (a DataLoader worker's SIGCHLD right as the loop ended: the end
        # had not started, so it runs now)
        handler_error: BaseException | None = None
        try:
            try:
                self._end_deferred(exc)
            except Exception as early:
                if not self._active:
                    raise
                handler_error = early
                self._end_deferred(exc)
        except BaseException as e:
            handler_error = e
        failure = self._end_failure
        if handler_error is not None:
            if exc is not None and isinstance(handler_error, Exception):
                warnings.warn(
                    f"asynctrace: after {type(exc).__name__}, a signal handler raised while the "
                    f"session ended (its records are written): {handler_error}",
                    AsyncTraceWarning,
                    stacklevel=2,
                )
            else:
                failure = _worse(failure, handler_error)
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

    def _end_deferred(self, exc: BaseException | None) -> None:
        """The end, with Python signal handlers (torch's SIGCHLD one for a dead DataLoader
        worker) run once it is done, raising then; SIGINT still interrupts the wait for the
        device (each part survives that). From here every step() of another thread takes the
        lock, and waits for the end."""
        self._shared = True
        self._end_failure = None
        # a SIGTERM/SIGHUP from here on is noted, and resent once the end is out
        self._signals.ending()
        # ended from another thread: a boundary of the entering thread in progress ends first
        while self._busy and threading.get_ident() != self._thread:
            time.sleep(0)
        with self._lock, deferred_signals(keep=(signal.SIGINT,)):
            self._end_failure = self._end_run(exc)

    def _end_run(self, exc: BaseException | None) -> BaseException | None:
        """Every part of the end, each whatever happened in the ones before; returns the worst
        failure instead of raising it."""
        self._wall_ns = self._now() - self._t0
        if exc is not None:
            self._error = _describe_exit(exc)
        # the sinks are finished even when restoring a global or collecting the device's
        # figures fails or is interrupted (a second Ctrl-C while a deep-mode window is written)
        failure: BaseException | None = None
        for part in (self._clock.discard_open, self._deactivate, self._clock.drain):
            try:
                part()
            except BaseException as e:
                failure = _worse(failure, e)
        try:
            # the records still batched: bounded work, which a Ctrl-C waits for
            with deferred_signals():
                self._deliver_batch()
        except BaseException as e:
            failure = _worse(failure, e)
        if failure is not None and self._error is None:
            self._error = _describe_exit(failure)
        try:
            # bounded work (writes and a rename, no device wait): a Ctrl-C waits for it
            with deferred_signals():
                failure = self._finish_sinks(self._end(started=True), failure=failure)
        except BaseException as e:
            failure = _worse(failure, e)
        return failure

    def _end(self, *, started: bool) -> SessionEnd:
        assert self._header is not None
        notes = [
            *self._clock.end_notes(),
            *self._sites.notes(),
            *self._lint_note(),
            *self._window_notes,
        ]
        held = self._held_steps
        if held:
            notes.append(
                Note(
                    code="lint-held-off",
                    text=f"{held} step(s) in deep mode's profiled windows have no lint sync "
                    "count: the lint was held off there; their syncs are in the profiler trace",
                )
            )
        if self._foreign_steps:
            notes.append(
                Note(
                    code="steps-from-other-threads",
                    text=f"{self._foreign_steps} step boundaries came from other threads than "
                    "the one that entered the session; they were counted in the order they "
                    "arrived",
                )
            )
        notes.extend(self._sink_failures)
        return SessionEnd(
            header=self._header,
            steps=self._steps_emitted,
            wall_ns=self._wall_ns,
            collected_at_exit=self._clock.collected_at_exit,
            syncs=self._sites.table(),
            notes=notes,
            error=self._error,
            window=self.options.window,
            max_pending=self.options.max_pending,
            traces=list(self._traces),
            started=started,
        )

    def _finish_sinks(
        self, end: SessionEnd, *, failure: BaseException | None = None
    ) -> BaseException | None:
        """Every sink's ``finish``, each whatever the others did; returns the worst failure
        that must reach the caller (an interruption, or a sink error under ``strict``)."""
        for sink in self.sinks:
            try:
                sink.finish(end)
            except Exception as e:
                err = self._sink_failed(sink, "finish", e, raising=False)
                if err is not None:
                    failure = _worse(failure, err)
            except BaseException as e:
                failure = _worse(failure, e)
        return failure

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
        if self._profiler is not None or self._clock.profiler is not None:
            bound.append("deep mode (profile=)")
        if bound:
            raise CaptureError(
                f"session {self.name or 'session'!r} uses {' and '.join(bound)}, which only the "
                "thread that entered it can undo: end it in that thread"
            )

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
        # The entering thread steps without the lock (it costs ~240 ns here, a tenth of the
        # whole step) until another thread steps too: that one first sets _shared, then waits
        # for a boundary of ours in progress (_busy) to end, then everyone takes the lock.
        # Ours sets _busy before it reads _shared, so one of the two always sees the other.
        if _get_ident() == self._thread:
            self._busy = True
            if not self._shared:
                try:
                    self._boundary()
                finally:
                    self._busy = False
                return
            self._busy = False
        self._shared_boundary(self._boundary)

    def _shared_boundary(self, boundary: Callable[[], None], *, step: bool = True) -> None:
        """A boundary once several threads step (or the session ends): under the lock.
        ``step=False``: not a step of its own (the batched records handed on), and nothing to
        do once the session ended."""
        own = threading.get_ident() == self._thread
        self._shared = True
        while not own and self._busy:
            time.sleep(0)
        with self._lock:
            if not self._active:  # ended by another thread while this one waited
                if not step:
                    return
                raise CaptureError("step() called after the session ended")
            if step and not own:
                self._foreign_steps += 1
            boundary()

    def _at_boundary(self, boundary: Callable[[], None], *, step: bool = True) -> bool:
        """``boundary`` (a train_step's open or close, the batched records handed on) as
        :meth:`step` runs its own; False, and nothing run, outside the session."""
        if not self._active:
            return False
        if _get_ident() == self._thread:
            if self._busy:
                # called back from inside this thread's boundary (by a sink): already serialized
                boundary()
                return True
            self._busy = True
            if not self._shared:
                try:
                    boundary()
                finally:
                    self._busy = False
                return True
            self._busy = False
        self._shared_boundary(boundary, step=step)
        return True

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
        clock = self._clock
        clock.discard_open()
        now = self._now
        try:
            while True:
                self.step()
                t = now()
                try:
                    item = next(it)
                except StopIteration:
                    return
                if clock.ph is None:
                    # nothing inside marked the fetch as data (a DataLoader's does: then it
                    # counts once, there): the clock moves it from forward to data at the close
                    clock.data_wait_ns = now() - t
                yield item
        finally:
            # exhausted, broken out of or closed by an exception: the open step is incomplete
            if self._active and self._run == run:
                clock.discard_open()

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
                if not self._at_boundary(self._open_call):
                    return await fn(*args, **kwargs)
                try:
                    result = await fn(*args, **kwargs)
                except BaseException:
                    self._drop_call_step()
                    raise
                self._at_boundary(self._close_call)
                return result

            return cast(Callable[_P, _R], step_awaited)

        @functools.wraps(fn)
        def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            if not self._at_boundary(self._open_call):
                return fn(*args, **kwargs)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                self._drop_call_step()
                raise
            self._at_boundary(self._close_call)
            return result

        return wrapper

    def _drop_call_step(self) -> None:
        """A train_step call raised: not a complete step."""
        if self._active:
            self._clock.discard_open()

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        # torch's hook is process-wide: another thread's optimizer step belongs to that
        # thread's session, if any
        if self._active and threading.get_ident() == self._thread:
            self.step()

    def _forget_in_child(self) -> None:
        self._active = False
        self._clock.open = False
        # the child's copy of the global hook would call into this ended copy at every
        # optimizer step (the sync detectors' hooks are undone by syncs' own at-fork hook)
        hook, self._hook = self._hook, None
        if hook is not None:
            with contextlib.suppress(Exception):
                hook.remove()
        self._detector = None
        # the parent's sinks and profiler: not the child's to flush, write or stop
        for sink in self.sinks:
            forget = getattr(sink, "forget_in_child", None)
            if forget is not None:
                with contextlib.suppress(Exception):
                    forget()
        self.sinks = []
        self._live_sinks = []
        self._step_fns = []
        self._batch_fns = []
        self._clock.out = []
        self._profiler = None
        self._nsys = None
        trigger, self._trigger = self._trigger, None
        if trigger is not None:
            trigger.forget_in_child()

    # ------------------------------------------------------------------ sinks
    def _bind_step_fns(self) -> None:
        """Which sinks take each record as it is known (``step``) and which in batches
        (``step_batch``); the clock calls :meth:`_deliver` after every record only for the
        first kind."""
        self._step_fns = []
        self._batch_fns = []
        from asynctrace.capture.sinks import BaseSink

        for sink in self._live_sinks:
            batch = getattr(sink, "step_batch", None)
            if callable(batch):
                self._batch_fns.append((sink, batch))
            else:
                step = sink.step
                # BaseSink's own no-op step (the annotator) is not called per step at all; a
                # sink may bind its step on the instance in start() (TensorBoard does)
                if getattr(step, "__func__", None) is not BaseSink.step:
                    self._step_fns.append((sink, step))
        self._clock.eager = bool(self._step_fns)

    def _deliver(self) -> None:
        """The clock's callback: a record was collected (``eager``), or a batch is full."""
        out = self._clock.out
        if self._step_fns:
            rec = out[-1]
            for sink, step in self._step_fns:
                try:
                    step(rec)
                except Exception as e:
                    err = self._sink_failed(sink, "step", e, raising=True)
                    if err is not None:
                        raise err from e
        if len(out) >= self._clock.batch:
            self._deliver_batch()

    def _deliver_batch(self) -> None:
        """The records collected so far, to the sinks that take them in batches."""
        records, self._clock.out = self._clock.out, []
        if not records:
            return
        self._steps_emitted += len(records)
        # under strict, the first failure is raised once every other sink has the batch
        first: tuple[CaptureError, Exception] | None = None
        for sink, step_batch in self._batch_fns:
            try:
                step_batch(records)
            except Exception as e:
                err = self._sink_failed(sink, "step_batch", e, raising=True)
                if err is not None and first is None:
                    first = (err, e)
        if first is not None:
            raise first[0] from first[1]

    def read_collected(self, read: Callable[[], _T]) -> _T:
        """``read()`` (a live summary of what the sinks hold) once the batched records are
        handed on, serialized with the steps as a boundary is, so no step changes the sinks
        while it reads. Called from another thread than the one that entered, it makes every
        later step take the lock, as a step from there does."""
        box: list[_T] = []

        def collected() -> None:
            self._deliver_batch()
            box.append(read())

        if not self._at_boundary(collected, step=False) or not box:
            # ending (its thread holds the lock: a sink asking as the last steps are collected)
            # or ended (nothing left to hand on)
            with self._lock:
                collected()
        return box[-1]

    def _dispatch(self, method: str, arg: Any) -> None:
        for sink in list(self._live_sinks):
            try:
                getattr(sink, method)(arg)
            except Exception as e:
                err = self._sink_failed(sink, method, e, raising=True)
                if err is not None:
                    raise err from e

    def _sink_failed(
        self, sink: Sink, method: str, error: Exception, *, raising: bool
    ) -> CaptureError | None:
        """A sink raised: it gets nothing more, and the user hears of it once. Returns the
        error to raise under ``strict`` (else None: a warning was given)."""
        # new lists, not removed in place: the loop that called this goes on over the old
        # one, so the sinks after the failed one still get this step
        self._live_sinks = [s for s in self._live_sinks if s is not sink]
        self._step_fns = [(s, f) for s, f in self._step_fns if s is not sink]
        self._batch_fns = [(s, f) for s, f in self._batch_fns if s is not sink]
        self._clock.eager = bool(self._step_fns)
        describe = getattr(sink, "describe_failure", None)
        text = describe(error) if describe is not None else None
        if text is None:
            text = (
                f"asynctrace: the sink {sink!r} failed in {method}() "
                f"({type(error).__name__}: {error}); the session goes on without it"
            )
        failure_note = getattr(sink, "failure_note", None)
        note = failure_note(error) if failure_note is not None else None
        if not isinstance(note, Note):
            # a sink of the user's: its own text (a str), or ours, under the one code for both
            said = note if isinstance(note, str) else f"sink {sink!r} stopped: {error}"
            note = Note(code="sink-failed", text=said)
        self._sink_failures.append(note)
        if self.strict:
            return CaptureError(text)
        warnings.warn(text, AsyncTraceWarning, stacklevel=4)
        return None

    def _trace_written(self, path: Path) -> None:
        """Deep mode wrote a trace (called from inside a step: never raises unless strict)."""
        self._traces.append(str(path))
        self._dispatch("trace_written", path)

    # ------------------------------------------------------------------ syncs
    def _on_sync(self, event: SyncEvent) -> None:
        """The SyncDetector's callback: count the sync in the open step and in its site."""
        if len(_active) > 1 and threading.get_ident() != self._thread:
            # the detectors are process-wide: with sessions in several threads, a sync belongs
            # to its own thread's session (syncs in autograd's threads are then not counted)
            return
        clock = self._clock
        clock.sync_count += 1
        clock.sync_wait_ns += event.wait_ns
        self._sites.add(event, clock.index)

    def sync_sites(self) -> list[SyncSite]:
        """The synchronizing source lines seen so far, most frequent first."""
        return self._sites.table()

    # ------------------------------------------------------------------ parts and globals
    def _start_parts(self) -> None:
        """The sync detector, optimizer hook, NVTX ranges, nsys range and deep mode."""
        opts = self.options
        if opts.phases:
            # before the optimizer_steps boundary hook: an optimizer step's end is marked
            # before the boundary it makes closes the step
            from asynctrace.capture import _phases

            _phases.register(self._clock)
            self._phases = True
        if opts.detect_syncs != "off":
            from asynctrace.capture.syncs import SyncDetector

            sampled = self._lint_sampled()
            mode = "lint" if sampled else opts.detect_syncs
            self._detector = SyncDetector(self._on_sync, mode=mode)
            try:
                self._detector.start()
            except CaptureError:
                if not sampled:
                    raise
                # a lint of another thread's session started meanwhile: the default has none
                self._detector = None
                sampled = False
            if sampled and self._detector is not None:
                # the first steps run linted; the clock calls back where the sample turns
                sampler = self._lint_sampler = LintSampler(self._detector, self._now)
                self._clock.lint_toggle = sampler.toggle
                self._clock.lint_at = sampler.start(self._clock.index)
                self._clock.reschedule()
        if opts.optimizer_steps:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            self._hook = register_optimizer_step_post_hook(self._on_optimizer_step)
        if opts.nvtx:
            self._setup_nvtx()
        if opts.nsys_capture is not None:
            self._nsys = self._clock.nsys = NsysCapture(
                opts.nsys_capture, device_kind=self.device.kind
            )
        if opts.profiling:
            self._start_profiler()
        if opts.on_demand and opts.write:
            self._start_trigger()

    def _start_trigger(self) -> None:
        from asynctrace.capture._trigger import Trigger

        trigger = Trigger(
            dir=self.dir,
            name=self.name or "session",
            rank=self._rank,
            clock=self._clock,
            make_profiler=self._window_profiler,
            hold_lint=self._hold_lint,
            on_window=self._window_done,
        )
        try:
            trigger.start()
        except OSError:
            # a folder that cannot be written: the records sink says so; no on-demand windows
            trigger.stop()
            return
        self._trigger = trigger

    def _window_profiler(self, start: int, steps: int) -> DeepProfiler | None:
        """Deep mode for steps ``start`` … ``start + steps - 1``, opened now, at the start of
        step ``start - 1`` (its warm-up); None, with a warning, where it cannot run."""
        from asynctrace.capture.profiler import DeepProfiler, Profile

        if self._profiler is not None or any(
            s is not self and s.options.profiling for s in _active
        ):
            warnings.warn(
                "asynctrace: deep mode (profile=) already runs: no on-demand window",
                AsyncTraceWarning,
                stacklevel=5,
            )
            return None
        try:
            prof = DeepProfiler(
                Profile(wait=0, warmup=1, active=steps, skip_first=start - 1),
                dir=self.dir,
                run=sanitize_name(self.name or "session"),
                on_trace=self._trace_written,
            )
            prof.start(first_step=start - 1)
        except Exception as e:
            warnings.warn(
                f"asynctrace: the on-demand deep window could not start ({type(e).__name__}: "
                f"{e}); the job goes on",
                AsyncTraceWarning,
                stacklevel=5,
            )
            return None
        self._clock.profiler = prof
        return prof

    def _hold_lint(self, hold: bool) -> None:
        # the lint's dispatch events would fill the profiled window (as in deep mode)
        detector = self._detector
        if detector is None:
            return
        with contextlib.suppress(Exception):
            if hold:
                detector.suspend()
            else:
                detector.resume()

    def _window_done(self, window: dict[str, Any]) -> None:
        traces = ", ".join(window.get("traces", ())) or "no trace written"
        self._window_notes.append(
            Note(
                code="deep-window",
                text=f"steps {window['start']}-{window['stop'] - 1} were profiled on demand "
                f"(request {window['id']}): {traces}",
            )
        )

    def _stop_trigger(self) -> None:
        trigger, self._trigger = self._trigger, None
        if trigger is not None:
            self._trigger_files = trigger
            trigger.stop()

    def _remove_trigger_files(self) -> None:
        trigger, self._trigger_files = self._trigger_files, None
        if trigger is not None:
            trigger.remove_files()

    def _start_profiler(self) -> None:
        from asynctrace.capture.profiler import make_profiler

        profiler = make_profiler(
            self.options.profile,
            dir=self.dir,
            run=sanitize_name(self.name or "session"),
            on_trace=self._trace_written,
            strict=self.strict,
        )
        if profiler is None:
            return
        try:
            profiler.start()
        except OSError as e:
            if self.strict:
                raise CaptureError(f"cannot write profiler traces under {self.dir}: {e}") from e
            warnings.warn(
                f"asynctrace could not write profiler traces under {self.dir}: {e}; "
                "training continues without deep mode",
                AsyncTraceWarning,
                stacklevel=4,
            )
            return
        self._profiler = self._clock.profiler = profiler
        self._clock.held_detector = self._detector

    def _setup_nvtx(self) -> None:
        from asynctrace.capture import ranges

        clock = self._clock
        clock.nvtx_push = ranges._push
        clock.nvtx_pop = ranges._pop
        if ranges.nvtx_attached():
            # a tool is listening: name each range after its step, like torch's ProfilerStep#N
            handle = ranges._handle

            def handle_for(i: int) -> Any:
                return handle(f"step {i}", cache=False)

            clock.nvtx_handle = None
            clock.nvtx_handle_for = handle_for
        else:
            # nobody sees the name: one handle serves every step (keeps the depth count right)
            clock.nvtx_handle = ranges._handle("step")

    def _restore_globals(self) -> None:
        """Undo everything __enter__ changed, each part independent of the others' failure."""
        parts: Sequence[Callable[[], None]] = (
            self._stop_trigger,
            self._stop_profiler,
            self._stop_nsys,
            self._remove_hook,
            self._stop_phases,
            self._stop_detector,
            self._leave_active,
        )
        failure: BaseException | None = None
        for part in parts:
            try:
                part()
            except BaseException as e:
                failure = _worse(failure, e)
        if failure is not None:
            raise failure

    def _stop_profiler(self) -> None:
        prof, self._profiler = self._profiler, None
        self._clock.profiler = None
        self._clock.held_detector = None
        if prof is not None:
            prof.stop()

    def _stop_nsys(self) -> None:
        nsys, self._nsys = self._nsys, None
        self._clock.nsys = None
        if nsys is not None:
            nsys.close()

    def _remove_hook(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook.remove()

    def _stop_phases(self) -> None:
        if self._phases:
            self._phases = False
            from asynctrace.capture import _phases

            _phases.unregister(self._clock)

    def _stop_detector(self) -> None:
        detector, self._detector = self._detector, None
        if detector is not None:
            self._held_steps = detector.held_steps
            detector.stop()

    def _leave_active(self) -> None:
        while self in _active:
            _active.remove(self)

    # ------------------------------------------------------------------ the header
    def header(self) -> SessionHeader:
        """Who, where, which device and how the clocks were aligned (as the records say)."""
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
            asynchronous=bool(dev.asynchronous),
            torch_version=str(torch.__version__) if torch is not None else None,
            started_unix_ns=self._started_unix_ns,
            clock_method=align.method if align is not None else "none",
            # device times are mapped onto the host clock by the device layer (see devices.py)
            clock_offset_ns=0,
            clock_uncertainty_ns=align.uncertainty_ns if align is not None else 0,
            sync_detection=self._sync_detection(),
            profile=self.options.profiling,
            tensorboard=self.options.tensorboard,
            # the live line draws only on a terminal: off elsewhere, whatever was asked
            live=self.options.live and sys.stderr.isatty(),
        )

    def _sync_detection(self) -> str:
        """The detector this session runs ("auto" resolved), said before it starts."""
        if self.options.detect_syncs == "off":
            return "off"
        if self._lint_sampled():
            return "lint-sampled"
        from asynctrace.capture.syncs import _resolve

        return _resolve(self.options.detect_syncs)

    def _lint_sampled(self) -> bool:
        """``detect_syncs="auto"`` where no CUDA hooks can run (a CPU): the lint, on a sample
        of the steps (:mod:`~asynctrace.capture._lint_sample`), so a default
        session names the syncs that would block an accelerator at a cost within noise. Not
        beside deep mode, whose windows hold the lint off."""
        if self.options.detect_syncs != "auto" or self.options.profiling:
            return False
        from asynctrace.capture.syncs import _hub, _resolve

        # one thread's dispatch-mode stack at a time: a session of another thread has it
        return _resolve("auto") == "off" and not _hub.lint_elsewhere()

    def _lint_note(self) -> list[Note]:
        sampler = self._lint_sampler
        return [] if sampler is None else [sampler.note(self._clock.index)]

    @property
    def started_unix_ns(self) -> int:
        return self._started_unix_ns

    def elapsed_ns(self) -> int:
        """Host time since the session started (its wall time once it ended)."""
        return self._now() - self._t0 if self._active else self._wall_ns

    @property
    def rank(self) -> int | None:
        return self._rank

    @property
    def step_index(self) -> int:
        """The number of the open step (steps count from 0)."""
        return self._clock.index
