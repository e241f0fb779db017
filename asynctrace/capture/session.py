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
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from threading import get_ident as _get_ident  # one lookup less per step()
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

from asynctrace.capture._clock import StepClock
from asynctrace.capture._parts import SessionParts
from asynctrace.capture.devices import ClockAlignment, Device, get_device
from asynctrace.capture.distributed import rank_and_world
from asynctrace.capture.options import TraceOptions
from asynctrace.capture.signals import SignalGuard, TerminatedBySignal, deferred_signals, resend
from asynctrace.capture.sinks import SessionEnd, Sink, SinkSet, as_sink, worse_failure
from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import Note, SessionHeader, SyncSite

if TYPE_CHECKING:
    from asynctrace.capture.syncs import SyncEvent

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
        self._sinks = SinkSet(self.sinks, strict=self.options.strict)
        self._clock = StepClock(
            self.device, max_pending=self.options.max_pending, deliver=self._sinks.deliver
        )
        self._sinks.clock = self._clock
        self._parts = SessionParts(
            self.options,
            clock=self._clock,
            now=self.device.host_now_ns,
            device_kind=self.device.kind,
            on_sync=self._on_sync,
            on_optimizer_step=self._on_optimizer_step,
            on_trace=self._trace_written,
            others_profiling=self._others_profiling,
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
        self._foreign_steps = 0
        self._sites = _SyncSites()
        self._traces: list[str] = []
        self._error: str | None = None
        self._signals = SignalGuard(self._end_at_exit)

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> CaptureSession:
        _check_can_enter(self)
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
        started = False
        try:
            self._sinks.start(self._header)
            self._parts.start(name=self.name or "session", rank=self._rank)
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
                self._sinks.finish(self._end(started=False))
                self._parts.remove_trigger_files()
        return self

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
        session ended on sent again (:func:`~asynctrace.capture.signals.resend`)."""
        if self._active:
            # the end was refused (from another thread): the session goes on, handlers and all
            return
        with contextlib.suppress(Exception):
            self._parts.remove_trigger_files()
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
        _raise_or_warn(exc, self._end_failure, handler_error)

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
                failure = worse_failure(failure, e)
        try:
            # the records still batched: bounded work, which a Ctrl-C waits for
            with deferred_signals():
                self._sinks.deliver_batch()
        except BaseException as e:
            failure = worse_failure(failure, e)
        if failure is not None and self._error is None:
            self._error = _describe_exit(failure)
        try:
            # bounded work (writes and a rename, no device wait): a Ctrl-C waits for it
            with deferred_signals():
                failure = self._sinks.finish(self._end(started=True), failure=failure)
        except BaseException as e:
            failure = worse_failure(failure, e)
        return failure

    def _end(self, *, started: bool) -> SessionEnd:
        assert self._header is not None
        notes = [
            *self._clock.end_notes(),
            *self._sites.notes(),
            *self._parts.notes(self._clock.index),
        ]
        if self._foreign_steps:
            notes.append(
                Note(
                    code="steps-from-other-threads",
                    text=f"{self._foreign_steps} step boundaries came from other threads than "
                    "the one that entered the session; they were counted in the order they "
                    "arrived",
                )
            )
        notes.extend(self._sinks.failures)
        return SessionEnd(
            header=self._header,
            steps=self._sinks.emitted,
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

    def _deactivate(self) -> None:
        self._active = False
        self._restore_globals()

    def _check_exit_thread(self) -> None:
        """Only the entering thread can undo what is bound to it: torch's dispatch-mode stack
        (lint sync detection) and torch.profiler (deep mode; stopping it from another thread
        kills the process). Refused before anything changes, so that thread can still end it."""
        if threading.get_ident() == self._thread:
            return
        bound = self._parts.bound_to_thread()
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
        from asynctrace.capture._decorate import step_per_call

        return step_per_call(fn, self)

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
        self._parts.forget_in_child()
        self._sinks.forget_in_child()

    # ------------------------------------------------------------------ sinks
    def read_collected(self, read: Callable[[], _T]) -> _T:
        """``read()`` (a live summary of what the sinks hold) once the batched records are
        handed on, serialized with the steps as a boundary is, so no step changes the sinks
        while it reads. Called from another thread than the one that entered, it makes every
        later step take the lock, as a step from there does."""
        box: list[_T] = []

        def collected() -> None:
            self._sinks.deliver_batch()
            box.append(read())

        if not self._at_boundary(collected, step=False) or not box:
            # ending (its thread holds the lock: a sink asking as the last steps are collected)
            # or ended (nothing left to hand on)
            with self._lock:
                collected()
        return box[-1]

    def _trace_written(self, path: Path) -> None:
        """Deep mode wrote a trace (called from inside a step: never raises unless strict)."""
        self._traces.append(str(path))
        self._sinks.dispatch("trace_written", path)

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

    def _restore_globals(self) -> None:
        """Undo everything __enter__ changed: the parts, then the session's place among the
        active ones, whatever the parts did."""
        try:
            self._parts.stop()
        finally:
            self._leave_active()

    def _others_profiling(self) -> bool:
        return any(s is not self and s.options.profiling for s in _active)

    def _leave_active(self) -> None:
        while self in _active:
            _active.remove(self)

    # ------------------------------------------------------------------ the header
    def header(self) -> SessionHeader:
        """Who, where, which device and how the clocks were aligned (as the records say)."""
        return _header(self)

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


def _check_can_enter(self: CaptureSession) -> None:
    """Refused before anything changes: a session already running, or one that would nest
    in or share a process-wide part with a session of this or another thread."""
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


def _header(self: CaptureSession) -> SessionHeader:
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
        sync_detection=self._parts.sync_detection(),
        profile=self.options.profiling,
        tensorboard=self.options.tensorboard,
        # the live line draws only on a terminal: off elsewhere, whatever was asked
        live=self.options.live and sys.stderr.isatty(),
    )


def _raise_or_warn(
    exc: BaseException | None, failure: BaseException | None, handler_error: BaseException | None
) -> None:
    """What a session's end met, to the caller: ``failure`` (the end's own) and
    ``handler_error`` (a signal handler's, run once the end was out) are raised where the
    session ended cleanly or the end was interrupted; after the user's ``exc`` they are
    warnings, so that ours never masks theirs."""
    if handler_error is not None:
        if exc is not None and isinstance(handler_error, Exception):
            warnings.warn(
                f"asynctrace: after {type(exc).__name__}, a signal handler raised while the "
                f"session ended (its records are written): {handler_error}",
                AsyncTraceWarning,
                stacklevel=3,
            )
        else:
            failure = worse_failure(failure, handler_error)
    if failure is not None:
        if exc is None or not isinstance(failure, Exception):
            # ours to raise: the session ended cleanly, or the cleanup was interrupted
            # (KeyboardInterrupt, SystemExit), which must not be swallowed
            raise failure
        # never mask the user's exception with one of ours
        warnings.warn(
            f"asynctrace could not finish the session after {type(exc).__name__}: {failure}",
            AsyncTraceWarning,
            stacklevel=3,
        )
