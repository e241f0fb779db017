"""Where a capture session's output goes: the :class:`Sink` protocol.

A session measures; everything it produces goes to its sinks, in the order given: the session's
header when it starts, each step record as the step is collected, each deep-mode trace file as
it is written, and the end of the session (its sync sites, notes and error) last. The records
file, the TensorBoard events, the live status line, the exit summary and the deep-mode
annotator are sinks that ``asynctrace.trace()`` plugs in from its options; a user's own sink is
passed with ``trace(..., sinks=[...])``: any object with some of these methods, or a plain
callable, which gets each step record::

    with asynctrace.trace("train", sinks=[lambda rec: log.info("step %d", rec.step)]):
        ...

A sink runs inside the training loop (``step`` is called from ``session.step()``), so it must
be quick. A sink that needs no record the moment it is known (a file, a summary) can have
``step_batch(records)`` instead: it is then given the records in step order, up to 256 at a
time (a list of its own), and every record before the session's ``summary()`` reads its
figures and before ``finish``; each batch costs the loop one call instead of one per step.

A sink that raises is reported once as an :class:`~asynctrace.AsyncTraceWarning` and gets
nothing more; the training loop never sees its exception (``strict=True`` raises it as a
:class:`~asynctrace.CaptureError` instead).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from asynctrace.errors import AsyncTraceWarning, CaptureError
from asynctrace.records import Note, SessionHeader, StepRecord, SyncSite

if TYPE_CHECKING:
    from asynctrace.capture._clock import StepClock

__all__ = ["BaseSink", "SessionEnd", "Sink", "SinkSet", "StepCallback", "as_sink"]


class SessionEnd(msgspec.Struct, frozen=True, kw_only=True):
    """What a session knows when it ends, handed to :meth:`Sink.finish`."""

    header: SessionHeader
    #: steps collected (each was handed to :meth:`Sink.step`)
    steps: int
    wall_ns: int
    #: steps whose device figures were still pending at exit and were waited for then
    collected_at_exit: int
    #: one row per synchronizing source line, most frequent first
    syncs: list[SyncSite]
    #: what the capture itself has to say (steps without device figures, sites not listed)
    notes: list[Note]
    #: the exception that ended the session (``"Type: message"``); None for a clean end
    error: str | None
    #: the session's window and pending-step bound, for the summary's notes
    window: int
    max_pending: int
    #: deep-mode traces written (their annotated copies are a sink's)
    traces: list[str] = msgspec.field(default_factory=list)
    #: False when the session failed while starting: there is no run to keep
    started: bool = True


@runtime_checkable
class Sink(Protocol):
    """What a session calls; every method is optional on a user's sink (see :func:`as_sink`)."""

    def start(self, header: SessionHeader) -> None:
        """The session started (before its first step)."""

    def step(self, record: StepRecord) -> None:
        """One step was collected (in step order); not called where the sink has a
        ``step_batch(records: list[StepRecord])`` method, which gets them instead."""

    def trace_written(self, path: Path) -> None:
        """Deep mode wrote a profiler trace."""

    def finish(self, end: SessionEnd) -> None:
        """The session ended; called for every sink, also when the session failed."""


class BaseSink:
    """A sink that does nothing: subclass it and override what you need."""

    def start(self, header: SessionHeader) -> None:
        pass

    def step(self, record: StepRecord) -> None:
        pass

    def trace_written(self, path: Path) -> None:
        pass

    def finish(self, end: SessionEnd) -> None:
        pass


class StepCallback(BaseSink):
    """A callable as a sink: it gets each step record."""

    def __init__(self, fn: Callable[[StepRecord], Any]) -> None:
        self.fn = fn

    def step(self, record: StepRecord) -> None:
        self.fn(record)

    def __repr__(self) -> str:
        return f"StepCallback({getattr(self.fn, '__qualname__', self.fn)!r})"


#: what a session calls on a sink (``step_batch``, where a sink has it, instead of ``step``)
_METHODS = ("start", "step", "step_batch", "trace_written", "finish")
#: what an object needs to be a sink as it is (else the missing ones do nothing)
_PROTOCOL = frozenset(("start", "step", "trace_written", "finish"))


