"""Deferring Python-level signal handlers around a section that must not be cut in two.

A Python signal handler runs in the main thread between two bytecodes, wherever that thread
is, and whatever it raises comes out there. torch's DataLoader installs one for ``SIGCHLD``
that raises ``RuntimeError("DataLoader worker … exited unexpectedly")``: arriving while a
session finishes its records file, it aborted the writer and left a ``.tmp`` with only the
header. :func:`deferred_signals` swaps every Python-level handler (but those in ``keep``) for
one that only notes the signal, and on leaving the section puts the handlers back and runs
each noted one once, in arrival order: the handler still runs, and raises, after the section.

Handlers set from C (``SIG_DFL``, ``SIG_IGN``, a C library's own) are not Python callables and
are left alone; outside the main thread nothing is deferred, since no Python handler can run
there. Nested sections work: the inner one notes the signal for the outer one. A handler
changed during the section stays as it was set; a session's own :class:`SignalGuard` handler,
which never raises once its session ends, is not deferred.

:class:`SignalGuard` makes ``SIGTERM`` and ``SIGHUP`` (how SLURM, Kubernetes and torchrun stop a
job) end a session as Ctrl-C does: where the signal would have killed the process
(``SIG_DFL``), its handler raises :class:`TerminatedBySignal` in the main thread, the session
ends with its records complete and its summary printed, and then :func:`resend` restores
``SIG_DFL`` and sends the signal again, so the process dies of it with the status it would
have had. Where the program has a Python handler of its own, that handler runs as before (it
decides how the job stops); where the signal is ignored or handled in C, nothing changes.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from collections.abc import Callable, Collection
from types import FrameType
from typing import Any, Final

__all__ = ["FlagHandler", "SignalGuard", "TerminatedBySignal", "deferred_signals", "resend"]

#: the signals that stop a job and that a session ends cleanly on
STOP_SIGNALS: Final = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class TerminatedBySignal(BaseException):
    """SIGTERM or SIGHUP arrived during a session: raised in the main thread so the session
    ends as on Ctrl-C; the session then lets the signal kill the process (:func:`resend`).

    A ``BaseException``, not an ``Exception``: ``except Exception`` in a training loop must
    not swallow the job being stopped; nor a ``KeyboardInterrupt``, which trainers catch to
    wind down and go on."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


