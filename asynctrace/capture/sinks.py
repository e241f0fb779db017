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

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import msgspec

from asynctrace.records import Note, SessionHeader, StepRecord, SyncSite

__all__ = ["BaseSink", "SessionEnd", "Sink", "StepCallback", "as_sink"]


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