class _Partial(BaseSink):
    """A user object with only some of the methods: the missing ones do nothing."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        for name in _METHODS:
            method = getattr(obj, name, None)
            if callable(method):
                setattr(self, name, method)

    def __repr__(self) -> str:
        return repr(self.obj)


def as_sink(obj: Any) -> Sink:
    """``obj`` as a :class:`Sink`: a sink as it is, a callable as a :class:`StepCallback`."""
    if isinstance(obj, BaseSink):
        return obj
    methods = [n for n in _METHODS if callable(getattr(obj, n, None))]
    if methods:
        return obj if _PROTOCOL.issubset(methods) else _Partial(obj)
    if callable(obj):
        return StepCallback(obj)
    from asynctrace.errors import OptionError

    raise OptionError(
        f"sinks=[{obj!r}]: a sink is a callable (given each step record) or an object with "
        "start/step/trace_written/finish methods (asynctrace.capture.sinks.Sink)"
    )


def worse_failure(first: BaseException | None, new: BaseException) -> BaseException:
    """The failure to report of two met while ending a session: the first, unless only the new
    one is an interruption (KeyboardInterrupt, SystemExit), which must reach the caller."""
    if first is None or (isinstance(first, Exception) and not isinstance(new, Exception)):
        return new
    return first


class SinkSet:
    """A session run's sinks: what each is given and when, and what happens when one fails.

    The clock hands records on through :meth:`deliver` (its ``deliver`` callback): after every
    record where some sink takes each one as it is known (``step``; the clock's ``eager``),
    else once a batch is full, to the sinks that take them in batches (``step_batch``). A sink
    that raises gets nothing more, and the user hears of it once (a warning, or under
    ``strict`` a :class:`~asynctrace.CaptureError` for the caller to raise); the sinks after it
    still get what it failed on.
    """

    __slots__ = (
        "_batch_fns",
        "_live",
        "_step_fns",
        "clock",
        "emitted",
        "failures",
        "sinks",
        "strict",
    )

    def __init__(self, sinks: Iterable[Sink], *, strict: bool) -> None:
        self.sinks = list(sinks)
        self.strict = strict
        self.clock: StepClock | None = None
        #: records handed on to the batch sinks so far
        self.emitted = 0
        #: a note for each sink that failed, in order
        self.failures: list[Note] = []
        self._live = list(self.sinks)
        # each live sink with its step (or step_batch) method, looked up once, after start():
        # a sink may bind it there
        self._step_fns: list[tuple[Sink, Callable[[StepRecord], Any]]] = []
        self._batch_fns: list[tuple[Sink, Callable[[list[StepRecord]], Any]]] = []

    def start(self, header: SessionHeader) -> None:
        """Every sink's ``start``; then which take each record and which take batches."""
        self.dispatch("start", header)
        for sink in self._live:
            batch = getattr(sink, "step_batch", None)
            if callable(batch):
                self._batch_fns.append((sink, batch))
            else:
                step = sink.step
                # BaseSink's own no-op step (the annotator) is not called per step at all; a
                # sink may bind its step on the instance in start() (TensorBoard does)
                if getattr(step, "__func__", None) is not BaseSink.step:
                    self._step_fns.append((sink, step))
        self._set_eager()

    def _set_eager(self) -> None:
        if self.clock is not None:
            self.clock.eager = bool(self._step_fns)

    def deliver(self) -> None:
        """The clock's callback: a record was collected (``eager``), or a batch is full."""
        clock = self.clock
        assert clock is not None
        out = clock.out
        if self._step_fns:
            rec = out[-1]
            for sink, step in self._step_fns:
                try:
                    step(rec)
                except Exception as e:
                    err = self.failed(sink, "step", e)
                    if err is not None:
                        raise err from e
        if len(out) >= clock.batch:
            self.deliver_batch()

    def deliver_batch(self) -> None:
        """The records collected so far, to the sinks that take them in batches."""
        clock = self.clock
        if clock is None:
            return
        records, clock.out = clock.out, []
        if not records:
            return
        self.emitted += len(records)
        # under strict, the first failure is raised once every other sink has the batch
        first: tuple[CaptureError, Exception] | None = None
        for sink, step_batch in self._batch_fns:
            try:
                step_batch(records)
            except Exception as e:
                err = self.failed(sink, "step_batch", e)
                if err is not None and first is None:
                    first = (err, e)
        if first is not None:
            raise first[0] from first[1]

    def dispatch(self, method: str, arg: Any) -> None:
        """``method(arg)`` of every live sink (``start``, ``trace_written``)."""
        for sink in list(self._live):
            try:
                getattr(sink, method)(arg)
            except Exception as e:
                err = self.failed(sink, method, e)
                if err is not None:
                    raise err from e

    def finish(
        self, end: SessionEnd, *, failure: BaseException | None = None
    ) -> BaseException | None:
        """Every sink's ``finish``, each whatever the others did; returns the worst failure
        that must reach the caller (an interruption, or a sink error under ``strict``)."""
        for sink in self.sinks:
            try:
                sink.finish(end)
            except Exception as e:
                err = self.failed(sink, "finish", e)
                if err is not None:
                    failure = worse_failure(failure, err)
            except BaseException as e:
                failure = worse_failure(failure, e)
        return failure

    def failed(self, sink: Sink, method: str, error: Exception) -> CaptureError | None:
        """``sink`` raised: it gets nothing more. Returns the error to raise under ``strict``
        (else None: a warning was given)."""
        # new lists, not removed in place: the loop that called this goes on over the old
        # one, so the sinks after the failed one still get this step
        self._live = [s for s in self._live if s is not sink]
        self._step_fns = [(s, f) for s, f in self._step_fns if s is not sink]
        self._batch_fns = [(s, f) for s, f in self._batch_fns if s is not sink]
        self._set_eager()
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
        self.failures.append(note)
        if self.strict:
            return CaptureError(text)
        warnings.warn(text, AsyncTraceWarning, stacklevel=4)
        return None

    def forget_in_child(self) -> None:
        """After fork: the parent's sinks are not the child's to flush or write."""
        for sink in self.sinks:
            forget = getattr(sink, "forget_in_child", None)
            if forget is not None:
                with contextlib.suppress(Exception):
                    forget()
        self.sinks = []
        self._live = []
        self._step_fns = []
        self._batch_fns = []
        if self.clock is not None:
            self.clock.out = []