def resend(signum: int) -> None:
    """Let ``signum`` do what it would have done without us: ``SIG_DFL``, then the signal
    again, so the process dies of it (status ``-signum``; ``128 + signum`` in a shell). Where
    it survives (the signal is blocked in this thread), ``SystemExit(128 + signum)``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass  # a closed stream: nothing more to say
    try:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
    raise SystemExit(128 + signum)


class FlagHandler:
    """A signal handler that only notes the signal for later (``note(signum, frame)`` sets a
    flag, raises nothing): safe at any moment, so :class:`deferred_signals` leaves it in
    place, and whoever installed it can take it out again inside a deferred section."""

    __slots__ = ("_note",)

    def __init__(self, note: Callable[[int, FrameType | None], None]) -> None:
        self._note = note

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self._note(signum, frame)


class _GuardHandler:
    """The handler a :class:`SignalGuard` installs for one signal (``prev``: what it
    replaced). :class:`deferred_signals` leaves it in place: it never raises once its
    session is ending."""

    __slots__ = ("guard", "prev")

    def __init__(self, guard: SignalGuard, prev: Any) -> None:
        self.guard = guard
        self.prev = prev

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        guard = self.guard
        prev = self.prev
        if callable(prev):
            # the program's own handler decides how the job stops (a flag, sys.exit, ...)
            prev(signum, frame)
            return
        if guard.state == "off" or guard.pid != os.getpid():
            # after the session (a handler someone chained to ours), or a forked child
            resend(signum)
            return
        if guard.received is None:
            guard.received = signum
        if guard.state == "armed":
            guard.raised = True
            guard.on_raise()
            raise TerminatedBySignal(signum)
        # ending: the session resends once its records and summary are out


class SignalGuard:
    """SIGTERM/SIGHUP handlers for one session's duration (main thread only).

    ``state``: ``"armed"`` while the session runs (a signal raises
    :class:`TerminatedBySignal`), ``"ending"`` while it ends (a signal is only noted), ``"off"``
    once :meth:`restore` put the previous handlers back. :attr:`received` is the signal the
    session must resend once its end is out. ``at_exit`` runs at interpreter exit if the
    exception raised never reached the session's end (a trainer that has no exception hook):
    it ends the session then."""

    def __init__(self, at_exit: Callable[[TerminatedBySignal], None]) -> None:
        self.state = "off"
        self.pid = os.getpid()
        self.received: int | None = None
        self.raised = False
        self._at_exit = at_exit
        self._registered = False
        self._installed: dict[int, _GuardHandler] = {}

    def install(self) -> None:
        self.pid = os.getpid()
        self.received = None
        self.raised = False
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            try:
                prev = signal.getsignal(sig)
            except (OSError, ValueError):
                continue
            if prev is signal.SIG_IGN or prev is None:
                # ignored, or handled in C: the signal does not stop the job as things are
                continue
            handler = _GuardHandler(self, prev)
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError, RuntimeError):
                continue
            self._installed[sig] = handler
        if self._installed:
            self.state = "armed"

    def ending(self) -> None:
        if self.state == "armed":
            self.state = "ending"

    def restore(self) -> None:
        """The previous handlers back, where ours is still the one installed."""
        installed, self._installed = self._installed, {}
        self.state = "off"
        if threading.current_thread() is not threading.main_thread():
            return
        for sig, handler in installed.items():
            try:
                if signal.getsignal(sig) is handler:
                    signal.signal(sig, installed[sig].prev)
            except (OSError, ValueError, RuntimeError):
                continue

    def take(self) -> int | None:
        """The signal to resend now that the session has ended (once), or None."""
        received, self.received = self.received, None
        return received

    def on_raise(self) -> None:
        if not self._registered:
            self._registered = True
            atexit.register(self._exiting)

    def _exiting(self) -> None:
        if self.state == "armed" and self.pid == os.getpid() and self.received is not None:
            self._at_exit(TerminatedBySignal(self.received))


class deferred_signals:
    """Context manager: Python signal handlers (but ``keep``'s) run after the section.

    What a deferred handler raises comes out of the ``with`` once the section is done; where
    the section itself raised, that exception wins, unless the handler's is an interrupt
    (``KeyboardInterrupt``, ``SystemExit``) and the section's an ordinary error.
    """

    def __init__(self, *, keep: Collection[int] = ()) -> None:
        self._keep = frozenset(int(s) for s in keep)
        self._saved: dict[int, Any] = {}
        #: signals that arrived during the section, in order, each once
        self.pending: list[int] = []

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if signum not in self.pending:
            self.pending.append(signum)

    def __enter__(self) -> deferred_signals:
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in signal.valid_signals():
            if sig in self._keep:
                continue
            try:
                handler = signal.getsignal(sig)
            except (OSError, ValueError):
                continue
            if not callable(handler) or isinstance(handler, (_GuardHandler, FlagHandler)):
                continue
            try:
                signal.signal(sig, self._note)
            except (OSError, ValueError, RuntimeError):
                continue
            self._saved[sig] = handler
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        saved, self._saved = self._saved, {}
        for sig, handler in saved.items():
            # one set during the section (a session restoring its own) stays
            if signal.getsignal(sig) == self._note:
                signal.signal(sig, handler)
        raised: BaseException | None = None
        for sig in self.pending:
            handler = saved.get(sig)
            if handler is None:
                continue
            try:
                handler(sig, sys._getframe())
            except BaseException as e:
                if raised is None:
                    raised = e
        self.pending = []
        if raised is None:
            return
        if exc is None or (isinstance(exc, Exception) and not isinstance(raised, Exception)):
            raise raised
        # the section's own exception goes on; the handler's is its context
        if exc.__context__ is None:
            exc.__context__ = raised
