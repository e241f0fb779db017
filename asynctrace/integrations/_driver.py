"""What the trainer callbacks share: one session per fit, steps from hooks, balanced ranges.

Trainers call hooks, they do not hand us a loop, so the mapping is:

* the session object is made when training is set up and **entered at the first training
  batch**, so model setup, sanity checks and the first data-loader start-up are not a step;
* each "batch end" hook is a step boundary (``session.step()``), exactly like a hand-written
  loop calling ``session.step()`` at the end of each iteration: a step's frontend time is the
  host time from the previous batch's end to this batch's end (it includes fetching this
  batch, and at an epoch boundary the validation run before it);
* the session ends at the trainer's "train end" hook, or with the exception that stopped
  training; the step still open then is incomplete and the session drops it.

Hook ranges (``train_batch``, ``backward``, ``validation``, ...) are ``asynctrace.range`` NVTX
ranges. They only ever nest inside one step, and :meth:`SessionDriver.close` pops whatever a
failing trainer left open, so the NVTX stack stays balanced.
"""

from __future__ import annotations

import os
import threading
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar

from asynctrace.errors import OptionError

if TYPE_CHECKING:
    from asynctrace.capture.ranges import Range
    from asynctrace.tracing import Session

__all__ = ["DrivingCallback", "SessionDriver"]

#: trace() options a callback cannot take: the callback makes each training batch a step, and
#: names the records folder itself
_NOT_FOR_CALLBACKS = frozenset({"optimizer_steps", "dir"})


def callback_options() -> tuple[str, ...]:
    """The :class:`~asynctrace.TraceOptions` a trainer callback passes through."""
    from asynctrace.capture.options import TraceOptions

    return tuple(n for n in TraceOptions.names() if n not in _NOT_FOR_CALLBACKS)


#: drivers whose session is entered, with the thread it was entered on
_entered: weakref.WeakKeyDictionary[SessionDriver, int] = weakref.WeakKeyDictionary()


class SessionDriver:
    """Drives one :class:`~asynctrace.Session` per training run from hooks."""

    def __init__(
        self,
        name: str,
        *,
        dir: str | os.PathLike[str],
        ranges: bool,
        trace_options: dict[str, Any],
    ) -> None:
        if "optimizer_steps" in trace_options:
            raise OptionError(
                "optimizer_steps cannot be used with a trainer callback: the callback already "
                "makes each training batch a step, so steps would be counted twice"
            )
        from asynctrace.capture.options import TraceOptions

        # checked now, so a wrong option fails when the trainer is built, not at its first batch
        TraceOptions.from_mapping(
            {**trace_options, "dir": dir},
            accepted=(*callback_options(), "dir"),
            what="AsyncTraceCallback",
        )
        self.name = name
        self.dir = dir
        self.ranges = ranges
        self.trace_options = dict(trace_options)
        #: the session of the current or last training run (kept after it ends for its summary)
        self.session: Session | None = None
        self._entered = False
        self._open: list[Range] = []
        self._range_cache: dict[str, Range] = {}

    @property
    def active(self) -> bool:
        """Whether a session is open (between the first batch and the end of training)."""
        return self._entered

    def begin(self) -> None:
        """Training is set up: make the session (entered at the first batch)."""
        # A run that never reached its end hook (a trainer without an exception hook raised)
        # leaves its session active, and sessions do not nest: close it now rather than refuse
        # to trace this run, also when it belongs to another callback (a notebook cell re-run
        # with a new one). No live run can be caught here: every callback's setup hook runs
        # before any of them enters its session at the first batch.
        tid = threading.get_ident()
        for driver, thread in list(_entered.items()):
            if thread == tid:
                driver.close(RuntimeError("training ended without its end hook"))
        from asynctrace.tracing import trace

        self.session = trace(self.name, dir=self.dir, **self.trace_options)

    def batch_start(self) -> None:
        """A training batch starts: enter the session on the first one."""
        if self.session is None:
            self.begin()
        if not self._entered:
            assert self.session is not None
            self.session.__enter__()
            self._entered = True
            _entered[self] = threading.get_ident()

    def batch_end(self) -> None:
        """A training batch ended: a step boundary."""
        if self._entered:
            self._close_ranges()
            assert self.session is not None
            self.session.step()

    def push(self, name: str) -> None:
        """Open the hook range ``name`` (inside the current step)."""
        if not (self.ranges and self._entered):
            return
        r = self._range_cache.get(name)
        if r is None:
            from asynctrace.capture.ranges import range as make_range

            r = self._range_cache[name] = make_range(name)
        r.__enter__()
        self._open.append(r)

    def pop(self, name: str) -> None:
        """Close the hook range ``name``, and any range opened inside it and left open."""
        opened = self._open
        if not any(r.name == name for r in opened):
            return
        while opened:
            r = opened.pop()
            r.__exit__(None, None, None)
            if r.name == name:
                return

    def _close_ranges(self) -> None:
        opened = self._open
        while opened:
            opened.pop().__exit__(None, None, None)

    def close(self, exc: BaseException | None = None) -> None:
        """Training ended (with ``exc`` if it failed): end the session. Safe to call twice."""
        try:
            self._close_ranges()
        finally:
            if self._entered:
                self._entered = False
                _entered.pop(self, None)
                assert self.session is not None
                tb: TracebackType | None = None if exc is None else exc.__traceback__
                self.session.__exit__(None if exc is None else type(exc), exc, tb)


class DrivingCallback:
    """What both trainer callbacks are built from: their options and the session they drive.

    A base to list first, before the trainer's own callback class (whose ``__init__`` it
    calls). ``name`` defaults to the class's :attr:`default_name`.
    """

    #: the records file's name where none is given
    default_name: ClassVar[str] = "session"

    def __init__(
        self,
        name: str | None = None,
        *,
        dir: str | os.PathLike[str] = "traces",
        ranges: bool = True,
        **trace_options: Any,
    ) -> None:
        super().__init__()
        self._driver = SessionDriver(
            self.default_name if name is None else name,
            dir=dir,
            ranges=ranges,
            trace_options=trace_options,
        )

    @property
    def session(self) -> Session | None:
        """The session of the current or last training run (None before the first)."""
        return self._driver.session
